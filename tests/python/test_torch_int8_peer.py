"""PyTorch's int8 as a peer (bench/peers/torch_int8.py): the engine chosen (fbgemm first, what this build
has otherwise, a clear error when none), and a tiny CNN quantized in its own process on the calibration
batches handed to it, its logits near the float model's and timed through the launcher's protocol."""
import os
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench", "peers"))
import torch_int8  # noqa: E402
import torch_models  # noqa: E402


def test_engine_choice_prefers_fbgemm_and_names_what_is_missing():
    assert torch_int8.engine_for("auto", ["qnnpack", "onednn", "fbgemm"]) == "fbgemm"
    assert torch_int8.engine_for("auto", ["qnnpack", "onednn"]) == "onednn"
    assert torch_int8.engine_for("qnnpack", ["qnnpack", "onednn"]) == "qnnpack"
    with pytest.raises(ValueError, match="no quantized engine 'fbgemm'; it has qnnpack"):
        torch_int8.engine_for("fbgemm", ["qnnpack"])
    with pytest.raises(ValueError, match="no int8 CPU engine"):
        torch_int8.engine_for("auto", [])


def int8_engines():
    import torch
    return [e for e in torch.backends.quantized.supported_engines if e in torch_int8.ENGINES]


def test_tiny_cnn_quantized_in_its_own_process():
    if not int8_engines():
        pytest.skip("this PyTorch has no int8 CPU engine (fbgemm, x86, onednn or qnnpack)")
    module, x = torch_models.build("tiny_cnn", 16)
    ref = module(x).detach().numpy()
    rng = np.random.default_rng(0)
    calib = [rng.standard_normal(tuple(x.shape)).astype(np.float32) for _ in range(2)] + [x.numpy()]
    with torch_int8.TorchInt8Peer("tiny_cnn", 16, x.numpy(), calib, 1) as p:
        engine = torch_int8.engine_for("auto", int8_engines())
        assert f"int8 {engine}" in p.label and "1T" in p.label and "3 calib batches" in p.label
        assert p.output.shape == ref.shape
        assert torch_models.rel_err(p.output, ref) < 0.05  # int8, calibrated on the input itself
        times = p.time(2, 1)
        assert len(times) == 2 and all(t > 0 for t in times)
