"""kiln.train: a compiled training step (forward, loss, backward, update in
one graph) follows PyTorch's training step by step: same initial weights,
same data, same optimizer rule."""
import numpy as np
import pytest
import torch

import kiln
from kiln import graph as kg

RNG = np.random.default_rng(7)


def mlp_torch(sizes=(8, 16, 16, 4)):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(sizes[0], sizes[1]), torch.nn.ReLU(), torch.nn.Linear(sizes[1], sizes[2]), torch.nn.Tanh(),
                               torch.nn.Linear(sizes[2], sizes[3]))


def mlp_graph(module, batch):
    """The torch MLP rebuilt with the graph Builder (its weights as constants named like torch's parameters)."""
    b = kg.Builder()
    h = b.input("x", (batch, module[0].in_features))
    for i, layer in enumerate(module):
        if isinstance(layer, torch.nn.Linear):
            w = b.constant(f"{i}.weight", layer.weight.detach().numpy())
            h = b.op("Gemm", h, w, b.constant(f"{i}.bias", layer.bias.detach().numpy()), transB=1)
        else:
            h = b.op("Relu" if isinstance(layer, torch.nn.ReLU) else "Tanh", h)
    return b.build(h)


def cnn_torch():
    torch.manual_seed(1)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 6, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                               torch.nn.Conv2d(6, 8, 3, stride=2, padding=1), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(8 * 2 * 2, 5))


def follow_torch(step, module, opt, x, y, loss_fn, steps=50, rtol=1e-4, atol=1e-6):
    for k in range(steps):
        loss = step(x, y)
        opt.zero_grad()
        ref = loss_fn(module(torch.tensor(x)), torch.tensor(y))
        ref.backward()
        opt.step()
        np.testing.assert_allclose(loss, ref.item(), rtol=rtol, atol=atol, err_msg=f"loss at step {k}")
    params = dict(module.named_parameters())
    assert sorted(step.parameters) == sorted(params)
    for name, p in step.parameters.items():
        np.testing.assert_allclose(p, params[name].detach().numpy(), rtol=1e-4, atol=1e-5, err_msg=name)


def assert_updates_in_place(step, x, y):
    """Every parameter and optimizer state is written over in place by its update (the step's plan lets
    each reuse its input): the same arrays before and after a step, with new values."""
    states = [s for per in step.optimizer_states for s in per]
    assert sum(i >= 0 for i in step._exe.output_reuses_input) == len(step.parameters) + len(states)
    before = {n: (a, a.copy()) for n, a in step.parameters.items()}
    state_ids = [id(s) for s in states]
    step(x, y)
    for n, (a, old) in before.items():
        assert step.parameters[n] is a, n
        assert not np.array_equal(a, old), n
    assert [id(s) for per in step.optimizer_states for s in per] == state_ids


def classification_data(batch, shape, classes):
    return RNG.standard_normal((batch,) + shape).astype("float32"), RNG.integers(0, classes, batch)


def test_mlp_sgd_momentum_follows_torch():
    m = mlp_torch()
    x, y = classification_data(16, (8,), 4)
    step = kiln.train.compile(mlp_graph(m, 16), loss="cross_entropy", optimizer=kiln.train.SGD(lr=0.1, momentum=0.9))
    follow_torch(step, m, torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9), x, y, torch.nn.functional.cross_entropy)
    assert_updates_in_place(step, x, y)


def test_cnn_from_onnx_sgd_momentum_weight_decay_follows_torch():
    m = cnn_torch()
    x, y = classification_data(8, (3, 8, 8), 5)
    model = kg.from_torch(m, x)  # its initializers become the parameters
    step = kiln.train.compile(model, loss="cross_entropy", optimizer=kiln.train.SGD(lr=0.02, momentum=0.9, weight_decay=1e-3))
    opt = torch.optim.SGD(m.parameters(), lr=0.02, momentum=0.9, weight_decay=1e-3)
    follow_torch(step, m, opt, x, y, torch.nn.functional.cross_entropy)


@pytest.mark.parametrize("kind", ["Adam", "AdamW"])
def test_mlp_adam_follows_torch(kind):
    m = mlp_torch()
    x, y = classification_data(16, (8,), 4)
    ours = getattr(kiln.train, kind)(lr=0.01, weight_decay=0.01)
    step = kiln.train.compile(mlp_graph(m, 16), loss="cross_entropy", optimizer=ours)
    follow_torch(step, m, getattr(torch.optim, kind)(m.parameters(), lr=0.01, weight_decay=0.01), x, y, torch.nn.functional.cross_entropy)
    assert_updates_in_place(step, x, y)


