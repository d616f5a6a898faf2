"""Model libraries: a model compiled and exported by ``Executor.export_library``,
loaded and run by kiln's runtime alone (no compiler); and the feed both it and
the graph executors take (a list in input order or a dict by name)."""
import os

from .._ffi import KilnError, _kiln


def model_feed(names, inputs):
    """A model's inputs in input order from a list or a dict by name; torch tensors and other
    DLPack producers become numpy views of their memory (no copy)."""
    import numpy as np
    if isinstance(inputs, dict):
        missing = [n for n in names if n not in inputs]
        extra = [n for n in inputs if n not in names]
        if missing or extra:
            raise KilnError(f"model inputs are {names}; missing {missing}, unknown {extra}")
        inputs = [inputs[n] for n in names]
    feed = []
    for a in inputs:
        if hasattr(a, "detach"):  # a torch tensor: a numpy view of its (CPU) memory
            a = a.detach().cpu().numpy()
        elif hasattr(a, "__dlpack__") and not isinstance(a, (np.ndarray, _kiln.NDArray)):
            a = np.from_dlpack(a)
        feed.append(a)
    return feed


class LoadedModel:
    """A model exported by ``Executor.export_library``, run by kiln's runtime
    alone (no compiler). Call it like the executor: ``m(x)`` or ``m.run([x])`` /
    ``m.run({"x": x})`` returns a list of numpy arrays; inputs are checked for
    count, dtype and shape (:class:`kiln.KilnError` names the input)."""

    def __init__(self, native):
        self._native = native
        self.inputs = native.inputs    # dicts: name, shape, dtype
        self.outputs = native.outputs

    @property
    def input_names(self):
        return [t["name"] for t in self.inputs]

    @property
    def input_types(self):
        """(shape, dtype) per input, as ``Model.input_types``."""
        return [(t["shape"], t["dtype"]) for t in self.inputs]

    @property
    def output_names(self):
        return [t["name"] for t in self.outputs]

    @property
    def num_kernels(self):
        return self._native.num_kernels

    @property
    def shape_vars(self):
        """A model compiled with symbolic dims: its shape variables, name -> (lo, hi) range or None ({} if static).
        Its inputs' shapes name them where a dimension is symbolic (``("batch", 3, 224, 224)``)."""
        return self._native.shape_vars

    def arena_bytes(self, shapes=None):
        """The working memory (bytes) a run at these shape values plans (``{"seq": 128}``; none for a static model)."""
        return self._native.arena_bytes(dict(shapes or {}))

    def __call__(self, *inputs):
        return self.run(list(inputs))

    def run(self, inputs):
        """Runs the model; `inputs` is a list in input order or a dict by input name. Returns a list of numpy arrays."""
        return self._native.run(model_feed(self.input_names, inputs))

    def __repr__(self):
        ins = ", ".join(f"{t['name']}: {t['dtype']}{list(t['shape'])}" for t in self.inputs)
        return f"LoadedModel(inputs=[{ins}], kernels={self.num_kernels})"


def load_model(path):
    """Loads a model library written by ``Executor.export_library`` (weights
    embedded, or in ``<path>.weights`` beside it). The library's checksum is
    checked before it is loaded, and a weights file must be the one written by
    the same export, intact: otherwise :class:`kiln.KilnError` says which."""
    return LoadedModel(_kiln.ModelRunner.load(os.fspath(path)))
