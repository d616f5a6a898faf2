"""pytest setup for kiln's Python tests.

The test command sets PYTHONPATH to python/ and <build>/python. When it is
not set (a developer running `pytest tests/python` by hand), look for the
extension in the usual build folders so the tests still find it.
"""
import glob
import os
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _ensure_importable():
    try:
        import kiln  # noqa: F401
        return
    except ImportError:
        pass
    sys.path.insert(0, os.path.join(ROOT, "python"))
    for build in [os.environ.get("KILN_BUILD_DIR", "build"), "build", "build-py"]:
        path = os.path.join(ROOT, build, "python")
        if glob.glob(os.path.join(path, "_kiln*.so")):
            sys.path.insert(1, path)
            break


_ensure_importable()


@pytest.fixture
def rng():
    return np.random.default_rng(0)
