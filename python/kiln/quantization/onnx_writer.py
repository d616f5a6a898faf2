"""A kiln graph written as an ONNX model (opset 13), for other runtimes to run what kiln.quantize made.

kiln's graph operators are ONNX's, with ONNX's attributes, so a node is
written as it is; attributes the opset's schema does not list (kiln's own
bookkeeping) and empty lists (ONNX's "default") are left out. kiln's own
operators (``kiln.*``, made by kiln's passes) have no ONNX form: quantize a
model before compiling it.
"""
import numpy as _np

from .._ffi import KilnError
from .qdq import walk

OPSET = 13


def _elem_type(dtype):
    from onnx import mapping  # onnx 1.12 (Debian's): helper.np_dtype_to_tensor_dtype came later

    return mapping.NP_TYPE_TO_TENSOR_TYPE[_np.dtype(dtype)]


def _value_info(name, shape, dtype):
    from onnx import helper

    return helper.make_tensor_value_info(name, _elem_type(dtype), [d if isinstance(d, (int, str)) else str(d) for d in shape])


def _attributes(op, attrs):
    from onnx import defs

    try:
        known = defs.get_schema(op, OPSET).attributes
    except Exception:  # onnx raises SchemaError
        raise KilnError(f"to_onnx: '{op}' has no ONNX opset {OPSET} form (kiln's own operators come from its passes: "
                        "write the model before compiling it)") from None
    out = {}
    for k, v in attrs.items():
        if k not in known or (isinstance(v, (list, tuple)) and len(v) == 0):
            continue
        if isinstance(v, tuple):
            if not all(isinstance(d, int) for d in v):
                raise KilnError(f"to_onnx: attribute '{k}' of {op} holds a symbolic shape {v}, which ONNX attributes cannot")
            v = list(v)
        out[k] = v
    return out


def to_onnx(graph, producer="kiln"):
    """The graph as an ``onnx.ModelProto`` (opset 13): inputs, constants as initializers, one node per operator."""
    from onnx import helper, numpy_helper

    w = walk(graph)
    used, names = set(), {}

    def unique(base):
        n, k = base or "t", 1
        while n in used:
            n, k = f"{base}_{k}", k + 1
        used.add(n)
        return n

    # A per-tensor scale or zero point is a scalar in ONNX (ONNX Runtime's QLinearAdd fusion insists);
    # kiln holds it as one value of shape [1].
    qdq_params = {tuple(n["inputs"][k]) for n in w["nodes"] if n["kind"] == "op" and n["op"] in ("QuantizeLinear", "DequantizeLinear")
                  for k in (1, 2) if k < len(n["inputs"]) and n["inputs"][k] is not None}
    inputs, inits, nodes = [], [], []
    for n in w["nodes"]:
        if n["kind"] == "input":
            names[(n["id"], 0)] = unique(n["name"])
            inputs.append(_value_info(names[(n["id"], 0)], *n["types"][0]))
        elif n["kind"] == "constant":
            names[(n["id"], 0)] = unique(n["name"])
            data = _np.ascontiguousarray(n["data"])
            if (n["id"], 0) in qdq_params and data.shape == (1,):
                data = data.reshape(())
            inits.append(numpy_helper.from_array(data, names[(n["id"], 0)]))
        else:
            outs = []
            for k in range(len(n["types"])):
                names[(n["id"], k)] = unique(n["name"] if len(n["types"]) == 1 else f"{n['name']}:{k}")
                outs.append(names[(n["id"], k)])
            ins = [names[tuple(i)] if i is not None else "" for i in n["inputs"]]
            nodes.append(helper.make_node(n["op"], ins, outs, name=unique(f"node.{n['name']}"), **_attributes(n["op"], n["attrs"])))
    outputs = []
    for k, o in enumerate(w["outputs"]):
        src = w["nodes"][o[0]]
        want = w["output_names"][k] if k < len(w["output_names"]) and w["output_names"][k] else f"output{k}"
        name = names[tuple(o)]
        if name != want and want not in used:  # the graph's output name, through an Identity
            used.add(want)
            nodes.append(helper.make_node("Identity", [name], [want], name=unique(f"node.{want}")))
            name = want
        outputs.append(_value_info(name, *src["types"][o[1]]))
    g = helper.make_graph(nodes, "kiln_graph", inputs, outputs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)], producer_name=producer)
