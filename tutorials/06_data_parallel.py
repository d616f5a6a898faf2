"""Tutorial 6: data-parallel training over several processes with kiln.dist.

Data parallelism is the simplest way to train on several processes (cores,
hosts): every rank holds the whole model, takes its share of each global
batch, computes the gradients of the loss on its share, and the ranks sum
their gradients (an all-reduce) before the optimizer step. Since the loss
is the mean over the whole batch, the sum of the ranks' partial gradients
is exactly the gradient of one process on the whole batch, so every rank
makes the same update and the training follows the one-process run (up to
the order of float sums).

kiln does it as a graph pass: kiln.dist.train(model, mesh, ...) compiles
the training step (forward, loss, backward, optimizer: kiln.train), marks
the batch inputs as split over the mesh's "data" axis ("S(data) R"), and
the distribution pass propagates that split through the graph; the weight
gradients come out as partial sums, so it inserts one kiln.AllReduce per
gradient (and one for the loss) before the optimizer. Each rank's graph
is cut at those collectives into segments compiled as usual. Parameters
start as rank 0's (as PyTorch's DistributedDataParallel does). With
kiln.dist.train(..., bucket_mb=1) the gradient all-reduces overlap the
backward pass instead: gradients are packed in buckets of about 1 MiB, each
all-reduced (non-blocking) as soon as the backward pass has produced it
(bench/dist_bench.py --bucket-mb measures what that hides).

This script

  1. builds a synthetic, learnable task: inputs drawn from a seeded
     generator, labels given by a fixed random "teacher" MLP (nothing is
     downloaded); every rank draws the same global batches
  2. trains a student MLP data parallel: each rank is fed the full global
     batch and keeps its block of rows (rank r of N takes rows
     r*B/N .. (r+1)*B/N), so with 2 ranks each takes its half
  3. on rank 0, trains the same model in one process on the whole batch
     with kiln.train, and prints both loss curves and their largest
     difference
  4. checks that every rank holds bitwise the same parameters, and that
     they match the one-process parameters
  5. saves a PNG of the two loss curves (--out, default
     data_parallel_loss.png)

Launch it with two processes on this host:

  PYTHONPATH=python:build/python mpirun --allow-run-as-root --oversubscribe -np 2 \\
      -x PYTHONPATH -x KILN_NUM_THREADS=1 /usr/bin/python3 tutorials/06_data_parallel.py

(--oversubscribe lets mpirun start more ranks than it counts free cores;
KILN_NUM_THREADS=1 keeps each rank on one thread so they do not fight for
the cores.) Across hosts, list them in a hostfile, one line each with its
slots ("node1 slots=2" / "node2 slots=2"), make kiln importable at the same
path on every host, and start

  mpirun --hostfile hosts -np 4 -x PYTHONPATH -x KILN_NUM_THREADS=1 \\
      /usr/bin/python3 tutorials/06_data_parallel.py

The global batch (64) must divide by the number of ranks. Without mpirun
the script runs as one process (a mesh of one rank: no communication).
--small (or KILN_TUTORIAL_SMALL=1) trains fewer steps, and then, unless
--out is given, writes the PNG to a temporary directory.
"""
import argparse
import os
import sys
import tempfile
import time

import numpy as np

import kiln

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--out", default=None, help="the PNG of the loss curves (default data_parallel_loss.png)")
parser.add_argument("--steps", type=int, default=None, help="training steps (default 200, 60 with --small)")
parser.add_argument("--every", type=int, default=20, help="print the losses every EVERY steps")
parser.add_argument("--small", action="store_true", help="fewer steps (the test suite's size)")
args = parser.parse_args()
small = args.small or os.environ.get("KILN_TUTORIAL_SMALL") == "1"
steps = args.steps or (60 if small else 200)
out = args.out or (os.path.join(tempfile.mkdtemp(prefix="kiln_tutorial6_"), "data_parallel_loss.png") if small
                   else "data_parallel_loss.png")

rank, n_ranks = kiln.dist.rank(), kiln.dist.size()
say = print if rank == 0 else (lambda *a, **k: None)  # rank 0 speaks for everyone
BATCH, D_IN, HIDDEN, CLASSES = 64, 32, 64, 8
if BATCH % n_ranks:
    sys.exit(f"the global batch ({BATCH}) must divide by the number of ranks ({n_ranks})")
say(f"{n_ranks} rank(s) ({kiln.dist.backend()}), global batch {BATCH}: {BATCH // n_ranks} rows per rank, {steps} steps")

# 1. The task: labels from a fixed random teacher (a wider tanh MLP); the student must learn its decision regions.
teacher_rng = np.random.default_rng(1234)
t1 = teacher_rng.standard_normal((D_IN, 128)) / np.sqrt(D_IN)
t2 = teacher_rng.standard_normal((128, CLASSES)) / np.sqrt(128)


