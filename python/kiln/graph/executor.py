"""A compiled graph: the executors kiln.compile returns, for the CPU (Executor) and for a cuda
target (GpuExecutor)."""
import os

from ..runtime import model_feed


class _CompiledModel:
    """What the CPU and the GPU executors share: inputs by position or name, the plan's memory and groups."""

    def __init__(self, native, model):
        self._exe = native
        self.model = model

    def __call__(self, *inputs):
        return self.run(list(inputs))

    def run(self, inputs, donate=None):
        """Runs the model; `inputs` is a list in input order or a dict by input name. Returns a list of numpy arrays.
        donate: positions of inputs whose arrays the run may overwrite (CPU executor): an output the plan lets
        reuse one (``output_reuses_input``; a parameter's update) is written into it in place and returned as it."""
        if donate:
            return self._exe.run(self._order(inputs), [int(i) for i in donate])
        return self._exe.run(self._order(inputs))

    def memory(self):
        """Bytes: arena_bytes (planned), naive_bytes (no reuse), peak_bytes (live at once), weight_bytes."""
        return self._exe.memory()

    @property
    def shape_vars(self):
        """The model's shape variables ("batch", "seq"), in the order its inputs first use them; [] for a static model."""
        return list(getattr(self._exe, "shape_vars", []))

    def groups(self):
        """One dict per fused group: name, ops, workload_key, schedule ("database", "default" or "plain"), schedule_detail,
        records_only_for (for a group the DB has no record of on this build's target: the same target with another
        -num-cores that it has records for, else ""; their schedules are not taken, see compile), flop, kernel (the
        plan's kernel it calls), variants (a model with shape variables: the group's size-dispatched kernels, each a dict
        of when ("seq in [2, 16]"), kernel and schedule_detail, tried in order before `kernel`; [] for one kernel)."""
        return self._exe.groups()

    @property
    def graph(self):
        """The optimized, fused graph the executor runs."""
        return self._exe.graph

    @property
    def num_kernels(self):
        return self._exe.num_kernels

    @property
    def output_reuses_input(self):
        """Per output, the input position whose array ``run(..., donate=)`` writes it into (the input
        donated), or -1: outputs computed element by element from an input no later group reads."""
        return list(getattr(self._exe, "output_reuses_input", [-1] * len(self.model.output_names)))

    def _order(self, inputs):
        return model_feed(self.model.input_names, inputs)


class Executor(_CompiledModel):
    """A compiled model: call it with arrays (numpy, torch, kiln) in input order."""

    def memory(self, shapes=None):
        """Bytes: arena_bytes (planned), naive_bytes (no reuse), peak_bytes (live at once), weight_bytes.
        A model with shape variables plans its arena per shape: give their values (``shapes={"seq": 128}``)."""
        return self._exe.memory(dict(shapes) if shapes is not None else None)

    def memory_bound(self):
        """The largest arena a run can plan (same keys as memory()) when compile's ``dims=`` gave every shape
        variable a range; None otherwise."""
        return self._exe.memory_bound()

    def run_stats(self):
        """Counts since compile: runs, plans (shapes planned: once per new shape, again only after one of
        the 16 cached shapes was evicted), arena_allocations (the one at compile included), arena_bytes, and
        the seconds spent planning (plan_seconds; last_plan_seconds: the latest new shape's planning and
        arena growth) and allocating the arena (arena_seconds). A shape seen lately costs neither."""
        return self._exe.runner.run_stats()

    def profile(self, *inputs, repeats=10):
        """Per-group times (median of `repeats` runs): a list of dicts with name, seconds, gflops, share."""
        return self._exe.profile(self._order(list(inputs)), repeats)

    def tuned_groups(self):
        """(groups built from a tuning record, all groups)."""
        groups = self._exe.groups()
        return sum(1 for g in groups if g["schedule"] == "database"), len(groups)

    def layout_decisions(self):
        """Per convolution, the channel-block cap compiling with ``db=`` chose from the records:
        conv, cap, conv_time and transform_time (s, the estimate it was chosen by), why. Empty without a db."""
        return self._exe.layout_decisions()

    def export_library(self, path, weights="embed", static_runtime=False):
        """Writes the compiled model as one shared library that
        :func:`kiln.runtime.load_model` runs without the compiler: every kernel,
        the plan, and the weights, ``"embed"``-ded in the library or
        ``"beside"`` it as ``<path>.weights``. Linked by ``$CC`` (default ``cc``).
        With ``static_runtime=True`` the library carries kiln_runtime (and its C
        API) itself and needs only libc, libm and libpthread (this machine's
        architecture only). For a cross target ``$CC`` must be a compiler for that
        machine (``aarch64-linux-gnu-gcc``); the library binds kiln_runtime where it
        is loaded there."""
        self._exe.export_library(os.fspath(path), weights, static_runtime)

    @property
    def compile_seconds(self):
        return self._exe.compile_seconds

    def __repr__(self):
        if self.shape_vars:
            return f"<kiln.graph.Executor: {self.num_kernels} kernels, shape variables {', '.join(self.shape_vars)}>"
        return f"<kiln.graph.Executor: {self.num_kernels} kernels, arena {self.memory()['arena_bytes']} bytes>"


class GpuExecutor(_CompiledModel):
    """A model compiled for a cuda target: one CUDA kernel per fused group,
    scheduled by the GPU rules (see ``kiln.gpu.default_schedule``).

    ``exe(*inputs)`` runs on the GPU (a clear :class:`KilnError` without
    one); ``exe.simulate(*inputs)`` runs every kernel in the GPU simulator on
    the CPU, so a model's GPU kernels can be checked anywhere."""

    def simulate(self, *inputs):
        """Runs every kernel in the GPU simulator (on the CPU); returns numpy arrays as run() does."""
        return self._exe.simulate(self._order(list(inputs)))

    def kernels(self):
        """One dict per kernel: name, source (the CUDA C), launch ("grid=(..) block=(..) shared=..B")."""
        return self._exe.kernels()

    def __repr__(self):
        return f"<kiln.graph.GpuExecutor: {self.num_kernels} CUDA kernels, arena {self.memory()['arena_bytes']} bytes>"
