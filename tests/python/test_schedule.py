"""Tensor declarations, schedule primitives, traces and lowering from Python."""
import json

import numpy as np

import pytest

import kiln
from kiln import te


def matmul(n=64, m=64, k=64):
    A = te.placeholder((n, k), name="A")
    B = te.placeholder((k, m), name="B")
    r = te.reduce_axis((0, k), name="k")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    return A, B, C


def test_declarations():
    A, B, C = matmul()
    assert A.shape == (64, 64) and A.dtype == "float32" and A.name == "A"
    assert C.op.kind == "compute" and A.op.kind == "placeholder"
    assert [a.name for a in C.op.axis] == ["i", "j"]
    assert [a.name for a in C.op.reduce_axis] == ["k"]
    assert C.op.axis[0].dom[1].value == 64
    assert set(t.name for t in C.op.input_tensors) == {"A", "B"}
    assert C.op.output(0) == C
    # lambda parameter names become axis names
    D = te.compute((4, 5, 6), lambda n, c, h: A[n, c] + h, name="D")
    assert [a.name for a in D.op.axis] == ["n", "c", "h"]
    assert A(1, 2).kind == "TensorLoad"
    i, j = C.op.axis
    assert (i == C.op.axis[0]) is True and (i != j) is True and i in [j, i]
    assert (i == 3).kind == "EQ"  # against a value: an expression
    assert len({i, C.op.axis[0], j}) == 2


def test_symbolic_shapes():
    n = te.var("n")
    A = te.placeholder((n, 8), name="A")
    B = te.compute((n, 8), lambda i, j: A[i, j] * 2.0, name="B")
    assert str(B.shape[0]) == "n"
    s = te.create_schedule(B)
    text = str(kiln.lower(s, [A, B]))
    assert "func main" in text


def test_compute_errors():
    A = te.placeholder((4, 4), name="A")
    with pytest.raises(kiln.KilnError, match="2 dimensions"):
        te.compute((4, 4), lambda i: A[i, i], name="bad")
    with pytest.raises(kiln.KilnError, match="several values"):
        te.compute((4, 4), lambda i, j: (A[i, j], A[j, i]), name="bad")
    with pytest.raises(kiln.KilnError):
        te.compute((4, 4), lambda i, j: A[i], name="bad")  # wrong number of indices
    with pytest.raises(ZeroDivisionError):
        te.compute((4, 4), lambda i, j: 1 / 0, name="bad")  # Python errors pass through
    with pytest.raises(kiln.KilnError, match="reduce_axis"):
        te.sum(A[0, 0], axis=te.var("x"))
    with pytest.raises(kiln.KilnError, match="range"):
        te.reduce_axis((0,), name="k")
    with pytest.raises(kiln.KilnError, match="cannot be used as a value"):
        te.compute((4, 4), lambda i, j: A, name="bad")
    with pytest.raises(kiln.KilnError, match="shape"):
        te.placeholder("abc")


def test_primitives_and_lower():
    A, B, C = matmul()
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    (k,) = C.op.reduce_axis
    io, jo, ii, ji = s[C].tile(i, j, 8, 16)
    ko, ki = s[C].split(k, factor=4)
    s[C].reorder(io, jo, ko, ii, ki, ji)
    s[C].vectorize(ji)
    s[C].unroll(ki)
    f = s[C].fuse(io, jo)
    s[C].parallel(f)
    assert [a.name for a in s[C].leaf_iter_vars] == ["i.outer.j.outer.fused", "k.outer", "i.inner", "k.inner", "j.inner"]
    text = str(kiln.lower(s, [A, B, C]))
    assert "parallel (i.outer.j.outer.fused" in text
    assert "ramp(" in text or "x16(" in text  # vectorized
    raw = str(kiln.lower(s, [A, B, C], run_passes=False))
    assert "vectorized (j.inner" in raw


def test_split_nparts_and_fuse_list():
    A, B, C = matmul()
    s = te.create_schedule(C)
    o, i = s[C].split(C.op.axis[0], nparts=4)
    assert o.name == "i.outer"
    fused = s[C].fuse([o, i])
    assert fused.name.endswith("fused")