def test_mse_regression_nesterov_follows_torch():
    m = mlp_torch((8, 16, 16, 3))
    x = RNG.standard_normal((16, 8)).astype("float32")
    y = RNG.standard_normal((16, 3)).astype("float32")
    step = kiln.train.compile(mlp_graph(m, 16), loss="mse", optimizer=kiln.train.SGD(lr=0.05, momentum=0.5, nesterov=True))
    follow_torch(step, m, torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.5, nesterov=True), x, y, torch.nn.functional.mse_loss, steps=20)


def bn_cnn_torch():
    torch.manual_seed(3)
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1, bias=False), torch.nn.BatchNorm2d(4), torch.nn.ReLU(), torch.nn.AvgPool2d(2),
                            torch.nn.Flatten(), torch.nn.Linear(4 * 3 * 3, 3))
    with torch.no_grad():  # not the trivial initial affine parameters
        m[1].weight.uniform_(0.5, 1.5)
        m[1].bias.uniform_(-0.5, 0.5)
    return m


def bn_cnn_graph(m, batch):
    b = kg.Builder()
    c = lambda name, t: b.constant(name, t.detach().numpy())
    h = b.op("Conv", b.input("x", (batch, 3, 6, 6)), c("0.weight", m[0].weight), pads=[1, 1, 1, 1])
    bn = m[1]
    h = b.op("BatchNormalization", h, c("1.weight", bn.weight), c("1.bias", bn.bias), c("1.running_mean", bn.running_mean),
             c("1.running_var", bn.running_var), epsilon=bn.eps, momentum=1 - bn.momentum)
    h = b.op("AveragePool", b.op("Relu", h), kernel_shape=[2, 2], strides=[2, 2])
    return b.build(b.op("Gemm", b.op("Flatten", h), c("5.weight", m[5].weight), c("5.bias", m[5].bias), transB=1))


def test_batch_norm_trains_on_batch_statistics_like_torch():
    m = bn_cnn_torch()
    x, y = classification_data(6, (3, 6, 6), 3)
    step = kiln.train.compile(bn_cnn_graph(m, 6), optimizer=kiln.train.SGD(lr=0.1, momentum=0.9))
    assert sorted(step.buffers) == ["1.running_mean", "1.running_var"]
    m.train()
    follow_torch(step, m, torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9), x, y, torch.nn.functional.cross_entropy, steps=30)
    for name, ref in m.named_buffers():
        if name in step.buffers:
            np.testing.assert_allclose(step.buffers[name], ref.numpy(), rtol=1e-4, atol=1e-6, err_msg=name)


def test_torch_model_with_batch_norm_trains_like_torch():
    # Exported in training mode: the batch norm stays (an eval-mode export folds it into the conv).
    torch.manual_seed(4)
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(4 * 4 * 4, 3))
    x, y = classification_data(5, (3, 6, 6), 3)
    before = m[1].running_var.clone()
    model = kiln.train.from_torch(m, x)
    assert "BatchNormalization" in model.op_types()
    assert torch.equal(m[1].running_var, before)  # the export's traced forward left no trace
    step = kiln.train.compile(model, optimizer=kiln.train.SGD(lr=0.05, momentum=0.9))
    m.train()
    follow_torch(step, m, torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9), x, y, torch.nn.functional.cross_entropy, steps=20)
    np.testing.assert_allclose(step.buffers["1.running_var"], m[1].running_var.numpy(), rtol=1e-4)
    with pytest.raises(kiln.KilnError, match="training_mode=1.*kiln.train"):
        kiln.compile(model)  # for inference, a training-mode batch norm has no meaning


