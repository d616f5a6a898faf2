"""Pipeline parallelism over the ranks of kiln.dist: a graph cut into balanced stages, one per
rank (kiln.dist.pipeline for inference, kiln.dist.pipeline_train for a training step), with
micro-batches streamed through the ranks by send/recv between neighbours."""
import time as _time

import numpy as _np

from .._ffi import KilnError, _kiln
from .. import graph as _g
from ..train import SGD
from ..train.checkpoint import apply_update, update_graph
from ..train.loss import loss_value
from ..train.parameters import Parameters
from ..train.segments import backward_graph
from .comm import rank, size

_d = _kiln.dist
_kg = _kiln.graph  # the native graph API: a training stage runs native executors; an inference stage, kiln.graph's (_g)


def _send(a, peer, tag):
    _d.send(_np.ascontiguousarray(a), peer, tag)


def _recv(shape, dtype, peer, tag):
    return _d.recv(list(shape), dtype, peer, tag)


def _exchange(sends, recvs):
    """Posts every receive and send at once and waits for all: (array, peer, tag) sends, (shape, dtype,
    peer, tag) receives; returns the received arrays."""
    return _d.exchange([(_np.ascontiguousarray(a), p, t) for a, p, t in sends], [(list(sh), dt, p, t) for sh, dt, p, t in recvs])


def _broadcast(a, root):
    return _d.broadcast(a, root)


def _all_gather(a):
    return _d.all_gather(a)


def _split_micro(names, types, inputs, m_count, what):
    """{input name: its m_count micro-batches}; each input must be m_count times its shape along dim 0
    (a scalar is shared by every micro-batch)."""
    if len(inputs) != len(names):
        raise KilnError(f"{what} takes {len(names)} input(s), got {len(inputs)}")
    micro = {}
    for name, (shape, dtype), a in zip(names, types, inputs):
        a = _np.asarray(a)
        a = a.astype(dtype) if a.dtype != _np.dtype(dtype) else a
        want = (shape[0] * m_count,) + tuple(shape[1:]) if shape else ()
        if a.shape != want:
            raise KilnError(f"input '{name}' must have shape {want} ({m_count} micro-batches of {tuple(shape)}), got {a.shape}")
        micro[name] = _np.split(a, m_count) if shape else [a] * m_count
    return micro


def _bubble_stats(total, busy):
    """A rank's step time, busy time and bubble (the share of the step it was not running its stage:
    waiting for a neighbour, or done early), and the mean bubble over the ranks (collective)."""
    bubble = 1.0 - busy / total if total > 0 else 0.0
    everyone = _all_gather(_np.array([bubble], "float64"))[:, 0] if size() > 1 else _np.array([bubble])
    return {"seconds": total, "busy_s": busy, "bubble": bubble, "bubble_mean": float(everyone.mean())}


def _tag_fwd(m, k):
    return m * 1024 + k


def _tag_bwd(m, k):
    return (1 << 20) + m * 1024 + k


class PipelinePlan:
    """A graph cut into balanced stages, one per rank (see ``pipeline``). ``print(plan)`` shows the cut."""

    def __init__(self, model, stages, text, micro_batches):
        self.model = model
        self.stages = stages
        self.micro_batches = micro_batches
        self._text = text

    def __str__(self):
        p, m = len(self.stages), self.micro_batches
        return self._text + f"# {m} micro-batches: GPipe's idle share (bubble) is (P-1)/(M+P-1) = {(p - 1) / (m + p - 1):.2f}"

    def compile(self, target="llvm"):
        """This rank's stage, compiled (every rank calls it; rank r runs stage r)."""
        if size() != len(self.stages):
            raise KilnError(f"the pipeline has {len(self.stages)} stages but {size()} process(es) run; "
                            f"start them with mpirun -np {len(self.stages)}")
        return PipelineRunner(self, _g.compile(self.stages[rank()]["graph"], target=target))


