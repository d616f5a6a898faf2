"""Whole models compiled for a cuda target (kiln.compile(model, target="cuda
-arch=sm_90")): every fused group becomes one CUDA kernel scheduled by the
GPU rules, and the plan runs them in the GPU simulator on the CPU, checked
against PyTorch. Small models keep the simulator (an interpreter per
thread) fast. NVRTC compiles every kernel when it can be loaded."""
import io

import numpy as np
import pytest

import kiln

torch = pytest.importorskip("torch")
TARGET = "cuda -arch=sm_90"


def _import(net, x):
    buf = io.BytesIO()
    torch.onnx.export(net.eval(), x, buf, input_names=["input"], output_names=["output"], opset_version=13)
    return kiln.graph.from_onnx(buf.getvalue(), shapes={"input": tuple(x.shape)})


def _check_simulated(net, x, tol=1e-4):
    model = _import(net, x)
    exe = kiln.compile(model, target=TARGET)
    assert isinstance(exe, kiln.graph.GpuExecutor)
    (y,) = exe.simulate(x.numpy())
    with torch.no_grad():
        ref = net(x).numpy()
    assert y.shape == ref.shape
    err = np.max(np.abs(y - ref)) / np.max(np.abs(ref))
    assert err <= tol, f"relative error {err:.2e}"
    for k in exe.kernels():
        assert "__global__" in k["source"] and "blockIdx.x" in k["source"], k["name"]
    return exe


class SmallCNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = torch.nn.BatchNorm2d(8)
        self.conv2 = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.dw = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.fc = torch.nn.Linear(8, 10)

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = torch.relu(self.conv2(y) + y)  # the residual add fused into the conv
        y = torch.nn.functional.max_pool2d(self.dw(y), 2)
        y = y.mean(dim=(2, 3))
        return torch.softmax(self.fc(y), dim=1)


class SmallBlock(torch.nn.Module):
    """A transformer MLP block: layer norm, dense + GELU, dense, residual, softmax."""

    def __init__(self, d=32, h=64):
        super().__init__()
        self.norm = torch.nn.LayerNorm(d)
        self.up = torch.nn.Linear(d, h)
        self.down = torch.nn.Linear(h, d)

    def forward(self, x):
        y = self.down(torch.nn.functional.gelu(self.up(self.norm(x))))
        return torch.softmax(x + y, dim=-1)


def test_small_cnn_simulated_matches_pytorch():
    torch.manual_seed(0)
    net = SmallCNN()
    with torch.no_grad():
        net.bn1.running_mean.uniform_(-0.2, 0.2)
        net.bn1.running_var.uniform_(0.5, 1.5)
    exe = _check_simulated(net, torch.randn(1, 3, 12, 12))
    ops = [g["ops"] for g in exe.groups()]
    assert any("Conv" in o and "Add" in o for o in ops), ops  # conv + residual in one kernel
    # The convolutions take the tiled rule: their inputs through shared memory.
    conv_sources = [k["source"] for k, g in zip(exe.kernels(), exe.groups()) if g["ops"].startswith("Conv")]
    assert conv_sources and all("__shared__" in s for s in conv_sources)


def test_transformer_mlp_block_simulated_matches_pytorch():
    torch.manual_seed(1)
    exe = _check_simulated(SmallBlock(), torch.randn(6, 32))
    sources = "".join(k["source"] for k in exe.kernels())
    assert "__shfl_down_sync" in sources  # layer norm and softmax reduce across threads


def test_gpu_model_errors_name_the_fix():
    torch.manual_seed(2)
    x = torch.randn(2, 32)
    model = _import(SmallBlock(), x)
    with pytest.raises(kiln.KilnError, match="drop plain="):
        kiln.compile(model, target=TARGET, plain=True)
    exe = kiln.compile(model, target=TARGET)
    with pytest.raises(kiln.KilnError, match="shape"):
        exe.simulate(np.zeros((3, 32), "float32"))
    ok, _ = kiln.gpu.driver_available()
    if not ok:
        with pytest.raises(kiln.KilnError, match="no CUDA driver|no GPU"):
            exe(x.numpy())


def test_small_cnn_on_the_device_matches_the_simulator():
    ok, why = kiln.gpu.driver_available()
    if not ok:
        pytest.skip(f"needs a GPU: {why}")
    if not kiln.gpu.nvrtc_available()[0]:
        pytest.skip("needs NVRTC to compile the kernels")
    torch.manual_seed(3)
    net = SmallCNN().eval()
    x = torch.randn(1, 3, 12, 12)
    exe = kiln.compile(_import(net, x), target=TARGET)
    (on_gpu,) = exe(x.numpy())
    (simulated,) = exe.simulate(x.numpy())
    np.testing.assert_allclose(on_gpu, simulated, rtol=1e-4, atol=1e-5)
    with torch.no_grad():
        np.testing.assert_allclose(on_gpu, net(x).numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2", "bert_layer"])
def test_full_size_models_compile_for_the_gpu(name):
    # Every group of the benchmark models gets a GPU schedule that fits the
    # device (and NVRTC compiles it where it can be loaded); every conv and
    # matmul takes the tiled rule, every row reduction the block-per-row rule.
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench", "peers"))
    import torch_models
    net, x = torch_models.build(name)
    exe = kiln.compile(_import(net, x), target=TARGET)
    for g in exe.groups():
        if g["ops"].split("+")[0] in ("Conv", "MatMul", "Gemm"):
            assert "block/thread/register tiles" in g["schedule_detail"], (g["ops"], g["schedule_detail"])
        if "ReduceMean" in g["ops"] or g["ops"] == "Softmax":
            assert "reduced across the threads" in g["schedule_detail"], (g["ops"], g["schedule_detail"])
    import re
    for k in exe.kernels():
        block, shared = re.search(r"block=\((\d+),(\d+),(\d+)\) shared=(\d+)B", k["launch"]).group(1, 2, 3), k["launch"].split("shared=")[1]
        threads = int(block[0]) * int(block[1]) * int(block[2])
        assert 1 <= threads <= 1024 and int(shared.rstrip("B")) <= 48 * 1024, (k["name"], k["launch"])


def test_model_tuning_for_the_gpu_in_the_simulator(tmp_path):
    # tune_model on a cuda target: the tasks are the groups compile builds for
    # the GPU; in the simulator its records are kept apart, so compile(db=)
    # still uses the defaults. Relabelled as device records (what a session
    # on a GPU writes), they are what compile(db=) builds, and the model stays right.
    import sqlite3
    torch.manual_seed(4)
    net, x = SmallBlock(), torch.randn(6, 32)
    model = _import(net, x)
    db = str(tmp_path / "gpu_model.db")
    r = kiln.tune_model(model, target=TARGET, trials=24, batch=8, db=db, progress=False, gpu_simulate=True)
    assert r["trials"] == 24 and not r["failures"], r
    assert all(g["schedule"] == "default" for g in kiln.compile(model, target=TARGET, db=db, quiet=True).groups())
    con = sqlite3.connect(db)
    con.execute("UPDATE targets SET target = replace(target, ' [simulated]', '')")
    con.commit()
    con.close()
    exe = kiln.compile(model, target=TARGET, db=db, quiet=True)
    tuned = [g for g in exe.groups() if g["schedule"] == "database"]
    assert tuned, exe.groups()
    (y,) = exe.simulate(x.numpy())
    with torch.no_grad():
        np.testing.assert_allclose(y, net(x).numpy(), rtol=1e-4, atol=1e-5)
