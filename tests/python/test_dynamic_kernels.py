"""Kernels over symbolic extents (dynamic shapes) with the default schedule: one
build per kernel, called at many sizes (1, primes, large) against numpy, on the
host target and on AVX2; and the hot loops of such kernels run whole vectors
with no bounds test, the remainder peeled off (loop partitioning on a shape
variable)."""
import os
import re
import sys

import numpy as np
import pytest

import kiln
from kiln import te
from kiln._ffi import _kiln
from kiln_helpers import cpu_targets

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "bench"))
import dynamic_kernels_bench as kernels  # noqa: E402  (the benchmark's kernels: one definition)

SIZES = (1, 2, 3, 7, 13, 31, 33, 64, 97, 128, 131, 263)


def gelu(x):
    from math import erf
    return x * 0.5 * (1 + np.vectorize(erf)(x * 0.70710678))


def reference(name, ins):
    if name in ("dense", "qk", "pv"):
        return ins[0] @ ins[1]
    if name == "dense_gelu":
        return gelu(ins[0] @ ins[1] + ins[2])
    if name == "bias_gelu":
        return gelu(ins[0] + ins[1])
    if name == "softmax":
        e = np.exp(ins[0] - ins[0].max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)
    if name == "layernorm":
        x = ins[0].astype(np.float64)
        m = x.mean(-1, keepdims=True)
        return (x - m) / np.sqrt(((x - m) ** 2).mean(-1, keepdims=True) + 1e-5) * ins[1] + ins[2]
    raise AssertionError(name)


def default_schedule(args, target):
    task = _kiln.tuner.make_task(list(args), target, "")
    return _kiln.Schedule.from_trace(task.outputs, _kiln.tuner.default_trace(task))


@pytest.mark.parametrize("target", cpu_targets())
@pytest.mark.parametrize("name", ["dense", "dense_gelu", "qk", "pv", "softmax", "layernorm", "bias_gelu"])
def test_one_build_serves_every_size(name, target):
    args = kernels.KERNELS[name](te, te.var("n"))
    mod = kiln.build(default_schedule(args, target), args, target)
    sizes = SIZES if name != "dense_gelu" else (1, 7, 31, 131)  # 3072 columns: the reference's erf is slow
    for n in sizes:
        arrays = kernels.inputs(np, args, n, seed=n)
        mod(*arrays)
        ref = reference(name, arrays[:-1])
        err = np.max(np.abs(arrays[-1] - ref)) / np.max(np.abs(ref))
        assert err < 1e-4, f"{name} at n = {n} on '{target}': relative error {err}"


def nchwc_to_nchw(x):
    n, cb, h, w, c = x.shape
    return x.transpose(0, 1, 4, 2, 3).reshape(n, cb * c, h, w)


@pytest.mark.parametrize("target", cpu_targets())
def test_conv_over_a_batch_variable(target):
    import torch
    args = kernels.conv(te, te.var("n"), C=16, K=32, HW=9)
    mod = kiln.build(default_schedule(args, target), args, target)
    for n in (1, 2, 3, 5):
        x, w, y = kernels.inputs(np, args, n, seed=n)
        mod(x, w, y)
        ko, ci, kh, kw, cb, kb = w.shape
        w_oihw = w.transpose(0, 5, 1, 4, 2, 3).reshape(ko * kb, ci * cb, kh, kw)
        ref = torch.nn.functional.conv2d(torch.from_numpy(nchwc_to_nchw(x)), torch.from_numpy(w_oihw), padding=1).numpy()
        np.testing.assert_allclose(nchwc_to_nchw(y), ref, rtol=1e-4, atol=1e-4, err_msg=f"batch {n}")


def test_size_hint_picks_the_tile():
    # A shape variable's extent counts as its hint (128 without one) in the
    # task's flop and in the tiles; a bad hint is refused by name.
    n = te.var("seq")
    args = kernels.dense(te, n)
    task = _kiln.tuner.make_task(args, "llvm -mcpu=znver3", "")
    assert task.flop == 2 * 128 * 768 * 768
    with pytest.raises(kiln.KilnError, match="size hint of 'seq' is 0"):
        _kiln.tuner.make_task(args, "llvm", "", {"seq": 0})
    hinted = _kiln.tuner.make_task(args, "llvm", "", {"seq": 16})
    assert hinted.flop == 2 * 16 * 768 * 768 and hinted.size_hints == {"seq": 16}
    # 16 rows: two tiles of 8 (two vectors wide), or on AVX-512 four of 4 (four vectors wide, test_matmul_tiles.py)
    desc = _kiln.tuner.default_description(hinted)
    assert "dense.i=2x1x1x8 " in desc or ("dense.i=4x1x1x4 " in desc and "x64 " in desc), desc