class PipelineRunner:
    """Rank r's stage of a pipeline. ``runner(*inputs)`` takes the full batch (micro_batches times the
    model's batch, on every rank), streams the micro-batches through the stages (GPipe order: stage r
    sends micro-batch m on as soon as it is done) and returns the model's outputs on every rank.
    ``stats`` holds the last run's seconds, this rank's time running its stage, its bubble (the share of
    the step it was idle: waiting for its neighbour, or done early) and the mean bubble over the ranks."""

    def __init__(self, plan, exe):
        self.plan = plan
        self._exe = exe
        self.stage = plan.stages[rank()]
        self.stats = {}

    def __call__(self, *inputs):
        return self.run(list(inputs))

    def run(self, inputs):
        model, m_count = self.plan.model, self.plan.micro_batches
        micro = _split_micro(model.input_names, model.input_types, inputs, m_count, "the model")
        r, last = rank(), len(self.plan.stages) - 1
        graph = self.stage["graph"]
        recv_types = graph.input_types[:len(self.stage["recv"])]
        results = []
        busy = 0.0
        start = _time.perf_counter()
        for m in range(m_count):
            got = [_recv(shape, dtype, r - 1, _tag_fwd(m, k)) for k, (shape, dtype) in enumerate(recv_types)]
            t0 = _time.perf_counter()
            outs = self._exe.run(got + [_np.ascontiguousarray(micro[n][m]) for n in self.stage["model_inputs"]])
            busy += _time.perf_counter() - t0
            if r < last:
                for k, o in enumerate(outs):
                    _send(o, r + 1, _tag_fwd(m, k))
            else:
                results.append(outs)
        # The last stage has the outputs; every rank returns them (the broadcast also ends the step together).
        finals = []
        for k, (shape, dtype) in enumerate(model.output_types):
            full = (shape[0] * m_count,) + tuple(shape[1:])
            out = _np.concatenate([res[k] for res in results]) if r == last else _np.empty(full, dtype)
            finals.append(_broadcast(_np.ascontiguousarray(out, dtype=dtype), last))
        self.stats = _bubble_stats(_time.perf_counter() - start, busy)
        return finals


def pipeline(model, micro_batches=4, num_stages=None, cost=None):
    """Pipeline parallel: `model` (a kiln.graph.Graph at the micro-batch size) cut into `num_stages`
    consecutive stages (default: one per rank) that balance the estimated time of their ops (the
    cost model of strategy="auto"; `cost` overrides its machine, e.g. from ``calibrate()``).
    Each rank runs its stage on `micro_batches` micro-batches in a row, sending each one's
    boundary values to the next rank. Returns a PipelinePlan; ``plan.compile()`` on every rank."""
    if not isinstance(model, _kg.Graph):
        raise KilnError(f"kiln.dist.pipeline takes a kiln.graph.Graph, got a {type(model).__name__}")
    if int(micro_batches) < 1:
        raise KilnError(f"micro_batches must be at least 1, got {micro_batches}")
    stages, text = _d.cut_pipeline(model, size() if num_stages is None else int(num_stages), {k: float(v) for k, v in (cost or {}).items()})
    return PipelinePlan(model, stages, text, int(micro_batches))