def batch(step):
    """The global batch of a step: the same on every rank (seeded by the step), so each rank can take its rows."""
    rng = np.random.default_rng(10_000 + step)
    x = rng.standard_normal((BATCH, D_IN)).astype("float32")
    y = np.argmax(np.tanh(x @ t1) @ t2, axis=1).astype("int64")
    return x, y


# 2. The student: Linear-ReLU-Linear, built as a kiln graph (its constants are the trainable parameters).
def student():
    rng = np.random.default_rng(0)
    b = kiln.graph.Builder()
    x = b.input("x", (BATCH, D_IN))
    w1 = b.constant("fc1.weight", (rng.standard_normal((D_IN, HIDDEN)) * np.sqrt(2 / D_IN)).astype("float32"))
    b1 = b.constant("fc1.bias", np.zeros(HIDDEN, "float32"))
    w2 = b.constant("fc2.weight", (rng.standard_normal((HIDDEN, CLASSES)) * np.sqrt(1 / HIDDEN)).astype("float32"))
    b2 = b.constant("fc2.bias", np.zeros(CLASSES, "float32"))
    h = b.op("Relu", b.op("Add", b.op("MatMul", x, w1), b1))
    return b.build(b.op("Add", b.op("MatMul", h, w2), b2))


def optimizer():
    return kiln.train.SGD(lr=0.1, momentum=0.9)


model = student()
mesh = kiln.dist.Mesh(("data", n_ranks))
start = time.perf_counter()
dp = kiln.dist.train(model, mesh, loss="cross_entropy", optimizer=optimizer())
say(f"compiled the data-parallel step in {time.perf_counter() - start:.1f} s; its collectives:")
for op, axis, nbytes in dp.plan.collectives():
    say(f"  {op} over '{axis}': {nbytes} bytes")

# Every rank calls the step with the full global batch; the runner feeds the rank its rows.
start = time.perf_counter()
dp_losses = [dp(*batch(i)) for i in range(steps)]
dp_seconds = time.perf_counter() - start

# 4a. Every rank must hold the same parameters, bit for bit (all gathered and compared on every rank).
for name, p in dp.parameters.items():
    everyone = kiln.dist.all_gather(p)
    if not all(np.array_equal(everyone[0], e) for e in everyone[1:]):
        sys.exit(f"rank {rank}: parameter {name} differs between ranks")
say(f"parameters identical on all {n_ranks} rank(s) ({len(dp.parameters)} tensors); {steps} steps took {dp_seconds:.2f} s")

if rank == 0:
    # 3. The reference: one process, the whole batch, the same initial weights and optimizer.
    single = kiln.train.compile(model, loss="cross_entropy", optimizer=optimizer())
    one_losses = [single(*batch(i)) for i in range(steps)]
    print(f"{'step':>6} {'data parallel':>14} {'one process':>14} {'difference':>11}")
    for i in list(range(0, steps, args.every)) + ([steps - 1] if (steps - 1) % args.every else []):
        print(f"{i + 1:>6} {dp_losses[i]:>14.6f} {one_losses[i]:>14.6f} {abs(dp_losses[i] - one_losses[i]):>11.2e}")
    diff = max(abs(a - b) for a, b in zip(dp_losses, one_losses))
    print(f"max loss difference over {steps} steps: {diff:.3e}")
    print(f"final loss: data parallel {dp_losses[-1]:.6f}, one process {one_losses[-1]:.6f}")
    # 4b. The parameters follow the one-process ones (sums in another order: float rounding only).
    pdiff = max(float(np.abs(dp.parameters[k] - single.parameters[k]).max()) for k in single.parameters)
    print(f"max parameter difference vs one process: {pdiff:.3e}")
    if diff > 1e-4 * max(1.0, abs(one_losses[0])) or pdiff > 1e-3:
        sys.exit("the data-parallel run does not follow the one-process run")
    if not dp_losses[-1] < 0.7 * dp_losses[0]:
        sys.exit(f"the loss did not fall: {dp_losses[0]:.4f} -> {dp_losses[-1]:.4f}")

    # 5. The two curves (they lie on top of each other).
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6.4, 4))
    ax.plot(range(1, steps + 1), one_losses, color="tab:blue", linewidth=3, alpha=0.5, label="one process, whole batch")
    ax.plot(range(1, steps + 1), dp_losses, "--", color="tab:red", linewidth=1.2, label=f"data parallel, {n_ranks} rank(s)")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy loss")
    ax.set_title(f"kiln.dist data parallel vs one process (max difference {diff:.1e})")
    ax.legend()
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    fig.savefig(out, dpi=100)
    print(f"wrote {out}")
kiln.dist.barrier()  # no rank leaves before rank 0 has checked (its failure is everyone's)
