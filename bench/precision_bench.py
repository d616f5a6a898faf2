#!/usr/bin/python3
"""Reduced precision against float32, in one process: bfloat16 inference speed and error, int8 (QDQ) error.

  bench/precision_bench.py [--bf16 resnet50,bert_layer] [--int8 resnet18] [--threads 2] [--rounds 7]
                           [--repeat-ms 200] [--image-size 224] [--seq-len 128] [--calib 4] [--build DIR]
                           [--target llvm] [--amx on|off|both]

bf16: each model (torchvision / torch.nn random weights, seeded, batch 1, eval mode; bench/peers/torch_models.py)
is exported to ONNX, imported and compiled twice by kiln, float32 and precision="bfloat16"; both are checked
against PyTorch's float32 output (relative error: max |got - ref| / max |ref|) and timed interleaved round by
round (float32, bfloat16, float32, ...), each round --repeat-ms of back-to-back calls. Reported: min and median
ms per call of each, and the median of the per-round float32/bfloat16 ratios (above 1: bfloat16 faster).
On a target with AMX-BF16 the bfloat16 matmuls run on AMX tiles (the count of such groups is printed);
--amx both also compiles bfloat16 with AMX off in the target (vdpbf16ps) and times the three in the same rounds.

int8: the model is quantized by kiln.quantize with each method (minmax, percentile, entropy), per-channel
weights, calibrated on --calib random batches (the model's input distribution: N(0, 1)), and the QDQ graph
compiled; reported is the relative error of the logits against float32 on a batch not calibrated on. (On a VNNI
target the QDQ convs and matmuls run on the int8 kernels; bench/int8_bench.py times them.)

The machine and its bf16/VNNI features are printed; KILN_NUM_THREADS is set from --threads.
"""
import argparse
import os
import platform
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(HERE, "peers"))


def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="precision_bench.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--bf16", default="resnet50,bert_layer", help="models to time in bfloat16 against float32 ('' for none)")
    ap.add_argument("--int8", default="resnet18", help="models to quantize with each method ('' for none)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--repeat-ms", type=float, default=200.0)
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--calib", type=int, default=4, help="calibration batches for int8")
    ap.add_argument("--winograd", default="on", choices=("on", "off"), help="kiln.compile's winograd= for both precisions")
    ap.add_argument("--target", default="llvm", help="kiln's target for both precisions")
    ap.add_argument("--amx", default="on", choices=("on", "off", "both"),
                    help="where the target has AMX: bfloat16 on AMX tiles, on vdpbf16ps (AMX off in the target), or both in the same rounds")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    return ap.parse_args(argv)


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def rel_err(got, ref):
    import numpy as np
    return float(np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30))


def module_and_graph(kiln, name, args):
    import io
    import torch
    import torch_models
    module, x = torch_models.build(name, args.image_size, args.seq_len)
    buf = io.BytesIO()
    with torch.enable_grad():  # nn.TransformerEncoderLayer's fused fast path has no ONNX form
        torch.onnx.export(module, (x,), buf, input_names=["input"], output_names=["output"], opset_version=14)
    with torch.no_grad():
        ref = module(x).numpy()
    return module, x.numpy(), ref, kiln.graph.from_onnx(buf.getvalue(), shapes={"input": tuple(x.shape)})


def time_interleaved(runs, rounds, repeat_s):
    """Per run, seconds per call of each round (runs alternate within a round)."""
    per_call = {}
    for name, run in runs:
        t0, n = time.perf_counter(), 0
        while n < 3 or time.perf_counter() - t0 < 0.5:
            run()
            n += 1
        per_call[name] = (time.perf_counter() - t0) / n
    times = {name: [] for name, _ in runs}
    for _ in range(rounds):
        for name, run in runs:
            number = max(1, int(repeat_s / per_call[name] + 0.999))
            t0 = time.perf_counter()
            for _ in range(number):
                run()
            times[name].append((time.perf_counter() - t0) / number)
    return times


def without_amx(kiln, target):
    """The target's features less AMX (a VM's host CPU name may imply fewer than it has)."""
    t = kiln.Target(target)
    feats = ",".join(["+" + f for f in t.features if not f.startswith("amx")] + ["-amx-tile"])
    return f"llvm -mcpu={t.mcpu} -num-cores={t.num_cores} -mattr={feats}"


