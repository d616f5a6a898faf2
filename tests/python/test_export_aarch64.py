"""Whole models for AArch64: kiln.compile(model, target="llvm -mtriple=aarch64-linux-gnu
-mcpu=cortex-a76") builds every group for NEON, export_library links the model with
the cross compiler, and the library runs under qemu-aarch64 through the C API
(tools/kiln_run_model.c, cross-built with kiln_runtime by scripts/build_aarch64_runner.sh):
its outputs match the x86 build of the same model (relative error <= 1e-5).

Needs aarch64-linux-gnu-gcc/g++ and qemu-user-static (scripts/setup.sh installs
them); skipped with the reason when they are missing. Under emulation nothing is
timed. Run with -s to see each library's size and the peak memory of its run
(qemu's own maximum resident set, as the program's getrusage reports it under
qemu-user: a proxy for the device's, emulator included)."""
import os
import shutil
import subprocess

import numpy as np
import pytest

import kiln
import kiln._ffi as ffi

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ARM = "llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a76"
SYSROOT = "/usr/aarch64-linux-gnu"


def _qemu():
    return shutil.which("qemu-aarch64-static") or shutil.which("qemu-aarch64")


def _missing_tools():
    missing = [t for t in ("aarch64-linux-gnu-gcc", "aarch64-linux-gnu-g++") if shutil.which(t) is None]
    if _qemu() is None:
        missing.append("qemu-aarch64 (qemu-user-static)")
    if not os.path.isdir(SYSROOT):
        missing.append(SYSROOT + " (libc6-dev-arm64-cross)")
    return missing


def _small_model():
    b = kiln.graph.Builder()
    rng = np.random.default_rng(1)
    x = b.input("x", (1, 3, 8, 8))
    w = b.constant("w", rng.standard_normal((8, 3, 3, 3)).astype("float32"))
    return b.build(b.op("Relu", b.op("Conv", x, w, pads=[1, 1, 1, 1])), names=["y"])


def test_cross_compiled_model_is_refused_here_with_the_fix(tmp_path, monkeypatch):
    exe = kiln.compile(_small_model(), target=ARM)
    assert exe.num_kernels >= 1 and exe.memory()["arena_bytes"] >= 0
    x = np.zeros((1, 3, 8, 8), "float32")
    with pytest.raises(kiln.KilnError, match=r"compiled for aarch64-linux-gnu.*export it with export_library.*run the library on that machine"):
        exe(x)
    with pytest.raises(kiln.KilnError, match="compiled for aarch64-linux-gnu"):
        exe.profile(x)
    if shutil.which("aarch64-linux-gnu-gcc") is None:
        pytest.skip("no aarch64-linux-gnu-gcc to link the library with (scripts/setup.sh installs gcc-aarch64-linux-gnu)")
    monkeypatch.setenv("CC", "aarch64-linux-gnu-gcc")
    # The static runtime beside this process is for x86-64: refused, naming what to do instead.
    with pytest.raises(kiln.KilnError, match="static runtime.*export without static_runtime"):
        exe.export_library(tmp_path / "s.so", static_runtime=True)
    exe.export_library(tmp_path / "m.so")
    header = (tmp_path / "m.so").read_bytes()[:20]
    assert header[:4] == b"\x7fELF" and int.from_bytes(header[18:20], "little") == 183  # EM_AARCH64


def _conv_tile(exe):
    """(the NCHWc channel block, output rows in the register tile, accumulator vectors) of the one conv group."""
    (detail,) = [g["schedule_detail"] for g in exe.groups() if g["ops"] == "kiln.ConvNCHWc"]
    last = {k: int(v.split("x")[-1]) for k, v in (w.split("=") for w in detail.split() if w.startswith("conv.") and "=" in w)}
    return last["conv.fi"], last["conv.y"] * last["conv.x"]


