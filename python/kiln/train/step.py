"""The plain training step: a model's forward pass, loss, backward pass and optimizer update
in one compiled graph (kiln.train.compile), and PyTorch modules imported for training (from_torch)."""
import numpy as _np

from .._ffi import KilnError, _kiln
from .. import graph as _kg
from . import checkpoint as _ck
from . import precision as _prec
from .loss import loss_value
from .nodes import Scalars, op
from .optimizers import SGD
from .parameters import Parameters, nbytes_of
from .precision import LOSS_SCALE_INPUT


class TrainStep:
    """One compiled training step; call it with the model's inputs and the target, get the loss (a float)."""

    def __init__(self, exe, graph, n_data, has_target, params, state_names, states, scalars, buffers, optimizer, scaler=None):
        self._exe, self.graph = exe, graph
        self.scaler = scaler  # the loss scale (a LossScaler) or None
        self.optimizer = optimizer  # its lr (and weight_decay for AdamW) are read at every step
        self._n_data, self._has_target = n_data, has_target
        self.parameters = params
        self.buffers = buffers  # updated each step, not trained (batch norm running statistics)
        self.optimizer_state_names = state_names
        self.optimizer_states = states  # per parameter, a list of arrays
        self._scalars = scalars
        self.steps = 0

    def _run(self, feed, first, end):
        """Runs the step with the parameters, optimizer state and buffers (feed[first:end]) donated, so
        their updates are written in place where the plan allows (the step's executor, not a distributed one).
        A donated array must be writeable, contiguous and no view of another numpy array; one that is not is copied first."""
        if not isinstance(self._exe, _kg.Executor):
            return self._exe.run(feed)
        for i in range(first, end):
            a = feed[i]
            if not (a.flags.writeable and a.flags.c_contiguous and (a.flags.owndata or not isinstance(a.base, _np.ndarray))):
                feed[i] = _np.array(a, order="C")
        return self._exe.run(feed, donate=range(first, end))

    @property
    def state(self):
        """The optimizer state: {parameter name: {state name: array}}."""
        return {n: dict(zip(self.optimizer_state_names, s)) for n, s in zip(self.parameters, self.optimizer_states)}

    @property
    def n_batch(self):
        """How many arrays a call takes: the model's inputs and, with a loss, the target."""
        return self._n_data + (1 if self._has_target else 0)

    def run_with(self, runner):
        """Runs the step's graph through `runner` from now on (kiln.dist's runner of this rank's share of
        it), kept as ``step.runner`` for its stats()."""
        self._exe = self.runner = runner

    def memory(self):
        """Bytes a step holds (dict by part: parameters, optimizer_state, inputs, running_graph (the one
        graph's planned arena of intermediates, kept activations and gradients included, and the new
        parameters and state it writes), total)."""
        g = self.graph
        params = sum(a.nbytes for a in self.parameters.values())
        states = sum(a.nbytes for per in self.optimizer_states for a in per)
        inputs = nbytes_of(g.input_types) - params - states
        # Outputs written into their donated inputs (parameter and state updates) take no memory of their own.
        reuses = getattr(self._exe, "output_reuses_input", [])
        outputs = nbytes_of([t for k, t in enumerate(g.output_types) if k >= len(reuses) or reuses[k] < 0])
        running = self._exe.memory()["arena_bytes"] + outputs
        return {"parameters": params, "optimizer_state": states, "inputs": inputs, "gradients": 0, "kept_boundaries": 0,
                "running_graph": running, "total": params + states + inputs + running, "segments": 1}

    def __call__(self, *inputs):
        if len(inputs) != self.n_batch:
            raise KilnError(f"the training step takes {self._n_data} model input(s)" + (" and the target" if self._has_target else "")
                            + f", got {len(inputs)} argument(s)")
        feed = [_np.ascontiguousarray(a) for a in inputs[: self._n_data]]
        if self._has_target:
            y = _np.asarray(inputs[-1])
            want_dtype = self.graph.input_types[self._n_data][1]
            feed.append(_np.ascontiguousarray(y.astype(want_dtype) if y.dtype.kind in "iu" and want_dtype.startswith("int") else y))
        self.steps += 1
        names = list(self.parameters)
        first_param = len(feed)
        feed += [dict.__getitem__(self.parameters, n) for n in names]
        feed += [s for per in self.optimizer_states for s in per]
        feed += [dict.__getitem__(self.buffers, n) for n in self.buffers]
        end_donated = len(feed)
        feed += self._scalars.feed(self.steps)
        if self.scaler is not None:
            feed.append(_np.asarray(self.scaler.scale, self.graph.input_types[-1][1]))
        outs = self._run(feed, first_param, end_donated)
        if self.scaler is not None:
            finite = bool(outs[-1])
            self.scaler.update(finite)
            if not finite:
                self.steps -= 1  # a skipped step: the optimizer's step count does not advance (as GradScaler)
        for k, n in enumerate(names):
            dict.__setitem__(self.parameters, n, outs[1 + k])
        at = 1 + len(names)
        for per in self.optimizer_states:
            per[:] = outs[at: at + len(per)]
            at += len(per)
        for n in list(self.buffers):
            dict.__setitem__(self.buffers, n, outs[at])
            at += 1
        return float(outs[0])