def test_misused_primitives_raise():
    A, B, C = matmul()
    s = te.create_schedule(C)
    i, j = C.op.axis
    with pytest.raises(kiln.KilnError, match="exactly one of factor"):
        s[C].split(i)
    with pytest.raises(kiln.KilnError, match="positive"):
        s[C].split(i, factor=0)
    o, inner = s[C].split(i, factor=8)
    with pytest.raises(kiln.KilnError, match="not a leaf axis"):
        s[C].split(i, factor=2)
    with pytest.raises(kiln.KilnError, match="adjacent"):
        s[C].fuse(o, j)
    with pytest.raises(kiln.KilnError, match="reduction axis"):
        s[C].vectorize(C.op.reduce_axis[0])
    with pytest.raises(kiln.KilnError, match="reduction axis"):
        s[C].parallel(C.op.reduce_axis[0])
    with pytest.raises(kiln.KilnError, match="placeholder"):
        s[A].split(A.op.axis[0] if A.op.axis else i, factor=2)
    with pytest.raises(kiln.KilnError, match="thread tag"):
        s[C].bind(o, "warp.x")
    with pytest.raises(kiln.KilnError, match="expected an axis"):
        s[C].vectorize(None)
    with pytest.raises(kiln.KilnError, match="is a reduction"):
        s[C].compute_inline()
    E = te.compute((4,), lambda x: A[x, 0] * 2.0, name="E")
    with pytest.raises(kiln.KilnError, match="output"):
        te.create_schedule(E)[E].compute_inline()
    F = te.compute((4,), lambda x: A[x, x], name="F")
    with pytest.raises(kiln.KilnError, match="not a reduction"):
        te.create_schedule(F).rfactor(F, F.op.axis[0])
    other = te.compute((4,), lambda x: A[x, 0], name="other")
    with pytest.raises(kiln.KilnError, match="not part of this schedule"):
        s[other]
    with pytest.raises(kiln.KilnError, match="tensor"):
        s[None]
    with pytest.raises(kiln.KilnError, match="storage_align"):
        s[C].storage_align(o, 8, 1)
    with pytest.raises(kiln.KilnError):
        s[C].storage_align(C.op.axis[1], 0, 1)


def test_compute_at_errors():
    A, B, C = matmul()
    D = te.compute((64, 64), lambda i, j: C[i, j] + 1.0, name="D")
    s = te.create_schedule(D)
    with pytest.raises(kiln.KilnError, match="does not read"):
        s[D].compute_at(s[C], C.op.axis[0])
    with pytest.raises(kiln.KilnError, match="at itself"):
        s[C].compute_at(s[C], C.op.axis[0])
    s2 = te.create_schedule(D)
    with pytest.raises(kiln.KilnError, match="another schedule"):
        s[C].compute_at(s2[D], D.op.axis[0])
    s[C].compute_at(D, D.op.axis[1])  # the parent may be given as its tensor
    assert s[C].attach_type == "scope"


def test_cache_write_keeps_tensor_axes_usable():
    A, B, C = matmul()
    s = te.create_schedule(C)
    CL = s.cache_write(C, "local")
    assert CL.name == "C.local" and s[CL].scope == "local"
    # C.op.axis (the declared op) and s[C].op.axis (the stage's new op) both work.
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 8, 8)
    s[CL].compute_at(s[C], jo)
    ko, ki = s[CL].split(CL.op.reduce_axis[0], factor=4)
    s[CL].reorder(ko, ki, *s[CL].op.axis)
    s[CL].vectorize(s[CL].op.axis[1])
    assert s.current_tensor(C).op.same_as(s[C].op)
    assert "allocate" in str(kiln.lower(s, [A, B, C]))
    s2 = te.create_schedule(C)
    s2.cache_write(C, "local")
    s2[C].split(s2[C].op.axis[0], factor=4)
    with pytest.raises(kiln.KilnError, match="must come before"):
        s2.cache_write(C, "local")


def test_cache_read_and_rfactor():
    A, B, C = matmul()
    s = te.create_schedule(C)
    AA = s.cache_read(A, "global", [C])
    assert AA.name.startswith("A")
    s[AA].compute_at(s[C], C.op.axis[0])
    with pytest.raises(kiln.KilnError, match="does not read"):
        s.cache_read(B, "local", [AA])
    x = te.placeholder((128,), name="x")
    k = te.reduce_axis((0, 128), name="k")
    y = te.compute((1,), lambda i: te.sum(x[k], axis=k), name="y")
    s = te.create_schedule(y)
    ko, ki = s[y].split(k, factor=16)
    yf = s.rfactor(y, ki)
    assert yf.name == "y.rf" and yf.shape == (16, 1)
    assert "func main" in str(kiln.lower(s, [x, y]))


