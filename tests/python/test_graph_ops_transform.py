"""Shape/transform operators (graph/src/ops/transform_*.cpp) against numpy and PyTorch.

Each op runs through a one-operator graph with plain kernels; inputs listed
in `consts` become graph constants (compile-time inputs, or constant Gather
indices), the others are fed. Shapes are random but small.
"""
import numpy as np
import pytest
import torch

import kiln
from kiln import graph as G
from kiln._ffi import _kiln

INT64_MAX = np.iinfo(np.int64).max
INT64_MIN = np.iinfo(np.int64).min


def run(op, inputs, consts=None, **attrs):
    """Runs `op` on numpy inputs; inputs at `consts` (default: the op's compile-time ones) become constants; None is absent.

    Unlike G.run_op, keeps 0-d arrays 0-d (np.ascontiguousarray makes them 1-d).
    """
    consts = set(_kiln.graph.op_const_inputs(op) if consts is None else consts)
    b = G.Builder()
    vals, feed = [], []
    for i, a in enumerate(inputs):
        if a is None:
            vals.append(None)
            continue
        a = np.asarray(a, order="C")
        if i in consts:
            vals.append(b.constant(f"c{i}", a) if a.ndim else G.make_constant(f"c{i}", a))
        else:
            vals.append(b.input(f"x{i}", a.shape, str(a.dtype)))
            feed.append(a)
    outs = G.make_op(op, vals, name=op, **attrs)
    exe = kiln.compile(b.build(outs), plain=True, fuse=False)
    return exe.run(feed)


def check(got, want):
    assert got.shape == want.shape, f"shape {got.shape} != {want.shape}"
    assert got.dtype == want.dtype, f"dtype {got.dtype} != {want.dtype}"
    np.testing.assert_array_equal(got, want)


def rand(rng, shape, dtype="float32"):
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    return rng.integers(-1000, 1000, size=shape).astype(dtype)


def rand_shape(rng, rank, lo=1, hi=5):
    return tuple(int(d) for d in rng.integers(lo, hi, size=rank))


# ---- Reshape, Flatten, Transpose, Squeeze, Unsqueeze, Expand ----------------


@pytest.mark.parametrize("dtype", ["float32", "int64"])
def test_reshape(rng, dtype):
    x = rand(rng, (2, 3, 4), dtype)
    for shape in [[24], [4, -1], [0, -1], [0, 0, 2, 2], [-1, 2, 1], [1, 0, -1, 1]]:
        want = x.reshape([x.shape[k] if s == 0 else s for k, s in enumerate(shape)])
        check(run("Reshape", [x, np.array(shape, "int64")])[0], want)
    # allowzero: a 0 is a zero-extent dimension, so a shape with 0 cannot take 24 elements
    with pytest.raises(kiln.KilnError, match=r"24 elements"):
        G.run_op("Reshape", [x, np.array([0, 24])], allowzero=1)
    check(run("Reshape", [x, np.array([6, 4], "int32")], allowzero=1)[0], x.reshape(6, 4))


@pytest.mark.parametrize("src, dst", [
    ((8, 6, 10), (48, 10)),          # a merged run, then an axis kept as it is
    ((48, 10), (8, 6, 10)),          # a split run, then a kept axis
    ((2, 12, 5), (6, 4, 5)),         # a run of two axes on each side
    ((1, 6, 1, 4, 1), (6, 4)),       # axes of 1 on either side
    ((6, 4), (1, 2, 3, 1, 4, 1)),
    ((4, 6, 5), (8, 15)),            # no common boundary: one run
])
def test_reshape_by_runs_of_axes(rng, src, dst):
    # Reshape indexes each run of axes with equal counts on both sides alone (ops/src/transform.cpp).
    x = rand(rng, src)
    check(run("Reshape", [x, np.array(dst, "int64")])[0], x.reshape(dst))
    # fused into a consumer that reads it transposed, as a gradient's A^T does
    b = G.Builder()
    xv = b.input("x", src)
    y = b.op("Transpose", b.op("Reshape", xv, b.constant("s", np.array(dst, "int64"))), perm=list(range(len(dst)))[::-1])
    check(kiln.compile(b.build(y)).run([x])[0], x.reshape(dst).transpose(list(range(len(dst)))[::-1]))


