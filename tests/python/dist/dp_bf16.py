"""Data-parallel training with the gradients all-reduced in bfloat16 (grad_dtype="bfloat16"): the loss
curve stays close to the float32 one over 60 steps of a learnable task, yet is not the same (the option
really rounds), and every rank holds the same parameters. Prints both curves on rank 0."""
import numpy as np

import kiln
from common import check, mlp, ok

n = kiln.dist.size()
mesh = kiln.dist.Mesh(("data", n))
batch, steps = 8 * n, 60
model, rng = mlp(batch=batch, d_in=12, hidden=32, d_out=4, seed=5)
teacher = rng.standard_normal((12, 4)).astype("float32")  # labels a linear teacher gives: the loss can fall
xs = [rng.standard_normal((batch, 12)).astype("float32") for _ in range(steps)]
ys = [np.argmax(x @ teacher, axis=1).astype("int64") for x in xs]


def curve(grad_dtype):
    step = kiln.dist.train(model, mesh, bucket_mb=0.001, grad_dtype=grad_dtype, loss="cross_entropy",
                           optimizer=kiln.train.SGD(lr=0.05, momentum=0.9))
    losses = [step(x, y) for x, y in zip(xs, ys)]
    for name, v in step.parameters.items():
        everyone = kiln.dist.all_gather(v)
        check(all(np.array_equal(everyone[0], e) for e in everyone), f"{grad_dtype}: parameter {name} differs between ranks")
    return np.array(losses), step


f32, _ = curve("float32")
b16, step = curve("bfloat16")
check(step.runner.stats()["buckets"] >= 1, "bfloat16 gradients ran without buckets")
check(f32[-10:].mean() < 0.5 * f32[:5].mean(), f"float32 did not learn: {f32[:5]} ... {f32[-10:]}")
rel = np.abs(b16 - f32) / np.maximum(f32, 1e-3)
check(not np.array_equal(b16, f32), "bfloat16 gradients gave float32's curve bit for bit: the option did nothing")
check(abs(b16[-10:].mean() - f32[-10:].mean()) <= 0.05 * f32[:5].mean(),
      f"final losses bfloat16 {b16[-10:].mean():.4f} vs float32 {f32[-10:].mean():.4f}")
check(rel[:20].max() < 0.05, f"early steps differ by up to {rel[:20].max():.3f} of the loss")
if kiln.dist.rank() == 0:
    print("step  float32  bfloat16")
    for i in range(0, steps, 10):
        print(f"{i:4d}  {f32[i]:.5f}  {b16[i]:.5f}")
    print(f"last 10 mean: {f32[-10:].mean():.5f} {b16[-10:].mean():.5f}; max relative difference {rel.max():.4f}")
ok("bf16 gradients follow float32")