def test_trace_round_trip():
    A, B, C = matmul()
    s = te.create_schedule(C)
    CL = s.cache_write(C, "local")
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 8, 8)
    s[CL].compute_at(s[C], jo)
    s[C].parallel(io)
    s[C].vectorize(ji)
    s[C].pragma(io, "auto_unroll_max_step", 16)
    t = s.trace()
    steps = json.loads(str(t))
    assert [st["kind"] for st in steps] == ["cache_write", "split", "split", "reorder", "compute_at", "parallel", "vectorize", "pragma"]
    assert t.to_json() == str(t) and len(t) == 8 and t.steps[0]["kind"] == "cache_write"
    expected = str(kiln.lower(s, [A, B, C]))
    for given in (t, t.to_json()):
        s2 = te.Schedule.from_trace(C, given)
        assert s2.trace() == t
        assert str(kiln.lower(s2, [A, B, C])) == expected
    # a trace replays on a structurally equal DAG whatever its names
    A2, B2, C2 = matmul()
    assert te.workload_key(C2) == te.workload_key(C)
    assert str(te.Schedule.from_trace([C2], t).trace()) == str(t)
    assert "split" in t.pretty()


def test_trace_errors():
    A, B, C = matmul()
    with pytest.raises(kiln.KilnError):
        te.Schedule.from_trace(C, "[{not json")
    with pytest.raises(kiln.KilnError):
        te.Schedule.from_trace(C, '[{"kind":"split","stage":99,"axes":[0],"ints":[4]}]')
    with pytest.raises(kiln.KilnError, match="trace"):
        te.Schedule.from_trace(C, 42)


def test_lower_and_build_argument_errors():
    A, B, C = matmul()
    s = te.create_schedule(C)
    with pytest.raises(kiln.KilnError):
        kiln.lower(s, [A, C])  # B missing
    with pytest.raises(kiln.KilnError, match="args\\[1\\]"):
        kiln.lower(s, [A, None, C])
    with pytest.raises(kiln.KilnError, match="schedule"):
        kiln.lower(C, [A, B, C])
    with pytest.raises(kiln.KilnError, match="target"):
        kiln.build(s, [A, B, C], target="tpu")
    with pytest.raises(kiln.KilnError):
        te.create_schedule([])
    with pytest.raises(kiln.KilnError, match="placeholder"):
        te.create_schedule(A)


def test_repr():
    A, B, C = matmul()
    s = te.create_schedule(C)
    assert "C" in repr(s) and "Stage(C" in repr(s[C]) and "Tensor(name=C" in repr(C)
    assert "k" in repr(C.op.reduce_axis[0])
    assert str(kiln.Target("llvm")).startswith("llvm")