def test_reshape_scalar_and_to_scalar(rng):
    check(run("Reshape", [np.array(7, "int64"), np.array([1, 1])])[0], np.array([[7]], "int64"))
    check(run("Reshape", [np.array([[2.5]], "float32"), np.zeros(0, "int64")])[0], np.array(2.5, "float32"))


@pytest.mark.parametrize("rank", [1, 2, 4])
def test_flatten(rng, rank):
    x = rand(rng, rand_shape(rng, rank))
    for axis in range(-rank, rank + 1):
        a = axis + rank if axis < 0 else axis
        check(run("Flatten", [x], axis=axis)[0], x.reshape(int(np.prod(x.shape[:a])), -1))


@pytest.mark.parametrize("dtype", ["float32", "int64", "int32"])
def test_transpose(rng, dtype):
    for rank in [1, 2, 3, 4]:
        x = rand(rng, rand_shape(rng, rank, 1, 5), dtype)
        perm = [int(p) for p in rng.permutation(rank)]
        check(run("Transpose", [x], perm=perm)[0], x.transpose(perm))
    check(run("Transpose", [x])[0], x.transpose())  # default: reversed


def test_squeeze_unsqueeze(rng):
    x = rand(rng, (1, 3, 1, 4, 1))
    check(run("Squeeze", [x, np.array([0, -1])])[0], x.squeeze((0, 4)))
    check(run("Squeeze", [x])[0], x.squeeze())
    check(run("Squeeze", [x, None])[0], x.squeeze())
    y = rand(rng, (3, 4), "int64")
    check(run("Unsqueeze", [y, np.array([0, -1])])[0], y.reshape(1, 3, 4, 1))
    check(run("Unsqueeze", [y, np.array([3, 1])])[0], y.reshape(3, 1, 4, 1))
    check(run("Unsqueeze", [np.array(5, "int64"), np.array([0])])[0], np.array([5], "int64"))
    with pytest.raises(kiln.KilnError, match=r"extent is 3, not 1"):
        run("Squeeze", [x, np.array([1])])
    with pytest.raises(kiln.KilnError, match=r"twice"):
        run("Unsqueeze", [y, np.array([0, -4])])


def test_expand(rng):
    for xs, shape in [((3, 1), (2, 3, 4)), ((1,), (5,)), ((2, 1, 4), (3, 1)), ((4,), (2, 1)), ((1, 3), (1,))]:
        x = rand(rng, xs, "int64")
        check(run("Expand", [x, np.array(shape)])[0], x * np.ones(shape, "int64"))
    with pytest.raises(kiln.KilnError, match=r"cannot expand"):
        run("Expand", [rand(rng, (3,)), np.array([4])])


# ---- Concat, Split ----------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "int64"])
def test_concat(rng, dtype):
    for n in [1, 2, 4]:
        rank = int(rng.integers(1, 4))
        axis = int(rng.integers(-rank, rank))
        base = list(rand_shape(rng, rank))
        xs = []
        for _ in range(n):
            s = list(base)
            s[axis] = int(rng.integers(1, 4))
            xs.append(rand(rng, s, dtype))
        check(run("Concat", xs, axis=axis)[0], np.concatenate(xs, axis=axis))


