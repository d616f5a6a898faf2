"""A fused group that reads an input only at the elements it writes (a residual
convolution's Add) writes its output over that input where the input dies there
(graph/src/plan_builder.cpp): no fresh output array to pull into the caches.
Checked against PyTorch, and against a value the group also reads elsewhere."""
import io

import numpy as np
import pytest
import torch

import kiln


class Residual(torch.nn.Module):
    """relu(conv1x1(relu(conv3x3(x))) + x): the second conv's group adds x, which dies there."""

    def __init__(self, c):
        super().__init__()
        self.a = torch.nn.Conv2d(c, c, 3, padding=1)
        self.b = torch.nn.Conv2d(c, c, 1)

    def forward(self, x):
        return torch.relu(self.b(torch.relu(self.a(x))) + x)


class ReadTwice(torch.nn.Module):
    """relu(conv1x1(h) + h), h = relu(conv3x3(x)): h feeds the conv of the same group, read at every element."""

    def __init__(self, c):
        super().__init__()
        self.a = torch.nn.Conv2d(c, c, 3, padding=1)
        self.b = torch.nn.Conv2d(c, c, 1)

    def forward(self, x):
        h = torch.relu(self.a(x))
        return torch.relu(self.b(h) + h)


def compile_module(module, x, threads):
    f = io.BytesIO()
    torch.onnx.export(module, x, f, input_names=["input"], opset_version=17)
    return kiln.compile(kiln.graph.from_onnx(f.getvalue()), target=f"llvm -num-cores={threads}", quiet=True)


def shared_inputs(exe, name):
    """The arena inputs of group `name` whose bytes its output takes (a static plan's offsets)."""
    lay = exe._exe.runner.layout({})
    (step,) = [s for s in lay["steps"] if name in s["name"]]
    bufs = lay["buffers"]
    out = bufs[step["args"][-1]]
    return [b for b in step["args"][:-1] if bufs[b]["kind"] == "arena" and bufs[b]["offset"] == out["offset"]]


@pytest.mark.parametrize("threads", [1, 2])
def test_residual_group_writes_over_its_input(threads):
    torch.manual_seed(0)
    m, x = Residual(32).eval(), torch.randn(1, 32, 14, 14)
    exe = compile_module(m, x, threads)
    assert len(shared_inputs(exe, "/b/Conv")) == 1
    assert exe.memory()["inplace"] >= 1
    with torch.no_grad():
        ref = m(x).numpy()
    for _ in range(2):  # the second call reuses the arena the first overwrote
        np.testing.assert_allclose(exe(x.numpy())[0], ref, rtol=1e-4, atol=1e-4)


def test_input_read_at_other_elements_keeps_its_bytes():
    torch.manual_seed(1)
    m, x = ReadTwice(32).eval(), torch.randn(1, 32, 14, 14)
    exe = compile_module(m, x, 2)
    assert shared_inputs(exe, "/b/Conv") == []
    with torch.no_grad():
        ref = m(x).numpy()
    np.testing.assert_allclose(exe(x.numpy())[0], ref, rtol=1e-4, atol=1e-4)