class PipelineTrainStep:
    """Rank r's stage of a pipelined training step (see ``pipeline_train``). ``step(*inputs, target)``
    takes the full batch on every rank and returns the loss (the mean over the micro-batches, on
    every rank); ``parameters`` are this rank's (its stage's), ``all_parameters()`` gathers every stage's."""

    def __init__(self, plan, fwd, bwd, update, params, state_names, states, scalars, batch_names):
        self.plan = plan
        self._fwd, self._bwd, self._update = fwd, bwd, update
        self.parameters = params
        self.optimizer_state_names, self.optimizer_states, self._scalars = state_names, states, scalars
        self._batch_names = batch_names
        self.steps = 0
        self.stats = {}

    def __call__(self, *inputs):
        plan = self.plan
        micro = _split_micro(self._batch_names, plan.graph.input_types, inputs, plan.micro_batches,
                             "the training step (the model's inputs and the target)")
        r, last = rank(), len(plan.stages) - 1
        stage = plan.stages[r]
        n_params = len(self.parameters)
        run = _StageRun(self, stage, micro, r, last)
        start = _time.perf_counter()
        if plan.schedule == "1f1b":
            _one_f_one_b(run, plan.micro_batches, len(plan.stages))
        else:
            _gpipe(run, plan.micro_batches)
        self.steps += 1
        grads = self._sum_shared(run.acc)
        if n_params:
            self._apply([a / plan.micro_batches for a in grads])  # the loss is the mean over the micro-batches
        loss = _broadcast(_np.array([_np.mean(run.losses) if r == last else 0.0], "float64"), last)[0]
        self.stats = dict(_bubble_stats(_time.perf_counter() - start, run.busy), max_stashed=run.max_stashed)
        return float(loss)

    def _sum_shared(self, grads):
        """The gradients with each shared parameter's summed over the stages that read it (every rank
        takes part: the sum over all ranks, stages without it adding zeros), then broadcast from its
        owner, so that every copy applies bitwise the same update."""
        mine = list(self.parameters)
        out = list(grads)
        for n in self.plan.shared:
            shape, dtype = self.plan.param_types[n]
            g = out[mine.index(n)] if n in mine else _np.zeros(shape, dtype)
            total = _broadcast(_np.ascontiguousarray(_d.all_reduce(_np.ascontiguousarray(g))), self.plan.owner[n])
            if n in mine:
                out[mine.index(n)] = total
        return out

    def _apply(self, grads):
        apply_update(self._update, self.parameters, grads, self.optimizer_states, self._scalars, self.steps)

    def all_parameters(self):
        """Every stage's parameters, on every rank (each stage's rank broadcasts its own)."""
        out = {}
        for s, names in enumerate(self.plan.stage_params):
            for n in names:
                if self.plan.owner[n] != s:
                    continue  # a shared parameter's copies are equal: its owner's stands for them
                a = dict.__getitem__(self.parameters, n) if s == rank() else _np.empty(*self.plan.param_types[n])
                out[n] = _broadcast(_np.ascontiguousarray(a), s)
        return out


class _StageRun:
    """One step of one stage: its forward and backward of a micro-batch, and what they exchange."""

    def __init__(self, step, stage, micro, r, last):
        self.step, self.stage, self.micro, self.r, self.last = step, stage, micro, r, last
        self.recv_types = stage["graph"].input_types[:len(stage["recv"])]
        self.send_types = stage["graph"].output_types if r < last else []
        self.stash = {}
        self.max_stashed = 0
        self.acc = [_np.zeros_like(dict.__getitem__(step.parameters, n)) for n in step.parameters]
        self.losses = []
        self.busy = 0.0

    def feed(self, m, got):
        return got + [_np.ascontiguousarray(self.micro[n][m]) if n in self.micro else dict.__getitem__(self.step.parameters, n)
                      for n in self.stage["model_inputs"]]

    def recv_fwd(self, m):
        return [_recv(sh, dt, self.r - 1, _tag_fwd(m, k)) for k, (sh, dt) in enumerate(self.recv_types)]

    def recv_bwd(self, m):
        return [_recv(sh, dt, self.r + 1, _tag_bwd(m, k)) for k, (sh, dt) in enumerate(self.send_types)]

    def forward(self, m, got):
        """Stashes the micro-batch's stage inputs; returns what goes to the next stage ([] on the last)."""
        self.stash[m] = got
        self.max_stashed = max(self.max_stashed, len(self.stash))
        if self.r == self.last:
            return []
        t0 = _time.perf_counter()
        outs = self.step._fwd.run(self.feed(m, got))
        self.busy += _time.perf_counter() - t0
        return outs

    def backward(self, m, dys):
        """The micro-batch's backward from its stashed inputs; accumulates the parameter gradients and
        returns the gradients of what the stage received."""
        t0 = _time.perf_counter()
        outs = self.step._bwd.run(self.feed(m, self.stash.pop(m)) + dys)
        self.busy += _time.perf_counter() - t0
        if self.r == self.last:
            self.losses.append(float(outs[0]))
            outs = outs[1:]
        n_recv = len(self.recv_types)
        for k in range(len(self.acc)):
            self.acc[k] += outs[n_recv + k]
        return outs[:n_recv]