def test_concat_constants_and_inputs(rng):
    """Constant and fed inputs mixed (as in shape subgraphs), a one-element constant among them."""
    a, b, c = np.array([1, 2], "int64"), np.array([7], "int64"), np.array([3, 4, 5], "int64")
    check(run("Concat", [a, b, c], consts=[0, 1], axis=0)[0], np.concatenate([a, b, c]))


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_split(rng, axis):
    x = rand(rng, (6, 7, 5))
    dim = x.shape[axis]
    sizes = [2, dim - 3, 1]
    outs = run("Split", [x, np.array(sizes)], axis=axis)
    want = np.split(x, np.cumsum(sizes)[:-1], axis=axis)
    assert len(outs) == 3
    for g, w in zip(outs, want):
        check(g, w)
    # num_outputs: equal parts, or ceil-sized with a smaller last part
    for n in [1, 2, 3]:
        part = -(-dim // n)
        cuts = [part * k for k in range(1, n)]
        outs = run("Split", [x], axis=axis, num_outputs=n)
        for g, w in zip(outs, np.split(x, cuts, axis=axis)):
            check(g, w)
        assert len(outs) == n


def test_split_needs_sizes():
    with pytest.raises(kiln.KilnError, match=r"into 4 parts of 2"):
        G.run_op("Split", [np.zeros((5, 2), "float32")], num_outputs=4)
    with pytest.raises(kiln.KilnError, match=r"num_outputs"):
        G.run_op("Split", [np.zeros((4, 2), "float32")])
    with pytest.raises(kiln.KilnError, match=r"sums to 5"):
        G.run_op("Split", [np.zeros((4, 2), "float32"), np.array([2, 3])])


# ---- Slice ------------------------------------------------------------------

SLICES = [
    # (starts, ends, axes, steps)
    ([1], [3], None, None),
    ([0, 1], [INT64_MAX, -1], [0, 2], None),
    ([-2], [INT64_MAX], [-1], None),
    ([10], [-10], [1], [-1]),  # clamped both ends, reversed
    ([-1], [INT64_MIN], [0], [-2]),
    ([4, 0], [0, 5], [2, 1], [-1, 2]),
    ([-100, 2], [100, 3], [1, 0], [3, 1]),
    ([3], [1], [-1], [-3]),
]


def numpy_slice(x, starts, ends, axes, steps):
    axes = list(range(len(starts))) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    idx = [slice(None)] * x.ndim
    for s, e, a, st in zip(starts, ends, axes, steps):
        # numpy clamps the same way; only the int64 extremes need to become None
        s = None if s in (INT64_MAX, INT64_MIN) else s
        e = None if e in (INT64_MAX, INT64_MIN) else e
        idx[a] = slice(s, e, st)
    return x[tuple(idx)]


@pytest.mark.parametrize("dtype", ["float32", "int64"])
def test_slice(rng, dtype):
    x = rand(rng, (5, 6, 7), dtype)
    for starts, ends, axes, steps in SLICES:
        ins = [x, np.array(starts, "int64"), np.array(ends, "int64"), None if axes is None else np.array(axes), None if steps is None else np.array(steps)]
        while ins[-1] is None:
            ins.pop()
        check(run("Slice", ins)[0], numpy_slice(x, starts, ends, axes, steps))


def test_slice_int32_bounds_and_absent_axes(rng):
    x = rand(rng, (4, 9))
    got = run("Slice", [x, np.array([1, -8], "int32"), np.array([-1, 9], "int32"), None, np.array([2, 3], "int32")])[0]
    check(got, x[1:-1:2, -8:9:3])


def test_slice_errors(rng):
    x = rand(rng, (4, 5))
    with pytest.raises(kiln.KilnError, match=r"must be a constant"):
        run("Slice", [x, np.array([1]), np.array([3])], consts=[2])  # starts fed, not constant
    with pytest.raises(kiln.KilnError, match=r"steps .* has a 0"):
        run("Slice", [x, np.array([1]), np.array([3]), np.array([0]), np.array([0])])
    with pytest.raises(kiln.KilnError, match=r"axis 2 is out of range"):
        run("Slice", [x, np.array([1]), np.array([3]), np.array([2])])


# ---- Gather -----------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "int64"])
@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
def test_gather(rng, dtype, index_dtype):
    x = rand(rng, (4, 5, 3), dtype)
    for axis in [0, 1, -1, -3]:
        n = x.shape[axis]
        for ishape in [(), (2,), (2, 3)]:
            idx = rng.integers(-n, n, size=ishape).astype(index_dtype)
            want = np.take(x, idx, axis=axis)
            check(run("Gather", [x, idx], axis=axis)[0], want)  # indices fed at run time
    idx = np.array([[-1, 0], [2, -4]], index_dtype)
    check(run("Gather", [x, idx], consts=[1], axis=0)[0], np.take(x, idx, axis=0))  # constant indices


def test_gather_shape_vector():
    """Gather of one dimension from an int64 shape vector: a scalar, as exporters write it."""
    s = np.array([2, 3, 224, 224], "int64")
    check(run("Gather", [s, np.array(-2, "int64")])[0], np.array(224, "int64"))
    check(run("Gather", [s, np.array(1, "int64")], consts=[0, 1])[0], np.array(3, "int64"))


def test_gather_errors(rng):
    x = rand(rng, (4, 5))
    with pytest.raises(kiln.KilnError, match=r"index 4 is out of range for axis 0"):
        run("Gather", [x, np.array([1, 4])], consts=[1])
    with pytest.raises(kiln.KilnError, match=r"int32 or int64"):
        run("Gather", [x, np.array([1.0], "float32")])
    with pytest.raises(kiln.KilnError, match=r"axis 2 is out of range"):
        run("Gather", [x, np.array([1])], axis=2)


# ---- Pad --------------------------------------------------------------------


def numpy_pad(x, before, after, mode, value=0):
    # numpy pads with non-negative amounts; negative ones crop afterwards
    pw = [(max(b, 0), max(a, 0)) for b, a in zip(before, after)]
    kw = {"constant_values": value} if mode == "constant" else {}
    y = np.pad(x, pw, mode=mode, **kw)
    idx = tuple(slice(-min(b, 0), y.shape[k] + min(a, 0)) for k, (b, a) in enumerate(zip(before, after)))
    return y[idx]


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
@pytest.mark.parametrize("dtype", ["float32", "int64"])
def test_pad(rng, mode, dtype):
    for rank in [1, 2, 4]:
        x = rand(rng, rand_shape(rng, rank, 2, 5), dtype)
        hi = [2 * d for d in x.shape] if mode == "reflect" else [3] * rank  # reflect beyond the extent repeats the mirror
        before = [int(rng.integers(0, h + 1)) for h in hi]
        after = [int(rng.integers(0, h + 1)) for h in hi]
        if mode == "constant" and rank > 1:
            before[0] = -1  # crop
        pads = np.array(before + after, "int64")
        value = np.array(7, dtype)
        got = run("Pad", [x, pads, value if mode == "constant" else None], mode=mode)[0]
        check(got, numpy_pad(x, before, after, mode, 7 if mode == "constant" else 0))


def test_pad_axes_and_default_value(rng):
    x = rand(rng, (2, 3, 4))
    got = run("Pad", [x, np.array([1, 2, 0, 3]), None, np.array([-1, 0])])[0]  # axes -1 and 0: (1, 0) on -1, (2, 3) on 0
    check(got, np.pad(x, [(2, 3), (0, 0), (1, 0)]))
    x1 = rand(rng, (1, 3))
    check(run("Pad", [x1, np.array([2, 1, 1, 0])], mode="reflect")[0], np.pad(x1, [(2, 1), (1, 0)], mode="reflect"))


def test_pad_errors(rng):
    x = rand(rng, (2, 3))
    with pytest.raises(kiln.KilnError, match=r"needs 4"):
        run("Pad", [x, np.array([1, 1])])
    with pytest.raises(kiln.KilnError, match=r"mode 'wrap'"):
        run("Pad", [x, np.array([1, 1, 1, 1])], mode="wrap")


# ---- Resize -----------------------------------------------------------------


def src_coord(out_len, in_len, scale, mode):
    x = np.arange(out_len, dtype=np.float64)
    if mode == "half_pixel":
        return (x + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (x + 0.5) / scale - 0.5 if out_len > 1 else np.zeros(out_len)
    if mode == "align_corners":
        return x * (in_len - 1) / (out_len - 1) if out_len > 1 else np.zeros(out_len)
    return x / scale


def ref_nearest(x, out_shape, scales, coord, nearest):
    idx = []
    for k, (n, m) in enumerate(zip(x.shape, out_shape)):
        c = src_coord(m, n, scales[k], coord)
        f = np.floor(c)
        frac = c - f
        i = {"round_prefer_floor": np.where(frac <= 0.5, f, f + 1), "round_prefer_ceil": np.where(frac < 0.5, f, f + 1),
             "floor": f, "ceil": np.ceil(c)}[nearest]
        idx.append(np.clip(i.astype(np.int64), 0, n - 1))
    return x[np.ix_(*idx)]


def ref_bilinear(x, out_shape, scales, coord):
    ys = src_coord(out_shape[-2], x.shape[-2], scales[-2], coord)
    xs = src_coord(out_shape[-1], x.shape[-1], scales[-1], coord)
    out = np.zeros(out_shape, np.float64)
    H, W = x.shape[-2:]
    for i, y in enumerate(ys):
        for j, c in enumerate(xs):
            # edge-padded neighbours, as the ONNX reference reads them
            y0, x0 = int(np.floor(y)), int(np.floor(c))
            wy, wx = y - y0, c - x0
            v = 0
            for dy, ay in ((0, 1 - wy), (1, wy)):
                for dx, ax in ((0, 1 - wx), (1, wx)):
                    v = v + ay * ax * x[..., min(max(y0 + dy, 0), H - 1), min(max(x0 + dx, 0), W - 1)]
            out[..., i, j] = v
    return out.astype(x.dtype)


COORDS = ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric"]


@pytest.mark.parametrize("coord", COORDS)
def test_resize_nearest(rng, coord):
    x = rand(rng, (2, 3, 5, 4))
    for nearest in ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]:
        for scales in [(1, 1, 2, 3), (1, 2, 0.6, 1.5)]:
            out_shape = [int(np.floor(n * s)) for n, s in zip(x.shape, np.float32(scales))]
            got = run("Resize", [x, None, np.array(scales, "float32")], mode="nearest", coordinate_transformation_mode=coord, nearest_mode=nearest)[0]
            check(got, ref_nearest(x, out_shape, np.float32(scales).astype(np.float64), coord, nearest))
    sizes = np.array([2, 3, 7, 3], "int64")
    got = run("Resize", [x, np.zeros(0, "float32"), np.zeros(0, "float32"), sizes], coordinate_transformation_mode=coord)[0]
    check(got, ref_nearest(x, sizes, sizes / np.array(x.shape), coord, "round_prefer_floor"))


def test_resize_nearest_int64():
    x = np.arange(6, dtype="int64").reshape(2, 3)
    got = run("Resize", [x, None, np.array([2, 2], "float32")], coordinate_transformation_mode="asymmetric", nearest_mode="floor")[0]
    check(got, x.repeat(2, 0).repeat(2, 1))


@pytest.mark.parametrize("coord", COORDS)
def test_resize_linear(rng, coord):
    x = rand(rng, (1, 2, 4, 5))
    for scales in [(1, 1, 2, 2), (1, 1, 0.5, 1.6), (1, 1, 1.75, 0.8)]:
        out_shape = [int(np.floor(n * s)) for n, s in zip(x.shape, np.float32(scales))]
        got = run("Resize", [x, None, np.array(scales, "float32")], mode="linear", coordinate_transformation_mode=coord)[0]
        np.testing.assert_allclose(got, ref_bilinear(x, out_shape, np.float32(scales).astype(np.float64), coord), rtol=1e-5, atol=1e-6)
    sizes = np.array([1, 2, 7, 3])
    got = run("Resize", [x, None, None, sizes], mode="linear", coordinate_transformation_mode=coord)[0]
    np.testing.assert_allclose(got, ref_bilinear(x, sizes, sizes / np.array(x.shape), coord), rtol=1e-5, atol=1e-6)


def test_resize_matches_torch(rng):
    x = rand(rng, (1, 3, 5, 6))
    t = torch.from_numpy(x)
    sizes = np.array([1, 3, 8, 9])
    want = torch.nn.functional.interpolate(t, size=(8, 9), mode="bilinear", align_corners=False).numpy()
    got = run("Resize", [x, None, None, sizes], mode="linear", coordinate_transformation_mode="pytorch_half_pixel")[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    want = torch.nn.functional.interpolate(t, size=(8, 9), mode="bilinear", align_corners=True).numpy()
    got = run("Resize", [x, None, None, sizes], mode="linear", coordinate_transformation_mode="align_corners")[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    want = torch.nn.functional.interpolate(t, scale_factor=2, mode="nearest").numpy()
    got = run("Resize", [x, None, np.array([1, 1, 2, 2], "float32")], coordinate_transformation_mode="asymmetric", nearest_mode="floor")[0]
    check(got, want)


@pytest.mark.parametrize("coord", COORDS)
def test_resize_matches_onnx_reference(rng, coord):
    """ONNX's own reference (onnx.backend.test.case.node.resize, pure Python: small shapes).

    Its align_corners divides by scale * length, not the integer output length
    (ORT, PyTorch and the spec's text use the integer), and its
    pytorch_half_pixel differs for outputs of length 1: scales here give
    integer output lengths above 1, where all agree.
    """
    ref = pytest.importorskip("onnx.backend.test.case.node.resize")
    x = rand(rng, (1, 2, 4, 4))
    for scales in [(1, 1, 2, 1.5), (1, 1, 0.5, 0.75)]:
        s32 = np.array(scales, "float32")
        for nearest in ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]:
            want = ref.interpolate_nd(x, lambda r: ref.nearest_coeffs(r, mode=nearest), scale_factors=s32, coordinate_transformation_mode=coord)
            got = run("Resize", [x, None, s32], coordinate_transformation_mode=coord, nearest_mode=nearest)[0]
            np.testing.assert_array_equal(got, want.astype("float32"))
        want = ref.interpolate_nd(x, ref.linear_coeffs, scale_factors=s32, coordinate_transformation_mode=coord)
        got = run("Resize", [x, None, s32], mode="linear", coordinate_transformation_mode=coord)[0]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    sizes = np.array([1, 2, 5, 2])
    want = ref.interpolate_nd(x, ref.linear_coeffs, output_size=sizes, coordinate_transformation_mode=coord)
    got = run("Resize", [x, None, None, sizes], mode="linear", coordinate_transformation_mode=coord)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_resize_errors(rng):
    x = rand(rng, (1, 2, 4, 4))
    s = np.array([1, 1, 2, 2], "float32")
    with pytest.raises(kiln.KilnError, match=r"both scales and sizes"):
        run("Resize", [x, None, s, np.array([1, 2, 8, 8])])
    with pytest.raises(kiln.KilnError, match=r"neither scales nor sizes"):
        run("Resize", [x, None, None, None])
    with pytest.raises(kiln.KilnError, match=r"dimension 1 goes from 2 to 4"):
        run("Resize", [x, None, np.array([1, 2, 2, 2], "float32")], mode="linear")
    with pytest.raises(kiln.KilnError, match=r"mode 'cubic'"):
        run("Resize", [x, None, s], mode="cubic")
    with pytest.raises(kiln.KilnError, match=r"tf_crop_and_resize"):
        run("Resize", [x, None, s], coordinate_transformation_mode="tf_crop_and_resize")


# ---- Shape, ConstantOfShape, Range ------------------------------------------


def test_shape(rng):
    info = G.op_info("Shape")
    assert info["pattern"] == "opaque" and not info["has_compute"]
    x = rand(rng, (2, 3, 4, 5))
    check(run("Shape", [x])[0], np.array([2, 3, 4, 5], "int64"))
    for start, end in [(1, 3), (-2, INT64_MAX), (0, -1), (-10, 10), (3, 1)]:
        check(run("Shape", [x], start=start, end=end)[0], np.array(x.shape[start:end], "int64"))


def test_constant_of_shape():
    check(run("ConstantOfShape", [np.array([2, 3])])[0], np.zeros((2, 3), "float32"))
    check(run("ConstantOfShape", [np.array([4])], value=-3, dtype=7)[0], np.full(4, -3, "int64"))
    check(run("ConstantOfShape", [np.array([2, 2])], value=1.5, dtype=11)[0], np.full((2, 2), 1.5, "float64"))
    check(run("ConstantOfShape", [np.array([3])], value=1, dtype=9)[0], np.ones(3, bool))
    with pytest.raises(kiln.KilnError, match=r"dtype 8 "):
        run("ConstantOfShape", [np.array([3])], dtype=8)


def test_range():
    for start, limit, delta, dtype in [(0, 5, 1, "int64"), (10, 1, -3, "int64"), (1, 2, 0.25, "float32"), (-2, 7, 4, "int32")]:
        got = run("Range", [np.array(start, dtype), np.array(limit, dtype), np.array(delta, dtype)])[0]
        check(got, np.arange(start, limit, delta, dtype=dtype))


# ---- Errors that name the problem -------------------------------------------


def test_type_errors(rng):
    x = rand(rng, (2, 3, 4))
    with pytest.raises(kiln.KilnError, match=r"cannot reshape float32\[2, 3, 4\] \(24 elements\) to \[5, 5\] \(25 elements\)"):
        G.run_op("Reshape", [x, np.array([5, 5])])
    with pytest.raises(kiln.KilnError, match=r"more than one -1"):
        G.run_op("Reshape", [x, np.array([-1, -1])])
    with pytest.raises(kiln.KilnError, match=r"perm \[0, 0, 1\] is not a permutation"):
        G.run_op("Transpose", [x], perm=[0, 0, 1])
    with pytest.raises(kiln.KilnError, match=r"perm \[1, 0\] has 2 entries"):
        G.run_op("Transpose", [x], perm=[1, 0])
    with pytest.raises(kiln.KilnError, match=r"input 1 is float32\[2, 5, 4\] but input 0 is float32\[2, 3, 4\]; all dimensions but axis 2"):
        G.run_op("Concat", [x, rand(rng, (2, 5, 4))], axis=2)
    with pytest.raises(kiln.KilnError, match=r"dtypes must agree"):
        G.run_op("Concat", [x, x.astype("int64")], axis=0)
    with pytest.raises(kiln.KilnError, match=r"axis 3 is out of range for rank 3"):
        G.run_op("Concat", [x, x], axis=3)
    with pytest.raises(kiln.KilnError, match=r"Flatten takes -rank to rank"):
        G.run_op("Flatten", [x], axis=4)
    with pytest.raises(kiln.KilnError, match=r"shape .* must be a constant"):
        run("Reshape", [x, np.array([24])], consts=[])


# ---- Constant folding of a shape subgraph ------------------------------------


def test_shape_chain_folds_to_a_constant_shape(rng):
    """x.reshape(x.shape[0], -1) as exporters write it: Shape -> Gather -> Unsqueeze -> Concat -> Reshape.

    Reshape's type needs its shape input's values, so make_op takes only a
    constant there: the shape subgraph is folded first (as the importer must,
    node by node) and its value becomes the Reshape's constant. Folding runs
    Gather, Unsqueeze and Concat on int64 through plain kernels.
    """
    b = G.Builder()
    x = b.input("x", (2, 3, 4, 5))
    shape = b.op("Shape", x)
    # a 0-d index (G.make_constant: Builder.constant makes 0-d arrays 1-d), so Gather gives a scalar
    batch = b.op("Gather", shape, G.make_constant("zero", np.array(0, "int64")), axis=0)
    batch = b.op("Unsqueeze", batch, b.constant("axes", np.array([0], "int64")))
    target = b.op("Concat", batch, b.constant("minus_one", np.array([-1], "int64")), axis=0)
    model = b.build(target, b.op("Relu", x))
    assert model.op_types() == ["Shape", "Gather", "Unsqueeze", "Concat", "Relu"]
    folded = G.fold_constants(model)
    assert folded.op_types() == ["Relu"]
    assert folded.output_types[0] == ((2,), "int64")
    a = rand(rng, (2, 3, 4, 5))
    value, _ = kiln.compile(model)(a)
    check(value, np.array([2, -1], "int64"))

    with pytest.raises(kiln.KilnError, match=r"input 1 \(shape\) must be a constant"):
        b.op("Reshape", x, target)
    y = b.op("Relu", b.op("Reshape", x, b.constant("target", value)))
    exe = kiln.compile(b.build(y))
    check(exe(a)[0], np.maximum(a.reshape(2, -1), 0))


def test_injective_chain_fuses(rng):
    """Transpose -> Slice -> Concat -> Pad fused in one kernel with the default schedule."""
    b = G.Builder()
    x = b.input("x", (2, 6, 5))
    t = b.op("Transpose", x, perm=[0, 2, 1])
    s = b.op("Slice", t, b.constant("s", np.array([1])), b.constant("e", np.array([-1])), b.constant("a", np.array([1])))
    c = b.op("Concat", s, s, axis=-1)
    p = b.op("Pad", c, b.constant("p", np.array([0, 1, 0, 0, 0, 2])), mode="edge")
    exe = kiln.compile(b.build(p))
    assert exe.num_kernels == 1
    a = rand(rng, (2, 6, 5))
    ts = a.transpose(0, 2, 1)[:, 1:-1]
    check(exe(a)[0], np.pad(np.concatenate([ts, ts], -1), [(0, 0), (1, 0), (0, 2)], mode="edge"))


def test_default_schedules(rng):
    """Runtime int64 Gather indices, bilinear Resize and reflect Pad under the default (tuner-rule) schedules."""
    b = G.Builder()
    x = b.input("x", (2, 3, 6, 5))
    idx = b.input("idx", (4,), "int64")
    g = b.op("Gather", x, idx, axis=-1)
    r = b.op("Resize", g, None, b.constant("scales", np.array([1, 1, 1.5, 2], "float32")), mode="linear")
    p = b.op("Pad", r, b.constant("pads", np.array([0, 0, 2, 1, 0, 0, 3, 2])), mode="reflect")
    out = b.op("Relu", p)
    exe = kiln.compile(b.build(out, g))
    a = rand(rng, (2, 3, 6, 5))
    i = np.array([4, -1, 0, 2], "int64")
    got, gathered = exe(a, i)
    check(gathered, np.take(a, i, axis=-1))
    want = ref_bilinear(np.take(a, i, axis=-1), (2, 3, 9, 8), [1, 1, 1.5, 2], "half_pixel")
    want = np.maximum(np.pad(want, [(0, 0), (0, 0), (2, 3), (1, 2)], mode="reflect"), 0)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_zero_width_slices_are_left_out():
    # torch.roll by 0 (Swin's shifted windows) exports a zero-width Slice feeding a Concat: no kernel can
    # run over an extent of 0, so the empty value is dropped, both on a graph input and on constants
    # (which the importer folds as it builds).
    import io
    import torch

    class Roll(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("table", torch.arange(12.0).reshape(3, 4))

        def forward(self, x):
            s = 0
            rolled = torch.cat([x[:, x.shape[1] - s:], x[:, :x.shape[1] - s]], dim=1)
            t = torch.cat([self.table[:, 4 - s:], self.table[:, :4 - s]], dim=1)
            return rolled * 2 + t.sum()

    x = torch.randn(3, 5)
    buf = io.BytesIO()
    torch.onnx.export(Roll(), (x,), buf, opset_version=14)
    g = kiln.graph.from_onnx(buf.getvalue())
    np.testing.assert_allclose(kiln.compile(g)(x.numpy())[0], Roll()(x).numpy(), rtol=1e-6)
    assert "Concat" not in str(kiln.compile(g).graph)


def _scatter_nd_model(data, indices, updates, reduction=None):
    import onnx
    from onnx import helper, numpy_helper
    attrs = {"reduction": reduction} if reduction else {}
    node = helper.make_node("ScatterND", ["d", "i", "u"], ["y"], **attrs)
    out = helper.make_tensor_value_info("y", onnx.mapping.NP_TYPE_TO_TENSOR_TYPE[data.dtype], list(data.shape))
    g = helper.make_graph([node], "g", [], [out], [numpy_helper.from_array(a, n) for a, n in ((data, "d"), (indices, "i"), (updates, "u"))])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 16)]).SerializeToString()