def test_pack_operand_into_panels():
    # B packed into panels of 8 columns, read by a vectorized register tile: same result as numpy.
    m, n, k = 12, 24, 10
    A = te.placeholder((m, k), name="A")
    B = te.placeholder((k, n), name="B")
    r = te.reduce_axis((0, k), name="r")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    s = te.create_schedule(C)
    BP = s.pack(B, [C], dim=1, factor=8)
    assert tuple(int(x) for x in BP.shape) == (3, 10, 8)
    i, j = s[C].op.axis
    jo, ji = s[C].split(j, factor=8)
    s[C].reorder(jo, i, r, ji)
    s[C].vectorize(ji)
    mod = kiln.build(s, [A, B, C])
    rng = np.random.default_rng(3)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    c = np.zeros((m, n), np.float32)
    mod(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
    with pytest.raises(kiln.KilnError, match="multiple of the factor 5"):
        te.create_schedule(C).pack(B, [C], dim=1, factor=5)


def _dag():
    A, B, C = matmul(16, 24, 12)
    D = te.compute((16, 24), lambda i, j: te.maximum(C[i, j], 0.0), name="relu")
    return A, B, C, D


def _rerun(code, tensors, outputs):
    """Runs the printed Python on a fresh schedule of the same DAG; returns that schedule."""
    s = te.create_schedule(outputs)
    exec(code, {"s": s, **{t.name: t for t in tensors}})  # noqa: S102 - the code under test
    return s


def test_trace_prints_as_the_python_that_rebuilds_it():
    A, B, C, D = _dag()
    s = te.create_schedule(D)
    BP = s.pack(B, [C], dim=1, factor=4)
    AL = s.cache_read(A, "local", [C])
    CL = s.cache_write(C, "local")
    fused = s[D].fuse(*s[D].tile(D.op.axis[0], D.op.axis[1], 4, 8)[:2])
    s[C].compute_at(s[D], fused)
    jo, ji = s[C].split(s[C].op.axis[1], nparts=2)
    s[CL].compute_at(s[C], ji)
    s[AL].compute_at(s[CL], s[CL].op.axis[0])
    s[BP].compute_root()
    s[CL].storage_align(s[CL].op.axis[0], 8, 1)
    s[CL].unroll(s[CL].op.axis[1])
    s[D].parallel(fused)
    s[D].vectorize(s[D].leaf_iter_vars[-1])
    s[D].pragma(fused, "auto_unroll_max_step", 16)
    t = s.trace()
    code = t.to_python()
    assert "i_outer, i_inner = s[relu].split(s[relu].axis(\"i\"), factor=4)" in code and "s[relu].fuse(" in code and "C_local = s.cache_write(C, \"local\")" in code
    s2 = _rerun(code, [A, B, C, D], D)
    assert s2.trace() == t
    assert str(kiln.lower(s2, [A, B, D])) == str(kiln.lower(s, [A, B, D]))

    # rfactor, and stages the printed code can only name by position
    s = te.create_schedule(C)
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=4)
    CF = s.rfactor(C, ki, factor_axis=1)
    s[C].parallel(s[C].op.axis[0])
    s[CF].compute_at(s[C], s[C].op.axis[1])
    t = s.trace()
    assert _rerun(t.to_python(), [A, B, C], C).trace() == t
    old = te.Trace.from_json('[{"kind":"compute_at","stage":0,"stage_name":"P","stages":[2],"axes":[1]}]')
    assert "s.stages[2]" in old.to_python()


def test_compute_at_follows_later_splits_tiles_and_fuses():
    m, n, k = 13, 10, 7
    A = te.placeholder((m, k), name="A")
    B = te.placeholder((k, n), name="B")
    P = te.compute((m, k), lambda i, j: A[i, j] * 2.0 + 1.0, name="P")
    r = te.reduce_axis((0, k), name="r")
    C = te.compute((m, n), lambda i, j: te.sum(P[i, r] * B[r, j], axis=r), name="C")
    rng = np.random.default_rng(7)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    want = (a * 2 + 1) @ b
    later = {
        "split": lambda st, i, j: st.split(j, factor=4),
        "tile": lambda st, i, j: st.tile(i, j, 4, 3),
        "fuse": lambda st, i, j: st.fuse(i, j),
    }
    for name, step in later.items():
        s = te.create_schedule(C)
        i, j = s[C].op.axis
        s[P].compute_at(s[C], j)
        step(s[C], i, j)
        c = np.zeros((m, n), np.float32)
        kiln.build(s, [A, B, C])(a, b, c)
        np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-4, err_msg=name)


def test_compute_at_an_unsplit_axis_of_an_attached_stage():
    # Q is computed at P's unsplit row axis, and P at a loop of C, so Q's region
    # starts at a value that names P's loop variable (the row axis itself). The
    # reads of Q in P were once rebased with that variable replaced too (reading
    # Q at -4*io instead of 0 from the second tile on).
    A = te.placeholder((16, 8), name="A")
    P = te.compute((16, 8), lambda i, j: A[i, j] * 2.0, name="P")
    C = te.compute((16, 8), lambda i, j: P[i, j] + 1.0, name="C")
    s = te.create_schedule(C)
    io, ii = s[C].split(C.op.axis[0], factor=4)
    s[P].compute_at(s[C], io)
    Q = s.cache_read(A, "global", [P])
    s[Q].compute_at(s[P], s[P].op.axis[0])
    a = np.random.default_rng(3).standard_normal((16, 8), dtype=np.float32)
    c = np.zeros((16, 8), np.float32)
    kiln.build(s, [A, C])(a, c)
    np.testing.assert_allclose(c, a * 2 + 1, rtol=1e-6)
