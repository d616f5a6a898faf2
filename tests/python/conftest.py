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


@pytest.fixture(scope="session")
def host_bed():
    """Two "hosts" (network namespaces, scripts/hosts.sh) for the session; removed at its end, failed tests or not
    (a session killed outright leaves them to the next up, which removes the old bed first)."""
    from hostbed import Bed, BedUnavailable
    bed = Bed(2)
    try:
        bed.up()
    except BedUnavailable as e:
        pytest.skip(f"no two-host test bed on this machine: {e}")
    try:
        yield bed
    finally:
        bed.down()


@pytest.fixture
def launcher(request):
    """How mpirun places the ranks: "local" (one host) or "hosts" (across host_bed over TCP);
    tests take it with @pytest.mark.parametrize("launcher", [...], indirect=True)."""
    from hostbed import Launcher
    kind = getattr(request, "param", "local")
    if kind == "local":
        return Launcher()
    assert kind == "hosts", kind
    return Launcher(request.getfixturevalue("host_bed"))
