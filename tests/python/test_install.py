"""The documented installation: `cmake --install <build> --component python
--prefix P` gives a self-contained package that works without PYTHONPATH
pointing into the source or build tree."""
import os
import shutil
import subprocess
import sys
import sysconfig

import pytest

import kiln._ffi as ffi

SCRIPT = r"""
import numpy as np, kiln
from kiln import te
A = te.placeholder((64, 64), name="A")
B = te.compute((64, 64), lambda i, j: A[i, j] * 3.0, name="B")
s = te.create_schedule(B)
s[B].parallel(B.op.axis[0])
s[B].vectorize(B.op.axis[1])
a = np.random.rand(64, 64).astype("float32")
b = np.empty_like(a)
kiln.build(s, [A, B])(a, b)
assert np.allclose(b, 3 * a)
print(kiln.__file__)
print(kiln._ffi._kiln.__file__)
"""


def build_dir():
    """The build tree the extension was loaded from, or None when it was installed."""
    d = os.path.dirname(os.path.dirname(os.path.abspath(ffi._kiln.__file__)))
    return d if os.path.exists(os.path.join(d, "CMakeCache.txt")) else None


@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake is not installed")
def test_cmake_install_gives_a_self_contained_package(tmp_path):
    build = build_dir()
    if build is None:
        pytest.skip("kiln was not loaded from a build tree")
    prefix = tmp_path / "prefix"
    subprocess.run(["cmake", "--install", build, "--component", "python", "--prefix", str(prefix)],
                   check=True, capture_output=True, text=True, timeout=300)
    version = sysconfig.get_python_version()
    site = prefix / "lib" / f"python{version}" / "site-packages"
    assert (site / "kiln" / "__init__.py").exists()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(site)
    proc = subprocess.run([sys.executable, "-c", SCRIPT], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    init, ext = proc.stdout.split()
    assert init.startswith(str(site)) and ext.startswith(str(site / "kiln"))
