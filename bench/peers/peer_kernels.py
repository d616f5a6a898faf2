"""The peer libraries' implementations of each benchmarked workload.

make(kind, impl, args, threads) returns a Kernel: `run` (one call, timed by
the worker), `label` (the library and its setup, printed in every table),
`warm` (calls and seconds of warm-up), and `check` (a float64-reference
error, or None). Every kernel computes on random float32 data; with "x",
"w" and "y" paths in args (conv2d), it reads its inputs from raw float32
files and writes its output there, so a bench can compare element by element.

kinds and impls:
  gemm        numpy | torch                 args M N K
  conv2d      torch_nchw | torch_channels_last | torch_mkldnn
              args N C H W K KH KW stride pad (groups: 1, or C for depthwise)
  dense_gelu  numpy | torch                 args M N K: gelu(A[M,K] B[K,N] + bias), erf form
  softmax     numpy | torch                 args rows cols: over the last axis
  layernorm   numpy | torch                 args rows cols: over the last axis, eps 1e-5, then * gamma + beta
"""
import math

import numpy as np


class Kernel:
    def __init__(self, run, label, warm=(2, 0.0), check=None):
        self.run, self.label, self.warm, self.check = run, label, warm, check


def blas_label(threads=None):
    """e.g. 'OpenBLAS 0.3.21 SkylakeX 2T': the BLAS loaded in this process, its core type and threads (without: no threads)."""
    try:
        from threadpoolctl import threadpool_info
        for d in threadpool_info():
            if d.get("user_api") == "blas":
                name = {"openblas": "OpenBLAS", "mkl": "MKL", "blis": "BLIS"}.get(d.get("internal_api"), d.get("internal_api"))
                text = f"{name} {d.get('version')} {d.get('architecture') or ''}".strip()
                return f"{text} {d.get('num_threads')}T" if threads else text
    except ImportError:
        pass
    return "BLAS (threadpoolctl missing)" + (f" {threads}T" if threads else "")


def _rng_arrays(*shapes):
    rng = np.random.default_rng(0)
    return [rng.standard_normal(s, dtype=np.float32) for s in shapes]


def _rel_err(got, ref):
    return float(np.max(np.abs(np.asarray(got, np.float64) - ref)) / max(1e-30, float(np.max(np.abs(ref)))))


def _torch(threads):
    import torch
    torch.set_num_threads(threads)
    torch.set_grad_enabled(False)
    return torch


def _torch_label(torch, what, threads):
    return f"PyTorch {torch.__version__.split('+')[0]} {what} {torch.get_num_threads()}T"


def gemm(impl, a, threads):
    m, n, k = (int(v) for v in a[:3])
    x, w = _rng_arrays((m, k), (k, n))
    ref = lambda: x[:7].astype(np.float64) @ w.astype(np.float64)  # noqa: E731 (first rows suffice)
    if impl == "numpy":
        out = np.empty((m, n), np.float32)
        return Kernel(lambda: np.matmul(x, w, out=out), "numpy " + blas_label(threads), (2, 0.2), lambda: (np.matmul(x, w, out=out), _rel_err(out[:7], ref()))[1])
    torch = _torch(threads)
    tx, tw = torch.from_numpy(x), torch.from_numpy(w)
    out = torch.empty(m, n)
    return Kernel(lambda: torch.matmul(tx, tw, out=out), _torch_label(torch, f"matmul ({blas_label()})", threads), (10, 0.3), lambda: (torch.matmul(tx, tw, out=out), _rel_err(out[:7].numpy(), ref()))[1])


