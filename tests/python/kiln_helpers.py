"""Shared helpers of the Python tests: random inputs, numpy references, build-and-run."""
import numpy as np

import kiln


def rand(rng, *shape, dtype="float32"):
    """Uniform values in [-1, 1) of `dtype`, C-contiguous."""
    return rng.uniform(-1, 1, size=shape).astype(dtype)


def run(s, args, inputs, target="llvm"):
    """Builds `s` and calls it on `inputs` (numpy arrays for the leading args);
    the remaining args get fresh zeroed outputs, returned in order."""
    mod = kiln.build(s, args, target)
    outs = [np.zeros(t.shape, dtype=t.dtype) for t in args[len(inputs):]]
    mod(*inputs, *outs)
    return outs[0] if len(outs) == 1 else outs


def conv2d_ref(x, w, stride=1, pad=0, dilation=1):
    """NCHW x OIHW convolution in numpy (float64 accumulation)."""
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad))).astype(np.float64)
    oh = (h + 2 * pad - dilation * (kh - 1) - 1) // stride + 1
    ow = (wd + 2 * pad - dilation * (kw - 1) - 1) // stride + 1
    out = np.zeros((n, o, oh, ow))
    for r in range(kh):
        for q in range(kw):
            patch = xp[:, :, r * dilation: r * dilation + stride * (oh - 1) + 1: stride,
                       q * dilation: q * dilation + stride * (ow - 1) + 1: stride]
            out += np.einsum("nchw,oc->nohw", patch, w[:, :, r, q])
    return out.astype(x.dtype)


def depthwise_ref(x, w, stride=1, pad=0):
    """Depthwise NCHW convolution, w of [C, 1, KH, KW]."""
    n, c, h, wd = x.shape
    _, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad))).astype(np.float64)
    oh = (h + 2 * pad - kh) // stride + 1
    ow = (wd + 2 * pad - kw) // stride + 1
    out = np.zeros((n, c, oh, ow))
    for r in range(kh):
        for q in range(kw):
            patch = xp[:, :, r: r + stride * (oh - 1) + 1: stride, q: q + stride * (ow - 1) + 1: stride]
            out += patch * w[None, :, 0, r, q, None, None]
    return out.astype(x.dtype)


def pool_ref(x, kernel, stride, kind, pad=0):
    n, c, h, w = x.shape
    fill = -np.inf if kind == "max" else 0.0
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)), constant_values=fill)
    oh = (h + 2 * pad - kernel) // stride + 1
    ow = (w + 2 * pad - kernel) // stride + 1
    windows = np.stack([xp[:, :, r: r + stride * (oh - 1) + 1: stride, q: q + stride * (ow - 1) + 1: stride]
                        for r in range(kernel) for q in range(kernel)])
    return (windows.max(0) if kind == "max" else windows.mean(0)).astype(x.dtype)


def elf_section(path, name):
    """(file offset, size) of section `name` of the ELF64 file at `path`."""
    import struct
    data = open(path, "rb").read()
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)

    def header(i):  # sh_name, sh_type, sh_flags, sh_addr, sh_offset, sh_size, ...
        return struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize)

    names = header(shstrndx)[4]
    for i in range(shnum):
        h = header(i)
        start = names + h[0]
        if data[start:data.index(b"\0", start)].decode() == name:
            return h[4], h[5]
    raise KeyError(f"{path} has no section {name}")


def flip_bytes(path, offset, count=64):
    """Inverts `count` bytes of the file at `path` from `offset` (a corruption no byte survives)."""
    with open(path, "r+b") as f:
        f.seek(offset)
        chunk = f.read(count)
        f.seek(offset)
        f.write(bytes(b ^ 0xFF for b in chunk))


AVX2 = "llvm -mcpu=znver3"


def host_has(flag):
    """Whether /proc/cpuinfo lists `flag` among this CPU's features."""
    try:
        with open("/proc/cpuinfo") as f:
            return any(flag in line.split() for line in f if line.startswith("flags"))
    except OSError:
        return False


def host_has_avx512():
    """Whether this CPU runs AVX-512 code (then AVX2 code can be tested on it too)."""
    try:
        with open("/proc/cpuinfo") as f:
            return " avx512f" in f.read()
    except OSError:
        return False


def cpu_targets():
    """The host target and, on an AVX-512 host, an AVX2 one (8 lanes: other blocks, other padding)."""
    return ["llvm"] + ([AVX2] if host_has_avx512() else [])


def compile_torch(net, x, target, **compile_args):
    """`net` exported to ONNX (opset 13) at x's shape, imported and compiled by kiln for `target`."""
    import io

    import torch
    buf = io.BytesIO()
    torch.onnx.export(net.eval(), x, buf, input_names=["input"], output_names=["output"], opset_version=13)
    model = kiln.graph.from_onnx(buf.getvalue(), shapes={"input": tuple(x.shape)})
    return kiln.compile(model, target=target, **compile_args)


def check_against_torch(net, x, target, tol=1e-4, **compile_args):
    """Compiles `net`, runs it on x and asserts kiln's output is PyTorch's within `tol`
    (relative to the largest reference value); returns the executable."""
    import torch
    exe = compile_torch(net, x, target, **compile_args)
    (y,) = exe(x.numpy())
    with torch.no_grad():
        ref = net(x).numpy()
    assert y.shape == ref.shape
    err = np.max(np.abs(y - ref)) / np.max(np.abs(ref))
    assert err <= tol, f"relative error {err:.2e}"
    return exe


def randomize_batch_norms(net, seed=0):
    """Random scales, shifts and running statistics in every BatchNorm2d of `net` (fresh ones are
    identities, so folding or blocking them would go untested); returns `net`."""
    import torch
    g = torch.Generator().manual_seed(seed)
    for m in net.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.weight.data.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            m.bias.data.copy_(torch.randn(m.num_features, generator=g) * 0.1)
            m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
    return net