def _gpipe(run, m_count):
    """Every micro-batch forward, then every one backward in reverse order: sends go one way in each
    phase, so blocking sends cannot wait on each other in a cycle."""
    for m in range(m_count):
        for k, o in enumerate(run.forward(m, run.recv_fwd(m))):
            _send(o, run.r + 1, _tag_fwd(m, k))
    for m in reversed(range(m_count)):
        dx = run.backward(m, run.recv_bwd(m) if run.r < run.last else [])
        for k, d in enumerate(dx):
            _send(d, run.r - 1, _tag_bwd(m, k))


def _one_f_one_b(run, m_count, stages):
    """1F1B (PipeDream-Flush): stage s runs stages-s-1 forwards, then alternates one forward and one
    backward, then drains the backwards; at most stages-s micro-batches are stashed at once instead of
    all of them. Where a rank both sends to and receives from a neighbour, the two are posted together
    (kiln.dist's exchange), so neither waits on the other."""
    r, last = run.r, run.last
    warm = min(stages - r - 1, m_count)
    for m in range(warm):
        for k, o in enumerate(run.forward(m, run.recv_fwd(m))):
            _send(o, r + 1, _tag_fwd(m, k))
    steady = m_count - warm
    got = run.recv_fwd(warm) if steady > 0 else None
    for i in range(steady):
        f, b = warm + i, i
        outs = run.forward(f, got)
        dys = []
        if r < last:  # this forward's outputs go up as the gradients of backward b come down
            dys = _exchange([(o, r + 1, _tag_fwd(f, k)) for k, o in enumerate(outs)],
                            [(sh, dt, r + 1, _tag_bwd(b, k)) for k, (sh, dt) in enumerate(run.send_types)])
        dx = run.backward(b, dys)
        if i + 1 < steady:  # the gradients go down as the next forward's inputs come up
            got = _exchange([(d, r - 1, _tag_bwd(b, k)) for k, d in enumerate(dx)],
                            [(sh, dt, r - 1, _tag_fwd(f + 1, k)) for k, (sh, dt) in enumerate(run.recv_types)])
        else:
            for k, d in enumerate(dx):
                _send(d, r - 1, _tag_bwd(b, k))
    for b in range(steady, m_count):
        dx = run.backward(b, run.recv_bwd(b) if r < last else [])
        for k, d in enumerate(dx):
            _send(d, r - 1, _tag_bwd(b, k))


