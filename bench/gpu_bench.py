#!/usr/bin/env python3
"""The GPU benchmark table (issue 14, item 8), for a machine with an NVIDIA GPU.

Times kiln's untuned GPU kernels (the GPU rules' default schedules,
kiln.gpu.default_schedule) against the vendor's libraries in one run,
interleaved round by round (kiln, peer, kiln, ...), each timed on the device
with CUDA events over back-to-back calls, inputs already on the device:

  - GEMM fp32 4096^3 against cuBLAS SGEMM (default math mode: no TF32);
  - GEMM fp16 inputs, fp32 accumulation, 4096^3 against cublasGemmEx
    (CUDA_R_16F in, CUDA_R_32F out and compute; cuBLAS uses tensor cores),
    once with the default schedule (no tensor cores) and once with
    kiln.gpu.tensor_core_schedule (WMMA, TENSOR_CORE_TILES);
  - the same with bfloat16 inputs (CUDA_R_16BF) on tensor cores;
  - a ResNet-18 conv layer (1x64x56x56, 3x3, pad 1) against PyTorch's cuDNN
    when this PyTorch has CUDA (Debian's does not: the row says so).

Each kiln result is checked against the peer's (max |kiln - peer| / max |peer|
within 1e-4 for fp32, 2e-3 for fp16 and bf16): a wrong result exits 1. Without a GPU it
says why and exits 2. Prints the GPU, the driver and each peer's setup.

    /usr/bin/python3 bench/gpu_bench.py [--rounds 5] [--number 10] [--size 4096]
"""
import argparse
import ctypes
import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def import_kiln():
    try:
        import kiln
    except ImportError:
        sys.path[:0] = [os.path.join(ROOT, "python"), os.path.join(ROOT, "build", "python")]
        import kiln
    return kiln


def load(names):
    for n in names:
        try:
            return ctypes.CDLL(n)
        except OSError:
            pass
    return None


class Cuda:
    """The CUDA runtime and cuBLAS through ctypes: device buffers, events, GEMMs."""

    HtoD, DtoH = 1, 2

    def __init__(self):
        lib64 = "/usr/local/cuda/lib64/"
        self.rt = load(["libcudart.so.13", "libcudart.so.12", "libcudart.so", lib64 + "libcudart.so"])
        self.blas = load(["libcublas.so.13", "libcublas.so.12", "libcublas.so", lib64 + "libcublas.so"])
        if self.rt is None or self.blas is None:
            raise RuntimeError("libcudart / libcublas not found (CUDA toolkit under /usr/local/cuda?)")
        self.handle = ctypes.c_void_p()
        self.ok(self.blas.cublasCreate_v2(ctypes.byref(self.handle)), "cublasCreate")
        self.start, self.stop = ctypes.c_void_p(), ctypes.c_void_p()
        self.ok(self.rt.cudaEventCreate(ctypes.byref(self.start)), "cudaEventCreate")
        self.ok(self.rt.cudaEventCreate(ctypes.byref(self.stop)), "cudaEventCreate")

    @staticmethod
    def ok(status, what):
        if status != 0:
            raise RuntimeError(f"{what} failed with status {status}")

    def device(self):
        major, minor = ctypes.c_int(), ctypes.c_int()
        self.ok(self.rt.cudaDeviceGetAttribute(ctypes.byref(major), 75, 0), "cudaDeviceGetAttribute")
        self.ok(self.rt.cudaDeviceGetAttribute(ctypes.byref(minor), 76, 0), "cudaDeviceGetAttribute")
        version = ctypes.c_int()
        self.rt.cudaDriverGetVersion(ctypes.byref(version))
        return major.value, minor.value, version.value

    def upload(self, array):
        ptr = ctypes.c_void_p()
        self.ok(self.rt.cudaMalloc(ctypes.byref(ptr), ctypes.c_size_t(array.nbytes)), "cudaMalloc")
        self.ok(self.rt.cudaMemcpy(ptr, array.ctypes.data_as(ctypes.c_void_p), ctypes.c_size_t(array.nbytes), self.HtoD), "cudaMemcpy")
        return ptr

    def download(self, ptr, array):
        self.ok(self.rt.cudaMemcpy(array.ctypes.data_as(ctypes.c_void_p), ptr, ctypes.c_size_t(array.nbytes), self.DtoH), "cudaMemcpy")
        return array

    def free(self, *ptrs):
        for p in ptrs:
            self.rt.cudaFree(p)

    def time(self, call, number):
        """Seconds per call of `number` back-to-back calls between two events."""
        self.ok(self.rt.cudaEventRecord(self.start, None), "cudaEventRecord")
        for _ in range(number):
            call()
        self.ok(self.rt.cudaEventRecord(self.stop, None), "cudaEventRecord")
        self.ok(self.rt.cudaEventSynchronize(self.stop), "cudaEventSynchronize")
        ms = ctypes.c_float()
        self.ok(self.rt.cudaEventElapsedTime(ctypes.byref(ms), self.start, self.stop), "cudaEventElapsedTime")
        return ms.value * 1e-3 / number

    def gemm(self, M, N, K, a, b, c, dtype):
        """Row-major C[M,N] = A[M,K] @ B[K,N]: column-major cuBLAS computes C^T = B^T A^T."""
        one, zero = ctypes.c_float(1.0), ctypes.c_float(0.0)
        i = ctypes.c_int
        if dtype == "float32":
            return lambda: self.ok(self.blas.cublasSgemm_v2(self.handle, i(0), i(0), i(N), i(M), i(K), ctypes.byref(one), b, i(N), a, i(K),
                                                            ctypes.byref(zero), c, i(N)), "cublasSgemm")
        r16, r32f, compute32f, default_algo = {"float16": 2, "bfloat16": 14}[dtype], 0, 68, -1
        return lambda: self.ok(self.blas.cublasGemmEx(self.handle, i(0), i(0), i(N), i(M), i(K), ctypes.byref(one), b, i(r16), i(N), a, i(r16), i(K),
                                                      ctypes.byref(zero), c, i(r32f), i(N), i(compute32f), i(default_algo)), "cublasGemmEx")


