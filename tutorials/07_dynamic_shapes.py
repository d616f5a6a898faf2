"""Tutorial 7: one compiled model for every batch size and sequence length.

The models people serve change shape on every call: each request has its own
length, a server batches a varying number of them, and a language model's
attention grows by one position per generated token. Compiling per shape
costs a compile (and a tuning session) each time. Here kiln compiles once:

  1. a BERT encoder layer exported with its batch and sequence axes dynamic
     (torch.onnx's dynamic_axes; kiln.graph.from_torch(..., shapes=) does it
     for you): kiln keeps them as the shape variables "batch" and "seq",
  2. kiln.compile builds every kernel over those variables (full tiles
     vectorized, the remainder in a tail) and a plan whose memory is laid out
     per shape when a new one arrives (then cached), and checks each call's
     shapes against the model's constraints,
  3. the same executor runs sequence lengths 1 to 384 (or any other),
  4. a GPT-style decoder block runs step by step with its key/value cache
     growing one position per token: the cache is an input and an output of
     dynamic length.

kiln.build_count() counts the kernels kiln has compiled: it does not move
while new shapes run.

Run it with

  PYTHONPATH=python:build/python /usr/bin/python3 tutorials/07_dynamic_shapes.py [--small]

--small (or KILN_TUTORIAL_SMALL=1) uses a layer of width 128, as the test
suite does; the full size is BERT-base (768 wide, 12 heads).
"""
import os
import sys
import time

import numpy as np
import torch

import kiln

small = "--small" in sys.argv or os.environ.get("KILN_TUTORIAL_SMALL") == "1"
d, heads, ff = (128, 4, 256) if small else (768, 12, 3072)
torch.manual_seed(0)


def ms_per_call(run, calls=5):
    run()  # warm (the first call at a shape plans its memory)
    t = time.perf_counter()
    for _ in range(calls):
        run()
    return (time.perf_counter() - t) / calls * 1e3


# ---- 1. a BERT layer with symbolic batch and sequence length -------------
layer = torch.nn.TransformerEncoderLayer(d_model=d, nhead=heads, dim_feedforward=ff, dropout=0.0, batch_first=True).eval()
# Strings in `shapes` name shape variables; ints must match the example input.
model = kiln.graph.from_torch(layer, torch.randn(1, 16, d), shapes={"input0": ("batch", "seq", d)})
print("inputs:", model.input_types)  # [(('batch', 'seq', d), 'float32')]

# ---- 2. compile once ------------------------------------------------------
t = time.perf_counter()
# dims= gives each variable the sizes it may take: calls outside are refused by name,
# and memory_bound() reports the largest arena any call will plan.
exe = kiln.compile(model, dims={"batch": (1, 8), "seq": (1, 512)})
print(f"compiled once in {time.perf_counter() - t:.1f} s: {exe}")
print(f"largest working memory any call plans: {exe.memory_bound()['arena_bytes'] / 2**20:.1f} MiB")
builds = kiln.build_count()

# ---- 3. every sequence length, checked against PyTorch ---------------------
print(f"\n{'batch':>5} {'seq':>5} {'ms':>8} {'arena MiB':>10}  max |kiln - torch|")
for batch, seq in [(1, 1), (1, 7), (1, 33), (1, 128), (4, 100)] + ([] if small else [(1, 384)]):
    x = torch.randn(batch, seq, d)
    with torch.no_grad():
        want = layer(x).numpy()
    got = exe.run([x.numpy()])[0]
    err = float(np.max(np.abs(got - want)))
    assert err < 1e-3, f"batch {batch}, seq {seq}: kiln differs from PyTorch by {err}"
    mem = exe.memory({"batch": batch, "seq": seq})["arena_bytes"] / 2**20
    print(f"{batch:>5} {seq:>5} {ms_per_call(lambda: exe.run([x.numpy()])):8.3f} {mem:10.2f}  {err:.1e}")

print(f"kernels compiled for those shapes: {kiln.build_count() - builds}")  # 0: one compile served them all

try:
    exe.run([np.zeros((1, 600, d), np.float32)])
except kiln.KilnError as e:
    print(f"\nseq 600 is outside dims=: {str(e).splitlines()[0][:160]}")

# ---- 4. a decoder generating tokens with a growing key/value cache --------
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench", "peers"))
from torch_models import decoder_block  # noqa: E402 -- a GPT-2-style block: (x, past_k, past_v) -> (y, k, v)

block = decoder_block(d, heads)
hd = d // heads
example = (torch.randn(1, 1, d), torch.randn(1, heads, 4, hd), torch.randn(1, heads, 4, hd))
cache = ("batch", heads, "past", hd)
decoder = kiln.compile(kiln.graph.from_torch(block, example, shapes={"input0": ("batch", 1, d), "input1": cache, "input2": cache}))
builds = kiln.build_count()

steps = 16 if small else 64
x, k, v = torch.randn(1, 1, d), torch.zeros(1, heads, 0, hd), torch.zeros(1, heads, 0, hd)
kk, vv = k.clone(), v.clone()
for step in range(steps):
    y, k, v = decoder.run([x.numpy(), np.asarray(k), np.asarray(v)])  # the new cache (numpy) comes back one position longer
    with torch.no_grad():
        y_ref, kk, vv = block(x, kk, vv)
    assert np.max(np.abs(y - y_ref.numpy())) < 1e-3 and k.shape[2] == step + 1
    x = torch.from_numpy(y)  # feed the output back (a stand-in for embedding the next token)
print(f"\ndecoded {steps} steps, cache now {k.shape}; matches PyTorch at every step")

print(f"{'cache':>6} {'ms per token':>13}")
for past in [1, 128] + ([] if small else [512, 1024]):
    pk = np.random.default_rng(past).standard_normal((1, heads, past, hd)).astype(np.float32)
    xs = np.zeros((1, 1, d), np.float32)
    print(f"{past:>6} {ms_per_call(lambda: decoder.run([xs, pk, pk])):13.3f}")

print(f"kernels compiled while the cache grew: {kiln.build_count() - builds}")
