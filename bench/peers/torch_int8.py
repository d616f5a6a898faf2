"""PyTorch's own int8 as a peer: torch.ao.quantization static post-training quantization of the same float
model kiln quantizes, run by PyTorch's quantized CPU engine in a process of its own.

The engine is fbgemm where this PyTorch has it, else x86 (fbgemm plus oneDNN, PyTorch >= 1.13 builds),
else onednn (oneDNN's int8 convolutions on VNNI / AMX), else qnnpack; ENGINES gives the order and the
peer's label names the engine it ran and the ones this build offers. The model goes through FX graph mode
(prepare_fx / convert_fx, so torchvision's residual adds are quantized too) with kiln.quantize's method:
minmax observers, uint8 activations, per-channel symmetric int8 weights (the engine's default mapping for
the ops with fixed ranges), calibrated on the very batches kiln.quantize saw: the bench writes them, with
the input, to an .npz file whose path the spec carries. The int8 logits are written beside it (out.npy) for the bench to compare.

  torch_int8.py serve SPEC     a peer worker (SPEC: {"kind": "int8_model", "impl": "auto" or an engine,
                               "args": [name, image_size, npz_path], "threads": T})

TorchInt8Peer starts one in the environment launcher.py gives every peer.
"""
import copy
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import launcher  # noqa: E402
import peer_kernels  # noqa: E402
import torch_models  # noqa: E402

ENGINES = ("fbgemm", "x86", "onednn", "qnnpack")


def engine_for(impl, supported):
    """The quantized engine to run: `impl` itself, or for "auto" the first of ENGINES this build supports."""
    if impl != "auto":
        if impl not in supported:
            raise ValueError(f"this PyTorch has no quantized engine {impl!r}; it has {', '.join(supported)}")
        return impl
    for e in ENGINES:
        if e in supported:
            return e
    raise ValueError(f"this PyTorch has no int8 CPU engine (it offers {', '.join(supported) or 'none'})")


def describe():
    """One line on the PyTorch int8 peer's setup: version, the engines offered and the one "auto" runs."""
    import torch
    supported = [e for e in torch.backends.quantized.supported_engines if e != "none"]
    try:
        chosen = engine_for("auto", supported)
    except ValueError as e:
        return f"PyTorch {torch.__version__} int8: {e}"
    absent = "" if chosen == "fbgemm" else " (fbgemm is not in this build)"
    return (f"PyTorch {torch.__version__} int8 on {chosen}{absent}, engines {'/'.join(supported)}: torch.ao.quantization "
            "FX static PTQ (minmax, per-channel weights) of the same float model on kiln's calibration batches, its own process")


def quantize(module, example, calib, engine):
    """FX static post-training quantization of `module` for `engine`, calibrated on `calib` (numpy batches)."""
    import torch
    from torch.ao.quantization import MinMaxObserver, PerChannelMinMaxObserver, QConfig, QConfigMapping, get_default_qconfig_mapping
    from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx
    torch.backends.quantized.engine = engine
    # kiln.quantize's method (minmax, per-channel weights) rather than the engine's default histogram observer:
    # the same quantization on both sides (the histogram's clipping left random-weight logits 20% off float).
    qc = QConfig(activation=MinMaxObserver.with_args(dtype=torch.quint8),
                 weight=PerChannelMinMaxObserver.with_args(dtype=torch.qint8, qscheme=torch.per_channel_symmetric))
    mapping = QConfigMapping().set_global(qc)
    # The engine's default names each conv and linear type with its histogram qconfig too: only its entries of
    # another kind (fixed ranges for sigmoid / tanh / softmax, reshapes reusing their input's) are kept.
    for op, q in get_default_qconfig_mapping(engine).object_type_qconfigs.items():
        if q is not None and type(q.activation()).__name__ != "HistogramObserver":
            mapping.set_object_type(op, q)
    prepared = prepare_fx(copy.deepcopy(module).eval(), mapping, example_inputs=(example,))
    with torch.no_grad():
        for b in calib:
            prepared(torch.from_numpy(b))
    return convert_fx(prepared)


def make(kind, impl, args, threads, paths=None):
    """worker.py's kernel: the quantized model on the bench's input; its logits saved beside the npz."""
    import numpy as np
    if kind != "int8_model":
        raise ValueError(f"torch_int8 serves kind 'int8_model', not {kind!r}")
    torch = peer_kernels._torch(threads)
    name, image_size, data = args[0], int(args[1]), np.load(args[2])
    module, _ = torch_models.build(name, image_size)
    x = torch.from_numpy(data["input"])
    calib = [data[k] for k in sorted(data.files) if k.startswith("calib")]
    supported = [e for e in torch.backends.quantized.supported_engines if e != "none"]
    engine = engine_for(impl, supported)
    q = quantize(module, x, calib, engine)

    def run():
        with torch.no_grad():
            return q(x)
    np.save(os.path.join(os.path.dirname(os.path.abspath(args[2])), "out.npy"), run().numpy())
    why = "" if engine == "fbgemm" else f", fbgemm absent: engines {'/'.join(supported)}"
    text = f"int8 {engine}{why}; FX static PTQ minmax per-channel, {len(calib)} calib batches"
    return peer_kernels.Kernel(run, peer_kernels._torch_label(torch, text, threads), (5, 1.0), None)


class TorchInt8Peer(launcher.Peer):
    """PyTorch int8 on model `name`; input and calib: numpy arrays. .output: its logits (numpy)."""

    def __init__(self, name, image_size, x, calib, threads, impl="auto", timeout=600):
        import tempfile

        import numpy as np
        self._dir = tempfile.TemporaryDirectory(prefix="kiln_torch_int8_")
        data = os.path.join(self._dir.name, "data.npz")
        np.savez(data, input=x, **{f"calib{i:03d}": b for i, b in enumerate(calib)})
        spec = json.dumps({"kind": "int8_model", "impl": impl, "args": [name, int(image_size), data], "threads": int(threads)})
        try:
            self._start([sys.executable, os.path.abspath(__file__), "serve", spec], torch_models.peer_env(threads),
                        f"PyTorch int8 ({impl})", timeout)
            self.output = np.load(os.path.join(self._dir.name, "out.npy"))
        except launcher.PeerError:
            self._dir.cleanup()
            raise

    def close(self):
        super().close()
        self._dir.cleanup()


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "serve":
        import worker
        return worker.serve_module(make, sys.argv[2])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