def _scatter_nd_reference(data, indices, updates, reduction="none"):
    out = data.copy()
    for t in np.ndindex(indices.shape[:-1]):
        at = tuple(indices[t])
        if reduction == "add":
            out[at] += updates[t]
        elif reduction == "mul":
            out[at] *= updates[t]
        else:
            out[at] = updates[t]
    return out


@pytest.mark.parametrize("reduction", [None, "add", "mul"])
def test_scatter_nd_on_constants(reduction):
    # Swin's shifted-window mask is built by slice assignment, which exports as ScatterND on constants.
    pytest.importorskip("onnx")
    rng = np.random.default_rng(5)
    data = rng.standard_normal((4, 5, 3)).astype("float32")
    indices = np.array([[[0, 1], [3, 4]], [[2, 0], [-1, 2]]], "int64")  # tuples of 2: whole rows of 3
    updates = rng.standard_normal((2, 2, 3)).astype("float32")
    g = kiln.graph.from_onnx(_scatter_nd_model(data, indices, updates, reduction))
    want = _scatter_nd_reference(data, indices, updates, reduction or "none")
    np.testing.assert_allclose(kiln.compile(g)()[0], want, rtol=1e-6)
    # Element tuples (k = rank) on int64.
    d, i, u = np.arange(12, dtype="int64").reshape(3, 4), np.array([[0, 0], [2, 3]], "int64"), np.array([-5, -7], "int64")
    np.testing.assert_array_equal(kiln.compile(kiln.graph.from_onnx(_scatter_nd_model(d, i, u)))()[0], _scatter_nd_reference(d, i, u))


def test_scatter_nd_errors():
    pytest.importorskip("onnx")
    data = np.zeros((3, 4), "float32")
    with pytest.raises(kiln.KilnError, match="out of range for dimension 0"):
        kiln.graph.from_onnx(_scatter_nd_model(data, np.array([[3]], "int64"), np.zeros((1, 4), "float32")))
    with pytest.raises(kiln.KilnError, match=r"updates are float32\[2, 4\].*need shape \[1, 4\]"):
        kiln.graph.from_onnx(_scatter_nd_model(data, np.array([[1]], "int64"), np.zeros((2, 4), "float32")))
    b = G.Builder()
    x = b.input("x", (3, 4), "float32")
    with pytest.raises(kiln.KilnError, match="its data is computed at run time; kiln evaluates ScatterND at compile time only"):
        kiln.compile(b.build(b.op("ScatterND", x, G.make_constant("i", np.array([[1]], "int64")),
                                  G.make_constant("u", np.zeros((1, 4), "float32")))))
