#!/usr/bin/python3
"""ResNet-18 over batch and image size, and a GPT-style decoder step over its cache length: one dynamic compile
against a static compile per shape, and the decoder against PyTorch.

  bench/dynamic_models_bench.py [--threads 2] [--rounds 5] [--repeat-ms 40] [--models resnet18,decoder] [--quick]
                                [--no-torch] [--build DIR]

ResNet-18 (torchvision, random weights, eval) is compiled once with shapes ("batch", 3, "h", "w") and once per
(batch, image) with the shape fixed; the decoder block (bench/peers/torch_models.py decoder_block, d=768, 12
heads) once with ("batch", 12, "past", 64) caches and once per (batch, past). Rounds interleave the dynamic
executor, the static one and (decoder) PyTorch, with a pause before each side. PyTorch runs in its own process
(bench/peers/torch_decoder.py, started in the peers' clean environment, torch.set_num_threads(T)) on the same
inputs, the faster of eager and jit trace+freeze at each shape, its output checked against kiln's; the line
under the table names its variant per shape. The table shows ms (min / median) and the median of per-round ratios;
"1st call +ms (plan)" is the dynamic executor's first call at that shape minus a call there once seen, both after
a pause and a cache flush, and in brackets kiln's own planning of the new shape (dynamic_shapes_bench.first_call_cost).
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "peers"))
from dynamic_shapes_bench import first_call_cost, import_kiln, print_first_call, time_per_call  # noqa: E402

PAUSE_S = 0.2  # before each side of a round (dynamic_shapes_bench's pause)


def table(title, rows, peer_name=None):
    """rows: (shape, dyn seconds per round, static's, the peer's or None, first_call_cost's dict)."""
    print(f"\n{title}")
    head = f"{'shape':>16} | {'dyn ms min/med':>17} | {'1st call +ms (plan)':>19} | {'static ms min/med':>17} | {'dyn/static':>10}"
    if peer_name:
        head += f" | {peer_name + ' ms min/med':>17} | {'dyn/' + peer_name:>9}"
    print(head)
    for shape, td, ts, tp, first in rows:
        line = (f"{shape:>16} | {min(td)*1e3:7.3f} / {statistics.median(td)*1e3:7.3f} | {first['extra']:8.3f} ({first['plan']:6.3f}) |"
                f" {min(ts)*1e3:7.3f} / {statistics.median(ts)*1e3:7.3f} | {statistics.median(a / b for a, b in zip(td, ts)):10.3f}")
        if peer_name and tp:
            line += f" | {min(tp)*1e3:7.3f} / {statistics.median(tp)*1e3:7.3f} | {statistics.median(a / b for a, b in zip(td, tp)):9.3f}"
        print(line)
    print_first_call([r[4] for r in rows])


def rounds(args, runs):
    """Per run, seconds per call in each round, round by round (A B C A B C ...), a pause before each side so
    that the previous side's threads (kiln's, or the peer's spinning ones) have gone to sleep. A run is
    ("call", f): f timed here for --repeat-ms; or ("peer", p): p.time() in its own process."""
    out = [[] for _ in runs]
    for _ in range(args.rounds):
        for i, (how, f) in enumerate(runs):
            time.sleep(PAUSE_S)
            out[i].append(time_per_call(f, args.repeat_ms) if how == "call" else min(f.time(1, args.repeat_ms)))
    return out


def resnet(args, kiln, np, torch):
    import torchvision
    torch.manual_seed(0)
    net = torchvision.models.resnet18(weights=None).eval()
    shapes = [(1, 160), (1, 224), (2, 193), (3, 224), (5, 288), (8, 224), (16, 160)]
    if args.quick:
        shapes = [(1, 64), (2, 97)]
    path = os.path.join(args.tmp, "resnet18.onnx")
    torch.onnx.export(net, (torch.randn(1, 3, 224, 224),), path, input_names=["x"], opset_version=13,
                      dynamic_axes={"x": {0: "batch", 2: "h", 3: "w"}})
    size = 64 if args.quick else 224
    for title, dims, cases in (("batch", ("batch", 3, size, size), sorted({(b, size) for b, _ in shapes})),
                               ("batch, h, w", ("batch", 3, "h", "w"), shapes)):
        dyn = kiln.compile(kiln.graph.from_onnx(path, shapes={"x": dims}), target=args.target)
        rows = []
        for b, s in cases:
            x = np.random.default_rng(b * 1000 + s).standard_normal((b, 3, s, s)).astype(np.float32)
            with torch.no_grad():
                want = net(torch.from_numpy(x)).numpy()
            first = first_call_cost(dyn, lambda: dyn.run([x]))
            assert np.max(np.abs(dyn.run([x])[0] - want)) <= 1e-3 * max(1.0, float(np.max(np.abs(want))))
            static = kiln.compile(kiln.graph.from_onnx(path, shapes={"x": (b, 3, s, s)}), target=args.target)
            td, ts = rounds(args, [("call", lambda: dyn.run([x])), ("call", lambda: static.run([x]))])
            rows.append((f"{b}x3x{s}x{s}", td, ts, None, first))
        table(f"ResNet-18, one dynamic compile over ({title})", rows)


def decoder_peer(args, np, d, heads, x, k, v, want):
    """PyTorch's decoder step in its own process (bench/peers/torch_decoder.py, the best of eager and jit
    trace+freeze) on kiln's inputs, its output checked against kiln's `want`; None (said why) if it fails."""
    import launcher
    from torch_decoder import DecoderPeer
    paths = {n: os.path.join(args.tmp, f"decoder_{n}.f32") for n in "xkvy"}
    for n, a in zip("xkv", (x, k, v)):
        a.tofile(paths[n])
    try:
        peer = DecoderPeer(d, heads, x.shape[0], k.shape[2], args.threads, paths)
    except launcher.PeerError as e:
        print(f"  PyTorch at b{x.shape[0]} past {k.shape[2]} did not run: {e}")
        return None
    got = np.fromfile(paths["y"], dtype=np.float32).reshape(want.shape)
    err = float(np.max(np.abs(got - want)) / max(1e-6, float(np.max(np.abs(want)))))
    if not err <= 1e-4:
        peer.close()
        raise AssertionError(f"PyTorch's decoder step and kiln's differ at b{x.shape[0]} past {k.shape[2]}: relative error {err:.2e}")
    args.peer_labels.append(f"b{x.shape[0]} past {k.shape[2]}: {peer.label}, output against kiln's {err:.1e}")
    args.peer_env = " ".join(f"{key}={val}" for key, val in sorted(peer.env.items()))
    return peer


def decoder(args, kiln, np, torch):
    from torch_models import decoder_block
    d, heads = (128, 4) if args.quick else (768, 12)
    hd = d // heads
    block = decoder_block(d, heads)
    shapes = [(1, 1), (1, 128), (1, 512), (1, 1024), (8, 1), (8, 128), (8, 512), (8, 1024)]
    if args.quick:
        shapes = [(1, 1), (1, 64), (4, 33)]
    cache = ("batch", heads, "past", hd)
    example = (torch.randn(1, 1, d), torch.randn(1, heads, 4, hd), torch.randn(1, heads, 4, hd))
    dyn = kiln.compile(kiln.graph.from_torch(block, example, shapes={"input0": ("batch", 1, d), "input1": cache, "input2": cache}),
                       target=args.target)
    rows, args.peer_labels, args.peer_env = [], [], None
    for b, past in shapes:
        rng = np.random.default_rng(b * 10000 + past)
        x, k, v = (rng.standard_normal(s).astype(np.float32) for s in ((b, 1, d), (b, heads, past, hd), (b, heads, past, hd)))
        static = kiln.compile(kiln.graph.from_torch(block, tuple(torch.from_numpy(a) for a in (x, k, v))), target=args.target)
        want = static.run([x, k, v])[0]
        first = first_call_cost(dyn, lambda: dyn.run([x, k, v]))
        got = dyn.run([x, k, v])[0]
        assert np.max(np.abs(got - want)) <= 1e-4 * max(1.0, float(np.max(np.abs(want))))
        peer = decoder_peer(args, np, d, heads, x, k, v, want) if args.torch else None
        runs = [("call", lambda: dyn.run([x, k, v])), ("call", lambda: static.run([x, k, v]))] + ([("peer", peer)] if peer else [])
        try:
            td, ts, *tp = rounds(args, runs)
        finally:
            if peer:
                peer.close()
        rows.append((f"b{b} past {past}", td, ts, tp[0] if tp else None, first))
    table(f"decoder step (d={d}, {heads} heads): time per generated token, cache grown to `past`", rows, "torch" if args.torch else None)
    for label in args.peer_labels:
        print(f"  torch {label}")
    if args.peer_env:
        print(f"  torch's process: launcher's clean environment {args.peer_env}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeat-ms", type=float, default=40)
    ap.add_argument("--models", default="resnet18,decoder")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-torch", dest="torch", action="store_false", help="leave PyTorch's decoder step out")
    ap.add_argument("--build", default=os.path.join(os.path.dirname(HERE), "build"))
    args = ap.parse_args()
    os.environ.setdefault("KILN_NUM_THREADS", str(args.threads))
    import numpy as np
    import torch
    torch.set_num_threads(args.threads)
    kiln = import_kiln(args.build)
    import blas_choice
    args.target = f"llvm -num-cores={args.threads}"
    m = blas_choice.machine()
    print(f"kiln dynamic-model bench on {m['host']}: {m['cpu']}, {m['isa']}, {m['cores']} cores; kiln and torch threads {args.threads}; "
          f"PyTorch {torch.__version__}: its own process (bench/peers/torch_decoder.py through the peers' launcher environment), "
          f"torch.set_num_threads({args.threads}), the faster of eager and jit trace+freeze per shape, warmed up, output checked against kiln's; "
          f"rounds interleave dyn, static, torch with {PAUSE_S} s pauses")
    with tempfile.TemporaryDirectory(prefix="kiln_dyn_models_") as tmp:
        args.tmp = tmp
        for name in args.models.split(","):
            {"resnet18": resnet, "decoder": decoder}[name](args, kiln, np, torch)


if __name__ == "__main__":
    main()