def test_the_target_drives_the_schedule():
    """The same convolution scheduled for AVX2 (8 float lanes, 16 vector registers) and for
    NEON (4 lanes, 32 registers): the channel block is two vectors of the target's, and the
    register tile's accumulators fill the target's register file (more than AVX2 has on NEON)."""
    arm, avx2 = kiln.Target(ARM), kiln.Target("llvm -mcpu=haswell")
    assert (arm.natural_lanes("float32"), arm.num_vector_registers, arm.is_cross) == (4, 32, True)
    assert (avx2.natural_lanes("float32"), avx2.num_vector_registers, avx2.is_cross) == (8, 16, False)
    b = kiln.graph.Builder()
    x = b.input("x", (1, 32, 14, 14))
    w = b.constant("w", np.random.default_rng(2).standard_normal((64, 32, 3, 3)).astype("float32"))
    model = b.build(b.op("Conv", x, w, pads=[1, 1, 1, 1]), names=["y"])
    tiles = {}
    for target in (arm, avx2):
        block, rows = _conv_tile(kiln.compile(model, target=str(target), winograd=False))
        lanes, registers = target.natural_lanes("float32"), target.num_vector_registers
        assert block == 2 * lanes, (str(target), block)
        accumulators = rows * block // lanes
        assert accumulators <= registers, (str(target), rows, block)
        tiles[target.mcpu] = accumulators
    assert tiles["cortex-a76"] > avx2.num_vector_registers, tiles  # a tile AVX2's 16 registers could not hold


@pytest.fixture(scope="module")
def runner(tmp_path_factory):
    """tools/kiln_run_model cross-built for AArch64 (kept in the build tree between runs)."""
    missing = _missing_tools()
    if missing:
        pytest.skip("cannot run AArch64 code here: missing " + ", ".join(missing) + "; scripts/setup.sh installs them")
    build = os.path.dirname(os.path.dirname(os.path.abspath(ffi._kiln.__file__)))
    out = os.path.join(build, "aarch64_runner") if os.path.exists(os.path.join(build, "CMakeCache.txt")) else str(tmp_path_factory.mktemp("aarch64"))
    r = subprocess.run(["bash", os.path.join(ROOT, "scripts", "build_aarch64_runner.sh"), out], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    return os.path.join(out, "kiln_run_model")


def _torch_model(name, size):
    torch = pytest.importorskip("torch")
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    net = getattr(torchvision.models, name)().eval()
    x = np.random.default_rng(0).standard_normal((1, 3, size, size)).astype("float32")
    with torch.no_grad():
        ref = net(torch.from_numpy(x)).numpy()
    return kiln.graph.from_torch(net, torch.from_numpy(x)), x, ref


@pytest.mark.parametrize("name,weights", [("resnet18", "embed"), ("mobilenet_v2", "beside")])
def test_model_exported_for_aarch64_matches_x86_under_qemu(name, weights, runner, tmp_path, monkeypatch):
    model, x, torch_out = _torch_model(name, 64)
    host = kiln.compile(model)(x)[0]
    # An independent reference first, so that a wrong x86 build cannot pass for a right one.
    np.testing.assert_allclose(host, torch_out, rtol=1e-4, atol=1e-4 * np.abs(torch_out).max())

    exe = kiln.compile(model, target=ARM)
    so = tmp_path / f"{name}.so"
    monkeypatch.setenv("CC", "aarch64-linux-gnu-gcc")
    exe.export_library(so, weights=weights)
    x.tofile(tmp_path / "in.bin")
    r = subprocess.run([_qemu(), "-L", SYSROOT, runner, str(so), str(tmp_path / "in.bin"), str(tmp_path / "out.bin")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    got = np.fromfile(tmp_path / "out.bin", dtype="float32").reshape(host.shape)
    rel = float(np.abs(got - host).max() / np.abs(host).max())
    rss = int(r.stdout.split("max_rss_kib")[1].split()[0])
    print(f"\n{name} 1x3x64x64 for {ARM}: library {so.stat().st_size / 2**20:.2f} MiB (weights {weights}"
          + ("" if weights == "embed" else f", {os.path.getsize(str(so) + '.weights') / 2**20:.2f} MiB") + f"; "
          f"{exe.num_kernels} kernels), peak RSS under qemu-aarch64 {rss / 1024:.1f} MiB (emulator included), "
          f"relative error against x86 {rel:.2e}")
    assert rel <= 1e-5, f"{name}: AArch64 outputs differ from x86's by {rel:.2e} (relative)"
    # What the device needs: libc and the C++ runtime, no LLVM, no Python, no compiler.
    needed = _needed(runner) + _needed(so)
    assert set(needed) <= {"libc.so.6", "libm.so.6", "libstdc++.so.6", "libgcc_s.so.1"}, needed


def _needed(elf):
    """The shared libraries an ELF file names (readelf reads any architecture's)."""
    if shutil.which("readelf") is None:
        return []
    out = subprocess.run(["readelf", "-d", str(elf)], capture_output=True, text=True, check=True).stdout
    return [ln.split("[")[1].rstrip("]") for ln in out.splitlines() if "(NEEDED)" in ln]
