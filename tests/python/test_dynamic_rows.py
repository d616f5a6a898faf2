"""A matmul whose rows run over several shape variables ([seq, batch, K] @ W, as
torch's attention projects its transposed input): its product runs over one
row axis of seq * batch, register-tiled like a dense over one variable, and
the bias epilogue reads it back at the rows' linear index from the same tile.
Before, the rows stayed two axes: a register tile along the batch, whose 2
rows (of a hint of 128) all fell into the scalar remainder, 9x slower than
the static compile in the BERT layer."""
import re

import numpy as np
import pytest

import kiln
from kiln import te
from kiln._ffi import _kiln
from kiln_helpers import cpu_targets

K, N, NB = 64, 96, 32


def projection(rows, relu=False):
    """x[rows..., K] @ panels [N/NB, K, NB] + bias (kiln.MatMulPackedB + Add), as the graph builds it."""
    X = te.placeholder(tuple(rows) + (K,), name="X")
    P = te.placeholder((N // NB, K, NB), name="P")
    b = te.placeholder((N,), name="b")
    C = kiln.ops.matmul_packed_b(X, P, "mm")

    def epilogue(*i):
        v = C[i] + b[i[-1]]
        return te.max(v, 0.0) if relu else v
    lambdas = {2: lambda r, j: epilogue(r, j), 3: lambda x, y, j: epilogue(x, y, j), 4: lambda x, y, z, j: epilogue(x, y, z, j)}
    out = te.compute(C.shape, lambdas[len(C.shape)], name="out")
    return [X, P, b, out]


def default_schedule(args, target):
    task = _kiln.tuner.make_task(list(args), target, "")
    return _kiln.Schedule.from_trace(task.outputs, _kiln.tuner.default_trace(task)), _kiln.tuner.default_description(task)


def test_rows_over_two_variables_are_one_tiled_axis():
    args = projection((te.var("seq"), te.var("batch")))
    sch, desc = default_schedule(args, "llvm -mcpu=skylake-avx512")
    # One row axis (the product), tiled by several rows; no tile of the batch alone.
    assert re.search(r"mm\.rows\.r=\d+x1x1x[2-9]", desc), desc
    ir = str(kiln.lower(sch, args))
    # The full tiles: an accumulator of a constant size (rows x 32 lanes, not sized by a variable) whose
    # stores to the output are unrolled vectors under no guard.
    assert re.search(r"allocate mm\.rows\.global\[float32 \* \d+\]", ir), ir
    stores = re.findall(r"^\s*out\[ramp\(.*\] = ", ir, re.M)
    assert len(stores) >= 4, ir
    first_tile = ir[:ir.index("out[ramp(")]
    assert "likely(" not in first_tile, f"the full tiles are guarded:\n{ir}"
    # The last tile: one copy per count of rows left (seq*batch - 8*t == r), each unrolled, not a loop over the rows.
    assert re.search(r"if \((batch\*seq|seq\*batch) == ", ir), ir


@pytest.mark.parametrize("target", cpu_targets())
@pytest.mark.parametrize("relu", [False, True])
def test_two_variable_rows_at_many_shapes(target, relu):
    args = projection((te.var("seq"), te.var("batch")), relu)
    sch, _ = default_schedule(args, target)
    mod = kiln.build(sch, args, target)
    rng = np.random.default_rng(7)
    p = rng.standard_normal((N // NB, K, NB)).astype(np.float32)
    w = p.transpose(1, 0, 2).reshape(K, N)
    b = rng.standard_normal(N).astype(np.float32)
    for seq, batch in ((1, 1), (1, 4), (7, 1), (33, 2), (13, 3), (2, 31), (64, 4), (100, 1), (5, 17)):
        x = rng.standard_normal((seq, batch, K)).astype(np.float32)
        y = np.zeros((seq, batch, N), np.float32)
        mod(x, p, b, y)
        ref = x @ w + b
        if relu:
            ref = np.maximum(ref, 0)
        np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4, err_msg=f"seq {seq} batch {batch} on '{target}'")


@pytest.mark.parametrize("target", cpu_targets())
def test_three_variable_rows(target):
    args = projection((te.var("a"), te.var("b"), te.var("c")))
    sch, _ = default_schedule(args, target)
    mod = kiln.build(sch, args, target)
    rng = np.random.default_rng(3)
    p = rng.standard_normal((N // NB, K, NB)).astype(np.float32)
    b = rng.standard_normal(N).astype(np.float32)
    for shape in ((1, 1, 1), (2, 3, 5), (7, 1, 3)):
        x = rng.standard_normal(shape + (K,)).astype(np.float32)
        y = np.zeros(shape + (N,), np.float32)
        mod(x, p, b, y)
        np.testing.assert_allclose(y, x @ p.transpose(1, 0, 2).reshape(K, N) + b, rtol=1e-4, atol=1e-4)


def test_static_and_one_variable_rows_keep_their_form():
    # Only several symbolic rows take the fused form: a static shape keeps its axes (and its schedule).
    _, desc = default_schedule(projection((33, 2)), "llvm -mcpu=skylake-avx512")
    assert "mm.rows" not in desc and "mm.i=" in desc, desc
    _, desc = default_schedule(projection((te.var("seq"),)), "llvm -mcpu=skylake-avx512")
    assert "mm.rows" not in desc, desc


@pytest.mark.parametrize("target", cpu_targets())
def test_bert_layer_transposed_projection_runs_at_many_shapes(target):
    torch = pytest.importorskip("torch")
    import io
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True).eval()
    buf = io.BytesIO()
    torch.onnx.export(layer, (torch.randn(1, 8, 64),), buf, input_names=["input"], opset_version=13,
                      dynamic_axes={"input": {0: "batch", 1: "seq"}})
    exe = kiln.compile(kiln.graph.from_onnx(buf.getvalue()), target=target)
    for batch, seq in ((1, 1), (2, 33), (3, 7), (4, 13), (1, 64), (5, 2)):
        x = torch.randn(batch, seq, 64)
        with torch.no_grad():
            ref = layer(x).numpy()
        np.testing.assert_allclose(exe.run([x.numpy()])[0], ref, rtol=1e-4, atol=1e-4, err_msg=f"batch {batch} seq {seq} on '{target}'")
