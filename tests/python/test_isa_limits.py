"""bench/peers/isa_limits.py: the AVX2 peer. Its verdict refuses a library
still on wider kernels, and on this host the limits really change what
PyTorch's libraries run (OpenBLAS's core type, oneDNN's convolutions)."""
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench", "peers"))
import blas_choice  # noqa: E402
import isa_limits  # noqa: E402
from peer_env import clean_env  # noqa: E402

GOOD = {"aten": "CPU capability usage: AVX2", "blas": "openblas 0.3.21", "blas_core": "Haswell", "mm_gflops": 60.0,
        "onednn_conv": {"forward_training": "jit:avx2", "backward_data": "jit:avx2", "backward_weights": "jit:avx2"}}


def test_verdict_refuses_any_library_on_wider_kernels():
    ok, line = isa_limits.verdict(GOOD, limited=True, ghz=2.6)
    assert ok and "AVX2 peak 83 at the reported 2.60 GHz" in line and "implies 1.88 GHz" in line and "forward_training jit:avx2" in line
    for bad, why in ((dict(GOOD, blas_core="SkylakeX"), "not Haswell"),
                     (dict(GOOD, onednn_conv={"backward_weights": "jit:avx512_core"}), "jit:avx512_core"),
                     (dict(GOOD, onednn_conv={"forward_training": "brg:avx512_core_amx"}), "amx"),
                     (dict(GOOD, onednn_conv={}), "no convolution"),
                     (dict(GOOD, aten="CPU capability usage: AVX512"), "AVX512")):
        ok, line = isa_limits.verdict(bad, limited=True, ghz=2.6)
        assert not ok and "NOT LIMITED" in line and why in line, line
    assert isa_limits.verdict(dict(GOOD, blas_core="SkylakeX"), limited=False, ghz=2.6)[0]  # unlimited: reported, not refused
    assert not isa_limits.verdict({"ok": False, "why": "crashed"}, limited=True)[0]


def test_limits_take_effect_in_pytorch():
    pytest.importorskip("torch")
    pytest.importorskip("threadpoolctl")
    _, flags = blas_choice.cpu_info()
    if blas_choice.host_level(flags) < 2:
        pytest.skip("the host has no AVX2")
    limited = isa_limits.check(isa_limits.limited_env(clean_env(1)))
    ok, line = isa_limits.verdict(limited, limited=True)
    assert ok, line
    assert limited["blas_core"] == "Haswell" and set(limited["onednn_conv"].values()) == {"jit:avx2"}
    if blas_choice.host_level(flags) == 3:  # the limits are what changed it: unlimited, an AVX-512 host runs wider kernels
        free = isa_limits.check(clean_env(1))
        assert any("avx512" in v for v in free["onednn_conv"].values()), free