def test_dropout_draws_new_masks_each_step():
    m = mlp_torch()
    b = kg.Builder()
    x = b.input("x", (16, 8))
    h = b.op("Relu", b.op("Gemm", x, b.constant("w1", m[0].weight.detach().numpy()), b.constant("b1", m[0].bias.detach().numpy()), transB=1))
    h = b.op("Dropout", h, b.constant("ratio", np.array(0.5, "float32")))
    logits = b.op("Gemm", h, b.constant("w2", m[2].weight.detach().numpy()[:4]), transB=1)
    model = b.build(logits)
    xv, yv = classification_data(16, (8,), 4)
    frozen = kiln.train.compile(model, optimizer=kiln.train.SGD(lr=0.0))
    losses = [frozen(xv, yv) for _ in range(3)]
    assert len(set(losses)) == 3  # same weights, other masks
    again = kiln.train.compile(model, optimizer=kiln.train.SGD(lr=0.0))
    assert [again(xv, yv) for _ in range(3)] == losses  # the masks follow the seed and the step
    other = kiln.train.compile(model, optimizer=kiln.train.SGD(lr=0.0), seed=1)
    assert other(xv, yv) != losses[0]
    (ref,) = kiln.compile(model)(xv)  # inference: dropout is the identity
    want = torch.nn.functional.cross_entropy(torch.tensor(ref), torch.tensor(yv)).item()
    assert abs(np.mean(losses) - want) < 0.5 * want
    step = kiln.train.compile(model, optimizer=kiln.train.SGD(lr=0.1, momentum=0.9))
    first = step(xv, yv)
    for _ in range(40):
        last = step(xv, yv)
    assert last < first


def test_torch_dropout_imports_for_training_only():
    torch.manual_seed(6)
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Dropout(0.2), torch.nn.Linear(16, 4))
    x, y = classification_data(8, (8,), 4)
    model = kiln.train.from_torch(m, x)
    assert "Dropout" in model.op_types()
    with pytest.raises(kiln.KilnError, match="training_mode is true.*kiln.train"):
        kiln.compile(model)
    step = kiln.train.compile(model, optimizer=kiln.train.SGD(lr=0.1))
    assert np.isfinite(step(x, y))


