"""Tutorial 2: let the auto-scheduler find a fast conv2d.

Tutorial 1 wrote a schedule by hand. Here we write none: we declare a ResNet
convolution layer, give kiln a budget of trials, and it searches schedules on
this machine, keeping every measurement in a tuning database (an SQLite
file). Then kiln.build(..., db=...) compiles the best one.

  1. choose the layout: NCHWc, the blocked layout of CPU inference
  2. declare the convolution with the operator library
  3. tune it: kiln.tune(tensors, trials=..., db=...)
  4. build the best record and check it against a numpy reference
  5. tune again: the session resumes from the database
  6. compare with PyTorch (when it is installed) on the same machine,
     interleaved, through kiln's peer launcher

Run it with

  PYTHONPATH=python:build/python /usr/bin/python3 tutorials/02_autotune_conv2d.py [--small]

--small (or KILN_TUTORIAL_SMALL=1) tunes a small layer with a tiny budget:
the test suite runs every tutorial that way. The full size tunes the first
3x3 layer of ResNet-50's second stage (64 channels, 56x56) with 64 trials,
about half a minute on 2 cores.
"""
import os
import shutil
import sys
import tempfile
import time

import numpy as np

import kiln
from kiln import te

SMALL = "--small" in sys.argv or os.environ.get("KILN_TUTORIAL_SMALL", "0") not in ("", "0")
C, K, HW, R, PAD = (16, 32, 14, 3, 1) if SMALL else (64, 64, 56, 3, 1)
TRIALS = 8 if SMALL else 64

######################################################################
# Step 1: the layout. In NCHW the innermost dimension is the image row (56
# or 14 floats), so vectors run along a row and a 3x3 window needs a bounds
# test at its edges. In NCHWc the channels are split into blocks of cb and
# the block is innermost: x[n, c // cb, h, w, c % cb]. The weights become
# [K/kb, C/cb, KH, KW, cb, kb]. Then kb output channels of one pixel are
# one or two vectors, and the kb weights of one (input channel, tap) are
# contiguous: the register tile the tuner's rules build is "some pixels x
# kb channels", and every load in it is a plain vector load or a broadcast.
cb, kb = kiln.ops.nchwc_blocks(C, K)
print(f"conv2d {C}->{K} channels, {HW}x{HW}, {R}x{R}, pad {PAD}; blocks cb={cb} kb={kb}")