def rel_err(got, ref):
    import numpy as np
    ref = ref.astype("float64")
    return float(np.max(np.abs(got.astype("float64") - ref)) / max(np.max(np.abs(ref)), 1e-30))


def row(name, flop, kiln_times, peer_times, peer, err, tol):
    km, kmed = min(kiln_times), statistics.median(kiln_times)
    ratios = [k / p for k, p in zip(kiln_times, peer_times)] if peer_times else []
    cells = [f"{name:34s}", f"{km * 1e3:9.3f}", f"{kmed * 1e3:9.3f}", f"{flop / km * 1e-12:8.2f}"]
    if peer_times:
        pm, pmed = min(peer_times), statistics.median(peer_times)
        cells += [f"{pm * 1e3:9.3f}", f"{pmed * 1e3:9.3f}", f"{flop / pm * 1e-12:8.2f}", f"{statistics.median(ratios):6.2f}",
                  f"{min(ratios):.2f}..{max(ratios):.2f}"]
    else:
        cells += ["        -"] * 3 + ["     -", "-"]
    verdict = "-" if err is None else (f"{err:.1e} ok" if err <= tol else f"{err:.1e} WRONG")
    print("  ".join(cells + [verdict, peer]))
    return err is None or err <= tol


def gemm_args(n, dtype):
    from kiln import te
    A, B = te.placeholder((n, n), name="A", dtype=dtype), te.placeholder((n, n), name="B", dtype=dtype)
    k = te.reduce_axis((0, n), name="k")
    if dtype != "float32":
        C = te.compute((n, n), lambda i, j: te.sum(te.cast(A[i, k], "float32") * te.cast(B[k, j], "float32"), axis=k), name="C")
    else:
        C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return [A, B, C]


