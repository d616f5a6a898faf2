"""Exporting a module as a shared library: the round trip through
Module.export_library and kiln.runtime.load, and the errors of a missing
compiler and of a library for CPU features the host lacks."""
import numpy as np
import pytest

import kiln
from kiln import te
from kiln.runtime import load


def build_scaled_add(target="llvm", name="scaled_add"):
    """C = tanh(A) * 3 + B over a symbolic n, outer loop parallel."""
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute((n,), lambda i: te.tanh(A[i]) * 3.0 + B[i], name="C")
    s = te.create_schedule(C)
    outer, inner = s[C].split(C.op.axis[0], factor=32)
    s[C].parallel(outer)
    return kiln.build(s, [A, B, C], target, name=name)


def test_round_trip_matches_in_process_module(tmp_path):
    mod = build_scaled_add()
    path = tmp_path / "libscaled_add.so"
    mod.export_library(path)
    loaded = load(path)
    assert loaded.names == ["scaled_add"]
    assert loaded.params() == mod.params()
    rng = np.random.default_rng(0)
    for n in (1, 31, 500):
        a = rng.uniform(-2, 2, n).astype("float32")
        b = rng.uniform(-1, 1, n).astype("float32")
        c_in, c_out = np.empty(n, "float32"), np.empty(n, "float32")
        mod(a, b, c_in)
        loaded(a, b, c_out)
        np.testing.assert_array_equal(c_out, c_in)
        np.testing.assert_allclose(c_out, np.tanh(a) * 3 + b, rtol=1e-5, atol=1e-5)
    with pytest.raises(kiln.KilnError, match="B"):
        loaded(np.zeros(4, "float32"), np.zeros(3, "float32"), np.zeros(4, "float32"))


def test_missing_compiler_is_a_clear_error(tmp_path, monkeypatch):
    mod = build_scaled_add()
    monkeypatch.setenv("CC", "/nonexistent/kiln-cc")
    with pytest.raises(kiln.KilnError, match=r"no C compiler.*\$CC is '/nonexistent/kiln-cc'"):
        mod.export_library(tmp_path / "lib.so")
    assert list(tmp_path.iterdir()) == []


def test_library_for_missing_cpu_features_is_refused(tmp_path, monkeypatch):
    path = tmp_path / "libavx512.so"
    build_scaled_add("llvm -mcpu=skylake-avx512").export_library(path)
    # Test-only hook of the loader: play a host without AVX-512.
    monkeypatch.setenv("KILN_TEST_HIDE_CPU_FEATURES", "avx512f")
    with pytest.raises(kiln.KilnError, match="features this machine lacks: .*avx512f"):
        load(path)


def test_cross_compiled_module_exports_for_its_machine(tmp_path, monkeypatch):
    import shutil
    import kiln
    from kiln import te
    A = te.placeholder((64,), name="A")
    B = te.compute((64,), lambda i: A[i] * 2, name="B")
    s = te.create_schedule(B)
    mod = kiln.build(s, [A, B], target="llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-v1")
    with pytest.raises(kiln.KilnError, match="compiled for aarch64-linux-gnu.*cannot run it"):
        mod(np.ones(64, "float32"), np.empty(64, "float32"))
    # This machine's compiler cannot link AArch64 objects: the error says so and names the fix.
    monkeypatch.setenv("CC", "cc")
    with pytest.raises(kiln.KilnError, match="not this machine: set CC to a compiler for it"):
        mod.export_library(str(tmp_path / "k.so"))
    assert not (tmp_path / "k.so").exists()
    cross = shutil.which("aarch64-linux-gnu-gcc")  # installed by scripts/setup.sh
    if cross is None:
        pytest.skip("no aarch64-linux-gnu-gcc to link the library with")
    monkeypatch.setenv("CC", cross)
    so = tmp_path / "k.so"
    mod.export_library(str(so))
    header = so.read_bytes()[:20]
    assert header[:4] == b"\x7fELF" and int.from_bytes(header[18:20], "little") == 183


def test_damaged_kernel_library_is_refused_before_it_runs(tmp_path):
    import subprocess
    import sys
    from kiln_helpers import elf_section, flip_bytes
    path = tmp_path / "libscaled_add.so"
    build_scaled_add().export_library(path)
    offset, size = elf_section(path, ".text")
    flip_bytes(path, offset + size // 2)
    script = ("import sys, numpy as np, kiln\n"
              "try:\n"
              "    m = kiln.runtime.load(sys.argv[1])\n"
              "    m(np.ones(100, 'float32'), np.ones(100, 'float32'), np.ones(100, 'float32'))\n"
              "except kiln.KilnError as e:\n"
              "    print('KilnError:', e); sys.exit(3)\n")
    r = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 3 and "checksum does not match" in r.stdout, (r.returncode, r.stdout + r.stderr)
