"""Test helpers under TVM's names (``tvm.testing.assert_allclose``)."""
import numpy as np


def _as_numpy(x):
    # kiln arrays (and TVM-style arrays) convert through .numpy(); the rest through numpy.
    return x.numpy() if hasattr(x, "numpy") and not isinstance(x, np.ndarray) else np.asarray(x)


def assert_allclose(actual, desired, rtol=1e-7, atol=1e-7):
    """Raises AssertionError unless ``actual`` and ``desired`` agree elementwise
    within ``atol + rtol * |desired|`` and have the same shape (as TVM's, which
    wraps numpy's with a default ``atol``). Takes kiln arrays or anything numpy does."""
    actual, desired = _as_numpy(actual), _as_numpy(desired)
    np.testing.assert_allclose(actual.shape, desired.shape)
    np.testing.assert_allclose(actual, desired, rtol=rtol, atol=atol, verbose=True)


__all__ = ["assert_allclose"]
