"""The CUDA backend: ``kiln.build(s, args, target="cuda -arch=sm_90")``.

The result, a :class:`CudaModule`, holds the CUDA C (``get_source()``), the
cubin NVRTC made for the target's architecture, and the lowered kernel.
``mod.simulate(*arrays)`` runs the kernel on the CPU over every block and
thread, honouring barriers, and raises :class:`kiln.KilnError` on a data race
(so GPU schedules are checked without a GPU). ``mod(*arrays)`` runs it on the
GPU; without a CUDA driver or GPU it raises :class:`kiln.KilnError` saying so.

A reduce loop bound to ``threadIdx.x`` (``s[B].bind(ki, "threadIdx.x")``
after splitting the reduce axis, or the rfactor axis of the final stage)
reduces across the block's threads: each thread keeps a partial in a
register, then warp shuffles (``__shfl_down_sync``) and, past 32 threads, a
small shared array combine them; see ``lower_thread_allreduce`` in
``core/include/kiln/pass/gpu.h`` for the order, which the simulator follows.

NVRTC (libnvrtc) and the driver (libcuda.so.1) are loaded when first needed;
kiln itself needs neither. ``nvrtc_available()`` and ``driver_available()``
tell what this machine has.
"""
from ._ffi import KilnError, _kiln

_cuda = _kiln.cuda


def nvrtc_available():
    """(True, "") when NVRTC can be loaded, else (False, why not)."""
    return _cuda.nvrtc_available()


def driver_available():
    """(True, "") when a CUDA driver and a GPU are present, else (False, why not)."""
    why = _cuda.driver_unavailable_reason()
    return (not why, why)


def lower(s, args, name="main", insert_barriers=True):
    """The kernel as lowered for a cuda target (``print()`` shows it, barriers included)."""
    return _cuda.lower(s, list(args), name, insert_barriers)


class CudaModule:
    """A kernel built for a cuda target."""

    def __init__(self, native):
        self._native = native

    @property
    def name(self):
        return self._native.name

    @property
    def func(self):
        """The lowered kernel (a PrimFunc)."""
        return self._native.func

    @property
    def launch(self):
        """{"grid": (x, y, z), "block": (x, y, z), "shared_bytes": n}."""
        return self._native.launch

    @property
    def cubin(self):
        """NVRTC's cubin for the target's architecture (bytes; empty when built with compile=False)."""
        return self._native.cubin

    def get_source(self):
        """The CUDA C of the kernel."""
        return self._native.source

    def get_ptx(self):
        """PTX of the kernel for compute_XX of the target (compiled now)."""
        return self._native.ptx()

    def simulate(self, *args):
        """Runs the kernel on the CPU (numpy arrays in, results written in place); returns what ran."""
        return self._native.simulate(list(args))

    def __call__(self, *args):
        """Runs the kernel on the GPU with numpy arrays (copied to the device and back)."""
        self._native.run(list(args))

    def time(self, *args, number=10, repeat=5):
        """Times the kernel on the GPU with CUDA events: the arrays are copied to the device once,
        one warm-up call, then `repeat` rounds of `number` calls with no copies between them.
        Returns the seconds per call of each round; the arrays hold the results afterwards."""
        return self._native.time(list(args), number, repeat)


def default_schedule(args, target="cuda -arch=sm_90"):
    """The schedule the GPU rules give ``args``'s computation without tuning.

    The rules (``tuner/README.md``) bind every loop to blocks and threads:
    matmul-like reductions get block, thread and register tiles with their
    inputs staged in shared memory (and their elementwise epilogue fused),
    row reductions (softmax, layer norm) a block per row reduced across its
    threads, everything else a thread per output element. The tiles shrink
    until the kernel fits the device's threads and shared memory."""
    task = _kiln.tuner.make_task(list(args), str(target), "")
    return _kiln.Schedule.from_trace(task.outputs, _kiln.tuner.default_trace(task))


def tensor_core_schedule(C, block=(64, 64), warp=(32, 32), k_step=32, pad=8):
    """A tensor-core schedule for the matmul ``C[i, j] = sum_k float32(A[i, k]) * float32(B[k, j])``
    of float16 or bfloat16 ``A`` and ``B`` (either may be stored transposed).

    Each block computes a ``block`` tile of C with one warp (``threadIdx.y``)
    per ``warp`` tile; each warp keeps its tile in (warp/16)^2 accumulator
    fragments and multiplies 16x16x16 tiles with ``mma_sync``. A and B are
    staged in shared memory ``k_step`` columns at a time by all the block's
    threads, 16 bytes per thread per copy, with each row padded by ``pad``
    elements so the warps' tile loads spread over the memory banks. The
    result is stored fragment by fragment to C. Every extent must divide
    (M by block[0], N by block[1], K by k_step; block by warp, warp and
    k_step by 16). Returns the schedule; build it with ``target="cuda ..."``.
    It is the GPU rules' tensor-core sketch with these tiles
    (``ops/src/sketch_rules_gpu_tensor_core.cpp``), which
    :func:`default_schedule` takes with tiles of its own choice.
    """
    args = list(C.op.input_tensors) + [C]
    return _kiln.tuner.tensor_core_schedule(args, tuple(block), tuple(warp), int(k_step), int(pad))


def build(s, args, target, name="main", insert_barriers=True, compile=True):
    """Lowers ``s`` for the GPU and compiles it; see :func:`kiln.build`."""
    return CudaModule(_cuda.build(s, list(args), str(target), name, insert_barriers, compile))


__all__ = ["CudaModule", "build", "default_schedule", "tensor_core_schedule", "lower", "nvrtc_available", "driver_available", "KilnError"]