def from_torch(module, example_inputs, opset=15):
    """Imports a PyTorch module for training: exported through ONNX in training
    mode, so its batch norms stay (kiln.graph.from_torch exports in eval mode,
    where the exporter folds each batch norm into the convolution before it,
    and drops the dropouts). kiln draws its own dropout masks, so a model with
    dropout trains like PyTorch's in distribution, not step by step."""
    import io

    import torch

    args = tuple(example_inputs) if isinstance(example_inputs, (list, tuple)) else (example_inputs,)
    args = tuple(torch.from_numpy(_np.ascontiguousarray(a)) if isinstance(a, _np.ndarray) else a for a in args)
    names = [f"input{i}" for i in range(len(args))]
    buf = io.BytesIO()
    was_training = module.training
    saved = {k: v.detach().clone() for k, v in module.state_dict().items()}
    try:
        with torch.no_grad():
            torch.onnx.export(module, args, buf, opset_version=int(opset), input_names=names,
                              training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    finally:
        module.train(was_training)
    data = _restore_buffers(buf.getvalue(), module, saved)
    return _kg.from_onnx(data, shapes={n: tuple(a.shape) for n, a in zip(names, args)})


def _restore_buffers(data, module, saved):
    """Tracing ran the module once in train mode, moving its batch norms' running
    statistics, and the export holds the moved values: put the module and the
    exported buffers back as they were. Without the onnx package the module
    keeps the moved values, so that it and the export still agree."""
    try:
        import onnx
        from onnx import numpy_helper
    except ImportError:
        return data
    buffers = {name for name, _ in module.named_buffers()}
    model = onnx.load_from_string(data)
    for init in model.graph.initializer:
        if init.name in buffers and init.name in saved:
            init.CopyFrom(numpy_helper.from_array(saved[init.name].cpu().numpy(), init.name))
    module.load_state_dict(saved)
    return model.SerializeToString()


def compile(model, loss="cross_entropy", optimizer=None, target="llvm", target_shape=None, seed=0, memory_limit=None,
            segments=None, precision=None, loss_scale=None, db=None, layout=True):
    """Compiles one training step of `model` (a kiln.graph.Graph with one output).

    loss: "cross_entropy" (the output is logits [batch, classes]; the target
    is int64 class indices [batch]), "mse" (the target has the output's shape,
    or `target_shape`), or None (the model's scalar output is the loss).
    optimizer: SGD, Adam or AdamW (default SGD(lr=0.01)).
    seed: the dropout masks' seed (each step draws new masks from it and the step number).
    memory_limit: bytes a step may hold (``step.memory()`` reports them); over it, activations are
    recomputed instead of kept (kiln/train/checkpoint.py): the fewest segments that fit are chosen, or a
    KilnError says the least memory any segmentation reached. segments=K forces K segments.
    precision: "bfloat16" or "float16" runs MatMul/Gemm/Conv on values rounded to it with float32
    accumulation, float32 master weights (kiln/train/precision.py). loss_scale: None ("dynamic" for
    float16), "dynamic", a fixed number, or a kiln.train.LossScaler; ``step.scaler`` holds it.
    db: a tuning database: each fused group of the step takes its best record, as kiln.compile's do.
    Tune a step with ``kiln.tune_model(step.graph, db=...)``: its forward, backward and update
    groups are tasks like any model's.
    layout: True (the default) runs the step's convolutions, batch norms, pools and their gradients
    in the blocked layout NCHWc, the weights packed once per step (graph/src/passes/train_layout.cpp);
    False keeps them in NCHW, as kiln.compile(layout=False) does.
    """
    if not isinstance(model, _kg.Graph):
        raise KilnError(f"kiln.train.compile takes a kiln.graph.Graph, got a {type(model).__name__}")
    if len(model.output_names) != 1:
        raise KilnError(f"kiln.train.compile needs a model with one output (the prediction or the loss); this one has {len(model.output_names)}")
    optimizer = optimizer or SGD()
    precision = _prec.check_precision(precision)
    scaler = _prec.scaler_of(loss_scale, precision)
    m = _Lifted(model, precision)
    loss_v, y = loss_value(loss, m.lifted.output_values[0], target_shape)
    batch = m.data + ([y] if y is not None else [])
    scale_v, grads, finite = _step_gradients(loss_v, m, scaler)
    state_names = optimizer.state_names()
    states = [[_kg.make_input(f"{n}.{s}", list(p.shape), p.dtype) for s in state_names] for n, p in zip(m.names, m.params)]
    scalars = Scalars(loss_v.dtype)
    new_params, new_states = optimizer.build(m.params, grads, states, scalars)
    if finite is not None:  # a step with inf/NaN gradients leaves parameters and state as they were
        new_params, new_states = _prec.guarded_update(finite, new_params, m.params, new_states, states)
    seed_fn = (lambda t: seed * 1000000007 + t) if m.seed_v is not None else None  # dropout masks: a new seed per step
    if seed_fn is not None:
        scalars.values.append(m.seed_v)
        scalars.fns.append(seed_fn)
    inputs = batch + m.params + [s for per in states for s in per] + m.buffers + scalars.values
    outputs = [loss_v] + new_params + [s for per in new_states for s in per] + m.lifted.output_values[1:]
    out_names = (["loss"] + [f"new.{n}" for n in m.names] + [f"new.{n}.{s}" for n in m.names for s in state_names]
                 + [f"new.{n}" for n in m.buffer_names])
    if scale_v is not None:
        inputs, outputs, out_names = inputs + [scale_v], outputs + [finite], out_names + ["finite"]
    graph = _kg.make_graph(inputs, outputs, out_names)
    if segments is not None and int(segments) > 1:
        return _checkpointed(m.loss_graph(batch, loss_v, scaler), len(batch), m, optimizer, int(segments), target, seed_fn, scaler, layout)
    exe = _kg.compile(graph, target=target, db=db, quiet=True, layout=layout)
    params_d = Parameters((n, _np.array(v, copy=True)) for n, v in zip(m.names, m.values))
    state_arrays = [[_np.zeros(p.shape, p.dtype) for _ in state_names] for p in m.params]
    buffers_d = Parameters((n, _np.array(v, copy=True)) for n, v in zip(m.buffer_names, m.buffer_values))
    step = TrainStep(exe, graph, len(m.data), y is not None, params_d, state_names, state_arrays, scalars, buffers_d, optimizer, scaler)
    if memory_limit is None or step.memory()["total"] <= memory_limit:
        return step
    return _fit_memory(step, m.loss_graph(batch, loss_v, scaler), len(batch), m, optimizer, int(memory_limit), target, seed_fn, scaler, layout)


class _Lifted:
    """The model with its parameters (and batch-norm buffers, dropout seed) lifted to graph inputs,
    rounded for mixed precision when asked; its input values split by role."""

    def __init__(self, model, precision):
        lifted, self.names, self.values, self.buffer_names, self.buffer_values, self.seed_input = \
            _kg.lift_parameters(model, training=True)
        if not self.names:
            raise KilnError("the model has no trainable parameters (float constants of rank >= 1)")
        self.lifted = _kg.autocast(lifted, precision) if precision else lifted
        n_data, n_params = len(model.input_names), len(self.names)
        ins = self.lifted.input_values
        self.data, self.params = ins[:n_data], ins[n_data: n_data + n_params]
        self.buffers = ins[n_data + n_params: n_data + n_params + len(self.buffer_names)]
        self.seed_v = ins[-1] if self.seed_input else None

    def loss_graph(self, batch, loss_v, scaler=None):
        """The graph a checkpointed step cuts into segments. Inputs: the batch, the dropout seed (when
        there is one), the parameters, the buffers (batch-norm running statistics), and the loss scale
        when `scaler` is given. Outputs: the objective the backward pass differentiates (the loss, or
        loss * scale), then the loss itself when scaled, then the buffers' new values.
        A segment's recomputed forward gets the step's seed again, so it draws the masks its first
        forward drew; the buffers' new values are those of the first forward (the recomputation's
        are not read), so the running statistics advance once a step."""
        seed = [self.seed_v] if self.seed_v is not None else []
        ins, outs = batch + seed + self.params + self.buffers, [loss_v]
        names = ["loss"]
        if scaler is not None:
            scale_v = _kg.make_input(LOSS_SCALE_INPUT, [], loss_v.dtype)
            ins, outs, names = ins + [scale_v], [op("Mul", loss_v, scale_v), loss_v], ["scaled_loss", "loss"]
        new_buffers = self.lifted.output_values[1:]
        return _kg.make_graph(ins, outs + new_buffers, names + [f"new.{n}" for n in self.buffer_names])


def _step_gradients(loss_v, m, scaler):
    """(the loss-scale input or None, the parameters' gradients, the all-finite flag or None)."""
    if scaler is not None:
        scale_v = _kg.make_input(LOSS_SCALE_INPUT, [], loss_v.dtype)
        grads, finite = _prec.scaled_gradients(loss_v, m.params, m.names, scale_v)
        return scale_v, grads, finite
    grads = [g if g is not None else _kg.make_constant(f"zero_grad_{n}", _np.zeros(p.shape, p.dtype))
             for n, p, g in zip(m.names, m.params, _kg.gradients(loss_v, m.params))]
    return None, grads, None


def _checkpointed(loss_graph, n_batch, m, optimizer, segments, target, seed_fn=None, scaler=None, layout=True):
    if not hasattr(_kiln, "dist"):
        raise KilnError("recomputing activations needs kiln's distribution pass (its balanced cut); this kiln was built without it")
    return _ck.compile_checkpointed(loss_graph, n_batch, m, optimizer, segments, target, seed_fn, scaler, layout)


def _fit_memory(step, loss_graph, n_batch, m, optimizer, limit, target, seed_fn=None, scaler=None, layout=True):
    """The fewest segments whose checkpointed step fits `limit` bytes (2, 3, ... 8, then doubling)."""
    tried = [(1, step.memory()["total"])]
    num_ops = len(loss_graph.op_types())  # a segment holds at least one operator
    k = 2
    while k <= num_ops:
        ck = _checkpointed(loss_graph, n_batch, m, optimizer, k, target, seed_fn, scaler, layout)
        total = ck.memory()["total"]
        tried.append((k, total))
        if total <= limit:
            return ck
        if len(tried) >= 4 and total >= tried[-2][1] >= tried[-3][1]:
            break  # more segments stopped helping (kept boundaries outgrow the activations saved)
        k = k + 1 if k < 8 else k * 2
    best_k, best = min(tried, key=lambda t: t[1])
    raise KilnError(f"memory_limit={limit} bytes cannot be met: the least a step needs is {best} bytes ({best_k} segment"
                    f"{'s' if best_k > 1 else ''}; tried " + ", ".join(f"{k}: {m}" for k, m in tried) +
                    "); raise the limit or use a smaller batch")
