"""tutorials/06_data_parallel.py under mpirun -np 2, on one host and across two (the test bed): the data-parallel loss curve follows the one-process one and the PNG is written."""
import os
import re
import shutil
import subprocess
import sys

import pytest

import kiln
from hostbed import python_env

pytestmark = pytest.mark.skipif(not hasattr(kiln, "dist"), reason="kiln was built without the distribution pass")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TUTORIAL = os.path.join(ROOT, "tutorials", "06_data_parallel.py")
MPIRUN = shutil.which("mpirun")


@pytest.mark.parametrize("launcher", ["local", "hosts"], indirect=True)
def test_data_parallel_tutorial_on_two_ranks(tmp_path, launcher):
    if MPIRUN is None:
        pytest.skip("mpirun is not installed (apt-get install openmpi-bin libopenmpi-dev); the MPI tests need it")
    if not kiln.dist.mpi_built():
        pytest.skip("kiln was built without MPI (libopenmpi-dev missing at configure time)")
    env = python_env()
    png = tmp_path / "curves.png"
    cmd = launcher.command(2, env) + [sys.executable, TUTORIAL, "--steps", "40", "--out", str(png)]
    p = subprocess.run(cmd, cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=120)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-4000:]
    assert "2 rank(s) (mpi)" in out and "parameters identical on all 2 rank(s)" in out, out[-4000:]
    final = re.search(r"final loss: data parallel ([\d.]+), one process ([\d.]+)", out)
    assert final, out[-4000:]
    dp, one = float(final.group(1)), float(final.group(2))
    assert abs(dp - one) <= 1e-5 * max(1.0, one), out[-4000:]
    diff = float(re.search(r"max loss difference over 40 steps: (\S+)", out).group(1))
    assert diff <= 1e-4, out[-4000:]
    assert png.exists() and png.stat().st_size > 1000 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
