"""Tutorial 3: compile a whole model from ONNX and check it against PyTorch.

Tutorials 1 and 2 compiled one operator. A user brings a model: here a
torchvision ResNet-18, exported to ONNX the usual way, then

  1. import it: kiln.graph.from_onnx(path, shapes=...) gives a graph of ONNX
     operators with the weights held as constants (print it to read it)
  2. compile it: kiln.compile(model) runs the graph passes (constant folding,
     batch norm folded into the convolutions, common subexpressions, fusion
     of each conv with its bias/add/relu epilogue), builds one kernel per
     fused group (default schedules; db=... would take tuned records) and
     plans every intermediate into one arena
  3. run it on the input PyTorch gets, and compare the outputs
  4. look at where the time goes (exe.profile) and at the memory plan

Run it with

  PYTHONPATH=python:build/python /usr/bin/python3 tutorials/03_compile_onnx_model.py [--small]

--small (or KILN_TUTORIAL_SMALL=1) uses 64x64 images, as the test suite
does; the full size is 224x224.
"""
import os
import sys
import tempfile
import time

import numpy as np
import torch
import torchvision

import kiln

small = "--small" in sys.argv or os.environ.get("KILN_TUTORIAL_SMALL") == "1"
size = 64 if small else 224

# A model as users have it: torchvision's ResNet-18 (random weights: no
# download), in inference mode, exported to ONNX.
torch.manual_seed(0)
net = torchvision.models.resnet18(weights=None).eval()
x = torch.randn(1, 3, size, size)
path = os.path.join(tempfile.mkdtemp(prefix="kiln_tutorial3_"), "resnet18.onnx")
torch.onnx.export(net, x, path, input_names=["input"], output_names=["logits"], opset_version=13)

# 1. Import. The shapes argument fixes the input's shape (needed where the
#    file leaves a dimension symbolic; harmless otherwise).
model = kiln.graph.from_onnx(path, shapes={"input": (1, 3, size, size)})
print(f"imported: {len(model.op_types())} operators, inputs {model.input_names}, outputs {model.output_names}")
print("\n".join(str(model).splitlines()[:8]) + "\n  ...")

# 2. Compile.
exe = kiln.compile(model)
groups = exe.groups()
print(f"compiled in {exe.compile_seconds:.1f} s: {len(groups)} fused groups, {exe.num_kernels} distinct kernels")
print("first groups: " + "; ".join(g["ops"] for g in groups[:5]))

# 3. Run and compare with PyTorch (fp32; relative error within 1e-4).
(logits,) = exe(x.numpy())
with torch.no_grad():
    expected = net(x).numpy()
err = np.max(np.abs(logits - expected)) / np.max(np.abs(expected))
print(f"max error vs PyTorch, relative to the largest logit: {err:.2e}")
assert err <= 1e-4, err

# 4. Time and memory.
t0 = time.perf_counter()
runs = 3 if small else 10
for _ in range(runs):
    exe(x.numpy())
print(f"{(time.perf_counter() - t0) / runs * 1e3:.2f} ms per run")
top = sorted(exe.profile(x.numpy(), repeats=3), key=lambda r: -r["seconds"])[:3]
for r in top:
    print(f"  {r['name'][:50]:50s} {r['seconds'] * 1e3:8.3f} ms {r['gflops']:7.1f} GFLOP/s {r['share'] * 100:5.1f}%")
m = exe.memory()
print(f"arena {m['arena_bytes'] / 2**20:.2f} MB for {m['naive_bytes'] / 2**20:.2f} MB of intermediates "
      f"(peak live {m['peak_bytes'] / 2**20:.2f} MB); weights {m['weight_bytes'] / 2**20:.1f} MB")
