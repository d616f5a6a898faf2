"""Tutorial 4: export a compiled model as one shared library and run it from C.

Tutorial 3 compiled a model and ran it in Python. To deploy it, kiln writes
the compiled model (every kernel, the execution plan and the weights) into
one .so that needs only kiln's small runtime library, libkiln_runtime (no
LLVM, no Python, no compiler). This script

  1. builds a small CNN (PyTorch through kiln.graph.from_torch; a
     kiln.graph.Builder graph when torch is missing) and compiles it
  2. exports it: exe.export_library("model.so"), and runs the .so from
     Python with kiln.runtime.load_model (the runtime alone)
  3. compiles the C program tutorials/04_export_library.c against
     libkiln_runtime only, through the C API (runtime/include/kiln/runtime/c_api.h):
     kiln_model_load, kiln_model_set_input, kiln_model_run,
     kiln_model_get_output, with kiln_last_error() after any failure
  4. runs it on the same input and compares its outputs with Python's
  5. checks with ldd that the C program pulls in no LLVM and no Python

Run it with

  PYTHONPATH=python:build/python /usr/bin/python3 tutorials/04_export_library.py [--small]

It needs a C compiler (cc) and kiln loaded from a build tree (it links
against <build>/libkiln_runtime.so). --small uses 16x16 images.
"""
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

import kiln
import kiln._ffi as ffi

small = "--small" in sys.argv or os.environ.get("KILN_TUTORIAL_SMALL") == "1"
size = 16 if small else 64
here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(here)
work = tempfile.mkdtemp(prefix="kiln_tutorial4_")
rng = np.random.default_rng(0)
x = rng.standard_normal((1, 3, size, size)).astype("float32")

# 1. A small CNN: conv-relu-pool twice, then a linear classifier.
try:
    import torch
except ImportError:
    torch = None
if torch is not None:
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(), torch.nn.Linear(16, 10)).eval()
    model = kiln.graph.from_torch(net, torch.from_numpy(x))
else:
    b = kiln.graph.Builder()
    inp = b.input("input0", x.shape)
    w = b.constant("w", rng.standard_normal((8, 3, 3, 3)).astype("float32") * 0.3)
    h = b.op("Relu", b.op("Conv", inp, w, pads=[1, 1, 1, 1]))
    model = b.build(b.op("GlobalAveragePool", h), names=["out"])
exe = kiln.compile(model)
expected = exe(x)[0]
if torch is not None:
    with torch.no_grad():
        np.testing.assert_allclose(expected, net(torch.from_numpy(x)).numpy(), rtol=1e-4, atol=1e-5)
print(f"compiled: {exe.num_kernels} kernels; output shape {expected.shape}")

# 2. Export, and run the library with the runtime alone.
so = os.path.join(work, "model.so")
exe.export_library(so)  # weights embedded; weights="beside" writes model.so.weights
loaded = kiln.runtime.load_model(so)
print(f"exported {os.path.getsize(so)} bytes: {loaded}")
np.testing.assert_array_equal(loaded(x)[0], expected)


def runtime_library_dir():
    """Where libkiln_runtime.so is: the build tree kiln was loaded from (or beside the extension)."""
    ext_dir = os.path.dirname(os.path.abspath(ffi._kiln.__file__))
    build = os.path.dirname(ext_dir)
    # The build tree puts it in runtime/ (one folder per library); an install beside the extension.
    for d in ([os.path.join(build, "runtime"), build] if os.path.exists(os.path.join(build, "CMakeCache.txt")) else []) + [ext_dir, build]:
        if os.path.isdir(d) and any(f.startswith("libkiln_runtime.so") for f in os.listdir(d)):
            return d
    return None


libdir = runtime_library_dir()
cc = os.environ.get("CC", "cc")
if libdir is None or shutil.which(cc) is None:
    print(f"skipping the C part: {'no libkiln_runtime.so found' if libdir is None else 'no C compiler ' + cc}")
    sys.exit(0)

# 3. Compile the C program: kiln's headers (plus DLPack's, in /usr/include), only -lkiln_runtime.
exe_c = os.path.join(work, "run_model")
cmd = [cc, "-std=c99", "-O2", "-Wall", "-Wextra", "-I" + os.path.join(root, "runtime", "include"),
       os.path.join(here, "04_export_library.c"), "-o", exe_c,
       "-L" + libdir, "-lkiln_runtime", "-Wl,-rpath," + libdir]
print("$ " + " ".join(cmd))
subprocess.run(cmd, check=True)

# 4. Run it: on x (written as raw float32), and on its built-in pattern.
x.tofile(os.path.join(work, "input.bin"))
out = subprocess.run([exe_c, so, os.path.join(work, "input.bin"), os.path.join(work, "output.bin")],
                     check=True, capture_output=True, text=True).stdout
print(out, end="")
got = np.fromfile(os.path.join(work, "output.bin"), dtype="float32").reshape(expected.shape)
np.testing.assert_array_equal(got, expected)  # the same kernels: bit for bit
pattern = ((np.arange(x.size) % 17) / 8.0 - 1.0).astype("float32").reshape(x.shape)
line = subprocess.run([exe_c, so], check=True, capture_output=True, text=True).stdout.splitlines()[0]
first = [float(v) for v in line.split(":")[1].split()]
np.testing.assert_allclose(first, exe(pattern)[0].ravel()[:len(first)], rtol=1e-5, atol=1e-6)
print("the C program's outputs match Python's")

# A failure in C is a status code plus a message, never a crash.
bad = subprocess.run([exe_c, os.path.join(work, "no_such_model.so")], capture_output=True, text=True)
assert bad.returncode == 1 and "no_such_model.so" in bad.stderr, bad.stderr
print("missing model ->", bad.stderr.strip())

# 5. What the program depends on: kiln_runtime, libc and friends; no LLVM, no Python, not the compiler.
deps = subprocess.run(["ldd", exe_c], check=True, capture_output=True, text=True).stdout
names = [ln.split()[0] for ln in deps.splitlines() if ln.strip()]
print("ldd:", ", ".join(os.path.basename(n) for n in names))
assert any(n.startswith("libkiln_runtime.so") for n in names), deps
for bad_dep in ("LLVM", "python", "libkiln.so", "libkiln_graph", "libkiln_tuner", "libkiln_ops"):
    assert not any(bad_dep.lower() in n.lower() for n in names), f"the C program depends on {bad_dep}:\n{deps}"
shutil.rmtree(work)
