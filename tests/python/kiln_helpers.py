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
