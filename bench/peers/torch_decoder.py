"""PyTorch running one decoder step (torch_models.decoder_block) as a peer, in its own process.

bench/dynamic_models_bench.py times kiln's decoder step against this worker
(worker.py's protocol), so that PyTorch's thread pool and kiln's never share
one process. The worker builds the block (seeded: the weights are kiln's),
reads its inputs x [b, 1, d], past_k and past_v [b, heads, past, d/heads]
from raw float32 files (or makes seeded random ones), and runs the best of
its variants (VARIANTS):

  eager   the module under torch.inference_mode
  jit     torch.jit.trace at this shape, then torch.jit.freeze (under no_grad)

impl "best" builds both, checks the trace against eager, times them
alternately after a warm-up and keeps the faster; its label says which and
by how much. The kernel's check runs the chosen variant against the block in
float64 and writes y (float32, raw) to paths["y"], for the caller to compare
with kiln's.

  torch_decoder.py serve SPEC   SPEC: {"kind": "decoder", "impl": "best", "args": [d, heads, b, past],
                                       "threads": T, "paths": {"x": ..., "k": ..., "v": ..., "y": ...}}
"""
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import launcher  # noqa: E402
import peer_kernels  # noqa: E402
import torch_models  # noqa: E402

VARIANTS = ("eager", "jit")
VARIANT_TEXT = {"eager": "eager inference_mode", "jit": "jit trace+freeze"}


def variant(block, inputs, impl):
    """run() -> (y, k, v): one step of `block` on `inputs` the way `impl` runs it."""
    import torch
    if impl == "eager":
        def run():
            with torch.inference_mode():
                return block(*inputs)
        return run
    if impl == "jit":
        with torch.no_grad():
            frozen = torch.jit.freeze(torch.jit.trace(block, inputs).eval())

        def run():
            with torch.no_grad():
                return frozen(*inputs)
        return run
    raise ValueError(f"unknown decoder variant {impl!r}; known: best, {', '.join(VARIANTS)}")


def inputs_of(args, paths):
    """(d, heads, (x, past_k, past_v) tensors): read from paths["x"/"k"/"v"], else seeded random."""
    import numpy as np
    import torch
    d, heads, b, past = (int(v) for v in args[:4])
    shapes = {"x": (b, 1, d), "k": (b, heads, past, d // heads), "v": (b, heads, past, d // heads)}
    if paths:
        arrays = [np.fromfile(paths[n], dtype=np.float32).reshape(s) for n, s in shapes.items()]
    else:
        rng = np.random.default_rng(0)
        arrays = [rng.standard_normal(s, dtype=np.float32) for s in shapes.values()]
    return d, heads, tuple(torch.from_numpy(a) for a in arrays)


def seconds_per_call(run, seconds):
    calls, t0 = 0, time.perf_counter()
    while calls < 3 or time.perf_counter() - t0 < seconds:
        run()
        calls += 1
    return (time.perf_counter() - t0) / calls


def pick_fastest(runs, rounds=5, seconds=0.1):
    """(name, {name: median seconds per call}) of the fastest run, timed alternately after a warm-up."""
    for run in runs.values():
        seconds_per_call(run, 0.3)
    times = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            times[name].append(seconds_per_call(run, seconds))
    med = {name: launcher.median(v) for name, v in times.items()}
    return min(med, key=med.get), med


def make(kind, impl, args, threads, paths=None):
    """worker.py's kernel: the decoder step in the variant `impl` ("best": the faster of VARIANTS)."""
    if kind != "decoder":
        raise ValueError(f"torch_decoder serves kind 'decoder', not {kind!r}")
    torch = peer_kernels._torch(threads)
    d, heads, inputs = inputs_of(args, paths)
    block = torch_models.decoder_block(d, heads)
    with torch.no_grad():
        ref64 = [t.numpy() for t in torch_models.decoder_block(d, heads).double()(*(t.double() for t in inputs))]
    runs = {name: variant(block, inputs, name) for name in (VARIANTS if impl == "best" else (impl,))}
    for name, run in runs.items():  # every variant is checked before it may be picked
        err = max(torch_models.rel_err(got.numpy(), want) for got, want in zip(run(), ref64))
        if not err < 1e-3:
            raise ArithmeticError(f"decoder {name} computes a wrong result: relative error {err:.3g} against float64")
    if len(runs) > 1:
        best, med = pick_fastest(runs)
        others = ", ".join(f"{VARIANT_TEXT[n]} {med[n] / med[best]:.2f}x slower" for n in med if n != best)
        text = f"decoder {VARIANT_TEXT[best]} (best of: {others})"
    else:
        best = impl
        text = f"decoder {VARIANT_TEXT[best]}"
    run = runs[best]

    def check():
        out = run()
        if paths and paths.get("y"):
            out[0].contiguous().numpy().tofile(paths["y"])
        return max(torch_models.rel_err(got.numpy(), want) for got, want in zip(out, ref64))
    return peer_kernels.Kernel(run, peer_kernels._torch_label(torch, text, threads), (5, 0.5), check)


def _spec(impl, d, heads, b, past, threads, paths):
    return json.dumps({"kind": "decoder", "impl": impl, "args": [int(d), int(heads), int(b), int(past)], "threads": int(threads), "paths": paths})


class DecoderPeer(launcher.Peer):
    """The decoder step's peer worker (launcher.Peer's protocol: .label, .check_error, .env, .time(), .close())."""

    def __init__(self, d, heads, b, past, threads, paths=None, impl="best", timeout=600):
        self._start([sys.executable, os.path.abspath(__file__), "serve", _spec(impl, d, heads, b, past, threads, paths)],
                    torch_models.peer_env(threads), f"peer decoder/{impl}", timeout)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "serve":
        import worker
        return worker.serve_module(make, sys.argv[2])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