def to_nchwc(x):
    """[N, C, H, W] -> [N, C/cb, H, W, cb]."""
    n, c, h, w = x.shape
    return np.ascontiguousarray(x.reshape(n, c // cb, cb, h, w).transpose(0, 1, 3, 4, 2))


def weights_to_blocked(wt):
    """[K, C, KH, KW] -> [K/kb, C/cb, KH, KW, cb, kb] (once per model in practice)."""
    k, c, kh, kw = wt.shape
    return np.ascontiguousarray(wt.reshape(k // kb, kb, c // cb, cb, kh, kw).transpose(0, 2, 4, 5, 3, 1))


def from_nkhwc(y):
    """[N, K/kb, H, W, kb] -> [N, K, H, W]."""
    n, ko, h, w, ki = y.shape
    return np.ascontiguousarray(y.transpose(0, 1, 4, 2, 3).reshape(n, ko * ki, h, w))


######################################################################
# Step 2: the computation, from the operator library. conv2d_nchwc returns
# the output and its padding stage; the tuner decides whether the padding
# is inlined into the convolution or stored once.
X = te.placeholder((1, C // cb, HW, HW, cb), name="X")
W = te.placeholder((K // kb, C // cb, R, R, cb, kb), name="W")
Y, padded = kiln.ops.conv2d_nchwc(X, W, stride=1, pad=PAD)
args = [X, W, Y]
flop = 2.0 * K * HW * HW * C * R * R

######################################################################
# Step 3: tune. The task is keyed by the computation's workload key, so any
# later session (or kiln.build) on the same shapes finds these records.
# Each candidate runs in a worker process with a time limit; a crash or a
# hang costs one trial and is recorded as an error.
workdir = tempfile.mkdtemp(prefix="kiln_tutorial_")
db = os.path.join(workdir, "tuning.db")
t0 = time.perf_counter()
result = kiln.tune(args, trials=TRIALS, db=db, batch_size=min(32, TRIALS), progress=not SMALL)
print(f"tuned in {time.perf_counter() - t0:.1f} s:", result)

######################################################################
# Step 4: build the best record and check it. kiln.build(..., db=) looks up
# the best record for this computation and target; the schedule passed in
# (here the default one) is only the fallback when there is none.
mod = kiln.build(te.create_schedule(Y), args, db=db)
rng = np.random.default_rng(0)
x = rng.uniform(-1, 1, (1, C, HW, HW)).astype("float32")
wt = rng.uniform(-1, 1, (K, C, R, R)).astype("float32")
y = np.zeros((1, K // kb, HW, HW, kb), "float32")
mod(to_nchwc(x), weights_to_blocked(wt), y)


def conv2d_reference(x, wt):
    """A direct NCHW convolution in numpy: one matrix product per tap."""
    xp = np.pad(x[0], ((0, 0), (PAD, PAD), (PAD, PAD)))
    out = np.zeros((K, HW, HW), "float64")
    for dy in range(R):
        for dx in range(R):
            window = xp[:, dy:dy + HW, dx:dx + HW].reshape(C, -1)
            out += (wt[:, :, dy, dx] @ window).reshape(K, HW, HW)
    return out[None].astype("float32")


np.testing.assert_allclose(from_nkhwc(y), conv2d_reference(x, wt), rtol=1e-4, atol=1e-4 * C * R * R)
print("the tuned kernel matches the numpy reference")
timer = mod.time_evaluator("main", number=1, repeat=5, min_repeat_ms=20)
kiln_seconds = timer(to_nchwc(x), weights_to_blocked(wt), y).median
print(f"kiln (tuned, NCHWc): {kiln_seconds * 1e3:.3f} ms, {flop / kiln_seconds * 1e-9:.1f} GFLOP/s")

######################################################################
# Step 5: resume. A second session on the same database never measures a
# schedule it already has; it continues the search with a cost model
# pre-trained on every record of the database.
again = kiln.tune(args, trials=TRIALS // 2, db=db, batch_size=min(32, TRIALS), seed=1, progress=False)
print("second session:", again)

######################################################################
# Step 6: the peer. PyTorch's CPU convolution on the same machine, started
# through kiln's peer launcher (bench/peers/launcher.py, as the benchmarks
# and kiln-tune do): a clean environment (no KILN_* settings), the same
# thread count, warmed up (30 calls and 0.5 s: its first calls of a shape
# are much slower), in the NCHW, channels_last and oneDNN blocked layouts
# (like NCHWc for kiln, the layout change is left out of its timing). kiln
# and PyTorch are timed interleaved, round by round, so a machine whose
# speed drifts slows both alike; the fastest PyTorch layout counts.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench", "peers"))
try:
    import torch  # noqa: F401  (only to know whether the peer can run)
    import launcher
except ImportError:
    launcher = None
if launcher is not None:
    threads = int(os.environ.get("KILN_NUM_THREADS", "0")) or os.cpu_count() or 1  # kiln's runtime uses as many
    layouts = ["torch_nchw"] if SMALL else ["torch_nchw", "torch_channels_last", "torch_mkldnn"]
    repeat_ms = 5 if SMALL else 50
    peers = []
    try:
        for impl in layouts:
            peers.append(launcher.Peer("conv2d", impl, [1, C, HW, HW, K, R, R, 1, PAD], threads))
        xb, wb = to_nchwc(x), weights_to_blocked(wt)
        round_timer = mod.time_evaluator("main", number=1, repeat=1, min_repeat_ms=repeat_ms)
        summary = launcher.interleave(lambda: round_timer(xb, wb, y).results[0], peers, rounds=5 if SMALL else 7, repeat_ms=repeat_ms)
    except launcher.PeerError as err:
        print(f"the PyTorch peer did not run: {err}")
        summary = None
    finally:
        for p in peers:
            p.close()
    if summary:
        for label, t in summary["peers"].items():
            print(f"{label}: median {t['median'] * 1e3:.3f} ms, {flop / t['median'] * 1e-9:.1f} GFLOP/s")
        print(f"kiln (tuned, NCHWc): median {summary['kiln_median'] * 1e3:.3f} ms; kiln / best PyTorch ({summary['peer']}) "
              f"per round: median {summary['ratio_median']:.2f} (range {summary['ratio_min']:.2f}..{summary['ratio_max']:.2f}), "
              f"below 1: kiln is faster")
if SMALL:
    shutil.rmtree(workdir)  # the test suite's run leaves nothing behind
else:
    print(f"\nthe records are in {db}; `kiln-db` lists them")
