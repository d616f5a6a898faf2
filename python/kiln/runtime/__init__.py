"""kiln's runtime: compiled kernel and model libraries (module.py) and kiln's arrays (ndarray.py)."""
from .module import Module, TimeResult, load, model_feed, LoadedModel, load_model, KilnError
from .ndarray import NDArray, Device, cpu, device, array, empty, from_dlpack
