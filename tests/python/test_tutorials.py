"""Runs every tutorial (tutorials/*.py) as a script, in its small size."""
import glob
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TUTORIALS = sorted(glob.glob(os.path.join(ROOT, "tutorials", "*.py")))


@pytest.mark.parametrize("path", TUTORIALS, ids=[os.path.basename(p) for p in TUTORIALS])
def test_tutorial_runs(path):
    env = dict(os.environ)
    # The child finds kiln where this process found it (conftest may have extended sys.path).
    import kiln
    import kiln._ffi as ffi
    paths = [os.path.dirname(os.path.dirname(kiln.__file__)), os.path.dirname(ffi._kiln.__file__)]
    env["PYTHONPATH"] = os.pathsep.join(paths + [env.get("PYTHONPATH", "")])
    env["KILN_TUTORIAL_SMALL"] = "1"
    proc = subprocess.run([sys.executable, path, "--small"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{os.path.basename(path)} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
