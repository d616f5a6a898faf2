"""Exported models: Executor.export_library, then kiln.runtime.load_model in
a fresh process that only loads and runs (no compiling), compared bitwise
with the in-process executor; and the error cases."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import kiln
from kiln.graph import from_torch


class Small(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.fc = torch.nn.Linear(4 * 6 * 6, 5)

    def forward(self, x):
        y = torch.relu(self.conv(x)) + 0.5
        return self.fc(y.flatten(1))


@pytest.fixture(scope="module")
def exe():
    x = torch.randn(2, 3, 6, 6)
    return kiln.compile(from_torch(Small().eval(), (x,)))


LOADER = """
import json, sys
import numpy as np
from kiln.runtime import load_model
m = load_model(sys.argv[1])
x = np.load(sys.argv[2])
out = m(x)
np.save(sys.argv[3], out[0])
print(json.dumps({"inputs": m.inputs, "outputs": m.outputs}))
"""


@pytest.mark.parametrize("weights", ["embed", "beside"])
def test_round_trip_in_subprocess(exe, tmp_path, weights):
    so = tmp_path / "model.so"
    exe.export_library(so, weights=weights)
    assert os.path.exists(str(so) + ".weights") == (weights == "beside")
    x = np.random.default_rng(1).standard_normal((2, 3, 6, 6)).astype("float32")
    np.save(tmp_path / "x.npy", x)
    env = dict(os.environ)
    res = subprocess.run([sys.executable, "-c", LOADER, str(so), str(tmp_path / "x.npy"), str(tmp_path / "y.npy")],
                         capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    info = json.loads(res.stdout.strip().splitlines()[-1])
    assert info["inputs"][0]["shape"] == [2, 3, 6, 6] and info["inputs"][0]["dtype"] == "float32"
    assert info["outputs"][0]["shape"] == [2, 5]
    got = np.load(tmp_path / "y.npy")
    want = exe(x)[0]
    assert got.tobytes() == np.asarray(want).tobytes()
    # A sanity check against torch too (the exported model is the model).
    ref = Small().eval()(torch.from_numpy(x)).detach().numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_errors(exe, tmp_path):
    so = tmp_path / "m.so"
    with pytest.raises(kiln.KilnError, match="weights must be"):
        exe.export_library(so, weights="nowhere")
    exe.export_library(so, weights="beside")
    m = kiln.runtime.load_model(so)
    with pytest.raises(kiln.KilnError, match=r"has shape \[2, 3, 7, 6\]; the model was compiled for \[2, 3, 6, 6\]"):
        m(np.zeros((2, 3, 7, 6), "float32"))
    with pytest.raises(kiln.KilnError, match="dtype float64"):
        m(np.zeros((2, 3, 6, 6)))
    out = m.run({m.input_names[0]: np.zeros((2, 3, 6, 6), "float32")})
    assert out[0].shape == (2, 5)
    os.remove(str(so) + ".weights")
    with pytest.raises(kiln.KilnError, match="weights file .*m.so.weights' is missing"):
        kiln.runtime.load_model(so)
