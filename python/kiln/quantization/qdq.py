"""Walking a kiln graph and rebuilding it with QuantizeLinear/DequantizeLinear pairs.

The plan names what a quantized model computes in 8 bits: every Conv, MatMul
and Gemm reads its float inputs through a Q/DQ pair (activations uint8
asymmetric, constant weights int8 symmetric, per output channel when asked,
a bias int32 at the input's scale times the weight's), and its output is
quantized too -- after the Relu or Clip (ReLU6) when that is its only reader, so that the
pair an int8 kernel fuses carries the activation, as ONNX Runtime's
quantizer places it.
"""
import numpy as _np

from .._ffi import KilnError, _kiln
from . import ranges as _r

_g = _kiln.graph
TARGET_OPS = ("Conv", "MatMul", "Gemm")
F32 = "float32"


def walk(graph):
    """The graph's nodes in topo order (graph inputs first): dicts of id, kind, name, op, attrs, inputs, types, data."""
    w = _g.graph_nodes(graph)
    for n in w["nodes"]:
        if n["kind"] == "op" and n["fused"]:
            raise KilnError(f"kiln.quantize takes a graph before fusion; '{n['name']}' is a fused group (quantize the model, then compile it)")
    return w


def _readers(w):
    """(id, index) -> the ids of the nodes that read it; a graph output counts as a reader (None)."""
    readers = {}
    for n in w["nodes"]:
        for i in n["inputs"]:
            if i is not None:
                readers.setdefault(tuple(i), []).append(n["id"])
    for o in w["outputs"]:
        readers.setdefault(tuple(o), []).append(None)
    return readers


def _weight_axis(n, pos, per_channel, ndim):
    """The per-channel axis of a constant operand `pos` of target node n (None: per tensor)."""
    if not per_channel:
        return None
    if n["op"] == "Conv" and pos == 1:
        return 0  # [K, C/group, kh, kw]: one scale per output channel
    if n["op"] == "MatMul" and pos == 1 and ndim == 2:
        return 1  # [K, N]: per column
    if n["op"] == "Gemm" and pos == 1:
        return 0 if n["attrs"].get("transB", 0) else 1
    return None


class Plan:
    """What to quantize: the activation values (keys (id, index)) to observe, and per target node its weights."""

    def __init__(self, w, per_channel):
        self.w, self.nodes = w, w["nodes"]
        self.activations = []  # keys in topo order
        self.targets = {}  # node id -> {"act": [(pos, key)], "weights": [(pos, axis)], "bias": pos or None}
        readers = _readers(w)
        seen = set()

        def activation(key):
            if key not in seen:
                seen.add(key)
                self.activations.append(key)

        for n in self.nodes:
            if n["kind"] != "op" or n["op"] not in TARGET_OPS or not self._quantizable(n):
                continue
            t = {"act": [], "weights": [], "bias": None}
            for pos, i in enumerate(n["inputs"][:2]):
                src = self.nodes[i[0]]
                if src["kind"] == "constant":
                    t["weights"].append((pos, _weight_axis(n, pos, per_channel, src["data"].ndim)))
                else:
                    t["act"].append((pos, tuple(i)))
                    activation(tuple(i))
            t["bias"] = self._bias_position(n, t)
            out = (n["id"], 0)
            after = readers.get(out, [])
            if len(after) == 1 and after[0] is not None and self.nodes[after[0]]["op"] in ("Relu", "Clip"):
                out = (after[0], 0)  # the activation is what the next int8 op reads, and what the kernel's epilogue gives
            if None not in readers.get(out, []):  # a model's result stays float: its kernel dequantizes in the epilogue
                activation(out)
            self.targets[n["id"]] = t
        if not self.targets:
            raise KilnError("kiln.quantize: the model has no Conv, MatMul or Gemm on float32 tensors to quantize "
                            f"(its operators: {', '.join(sorted({n['op'] for n in self.nodes if n['kind'] == 'op'}))})")

    def _quantizable(self, n):
        ins = n["inputs"]
        if len(ins) < 2 or ins[0] is None or ins[1] is None or n["types"][0][1] != F32:
            return False
        if n["op"] == "Gemm" and (n["attrs"].get("alpha", 1.0) != 1.0 or n["attrs"].get("transA", 0)):
            return False
        return all(self.nodes[i[0]]["types"][i[1]][1] == F32 for i in ins[:2])

    def _bias_position(self, n, t):
        """Input 2 of a Conv, or of a Gemm with beta 1 and a 1-D C, when it is a float32 constant and B is the constant weight."""
        ins = n["inputs"]
        if len(ins) < 3 or ins[2] is None or [p for p, _ in t["weights"]] != [1] or len(t["act"]) != 1:
            return None
        src = self.nodes[ins[2][0]]
        if src["kind"] != "constant" or src["data"].dtype != _np.float32 or src["data"].ndim != 1:
            return None
        if n["op"] == "Gemm" and n["attrs"].get("beta", 1.0) != 1.0:
            return None
        return 2


