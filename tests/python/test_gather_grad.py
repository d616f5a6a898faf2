"""kiln.GatherGrad, Gather's data gradient (a scatter-add written as a sort
and a segmented scan), against numpy's np.add.at: repeated, negative and
out-of-range indices (clamped, as Gather clamps), index tensors of any rank,
every axis, plain kernels and compiled ones."""
import numpy as np
import pytest

import kiln
from kiln import graph as kg

RNG = np.random.default_rng(11)


def reference(data_shape, axis, idx, dy):
    n = data_shape[axis]
    rows = np.clip(np.where(idx < 0, idx + n, idx), 0, n - 1).ravel()
    pre, post = int(np.prod(data_shape[:axis])), int(np.prod(data_shape[axis + 1:]))
    out = np.zeros((pre, n, post), dy.dtype)
    np.add.at(out, (slice(None), rows), dy.reshape(pre, rows.size, post))
    return out.reshape(data_shape)


def dy_shape(data_shape, axis, idx):
    return tuple(data_shape[:axis]) + idx.shape + tuple(data_shape[axis + 1:])


def run(data_shape, axis, idx, dy, compiled):
    attrs = dict(axis=axis, data_shape=list(data_shape))
    if not compiled:
        return kg.run_op("kiln.GatherGrad", [idx, dy], **attrs)[0]
    b = kg.Builder()
    out = b.op("kiln.GatherGrad", b.input("indices", idx.shape, str(idx.dtype)), b.input("dy", dy.shape), **attrs)
    return kiln.compile(b.build(out))(idx, dy)[0]


CASES = [
    ((4, 3), 0, np.array([[0, 2, -1], [2, 2, 1]])),      # repeats and a negative index
    ((4, 3), 1, np.array([[0, 2, -1], [2, 2, 1]])),
    ((5, 2, 3), 1, np.array(1)),                          # a scalar index: one position
    ((6, 4), 0, np.array([3, 3, 3, 3, 3, 3, 3])),         # one row takes everything (7 positions: not a power of 2)
    ((6, 4), 0, np.array([9, -9, 5, 0])),                 # out of range: clamped to the ends
    ((2, 7, 3), 1, RNG.integers(-7, 7, (3, 5))),          # 2-D indices, the axis in the middle
    ((3, 50), 1, RNG.integers(0, 4, (33,))),              # few rows hit, most stay 0
]


@pytest.mark.parametrize("compiled", [False, True], ids=["plain", "compiled"])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_gather_grad_matches_add_at(case, compiled):
    data_shape, axis, idx = CASES[case]
    for dtype in ("int64", "int32"):
        i = idx.astype(dtype)
        dy = RNG.standard_normal(dy_shape(data_shape, axis, i)).astype("float32")
        got = run(data_shape, axis, i, dy, compiled)
        np.testing.assert_allclose(got, reference(data_shape, axis, i, dy), rtol=1e-5, atol=1e-5, err_msg=f"{data_shape} axis {axis} {dtype}")


def test_embedding_sized_gradient():
    # 1000 rows, 300 tokens of width 16: the scan sums up to ~300 rows per token id.
    idx = np.concatenate([RNG.integers(0, 1000, 200), np.full(100, 17)]).reshape(3, 100)
    dy = RNG.standard_normal((3, 100, 16)).astype("float32")
    got = run((1000, 16), 0, idx, dy, compiled=True)
    np.testing.assert_allclose(got, reference((1000, 16), 0, idx, dy), rtol=1e-5, atol=1e-5)


def test_gather_grad_checks_dy_shape():
    with pytest.raises(kiln.KilnError, match="dY is .* gives"):
        kg.run_op("kiln.GatherGrad", [np.array([0, 1]), np.zeros((3, 4), "float32")], axis=0, data_shape=[5, 4])