class Encoder(torch.nn.Module):
    """Embedding, one transformer encoder layer (multi-head attention, GELU, post-norm) and a classifier over the mean."""

    def __init__(self, vocab=11, d=16, heads=2, ff=32, classes=3):
        super().__init__()
        torch.manual_seed(2)
        self.heads = heads
        self.emb = torch.nn.Embedding(vocab, d)
        self.qkv, self.out = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.ff1, self.ff2 = torch.nn.Linear(d, ff), torch.nn.Linear(ff, d)
        self.head = torch.nn.Linear(d, classes)

    def forward(self, ids):
        x = self.emb(ids)
        b, s, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        split = lambda t: t.reshape(b, s, self.heads, d // self.heads).transpose(1, 2)
        a = torch.softmax(split(q) @ split(k).transpose(-1, -2) / (d // self.heads) ** 0.5, dim=-1) @ split(v)
        x = self.ln1(x + self.out(a.transpose(1, 2).reshape(b, s, d)))
        x = self.ln2(x + self.ff2(torch.nn.functional.gelu(self.ff1(x))))
        return self.head(x.mean(1))


def test_transformer_encoder_from_onnx_follows_torch():
    m = Encoder()
    ids, y = RNG.integers(0, 11, (4, 5)), np.array([0, 2, 1, 2])
    step = kiln.train.compile(kg.from_torch(m, ids), loss="cross_entropy", optimizer=kiln.train.SGD(lr=0.1, momentum=0.9))
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    for k in range(20):
        loss = step(ids, y)
        opt.zero_grad()
        ref = torch.nn.functional.cross_entropy(m(torch.tensor(ids)), torch.tensor(y))
        ref.backward()
        opt.step()
        np.testing.assert_allclose(loss, ref.item(), rtol=1e-4, atol=1e-6, err_msg=f"loss at step {k}")
    # The exporter renames some weights (transposed MatMul operands); those that keep torch's names must match.
    params = dict(m.named_parameters())
    shared = [n for n in step.parameters if n in params]
    assert "emb.weight" in shared and "ln1.weight" in shared
    for n in shared:
        np.testing.assert_allclose(step.parameters[n], params[n].detach().numpy(), rtol=1e-4, atol=1e-5, err_msg=n)


def test_parameters_are_readable_and_writable():
    m = mlp_torch()
    step = kiln.train.compile(mlp_graph(m, 4), optimizer=kiln.train.SGD(lr=0.1))
    w = step.parameters["0.weight"]
    np.testing.assert_array_equal(w, m[0].weight.detach().numpy())
    step.parameters["0.weight"] = np.zeros_like(w)
    step.parameters["2.weight"][:] = 0  # in place, too
    x, y = classification_data(4, (8,), 4)
    step(x, y)
    # With the hidden weights zero, layer 0's gradient is zero: plain SGD leaves it at zero.
    np.testing.assert_array_equal(step.parameters["0.weight"], 0)
    with pytest.raises(kiln.KilnError, match=r"parameter '0.weight' has shape \(16, 8\)"):
        step.parameters["0.weight"] = np.zeros((2, 2))
    with pytest.raises(kiln.KilnError, match="no parameter 'nope'"):
        step.parameters["nope"] = w


def test_learning_rate_changes_between_steps():
    m = mlp_torch()
    x, y = classification_data(4, (8,), 4)
    step = kiln.train.compile(mlp_graph(m, 4), optimizer=kiln.train.Adam(lr=0.01))
    step(x, y)
    before = {n: p.copy() for n, p in step.parameters.items()}
    step.optimizer.lr = 0.0
    step(x, y)
    for n, p in step.parameters.items():
        np.testing.assert_array_equal(p, before[n], err_msg=n)
    assert step.steps == 2 and set(step.state["0.weight"]) == {"exp_avg", "exp_avg_sq"}


def test_a_model_that_computes_its_loss():
    b = kg.Builder()
    x, t = b.input("x", (6, 3)), b.input("t", (6, 2))
    w = b.constant("w", np.zeros((3, 2), "float32"))
    d = b.op("Sub", b.op("MatMul", x, w), t)
    model = b.build(b.op("ReduceMean", b.op("Mul", d, d), keepdims=0))
    step = kiln.train.compile(model, loss=None, optimizer=kiln.train.SGD(lr=0.5))
    xv = RNG.standard_normal((6, 3)).astype("float32")
    tv = xv @ np.array([[1, 0], [0, 2], [1, 1]], "float32")
    losses = [step(xv, tv) for _ in range(100)]
    assert losses[-1] < 1e-3 * losses[0]
    with pytest.raises(kiln.KilnError, match="must be a scalar"):
        kiln.train.compile(mlp_graph(mlp_torch(), 4), loss=None)


def test_mismatched_loss_shapes_are_named():
    m = mlp_torch()
    with pytest.raises(kiln.KilnError, match=r"prediction float32\[4, 4\] and the target float32\[4, 3\] must have one shape"):
        kiln.train.compile(mlp_graph(m, 4), loss="mse", target_shape=(4, 3))
    step = kiln.train.compile(mlp_graph(m, 4), loss="cross_entropy")
    with pytest.raises(kiln.KilnError, match="labels"):
        step(np.zeros((4, 8), "float32"), np.zeros(3, "int64"))
    with pytest.raises(kiln.KilnError, match="logits"):
        b = kg.Builder()
        x = b.input("x", (4, 3, 2))
        kiln.train.compile(b.build(b.op("Mul", x, b.constant("w", np.ones(2, "float32")))), loss="cross_entropy")


def test_an_op_without_a_gradient_is_named():
    b = kg.Builder()
    x = b.input("x", (4, 8))
    h = b.op("Gemm", x, b.constant("w", np.ones((8, 3), "float32")))
    logits = b.op("Floor", h, name="quantize")
    with pytest.raises(kiln.KilnError, match="Floor node 'quantize'.*no gradient"):
        kiln.train.compile(b.build(logits), loss="cross_entropy")


def test_bad_optimizer_settings():
    with pytest.raises(kiln.KilnError, match="must not be negative"):
        kiln.train.SGD(lr=-1)
    with pytest.raises(kiln.KilnError, match="betas"):
        kiln.train.Adam(betas=(1.0, 0.9))


def test_a_tuned_training_step(tmp_path):
    """kiln.tune_model tunes a training step's graph like a model's; compile(db=) then builds its groups
    from the records and the step trains as the untuned one does."""
    rng = np.random.default_rng(0)
    b = kiln.graph.Builder()
    h = b.op("Relu", b.op("MatMul", b.input("x", (16, 32)), b.constant("w1", (rng.standard_normal((32, 32)) / 6).astype("float32"))))
    model = b.build(b.op("MatMul", h, b.constant("w2", (rng.standard_normal((32, 4)) / 6).astype("float32"))))
    db = str(tmp_path / "train.db")
    plain = kiln.train.compile(model, optimizer=kiln.train.SGD(lr=0.1))
    r = kiln.tune_model(plain.graph, trials=16, batch=8, db=db, progress=False, confirm_top=1, confirm_rounds=1)
    assert r["trials"] == 16
    tuned = kiln.train.compile(model, optimizer=kiln.train.SGD(lr=0.1), db=db)
    assert tuned._exe.tuned_groups()[0] >= 1
    for _ in range(3):
        x, y = rng.standard_normal((16, 32)).astype("float32"), rng.integers(0, 4, 16)
        assert tuned(x, y) == pytest.approx(plain(x, y), rel=1e-5)