def gemm_inputs(kiln, n, dtype):
    """(a, b) for kiln (bfloat16 through DLPack: numpy has no such dtype), their raw bits for cuBLAS, and float32 copies."""
    import numpy as np
    rng = np.random.default_rng(0)
    a32, b32 = rng.standard_normal((n, n), dtype="float32"), rng.standard_normal((n, n), dtype="float32")
    if dtype != "bfloat16":
        a, b = a32.astype(dtype), b32.astype(dtype)
        return a, b, a, b
    import torch
    ta, tb = torch.from_numpy(a32).bfloat16(), torch.from_numpy(b32).bfloat16()
    return kiln.nd.from_dlpack(ta), kiln.nd.from_dlpack(tb), ta.view(torch.int16).numpy(), tb.view(torch.int16).numpy()


# The tensor-core rows' schedule: 128x128 blocks of four warps, 64x64 each (16 fragments), k steps of 32.
TENSOR_CORE_TILES = dict(block=(128, 128), warp=(64, 64), k_step=32)


def gemm_case(kiln, cuda, target, n, dtype, rounds, number, schedule=None, label=""):
    import numpy as np
    args = gemm_args(n, dtype)
    s = schedule if schedule is not None else kiln.gpu.default_schedule(args, target)
    mod = kiln.build(s, args, target=target, name="gemm")
    a, b, a_bits, b_bits = gemm_inputs(kiln, n, dtype)
    c = np.zeros((n, n), "float32")
    da, db, dc = cuda.upload(a_bits), cuda.upload(b_bits), cuda.upload(c)
    peer_call = cuda.gemm(n, n, n, da, db, dc, dtype)
    peer_call()
    kt, pt = [], []
    for _ in range(rounds):
        kt.append(statistics.median(mod.time(a, b, c, number=number, repeat=1)))
        pt.append(cuda.time(peer_call, number))
    ref = cuda.download(dc, np.empty((n, n), "float32"))
    cuda.free(da, db, dc)
    short = {"float32": "fp32", "float16": "fp16->fp32", "bfloat16": "bf16->fp32"}[dtype]
    name = f"gemm {short} {n}^3{label}"
    peer = "cuBLAS SGEMM, default math (no TF32)" if dtype == "float32" else f"cublasGemmEx {short.split('-')[0]} in, fp32 compute (tensor cores)"
    return row(name, 2.0 * n ** 3, kt, pt, peer, rel_err(c, ref), 1e-4 if dtype == "float32" else 2e-3)


def tensor_core_case(kiln, cuda, target, n, dtype, rounds, number):
    args = gemm_args(n, dtype)
    s = kiln.gpu.tensor_core_schedule(args[2], **TENSOR_CORE_TILES)
    tiles = TENSOR_CORE_TILES
    return gemm_case(kiln, cuda, target, n, dtype, rounds, number, schedule=s, label=f" wmma {tiles['block'][0]}x{tiles['block'][1]}/{tiles['warp'][0]}x{tiles['warp'][1]}")