def conv2d(impl, a, threads, paths):
    n, c, h, wd, k, kh, kw, stride, pad = (int(v) for v in a[:9])
    groups = int(a[9]) if len(a) > 9 else 1
    torch = _torch(threads)
    if paths:
        x = torch.from_numpy(np.fromfile(paths["x"], dtype=np.float32).reshape(n, c, h, wd))
        wt = torch.from_numpy(np.fromfile(paths["w"], dtype=np.float32).reshape(k, c // groups, kh, kw))
    else:
        x, wt = (torch.from_numpy(v) for v in _rng_arrays((n, c, h, wd), (k, c // groups, kh, kw)))
    conv = torch.nn.Conv2d(c, k, (kh, kw), stride=stride, padding=pad, groups=groups, bias=False)
    conv.weight.copy_(wt)
    conv.eval()
    layout = impl.replace("torch_", "")
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
        conv = conv.to(memory_format=torch.channels_last)
    elif layout == "mkldnn":
        # oneDNN's blocked layout: input and weights converted once, outside the timing.
        from torch.utils import mkldnn as mkldnn_utils
        x = x.to_mkldnn()
        conv = mkldnn_utils.to_mkldnn(conv)
    elif layout != "nchw":
        raise ValueError(f"unknown conv2d impl {impl!r}: use torch_nchw, torch_channels_last or torch_mkldnn")
    result = {}

    def run():
        result["y"] = conv(x)

    def check():
        run()
        y = result["y"].to_dense() if layout == "mkldnn" else result["y"]
        y = y.contiguous().numpy()
        if paths and paths.get("y"):
            y.tofile(paths["y"])
        # Reference: the same conv in float64 (PyTorch's own, another code path).
        ref = torch.nn.functional.conv2d(wt_ref[0], wt_ref[1], stride=stride, padding=pad, groups=groups).numpy()
        return _rel_err(y, ref)
    xs = x.to_dense() if layout == "mkldnn" else x
    wt_ref = (xs.contiguous().double(), wt.double())
    what = {"nchw": "conv2d NCHW", "channels_last": "conv2d channels_last", "mkldnn": "conv2d oneDNN blocked"}[layout]
    # Here PyTorch's first 10-20 calls of a shape run up to 30x slower (fresh
    # memory for its outputs until the allocator settles): warm up 30 calls, 0.5 s.
    return Kernel(run, _torch_label(torch, what, threads), (30, 0.5), check)


def gelu_ref(v):
    return 0.5 * v * (1.0 + np.vectorize(math.erf)(v / math.sqrt(2.0)))


def dense_gelu(impl, a, threads):
    m, n, k = (int(v) for v in a[:3])
    x, w, bias = _rng_arrays((m, k), (k, n), (n,))
    ref = lambda: gelu_ref(x[:3].astype(np.float64) @ w.astype(np.float64) + bias)  # noqa: E731
    if impl == "numpy":
        from scipy.special import erf
        y = np.empty((m, n), np.float32)
        t = np.empty((m, n), np.float32)

        def run():
            np.matmul(x, w, out=y)
            np.add(y, bias, out=y)
            np.multiply(y, np.float32(1 / math.sqrt(2)), out=t)
            erf(t, out=t)
            np.add(t, np.float32(1), out=t)
            np.multiply(y, t, out=y)
            np.multiply(y, np.float32(0.5), out=y)
        return Kernel(run, "numpy+scipy.erf " + blas_label(threads), (2, 0.2), lambda: (run(), _rel_err(y[:3], ref()))[1])
    torch = _torch(threads)
    F = torch.nn.functional
    tx, tb = torch.from_numpy(x), torch.from_numpy(bias)
    tw = torch.from_numpy(np.ascontiguousarray(w.T))  # nn.Linear's [out, in] weights
    out = {}

    def run():
        out["y"] = F.gelu(F.linear(tx, tw, tb))  # approximate="none": the erf form

    return Kernel(run, _torch_label(torch, f"gelu(linear) ({blas_label()})", threads), (10, 0.3), lambda: (run(), _rel_err(out["y"][:3].numpy(), ref()))[1])


def rowwise(kind, impl, a, threads):
    rows, cols = (int(v) for v in a[:2])
    x, gamma, beta = _rng_arrays((rows, cols), (cols,), (cols,))
    x64 = x.astype(np.float64)
    if kind == "softmax":
        e = np.exp(x64 - x64.max(axis=1, keepdims=True))
        ref = e / e.sum(axis=1, keepdims=True)
    else:
        ref = (x64 - x64.mean(axis=1, keepdims=True)) / np.sqrt(x64.var(axis=1, keepdims=True) + 1e-5) * gamma + beta
    out = {}
    if impl == "numpy":
        def run():
            if kind == "softmax":
                e = np.exp(x - x.max(axis=1, keepdims=True))
                out["y"] = e / e.sum(axis=1, keepdims=True)
            else:
                mu = x.mean(axis=1, keepdims=True)
                out["y"] = (x - mu) / np.sqrt(x.var(axis=1, keepdims=True) + np.float32(1e-5)) * gamma + beta
        label = f"numpy {np.__version__}"
    else:
        torch = _torch(threads)
        tx = torch.from_numpy(x)
        if kind == "softmax":
            run = lambda: out.__setitem__("y", torch.softmax(tx, dim=1))  # noqa: E731
        else:
            tg, tb = torch.from_numpy(gamma), torch.from_numpy(beta)
            run = lambda: out.__setitem__("y", torch.nn.functional.layer_norm(tx, (cols,), tg, tb, eps=1e-5))  # noqa: E731
        label = _torch_label(torch, kind, threads)
    return Kernel(run, label, (30, 0.3), lambda: (run(), _rel_err(np.asarray(out["y"]), ref))[1])


def make(kind, impl, args, threads, paths=None):
    if kind == "gemm":
        return gemm(impl, args, threads)
    if kind == "conv2d":
        return conv2d(impl, args, threads, paths)
    if kind == "dense_gelu":
        return dense_gelu(impl, args, threads)
    if kind in ("softmax", "layernorm"):
        return rowwise(kind, impl, args, threads)
    raise ValueError(f"unknown peer workload {kind!r}; known: gemm, conv2d, dense_gelu, softmax, layernorm")

