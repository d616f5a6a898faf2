"""Out-of-bounds and liveness checks of compiled models' plans, for tests of dynamic shapes (issue 49, item 8).

- guarded_array: a numpy array whose bytes end right at a PROT_NONE page ("after"), or start right after one
  ("before"): a kernel that reads or writes one element past the array's end (or before its start) faults.
- run_guarded: runs a plan step by step (ModelRunner.layout at the call's shape values, its kernels through
  ModelRunner.module) with every input, constant, intermediate and output in its own guarded array, so each
  kernel's accesses are checked against each buffer's own bounds, not only against the arena's.
- check_layout: no two arena buffers that are live at the same step share a byte, every buffer lies inside
  the arena, and each buffer's declared lifetime covers every step that uses it (or a view of it).
A fault kills the process: run these in a subprocess (see test_dynamic_robustness.py).
"""
import ctypes
import mmap

import numpy as np

PAGE = mmap.PAGESIZE
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]


class _Guarded:
    """One mapping: the data's pages and a PROT_NONE page after or before them. Keeps the mapping alive."""

    def __init__(self, nbytes, where):
        self.data_pages = max(1, -(-nbytes // PAGE))
        self.map = mmap.mmap(-1, (self.data_pages + 1) * PAGE)
        base = ctypes.addressof(ctypes.c_char.from_buffer(self.map))
        guard = base + self.data_pages * PAGE if where == "after" else base
        if _libc.mprotect(guard, PAGE, 0) != 0:
            raise OSError(ctypes.get_errno(), "mprotect failed")
        # "after": the data's last byte is the one before the guard; "before": its first byte follows the guard.
        self.start = self.data_pages * PAGE - nbytes if where == "after" else PAGE
        self.nbytes = nbytes


def guarded_array(shape, dtype, where="after", fill=None):
    """A C-contiguous array of `shape` and `dtype` next to a PROT_NONE page (`where`: "after" or "before")."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    g = _Guarded(count * dtype.itemsize, where)
    a = np.frombuffer(g.map, dtype=dtype, count=count, offset=g.start).reshape(shape)
    _KEEP[id(a)] = (a, g)
    if fill is not None:
        a[...] = fill
    return a


_KEEP = {}  # the mappings behind guarded arrays, until release()


def release():
    """Drops the mappings kept for guarded arrays (call between models to bound memory)."""
    _KEEP.clear()


def view_in(array, shape, dtype):
    """A guarded array's bytes as another shape (a plan's view buffer): the same first byte, no more bytes."""
    _, g = _KEEP[id(array)]
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    assert count * dtype.itemsize <= g.nbytes, (shape, array.shape)
    return np.frombuffer(g.map, dtype=dtype, count=count, offset=g.start).reshape(shape)


def _root(buffers, b):
    while buffers[b]["view_of"] >= 0:
        b = buffers[b]["view_of"]
    return b


def run_guarded(runner, inputs, shapes, where="after", poison=np.nan):
    """Runs `runner`'s plan on `inputs` (a list of numpy arrays) at shape values `shapes` (a dict), every buffer in
    its own guarded array; intermediates and outputs start filled with `poison`. Returns the outputs (copies)."""
    lay = runner.layout(shapes)
    bufs = lay["buffers"]
    arrays = [None] * len(bufs)
    outputs = {}
    for b, d in enumerate(bufs):
        if d["kind"] == "arena" and d["view_of"] >= 0:
            continue  # placed below, once its source is
        fill = poison if np.dtype(d["dtype"]).kind == "f" else 0
        a = guarded_array(d["shape"], d["dtype"], where, fill)
        if d["kind"] == "input":
            a[...] = inputs[d["index"]]
        elif d["kind"] == "constant":
            a[...] = runner.constant(d["index"])
        elif d["kind"] == "output":
            outputs[d["index"]] = b
        arrays[b] = a
    for b, d in enumerate(bufs):
        if arrays[b] is None:
            arrays[b] = view_in(arrays[_root(bufs, b)], d["shape"], d["dtype"])
    mod = runner.module
    for s in lay["steps"]:
        params = mod.params(s["kernel"])
        args = [arrays[b] for b in s["args"]]
        # Shape scalars named after the model's shape variables get their values; the binder infers the rest.
        for p in params[len(args):]:
            if p["kind"] != "scalar" or p["name"] not in shapes:
                break
            args.append(int(shapes[p["name"]]))
        mod.call(s["kernel"], args)
    return [np.array(arrays[outputs[i]]) if i in outputs else None for i in range(len(outputs))]


def use_intervals(lay):
    """Per arena buffer with bytes of its own: (first step, last step) that use it or any view of it."""
    bufs = lay["buffers"]
    span = {}
    for s, step in enumerate(lay["steps"]):
        for b in step["args"]:
            if bufs[b]["kind"] != "arena":
                continue
            r = _root(bufs, b)
            lo, hi = span.get(r, (s, s))
            span[r] = (min(lo, s), max(hi, s))
    return span


def check_layout(lay):
    """Returns a list of problems (empty when the plan is sound) with the layout at these shape values."""
    bufs = lay["buffers"]
    problems = []
    span = use_intervals(lay)
    nbytes = {b: int(np.prod(d["shape"], dtype=np.int64)) * np.dtype(d["dtype"]).itemsize for b, d in enumerate(bufs)}
    roots = [b for b, d in enumerate(bufs) if d["kind"] == "arena" and d["view_of"] < 0]
    for b, d in enumerate(bufs):
        if d["kind"] != "arena":
            continue
        r = _root(bufs, b)
        off = bufs[r]["offset"]
        if off < 0 or off + nbytes[b] > lay["arena_bytes"]:
            problems.append(f"buffer {b} [{off}, {off + nbytes[b]}) lies outside the arena of {lay['arena_bytes']} bytes")
        if d["view_of"] >= 0 and nbytes[b] > nbytes[r]:
            problems.append(f"view {b} ({nbytes[b]} bytes) is larger than its source {r} ({nbytes[r]} bytes)")
    if lay["dynamic"]:  # a dynamic plan declares lifetimes: they must cover every use
        for r in roots:
            if r in span:
                lo, hi = span[r]
                if not (bufs[r]["first_step"] <= lo and hi <= bufs[r]["last_step"]):
                    problems.append(f"buffer {r} is used at steps {lo}..{hi} but declared live {bufs[r]['first_step']}..{bufs[r]['last_step']}")

    def inplace(a, b):  # b writes over a in place: a dies at the step that writes b
        src = bufs[b]["inplace_of"]
        return src >= 0 and _root(bufs, src) == a and span.get(a, (0, -1))[1] <= span.get(b, (0, -1))[0]

    for i, a in enumerate(roots):
        for b in roots[i + 1:]:
            if a not in span or b not in span or nbytes[a] == 0 or nbytes[b] == 0:
                continue
            (a0, a1), (b0, b1) = span[a], span[b]
            if a1 < b0 or b1 < a0 or inplace(a, b) or inplace(b, a):
                continue
            oa, ob = bufs[a]["offset"], bufs[b]["offset"]
            if oa < ob + nbytes[b] and ob < oa + nbytes[a]:
                problems.append(f"buffers {a} (steps {a0}..{a1}, bytes [{oa}, {oa + nbytes[a]})) and {b} (steps {b0}..{b1}, "
                                f"bytes [{ob}, {ob + nbytes[b]})) are live together and share bytes")
    return problems