class PipelineTrainPlan:
    """A training step's loss graph cut into stages; ``compile()`` on every rank gives its PipelineTrainStep."""

    def __init__(self, graph, stages, text, micro_batches, names, values, batch_names, optimizer, schedule="1f1b"):
        self.graph, self.stages, self._text, self.micro_batches = graph, stages, text, micro_batches
        self.schedule = schedule
        self.optimizer = optimizer
        self._names, self._values, self._batch_names = names, values, batch_names
        pset = set(names)
        self.stage_params = [[n for n in st["model_inputs"] if n in pset] for st in stages]
        # A parameter read by several stages (a shared weight, as tied embeddings are) has a copy on
        # each of their ranks: the step sums its gradients over them, and each applies the same
        # update to the same values, so the copies stay equal. The first stage owns it.
        self.owner, self.holders = {}, {}
        for s, ps in enumerate(self.stage_params):
            for n in ps:
                self.owner.setdefault(n, s)
                self.holders.setdefault(n, []).append(s)
        self.shared = [n for n in names if len(self.holders.get(n, [])) > 1]
        self.param_types = {n: (v.shape, v.dtype) for n, v in zip(names, values)}

    def __str__(self):
        p, m = len(self.stages), self.micro_batches
        name = "1F1B" if self.schedule == "1f1b" else "GPipe"
        return self._text + (f"# {m} micro-batches, {name} schedule; each stage's backward recomputes its forward; "
                             f"ideal bubble (P-1)/(M+P-1) = {(p - 1) / (m + p - 1):.2f}")

    def compile(self, target="llvm"):
        if size() != len(self.stages):
            raise KilnError(f"the pipeline has {len(self.stages)} stages but {size()} process(es) run; "
                            f"start them with mpirun -np {len(self.stages)}")
        r = rank()
        stage = self.stages[r]
        pset = set(self._names)
        fwd = _kg.compile(stage["graph"], target=target) if stage["send"] else None
        bwd_graph, n_params = backward_graph(stage, pset)
        bwd = _kg.compile(bwd_graph, target=target)
        mine = self.stage_params[r]
        values = dict(zip(self._names, self._values))
        params = Parameters((n, _np.array(values[n], copy=True)) for n in mine)
        state_names = self.optimizer.state_names()
        update, states, scalars = None, [], None
        if mine:
            g, scalars = update_graph(self.optimizer, mine, [values[n] for n in mine])
            update = _kg.compile(g, target=target)
            states = [[_np.zeros(values[n].shape, values[n].dtype) for _ in state_names] for n in mine]
        return PipelineTrainStep(self, fwd, bwd, update, params, state_names, states, scalars, self._batch_names)


def pipeline_train(model, loss="cross_entropy", optimizer=None, micro_batches=4, num_stages=None, cost=None, schedule="1f1b"):
    """Pipeline-parallel training: `model` (a kiln.graph.Graph at the micro-batch size, with one
    output) with its loss cut into `num_stages` stages (default: one per rank) balanced by estimated
    time; the model's float constants become parameters, each trained on the rank of the stage that
    uses it (a weight several stages read has a copy on each of their ranks, its gradients summed
    over them, so the copies stay equal). Each step streams `micro_batches` micro-batches forward and backward through the ranks,
    sums the gradients and updates every stage's parameters with `optimizer` (as in kiln.train: SGD,
    Adam, AdamW). schedule="1f1b" (default) interleaves forwards and backwards so a stage keeps at most
    as many micro-batches as stages after it; "gpipe" runs all forwards first. Both give the same
    losses and parameters. Returns a PipelineTrainPlan; ``plan.compile()`` on every rank."""
    if not isinstance(model, _kg.Graph):
        raise KilnError(f"kiln.dist.pipeline_train takes a kiln.graph.Graph, got a {type(model).__name__}")
    if int(micro_batches) < 1:
        raise KilnError(f"micro_batches must be at least 1, got {micro_batches}")
    if schedule not in ("1f1b", "gpipe"):
        raise KilnError(f"schedule must be '1f1b' or 'gpipe', got {schedule!r}")
    optimizer = optimizer or SGD()
    lifted, names, values, buffer_names, _, seed_input = _kg.lift_parameters(model, training=True)
    if buffer_names or seed_input:
        raise KilnError("pipeline_train does not handle batch-norm running statistics or dropout yet; "
                        "train such a model with kiln.train or kiln.dist.train (data parallel)")
    if not names:
        raise KilnError("the model has no trainable parameters (float constants of rank >= 1)")
    n_data = len(model.input_names)
    ins = lifted.input_values
    data, params = ins[:n_data], ins[n_data: n_data + len(names)]
    loss_v, y = loss_value(loss, lifted.output_values[0], None)
    batch = data + ([y] if y is not None else [])
    graph = _kg.make_graph(batch + params, [loss_v], ["loss"])
    n = size() if num_stages is None else int(num_stages)
    stages, text = _d.cut_pipeline(graph, n, {k: float(v) for k, v in (cost or {}).items()})
    batch_names = graph.input_names[:len(batch)]
    return PipelineTrainPlan(graph, stages, text, int(micro_batches), names, values, batch_names, optimizer, schedule)
