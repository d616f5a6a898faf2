"""The GPU rules without a GPU: the default schedule (kiln.gpu.default_schedule)
and random candidates of the GPU search space for the operators that
dominate models (matmul, dense + epilogue, conv2d, depthwise conv, pooling,
softmax, layer norm, reductions, elementwise) are lowered for a cuda target,
run in the GPU simulator against numpy, and compiled by NVRTC for sm_80 and
sm_90 (skipped when NVRTC cannot be loaded). Large layers are only lowered:
their defaults must fit the device (threads per block, shared memory)."""
import numpy as np
import pytest

import kiln
from kiln import te

NVRTC_OK, NVRTC_WHY = kiln.gpu.nvrtc_available()
TARGET = "cuda -arch=sm_90"
rng = np.random.default_rng(1)


def rand(*shape):
    return rng.standard_normal(shape, dtype="float32")


def conv_ref(x, w, stride, pad, groups=1):
    x = np.pad(x.astype("float64"), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    n, c, h, wd = x.shape
    k, cg, kh, kw = w.shape
    oh, ow = (h - kh) // stride + 1, (wd - kw) // stride + 1
    out = np.zeros((n, k, oh, ow))
    per = k // groups
    for o in range(k):
        g = o // per
        for r in range(kh):
            for q in range(kw):
                patch = x[:, g * cg:(g + 1) * cg, r:r + stride * oh:stride, q:q + stride * ow:stride]
                out[:, o] += np.einsum("nchw,c->nhw", patch, w[o, :, r, q])
    return out.astype("float32")


def gelu(x):
    import math
    return np.vectorize(lambda v: 0.5 * v * (1.0 + math.erf(v / math.sqrt(2.0))))(x.astype("float64")).astype("float32")


def cases():
    """(name, args, inputs, numpy reference of the output, structure the default must have)."""
    out = []
    A, B = te.placeholder((48, 40), name="A"), te.placeholder((40, 36), name="B")
    a, b = rand(48, 40), rand(40, 36)
    out.append(("matmul", [A, B, kiln.ops.matmul(A, B)], [a, b], a @ b, "__shared__"))
    bias = te.placeholder((36,), name="bias")
    y = kiln.ops.relu(kiln.ops.bias_add(kiln.ops.matmul(A, B), bias))
    bv = rand(36)
    out.append(("dense_bias_relu", [A, B, bias, y], [a, b, bv], np.maximum(a @ b + bv, 0), "__shared__"))
    X, W = te.placeholder((1, 6, 10, 10), name="X"), te.placeholder((8, 6, 3, 3), name="W")
    x, w = rand(1, 6, 10, 10), rand(8, 6, 3, 3)
    out.append(("conv2d_pad1", [X, W, kiln.ops.conv2d_nchw(X, W, stride=1, pad=1)[0]], [x, w], conv_ref(x, w, 1, 1), "__shared__"))
    out.append(("conv2d_stride2", [X, W, kiln.ops.conv2d_nchw(X, W, stride=2, pad=1)[0]], [x, w], conv_ref(x, w, 2, 1), "__shared__"))
    DW = te.placeholder((6, 1, 3, 3), name="DW")
    dw = rand(6, 1, 3, 3)
    out.append(("depthwise", [X, DW, kiln.ops.depthwise_conv2d_nchw(X, DW, stride=1, pad=1)[0]], [x, dw], conv_ref(x, dw, 1, 1, groups=6), None))
    pooled = x[:, :, :9, :9].reshape(1, 6, 3, 3, 3, 3).max(axis=(3, 5))
    out.append(("max_pool", [X, kiln.ops.max_pool2d(X, 3, 3)], [x], pooled, None))
    S = te.placeholder((5, 70), name="S")
    s = rand(5, 70) * 3
    e = np.exp(s - s.max(1, keepdims=True))
    out.append(("softmax", [S, kiln.ops.softmax(S)], [s], e / e.sum(1, keepdims=True), "__shfl_down_sync"))
    L, G, Bt = te.placeholder((4, 96), name="L"), te.placeholder((96,), name="gamma"), te.placeholder((96,), name="beta")
    l, g, bt = rand(4, 96), rand(96), rand(96)
    mu, var = l.mean(1, keepdims=True), l.var(1, keepdims=True)
    out.append(("layer_norm", [L, G, Bt, kiln.ops.layer_norm(L, G, Bt)], [l, g, bt], (l - mu) / np.sqrt(var + 1e-5) * g + bt, "__shfl_down_sync"))
    R = te.placeholder((6, 300), name="R")
    k = te.reduce_axis((0, 300), name="k")
    r = rand(6, 300)
    out.append(("row_sum", [R, te.compute((6,), lambda i: te.sum(R[i, k], axis=k), name="rowsum")], [r], r.sum(1), "__shfl_down_sync"))
    P, Q = te.placeholder((33, 17), name="P"), te.placeholder((33, 17), name="Q")
    p, q = rand(33, 17), rand(33, 17)
    out.append(("elementwise", [P, Q, kiln.ops.gelu(kiln.ops.relu(kiln.ops.add(P, Q)))], [p, q], gelu(np.maximum(p + q, 0)), None))
    BA, BB = te.placeholder((2, 16, 12), name="BA"), te.placeholder((2, 12, 20), name="BB")
    ba, bb = rand(2, 16, 12), rand(2, 12, 20)
    out.append(("batch_matmul", [BA, BB, kiln.ops.batch_matmul(BA, BB)], [ba, bb], ba @ bb, "__shared__"))
    return out


CASES = cases()
IDS = [c[0] for c in CASES]


def simulate_and_check(s, args, inputs, want):
    mod = kiln.gpu.build(s, args, TARGET, compile=False)
    got = np.full(want.shape, np.nan, "float32")
    mod.simulate(*inputs, got)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    return mod


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_default_schedule_simulates_and_compiles(case):
    name, args, inputs, want, marker = case
    s = kiln.gpu.default_schedule(args, TARGET)
    mod = simulate_and_check(s, args, inputs, want)
    src = mod.get_source()
    if marker:
        assert marker in src, src
    assert "blockIdx.x" in src and "threadIdx.x" in src
    if NVRTC_OK:
        for arch in ("cuda -arch=sm_80", "cuda -arch=sm_90"):
            assert kiln.build(s, args, target=arch, name=name).cubin[:4] == b"\x7fELF", arch


@pytest.mark.parametrize("case", [c for c in CASES if c[0] in ("matmul", "dense_bias_relu", "conv2d_pad1", "softmax", "row_sum", "elementwise")],
                         ids=["matmul", "dense_bias_relu", "conv2d_pad1", "softmax", "row_sum", "elementwise"])
def test_random_candidates_simulate(case):
    # What the tuner would measure: draws and mutations of every GPU sketch.
    name, args, inputs, want, _ = case
    task = kiln.tuner.make_task(args, TARGET)
    for trace in kiln._ffi._kiln.tuner.sample_traces(task, 6, 3):
        s = kiln._ffi._kiln.Schedule.from_trace(task.outputs, trace)
        simulate_and_check(s, args, inputs, want)


def test_epilogue_is_fused_into_the_tiled_matmul():
    A, B, bias = te.placeholder((64, 64), name="A"), te.placeholder((64, 64), name="B"), te.placeholder((64,), name="bias")
    y = kiln.ops.relu(kiln.ops.bias_add(kiln.ops.matmul(A, B), bias))
    s = kiln.gpu.default_schedule([A, B, bias, y], TARGET)
    mod = kiln.gpu.build(s, [A, B, bias, y], TARGET, compile=False)
    src = mod.get_source()
    # One kernel: the accumulator is each thread's 4x4 register tile, the
    # inputs' tiles go through shared memory, and bias + relu are applied on the way out.
    assert "float C_local[16];" in src or "C_local[16]" in src, src
    # relu is a NaN-propagating max: its call beside the prelude's definition.
    assert src.count("__shared__") == 2 and src.count("kiln_max_nan(") >= 2, src
    assert mod.launch["block"] == (256, 1, 1) and mod.launch["grid"] == (1, 1, 1)


@pytest.mark.parametrize("shape", [("matmul", 1024, 1024, 1024), ("conv", 64, 56, 64), ("conv", 256, 14, 256), ("conv", 3, 224, 64)])
def test_defaults_of_large_layers_fit_the_device(shape):
    if shape[0] == "matmul":
        _, M, N, K = shape
        A, B = te.placeholder((M, K), name="A"), te.placeholder((K, N), name="B")
        args = [A, B, kiln.ops.matmul(A, B)]
    else:
        _, C, H, K = shape
        X, W = te.placeholder((1, C, H, H), name="X"), te.placeholder((K, C, 3, 3), name="W")
        args = [X, W, kiln.ops.conv2d_nchw(X, W, stride=1, pad=1)[0]]
    s = kiln.gpu.default_schedule(args, TARGET)
    mod = kiln.gpu.build(s, args, TARGET, compile=False)
    launch = mod.launch
    threads = launch["block"][0] * launch["block"][1] * launch["block"][2]
    assert 32 <= threads <= 1024 and launch["shared_bytes"] <= 48 * 1024, launch
    assert launch["grid"][0] >= 8, launch  # enough blocks to spread over the SMs


def test_two_outputs_are_refused_with_the_fix():
    A = te.placeholder((8, 8), name="A")
    B = kiln.ops.relu(A)
    C = kiln.ops.gelu(B, name="C")
    with pytest.raises(kiln.KilnError, match="one output per kernel"):
        kiln.gpu.default_schedule([A, B, C], TARGET)


def test_tuning_for_a_gpu_without_one_stops_with_the_reason(tmp_path):
    ok, _ = kiln.gpu.driver_available()
    if ok:
        pytest.skip("this machine has a GPU")
    A, B = te.placeholder((32, 32), name="A"), te.placeholder((32, 32), name="B")
    with pytest.raises(kiln.KilnError, match="measured on the GPU and this machine has none"):
        kiln.tune([A, B, kiln.ops.matmul(A, B)], target=TARGET, trials=4, db=str(tmp_path / "t.db"))


def test_a_gpu_session_in_the_simulator(tmp_path):
    # The whole GPU tuning loop without a GPU: GPU sketches, builds, workers
    # (one crashes, one hangs), the cost model, the check of the best against
    # the CPU reference, and records kept apart as simulated.
    A, B = te.placeholder((32, 48), name="A"), te.placeholder((48, 40), name="B")
    args = [A, B, kiln.ops.matmul(A, B)]
    db = str(tmp_path / "gpu.db")
    r = kiln.tune(args, target=TARGET, trials=16, batch_size=8, db=db, gpu_simulate=True, timeout=5, progress=False,
                  inject_faults="crash@1,hang@2")
    assert r.trials_measured == 16 and r.errors == 2
    with kiln.tuning_db.open(db) as d:
        (w,) = d.workloads()
        recs = d.records(w.key)
        assert {x.target.target for x in recs} == {TARGET + " [simulated]"}
        kinds = sorted(x.error_kind for x in recs)
        assert kinds.count("run_error") == 1 and kinds.count("timeout") == 1 and kinds.count("none") == 14, kinds
        best = d.best(w.key, recs[0].target, 1)[0]
    # Simulated times say nothing of a GPU: no build takes a schedule from them.
    assert kiln.tuner.best_schedule(args, target=TARGET, db=db) is None
    s = kiln._ffi._kiln.Schedule.from_trace(kiln.tuner.make_task(args, TARGET).outputs, best.trace)
    a, b = rand(32, 48), rand(48, 40)
    simulate_and_check(s, args, [a, b], a @ b)


def test_kiln_tune_cli_for_a_gpu_in_the_simulator(tmp_path):
    import os
    import subprocess
    build = os.path.dirname(os.path.dirname(os.path.abspath(kiln._ffi._kiln.__file__)))
    tool = os.path.join(build, "tuner", "kiln-tune")
    if not os.path.exists(tool):
        pytest.skip("kiln-tune is not built here")
    db = str(tmp_path / "cli.db")
    r = subprocess.run([tool, "conv2d", "1", "4", "6", "6", "8", "3", "3", "1", "1", "--target", TARGET, "--gpu-simulate", "--trials", "8",
                        "--batch", "4", "--db", db, "--quiet"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    # No CPU peer for a GPU kernel, the NCHW layout, and every trial measured.
    assert "no peer for a cuda target" in r.stdout and "8 trials measured, 0 errors" in r.stdout, r.stdout