def bf16_rows(kiln, args):
    winograd = args.winograd == "on"
    has_amx = kiln.Target(args.target).has_feature("amx-bf16")
    variants = {"bf16": args.target}
    if has_amx and args.amx != "on":
        variants = {"bf16 amx": args.target, "bf16 no-amx": without_amx(kiln, args.target)} if args.amx == "both" else {"bf16": without_amx(kiln, args.target)}
    for name in [m for m in args.bf16.split(",") if m]:
        _, x, ref, g = module_and_graph(kiln, name, args)
        t0 = time.perf_counter()
        f32 = kiln.compile(g, winograd=winograd, target=args.target)
        t1 = time.perf_counter()
        bfs = {k: kiln.compile(g, precision="bfloat16", winograd=winograd, target=t) for k, t in variants.items()}
        t2 = time.perf_counter()
        amx_groups = {k: sum(1 for grp in bf.groups() if grp.get("schedule_detail") == "amx tiles") for k, bf in bfs.items()}
        e32 = rel_err(f32(x)[0], ref)
        runs = [("f32", lambda: f32(x))] + [(k, (lambda bf: lambda: bf(x))(bf)) for k, bf in bfs.items()]
        times = time_interleaved(runs, args.rounds, args.repeat_ms / 1e3)
        ms = {k: (min(v) * 1e3, statistics.median(v) * 1e3) for k, v in times.items()}
        print(f"{name:12s} float32 {ms['f32'][0]:8.2f} / {ms['f32'][1]:8.2f} ms (min / median)   rel err vs torch f32 {e32:.1e}   compile {t1 - t0:.0f} s", flush=True)
        for k, bf in bfs.items():
            ratios = [a / b for a, b in zip(times["f32"], times[k])]
            print(f"{'':12s} {k:11s} {ms[k][0]:8.2f} / {ms[k][1]:8.2f} ms   f32/bf16 median {statistics.median(ratios):.2f}x (range {min(ratios):.2f}-{max(ratios):.2f})   "
                  f"rel err {rel_err(bf(x)[0], ref):.1e}   groups on AMX tiles: {amx_groups[k]}   compile (all bf16) {t2 - t1:.0f} s", flush=True)


def int8_rows(kiln, args):
    import numpy as np
    for name in [m for m in args.int8.split(",") if m]:
        _, x, ref, g = module_and_graph(kiln, name, args)
        f32 = kiln.compile(g)
        rng = np.random.default_rng(1)
        calib = [rng.standard_normal(x.shape).astype("float32") for _ in range(args.calib)]
        y32 = f32(x)[0]
        for method in ("minmax", "percentile", "entropy"):
            t0 = time.perf_counter()
            q = kiln.quantize(g, calibration=calib, method=method)
            t1 = time.perf_counter()
            yq = kiln.compile(q)(x)[0]
            print(f"{name:12s} int8 QDQ {method:10s} logits rel err vs float32 {rel_err(yq, y32):.3e}   "
                  f"(mean |diff| / mean |y| {np.abs(yq - y32).mean() / np.abs(y32).mean():.3e})   "
                  f"quantize {t1 - t0:.0f} s", flush=True)


def main(argv=None):
    args = parse_args(argv)
    os.environ["KILN_NUM_THREADS"] = str(args.threads)
    try:
        import kiln
    except ImportError:
        sys.path[:0] = [os.path.join(ROOT, "python"), os.path.join(args.build, "python")]
        import kiln
    t = kiln.Target(args.target)
    feats = [f for f in ("avx512bf16", "avx512vnni", "avxvnni", "amx-bf16", "amx-int8") if t.has_feature(f)]
    print(f"# {cpu_name()}, {os.cpu_count()} CPUs, features: {', '.join(feats) or 'no bf16/VNNI'}; "
          f"target {args.target!r}; kiln threads {args.threads}; load average {os.getloadavg()[0]:.1f}; min / median of {args.rounds} rounds")
    if args.bf16:
        bf16_rows(kiln, args)
    if args.int8:
        int8_rows(kiln, args)


if __name__ == "__main__":
    main()
