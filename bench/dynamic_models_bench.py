#!/usr/bin/python3
"""ResNet-18 over batch and image size, and a GPT-style decoder step over its cache length: one dynamic compile
against a static compile per shape, and the decoder against PyTorch eager.

  bench/dynamic_models_bench.py [--threads 2] [--rounds 5] [--repeat-ms 40] [--models resnet18,decoder] [--quick] [--build DIR]

ResNet-18 (torchvision, random weights, eval) is compiled once with shapes ("batch", 3, "h", "w") and once per
(batch, image) with the shape fixed; the decoder block (bench/peers/torch_models.py decoder_block, d=768, 12
heads) once with ("batch", 12, "past", 64) caches and once per (batch, past). Rounds interleave the dynamic
executor, the static one and (decoder) PyTorch eager under no_grad with torch.set_num_threads(T); the table shows
ms (min / median) and the median of per-round ratios.
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
from dynamic_shapes_bench import import_kiln, time_per_call  # noqa: E402


def table(title, rows, peer_name=None):
    print(f"\n{title}")
    head = f"{'shape':>16} | {'dyn ms min/med':>17} | {'static ms min/med':>17} | {'dyn/static':>10}"
    if peer_name:
        head += f" | {peer_name + ' ms min/med':>17} | {'dyn/' + peer_name:>9}"
    print(head)
    for shape, td, ts, tp in rows:
        line = (f"{shape:>16} | {min(td)*1e3:7.3f} / {statistics.median(td)*1e3:7.3f} | {min(ts)*1e3:7.3f} / {statistics.median(ts)*1e3:7.3f} |"
                f" {statistics.median(a / b for a, b in zip(td, ts)):10.3f}")
        if peer_name:
            line += f" | {min(tp)*1e3:7.3f} / {statistics.median(tp)*1e3:7.3f} | {statistics.median(a / b for a, b in zip(td, tp)):9.3f}"
        print(line)


def rounds(args, runs, settle=()):
    """Per run, seconds per call in each round; runs whose index is in `settle` start after a pause, so that
    kiln's worker threads have gone to sleep and do not take the cores from PyTorch's."""
    out = [[] for _ in runs]
    for _ in range(args.rounds):
        for i, run in enumerate(runs):
            if i in settle:
                time.sleep(0.2)
            out[i].append(time_per_call(run, args.repeat_ms))
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
            assert np.max(np.abs(dyn.run([x])[0] - want)) <= 1e-3 * max(1.0, float(np.max(np.abs(want))))
            static = kiln.compile(kiln.graph.from_onnx(path, shapes={"x": (b, 3, s, s)}), target=args.target)
            td, ts = rounds(args, [lambda: dyn.run([x]), lambda: static.run([x])])
            rows.append((f"{b}x3x{s}x{s}", td, ts, None))
        table(f"ResNet-18, one dynamic compile over ({title})", rows)


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
    rows = []
    for b, past in shapes:
        rng = np.random.default_rng(b * 10000 + past)
        x, k, v = (rng.standard_normal(s).astype(np.float32) for s in ((b, 1, d), (b, heads, past, hd), (b, heads, past, hd)))
        tx, tk, tv = (torch.from_numpy(a) for a in (x, k, v))
        static = kiln.compile(kiln.graph.from_torch(block, (tx, tk, tv)), target=args.target)

        def eager():
            with torch.no_grad():
                block(tx, tk, tv)
        td, ts, tp = rounds(args, [lambda: dyn.run([x, k, v]), lambda: static.run([x, k, v]), eager], settle=(2,))
        rows.append((f"b{b} past {past}", td, ts, tp))
    table(f"decoder step (d={d}, {heads} heads): time per generated token, cache grown to `past`", rows, "torch")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeat-ms", type=float, default=40)
    ap.add_argument("--models", default="resnet18,decoder")
    ap.add_argument("--quick", action="store_true")
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
          f"PyTorch {torch.__version__} eager, no_grad, warmed up, in this process")
    with tempfile.TemporaryDirectory(prefix="kiln_dyn_models_") as tmp:
        args.tmp = tmp
        for name in args.models.split(","):
            {"resnet18": resnet, "decoder": decoder}[name](args, kiln, np, torch)


if __name__ == "__main__":
    main()