def rebuild(w, on_value=None, on_op=None):
    """The graph of walk `w` made again node by node: on_value(key, value) may replace each output
    (for every reader), on_op(node, inputs) each operator's inputs. Returns (inputs, values by key)."""
    vals, inputs = {}, []
    for n in w["nodes"]:
        if n["kind"] == "input":
            shape, dtype = n["types"][0]
            outs = [_g.make_input(n["name"], list(shape), dtype)]
            inputs.append(outs[0])
        elif n["kind"] == "constant":
            outs = [_g.make_constant(n["name"], n["data"])]
        else:
            ins = [vals[tuple(i)] if i is not None else None for i in n["inputs"]]
            if on_op:
                ins = on_op(n, ins)
            outs = _g.make_op(n["op"], ins, dict(n["attrs"]), n["name"])
        for k, v in enumerate(outs):
            key = (n["id"], k)
            vals[key] = on_value(key, v) if on_value else v
    return inputs, vals


def _const(name, a):
    return _g.make_constant(name, _np.ascontiguousarray(a))


def _qdq(v, name, scale, zp, axis=None):
    """Quantize then dequantize v (a float32 Value) at scale/zp."""
    s, z = _const(f"{name}.scale", scale), _const(f"{name}.zero_point", zp)
    attrs = {} if axis is None else {"axis": axis}
    q = _g.make_op("QuantizeLinear", [v, s, z], attrs, f"{name}.quantize")[0]
    return _g.make_op("DequantizeLinear", [q, s, z], attrs, f"{name}.dequantize")[0]


def _dequantized_constant(name, q, scale, zp, axis):
    attrs = {} if axis is None or _np.ndim(scale) == 0 else {"axis": axis}
    ins = [_const(f"{name}.quantized", q), _const(f"{name}.scale", scale)]
    if zp is not None:
        ins.append(_const(f"{name}.zero_point", zp))
    return _g.make_op("DequantizeLinear", ins, attrs, f"{name}.dequantize")[0]


def quantized_graph(plan, params):
    """The graph with Q/DQ pairs: params maps each activation key to (scale, zero point)."""
    nodes = plan.nodes

    def on_value(key, v):
        if key not in params:
            return v
        return _qdq(v, f"{nodes[key[0]]['name']}.{key[1]}" if key[1] else nodes[key[0]]["name"], *params[key])

    def on_op(n, ins):
        t = plan.targets.get(n["id"])
        if t is None:
            return ins
        ins = list(ins)
        w_scale = None
        for pos, axis in t["weights"]:
            src = nodes[n["inputs"][pos][0]]
            scale, q = _r.weight_params(src["data"], axis)
            zp = _np.zeros(scale.shape, _np.int8)
            ins[pos] = _dequantized_constant(f"{n['name']}.w{pos}", q, scale, zp, axis)
            w_scale = scale
        if t["bias"] is not None:
            (_, act_key), = t["act"]
            b = nodes[n["inputs"][2][0]]["data"].astype(_np.float64)
            scale = (params[act_key][0].astype(_np.float64) * w_scale.astype(_np.float64)).astype(_np.float32)
            scale = _np.broadcast_to(scale, b.shape).copy() if scale.ndim else scale
            qb = _np.clip(_np.round(b / scale.astype(_np.float64)), -2 ** 31 + 1, 2 ** 31 - 1).astype(_np.int32)
            ins[2] = _dequantized_constant(f"{n['name']}.bias", qb, scale, None, 0)
        return ins

    inputs, vals = rebuild(plan.w, on_value, on_op)
    outputs = [vals[tuple(o)] for o in plan.w["outputs"]]
    return _g.make_graph(inputs, outputs, list(plan.w["output_names"]))