def test_cuda_rules_refuse_symbolic_extents():
    args = kernels.dense(te, te.var("n"))
    task = _kiln.tuner.make_task(args, "cuda -arch=sm_90", "")
    with pytest.raises(kiln.KilnError, match="symbolic extent; the GPU rules need constant shapes"):
        _kiln.tuner.default_trace(task)


# ---- the hot loop: whole vectors, no bounds test (fails where symbolic loops are not partitioned)


def vector_stores(ir):
    """(statement, under a likely() guard) of each vector store in the lowered IR, in order."""
    guards, out = [], []
    for line in ir.splitlines():
        indent = len(line) - len(line.lstrip())
        guards = [d for d in guards if d < indent]
        if "if (likely(" in line:
            guards.append(indent)
        elif re.search(r"\[ramp\(.*\] = ", line):
            out.append((line.strip(), bool(guards)))
    return out


@pytest.mark.parametrize("target", cpu_targets())
@pytest.mark.parametrize("name,out", [("dense", "dense"), ("qk", "qk"), ("softmax", "softmax"), ("layernorm", "layernorm"), ("bias_gelu", "gelu")])
def test_hot_loop_is_vectorized_for_a_symbolic_extent(name, out, target):
    args = kernels.KERNELS[name](te, te.var("n"))
    ir = str(kiln.lower(default_schedule(args, target), args))
    # The main pieces (the full tiles) come first, the peeled remainder after:
    # the first vector store of any buffer and the first to the output are under no bounds test.
    stores = vector_stores(ir)
    to_out = [g for line, g in stores if line.startswith(out + "[")]
    assert to_out, f"no vector store to '{out}':\n{ir}"
    assert not stores[0][1] and not to_out[0], f"the full tiles' vector code is under a guard:\n{ir}"


@pytest.mark.parametrize("target", cpu_targets())
def test_batch_variable_stays_out_of_the_column_tiles(target):
    # x[b, n, 768] @ w[768, 512], both rows symbolic: fused after the constant column tiles, the batch made
    # each column tile's extent a division by b and its vector loop one of run-time length (4-8x slower).
    b, n = te.var("b"), te.var("n")
    X, W = te.placeholder((b, n, 768), name="X"), te.placeholder((768, 512), name="W")
    k = te.reduce_axis((0, 768), "k")
    D = te.compute((b, n, 512), lambda z, i, j: te.sum(X[z, i, k] * W[k, j], axis=k), name="dense")
    args = [X, W, D]
    ir = str(kiln.lower(default_schedule(args, target), args))
    assert "floordiv(min(floordiv(" not in ir and ".inner.extent" not in ir, f"a column tile of run-time length:\n{ir}"
    mod = kiln.build(default_schedule(args, target), args, target)
    rng = np.random.default_rng(0)
    for bb, nn in ((1, 1), (3, 7), (2, 33)):
        x, w = rng.standard_normal((bb, nn, 768)).astype(np.float32), rng.standard_normal((768, 512)).astype(np.float32)
        out = np.zeros((bb, nn, 512), np.float32)
        mod(x, w, out)
        np.testing.assert_allclose(out, x @ w, rtol=1e-4, atol=1e-3)


def test_tiles_of_a_shape_variable_are_peeled():
    # A hand schedule: the rows of a symbolic extent split by 6, the columns
    # vectorized. Before, the guard on the rows stayed in every tile and the
    # copy out ran one element at a time.
    n = te.var("n")
    X = te.placeholder((n, 64), name="X")
    Y = te.compute((n, 64), lambda i, j: X[i, j] * 2.0, name="Y")
    s = te.create_schedule(Y)
    i, j = s[Y].op.axis
    io, ii = s[Y].split(i, 6)
    s[Y].unroll(ii)
    s[Y].vectorize(j)
    ir = str(kiln.lower(s, [X, Y]))
    # The full tiles: six rows unrolled, each a vector store under no guard.
    assert len([line for line, guarded in vector_stores(ir) if line.startswith("Y[") and not guarded]) >= 6, ir
    mod = kiln.build(s, [X, Y])
    for rows in (1, 5, 6, 7, 13, 100):
        x = np.random.default_rng(rows).standard_normal((rows, 64)).astype("float32")
        y = np.zeros_like(x)
        mod(x, y)
        np.testing.assert_allclose(y, 2 * x, rtol=1e-6)
