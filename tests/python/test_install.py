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


@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake is not installed")
def test_installed_kiln_tune_finds_its_peers_and_plot_script(tmp_path):
    """kiln-tune from `cmake --install` runs the peers and the curve plot from the installed copy, not the sources."""
    build = build_dir()
    if build is None or not os.path.exists(os.path.join(build, "tuner", "kiln-tune")):
        pytest.skip("kiln-tune was not built here")
    prefix = tmp_path / "prefix"
    subprocess.run(["cmake", "--install", build, "--prefix", str(prefix)], check=True, capture_output=True, text=True, timeout=300)
    kiln_tune = prefix / "bin" / "kiln-tune"
    assert kiln_tune.exists()
    # A Python that logs what it runs: the launcher and the plot script must come from the prefix.
    log = tmp_path / "python.log"
    wrapper = tmp_path / "python"
    wrapper.write_text(f'#!/bin/sh\necho "$1" >> {log}\nexec /usr/bin/python3 "$@"\n')
    wrapper.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KILN_") and k != "PYTHONPATH"}
    env["KILN_PYTHON"] = str(wrapper)
    png = tmp_path / "curve.png"
    proc = subprocess.run([str(kiln_tune), "matmul", "32", "32", "32", "--trials", "4", "--batch", "4", "--threads", "1",
                           "--quiet", "--db", str(tmp_path / "t.db"), "--curve", str(png)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "<- best peer" in proc.stdout and "numpy OpenBLAS" in proc.stdout, proc.stdout
    assert png.exists() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    scripts = log.read_text().split()
    assert any(s.endswith("launcher.py") for s in scripts) and any(s.endswith("plot_curve.py") for s in scripts), scripts
    assert all(s.startswith(str(prefix)) for s in scripts), scripts