def conv_case(kiln, target, rounds, number):
    import numpy as np
    from kiln import te
    N, C, H, K = 1, 64, 56, 64
    X, W = te.placeholder((N, C, H, H), name="X"), te.placeholder((K, C, 3, 3), name="W")
    Y = kiln.ops.conv2d_nchw(X, W, stride=1, pad=1)[0]
    mod = kiln.build(kiln.gpu.default_schedule([X, W, Y], target), [X, W, Y], target=target, name="conv")
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((N, C, H, H), dtype="float32"), rng.standard_normal((K, C, 3, 3), dtype="float32")
    y = np.zeros((N, K, H, H), "float32")
    flop = 2.0 * N * K * H * H * C * 9
    kt = [statistics.median(mod.time(x, w, y, number=number, repeat=1)) for _ in range(rounds)]
    try:
        import torch
        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    if not has_cuda:
        return row("conv2d 1x64x56x56 3x3 (ResNet-18)", flop, kt, [], "no peer: this PyTorch has no CUDA, and cuDNN is not called directly", None, 0)
    torch.backends.cudnn.benchmark = True
    tx, tw = torch.from_numpy(x).cuda(), torch.from_numpy(w).cuda()
    conv = lambda: torch.nn.functional.conv2d(tx, tw, padding=1)  # noqa: E731
    for _ in range(3):
        conv()
    pt = []
    for i in range(rounds):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(number):
            out = conv()
        stop.record()
        torch.cuda.synchronize()
        pt.append(start.elapsed_time(stop) * 1e-3 / number)
        if i == 0:
            ref = out.cpu().numpy()
    return row("conv2d 1x64x56x56 3x3 (ResNet-18)", flop, kt, pt, f"PyTorch {torch.__version__} cuDNN (benchmark mode)", rel_err(y, ref), 1e-4)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--number", type=int, default=10, help="back-to-back calls per timed round")
    ap.add_argument("--size", type=int, default=4096, help="GEMM M = N = K")
    ap.add_argument("--trials", type=int, default=64, help="tuning trials for the tuned fp32 GEMM row (0: no such row)")
    ap.add_argument("--tune-into", metavar="DB", help=argparse.SUPPRESS)  # the tuned row's child process: tune for --target, then exit
    ap.add_argument("--target", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    kiln = import_kiln()
    if args.tune_into:
        kiln.tune(gemm_args(args.size, "float32"), target=args.target, trials=args.trials, db=args.tune_into, progress=False, timeout=30)
        return 0
    ok, why = kiln.gpu.driver_available()
    if not ok:
        print(f"gpu_bench: no GPU here ({why}); nothing to time", file=sys.stderr)
        return 2
    nvrtc, why = kiln.gpu.nvrtc_available()
    if not nvrtc:
        print(f"gpu_bench: NVRTC cannot be loaded ({why}); kiln cannot compile GPU kernels", file=sys.stderr)
        return 1
    cuda = Cuda()
    major, minor, driver = cuda.device()
    target = f"cuda -arch=sm_{major}{minor}"
    print(f"gpu_bench: GPU compute capability {major}.{minor}, driver {driver // 1000}.{driver % 1000 // 10}, target '{target}'; "
          f"{args.rounds} interleaved rounds of {args.number} calls; kiln: untuned default schedules (GPU rules)")
    print("  ".join(["workload".ljust(34), "kiln min", "kiln med", "kiln TF/s", "peer min", "peer med", "peer TF/s", " k/p", "range", "check", "peer"]))
    good = gemm_case(kiln, cuda, target, args.size, "float32", args.rounds, args.number)
    good = gemm_case(kiln, cuda, target, args.size, "float16", args.rounds, args.number) and good
    good = tensor_core_case(kiln, cuda, target, args.size, "float16", args.rounds, args.number) and good
    good = tensor_core_case(kiln, cuda, target, args.size, "bfloat16", args.rounds, args.number) and good
    good = conv_case(kiln, target, args.rounds, args.number) and good
    if args.trials > 0:
        good = tuned_gemm_row(kiln, cuda, target, args) and good
    return 0 if good else 1


def tuned_gemm_row(kiln, cuda, target, args):
    """The fp32 GEMM after `trials` trials of the GPU search (a fresh database), timed as the rows above.
    The session runs in a child process: its measurement workers fork, and CUDA, which this
    process has used already, does not survive a fork."""
    import subprocess
    import tempfile
    import time
    gemm = gemm_args(args.size, "float32")
    with tempfile.TemporaryDirectory() as tmp:
        db = os.path.join(tmp, "gpu_bench.db")
        t0 = time.time()
        child = subprocess.run([sys.executable, os.path.abspath(__file__), "--tune-into", db, "--target", target, "--size", str(args.size),
                                "--trials", str(args.trials)], capture_output=True, text=True)
        if child.returncode != 0:
            print(f"gemm fp32 {args.size}^3 tuned: the GPU session failed:\n{child.stdout}{child.stderr}")
            return False
        s = kiln.tuner.best_schedule(gemm, target=target, db=db)
        if s is None:
            print(f"gemm fp32 {args.size}^3 tuned: the session left no valid record")
            return False
        wall = time.time() - t0
    return gemm_case(kiln, cuda, target, args.size, "float32", args.rounds, args.number, schedule=s, label=f" tuned {args.trials} ({wall:.0f} s)")


if __name__ == "__main__":
    sys.exit(main())
