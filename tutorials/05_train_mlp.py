"""Tutorial 5: train a PyTorch MLP with kiln, step by step beside PyTorch.

Tutorial 3 compiled a model for inference. kiln also compiles a whole
training step: the forward pass, the loss, the backward pass (kiln's own
autodiff, over the same graph operators) and the optimizer's update, as one
graph run once per batch. Here

  1. a dataset: three interleaved 2-D spirals, generated with a seed
     (nothing is downloaded), that a small MLP can learn
  2. a model: a 2-64-64-3 MLP in torch.nn, and an identical copy of it
     (same initial weights) that PyTorch trains
  3. import and compile: kiln.train.from_torch exports the module (in
     training mode) and imports it, its weights becoming the trainable
     parameters; kiln.train.compile adds the cross-entropy loss, the
     gradients and torch.optim.SGD's momentum rule
  4. train both on the same batches, printing the two losses as they go:
     they follow each other to float32 rounding
  5. plot both loss curves into a PNG (--out, default train_mlp_loss.png)

Run it with

  PYTHONPATH=python:build/python /usr/bin/python3 tutorials/05_train_mlp.py [--out FILE] [--steps 200]

--small (or KILN_TUTORIAL_SMALL=1) trains 100 steps, as the test suite does
(and, without --out, writes the PNG into a temporary directory).
"""
import argparse
import copy
import os
import tempfile
import time

import numpy as np
import torch

import kiln

ap = argparse.ArgumentParser(description="train an MLP with kiln.train beside PyTorch")
ap.add_argument("--out", default=None, help="where to write the PNG of the loss curves (default train_mlp_loss.png)")
ap.add_argument("--steps", type=int, default=None, help="training steps (default 200; 100 with --small)")
ap.add_argument("--small", action="store_true", help="fewer steps (for the test suite)")
args = ap.parse_args()
small = args.small or os.environ.get("KILN_TUTORIAL_SMALL") == "1"
steps = args.steps or (100 if small else 200)
if args.out is None:  # the test suite (KILN_TUTORIAL_SMALL=1) runs it in the source tree: keep the PNG out of it
    args.out = os.path.join(tempfile.mkdtemp(prefix="kiln_tutorial5_"), "train_mlp_loss.png") if small else "train_mlp_loss.png"
batch, classes, lr, momentum = 64, 3, 0.1, 0.9
torch.set_num_threads(1)  # the reference side: one thread, deterministic

# 1. The data: 3 spirals of 1000 points each, with a little noise.
rng = np.random.default_rng(0)
n = 1000
t = np.sqrt(rng.uniform(0, 1, (classes, n))) * 2.0 * np.pi  # angle along each arm
arms = np.arange(classes)[:, None] * 2 * np.pi / classes
x_all = np.stack([t * np.cos(t + arms), t * np.sin(t + arms)], axis=-1) / (2 * np.pi)
x_all = (x_all + rng.normal(0, 0.02, x_all.shape)).reshape(-1, 2).astype("float32")
y_all = np.repeat(np.arange(classes), n).astype("int64")
print(f"dataset: {len(x_all)} points, {classes} spirals; batches of {batch}, {steps} steps")

# 2. The model, and the copy PyTorch trains (deepcopy: the same initial weights).
torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(2, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, classes))
ref = copy.deepcopy(net)
ref_opt = torch.optim.SGD(ref.parameters(), lr=lr, momentum=momentum)

# 3. Import and compile one training step. The batch size is fixed by the
#    example input; the parameters take torch's names ("0.weight", ...).
model = kiln.train.from_torch(net, x_all[:batch])
t0 = time.perf_counter()
step = kiln.train.compile(model, loss="cross_entropy", optimizer=kiln.train.SGD(lr=lr, momentum=momentum))
print(f"compiled the training step in {time.perf_counter() - t0:.1f} s; parameters: "
      + ", ".join(f"{k}{list(v.shape)}" for k, v in step.parameters.items()))

# 4. Train both on the same batches (a new shuffle each epoch).
order = np.empty(0, np.int64)
kiln_losses, torch_losses = [], []
max_diff = 0.0
t0 = time.perf_counter()
for k in range(steps):
    if len(order) < batch:
        order = rng.permutation(len(x_all))
    pick, order = order[:batch], order[batch:]
    xb, yb = x_all[pick], y_all[pick]

    kiln_losses.append(step(xb, yb))  # forward, backward and update in one call

    ref_opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(ref(torch.from_numpy(xb)), torch.from_numpy(yb))
    loss.backward()
    ref_opt.step()
    torch_losses.append(loss.item())

    max_diff = max(max_diff, abs(kiln_losses[-1] - torch_losses[-1]))
    if k % 20 == 0 or k == steps - 1:
        print(f"step {k:4d}  loss kiln {kiln_losses[-1]:.6f}  torch {torch_losses[-1]:.6f}  |diff| {abs(kiln_losses[-1] - torch_losses[-1]):.2e}")
print(f"{steps} steps in {time.perf_counter() - t0:.1f} s (both sides); largest loss difference {max_diff:.2e}")

# The trained weights are plain numpy arrays, here compared with PyTorch's.
w_err = max(float(np.max(np.abs(step.parameters[name] - p.detach().numpy()))) for name, p in ref.named_parameters())
print(f"largest weight difference after training: {w_err:.2e}")

# Accuracy on the whole dataset, with the trained kiln weights put back into a torch module.
with torch.no_grad():
    for name, p in net.named_parameters():
        p.copy_(torch.from_numpy(step.parameters[name]))
    acc = (net(torch.from_numpy(x_all)).argmax(1).numpy() == y_all).mean()
print(f"accuracy of the kiln-trained MLP on the spirals: {acc * 100:.1f}%")

# 5. The loss curves (Agg: no display needed). Each curve is averaged over
#    10 steps, since single batches are noisy.
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

smooth = lambda v: np.convolve(v, np.ones(10) / 10, mode="valid")  # noqa: E731
fig, ax = plt.subplots(figsize=(7, 4))
ax.plot(kiln_losses, color="tab:blue", alpha=0.25)
ax.plot(torch_losses, color="tab:orange", alpha=0.25)
ax.plot(np.arange(9, steps), smooth(kiln_losses), color="tab:blue", label="kiln.train")
ax.plot(np.arange(9, steps), smooth(torch_losses), color="tab:orange", linestyle="--", label="PyTorch")
ax.set_xlabel("step")
ax.set_ylabel("cross-entropy loss")
ax.set_title(f"MLP on 3 spirals, SGD lr={lr} momentum={momentum}, batch {batch}")
ax.legend()
fig.tight_layout()
fig.savefig(args.out, dpi=100)
print(f"wrote {args.out}")

# The last line, for the test suite: the mean of the last 10 losses of each side.
print(f"final loss kiln={np.mean(kiln_losses[-10:]):.6f} torch={np.mean(torch_losses[-10:]):.6f} "
      f"first kiln={kiln_losses[0]:.6f} torch={torch_losses[0]:.6f}")
