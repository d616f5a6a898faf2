"""Loads the native extension ``_kiln``.

Installed with ``cmake --install``, the extension sits inside this package
(``kiln/_kiln*.so``, next to the kiln shared libraries). In a build tree it is
a top-level module in ``<build>/python``, found through ``PYTHONPATH``.
"""
import importlib
import importlib.util

if importlib.util.find_spec(__package__ + "._kiln") is not None:
    _kiln = importlib.import_module(__package__ + "._kiln")
else:
    try:
        _kiln = importlib.import_module("_kiln")
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError(
            "kiln: cannot find the native extension _kiln. Build it with "
            "`ninja -C build _kiln` and put build/python on PYTHONPATH, or install "
            "kiln with `cmake --install build --component python --prefix ~/.local`."
        ) from err

KilnError = _kiln.KilnError
InternalError = _kiln.InternalError
