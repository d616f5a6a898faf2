#!/usr/bin/python3
"""int8 CNNs: kiln's int8 kernels against kiln's own float32, ONNX Runtime on the same QDQ model and PyTorch's int8.

  bench/int8_bench.py [--models resnet18,resnet50,mobilenet_v2] [--threads 2] [--image-size 224] [--repeat 7]
                      [--repeat-ms 200] [--calib 4] [--target llvm] [--build DIR] [--json FILE]
                      [--no-ort] [--no-torch]

Setup per (model, threads), in one process per thread count (kiln reads KILN_NUM_THREADS once): the torchvision model (random
weights, seeded, eval, batch 1) exported to ONNX, imported by kiln, quantized by kiln.quantize
(minmax, per channel, --calib random calibration batches) with export= writing the QDQ ONNX file; kiln
compiles the float model and the QDQ model twice: int8 (the int8 kernels, use_int8_conv/use_int8_dot)
and int8=False (the same QDQ graph on float kernels). ONNX Runtime (onnxruntime-node, CPU provider, all
optimizations, intra-op threads = T) runs the exported QDQ file in its peer process. PyTorch int8
(peers/torch_int8.py: torch.ao.quantization FX static quantization of the same float model, calibrated on
the same batches, on fbgemm where this PyTorch has it, else the engine its label names; T threads) runs
in a peer process of its own. Rounds interleave kiln float32, kiln int8, kiln QDQ-on-float, ORT and PyTorch; each row gives min and median ms and the median of
the per-round ratios. The int8 outputs are compared with the float model's (relative error of the
logits), ORT's and PyTorch int8's with kiln int8's.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(HERE, "peers"))

import blas_choice  # noqa: E402
import launcher  # noqa: E402
import ort_peer  # noqa: E402
import torch_int8  # noqa: E402
import torch_models  # noqa: E402
from peer_timing import calls_per_repeat, time_calls, warm_up  # noqa: E402


INT8_OPS = ("kiln.QConvNCHWcI8", "kiln.QDepthwiseNCHWcI8", "kiln.QMatMulI8x4")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="int8_bench.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="resnet18,resnet50,mobilenet_v2")
    ap.add_argument("--threads", default="2", help="comma-separated thread counts")
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--repeat", type=int, default=7, help="interleaved rounds (at least 5)")
    ap.add_argument("--repeat-ms", type=float, default=200.0, help="milliseconds of back-to-back calls per round and side")
    ap.add_argument("--calib", type=int, default=4, help="calibration batches for kiln.quantize")
    ap.add_argument("--target", default="llvm")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--json")
    ap.add_argument("--no-ort", action="store_true")
    ap.add_argument("--no-torch", action="store_true", help="leave out the PyTorch int8 peer")
    a = ap.parse_args(argv)
    a.models = [m for m in a.models.split(",") if m]
    a.threads = [int(t) for t in a.threads.split(",") if t]
    return a


def median(v):
    s = sorted(v)
    return s[len(s) // 2] if len(s) % 2 else 0.5 * (s[len(s) // 2 - 1] + s[len(s) // 2])


def row(args, model, threads):
    os.environ["KILN_NUM_THREADS"] = str(threads)
    sys.path[:0] = [os.path.join(ROOT, "python"), os.path.join(args.build, "python")]
    import numpy as np
    import torch
    import kiln
    torch.set_num_threads(1)
    module, x = torch_models.build(model, args.image_size)
    buf = tempfile.NamedTemporaryFile(suffix=".onnx")
    torch.onnx.export(module, (x,), buf.name, input_names=["input"], output_names=["output"], opset_version=14)
    g = kiln.graph.from_onnx(open(buf.name, "rb").read(), shapes={"input": tuple(x.shape)})
    rng = np.random.default_rng(0)
    calib = [rng.standard_normal(tuple(x.shape)).astype(np.float32) for _ in range(args.calib)]
    qdq_path = tempfile.NamedTemporaryFile(suffix="_qdq.onnx")
    t0 = time.perf_counter()
    q = kiln.quantize(g, calibration=calib, export=qdq_path.name)
    quant_s = time.perf_counter() - t0
    target = f"{args.target} -num-cores={threads}"
    xn = x.numpy()
    sides = {}
    for name, graph, kw in (("kiln fp32", g, {}), ("kiln int8", q, {}), ("kiln qdq-float", q, {"int8": False})):
        t0 = time.perf_counter()
        exe = kiln.compile(graph, target=target, **kw)
        sides[name] = {"exe": exe, "compile_s": time.perf_counter() - t0,
                       "int8_groups": sum(1 for gr in exe.groups() if any(k in gr["ops"] for k in INT8_OPS))}
    outs = {k: s["exe"](xn)[0] for k, s in sides.items()}
    res = {"model": model, "threads": threads, "image": args.image_size, "quantize_s": quant_s,
           "int8_vs_fp32_rel_err": torch_models.rel_err(outs["kiln int8"], outs["kiln fp32"]),
           "int8_vs_qdq_float_rel_err": torch_models.rel_err(outs["kiln int8"], outs["kiln qdq-float"])}
    runs = {k: (lambda e=s["exe"]: e(xn)) for k, s in sides.items()}
    numbers = {k: calls_per_repeat(warm_up(r, 3, 0.3), args.repeat_ms * 1e-3) for k, r in runs.items()}
    peers = []
    if not args.no_ort:
        try:
            peers.append(ort_peer.OrtPeer(qdq_path.name, {"input": xn}, outs["kiln int8"], threads))
        except launcher.PeerError as e:
            # The peer checks against kiln int8's logits to 1e-3; rounding steps of two int8 runtimes may exceed it.
            res["ort_check"] = str(e)
            try:
                peers.append(ort_peer.OrtPeer(qdq_path.name, {"input": xn}, None, threads))
            except launcher.PeerError as e2:
                res["ort_error"] = str(e2)
    if not args.no_torch:
        try:
            tp = torch_int8.TorchInt8Peer(model, args.image_size, xn, calib, threads)
            peers.append(tp)
            res["torch_label"] = tp.label
            res["torch_vs_kiln_int8_rel_err"] = torch_models.rel_err(tp.output, outs["kiln int8"])
            res["torch_vs_fp32_rel_err"] = torch_models.rel_err(tp.output, outs["kiln fp32"])
        except launcher.PeerError as e:
            res["torch_error"] = str(e)
    times = {k: [] for k in list(runs) + [p.label for p in peers]}
    for _ in range(max(5, args.repeat)):
        for k, r in runs.items():
            times[k].append(time_calls(r, 1, numbers[k])[0])
        for p in peers:
            times[p.label].extend(p.time(1, args.repeat_ms))
            time.sleep(0.15)
    for p in peers:
        if isinstance(p, ort_peer.OrtPeer):
            res["ort_label"] = p.label
            res["ort_vs_kiln_int8_rel_err"] = p.check_error
        p.close()
    res["sides"] = {k: {"min_ms": 1e3 * min(v), "median_ms": 1e3 * median(v)} for k, v in times.items()}
    for k in sides:
        res["sides"][k].update(compile_s=sides[k]["compile_s"], int8_groups=sides[k]["int8_groups"])
    base = times["kiln int8"]
    res["ratios"] = {k: median([a / b for a, b in zip(base, v)]) for k, v in times.items() if k != "kiln int8"}
    return res


def per_thread_count(args):
    """Each thread count in a process of its own: kiln's thread pool reads KILN_NUM_THREADS once, when it
    starts, so a second count in the same process would still run on the first count's threads."""
    rows = []
    for t in args.threads:
        argv = [a for a in sys.argv[1:]]
        for flag in ("--threads", "--json"):
            while flag in argv:
                i = argv.index(flag)
                del argv[i:i + 2]
            argv = [a for a in argv if not a.startswith(flag + "=")]
        with tempfile.NamedTemporaryFile(suffix=".json") as out:
            subprocess.run([sys.executable, os.path.abspath(__file__), *argv, "--threads", str(t), "--json", out.name], check=True)
            with open(out.name) as f:
                rows += json.load(f)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1, default=str)
    return 0


def main():
    args = parse_args()
    if len(args.threads) > 1:
        return per_thread_count(args)
    load = os.getloadavg()
    cpu, flags = blas_choice.cpu_info()
    print(f"# {cpu} ({blas_choice.vector_isa(flags)}, {os.cpu_count()} CPUs)")
    print(f"int8_bench: target '{args.target}', batch 1, image {args.image_size}, {args.repeat} interleaved rounds of "
          f"{args.repeat_ms:g} ms; kiln.quantize minmax per-channel, {args.calib} random calibration batches; "
          f"ONNX Runtime {ort_peer.version() or '(unavailable)'} on kiln.quantize's exported QDQ model; "
          f"{torch_int8.describe()}; load {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    rows = []
    for m in args.models:
        for t in args.threads:
            r = row(args, m, t)
            rows.append(r)
            print(f"{m} {t}T: " + ", ".join(f"{k} min {v['min_ms']:.2f} median {v['median_ms']:.2f} ms" for k, v in r["sides"].items()))
            print("    kiln int8 / other (median of per-round ratios, below 1 int8 is faster): "
                  + ", ".join(f"{k} {v:.3f}" for k, v in r["ratios"].items()))
            print(f"    rel err of logits: int8 vs fp32 {r['int8_vs_fp32_rel_err']:.3g}, int8 vs QDQ on float {r['int8_vs_qdq_float_rel_err']:.3g}"
                  + (f", ORT vs kiln int8 {r['ort_vs_kiln_int8_rel_err']:.3g}" if r.get("ort_vs_kiln_int8_rel_err") is not None else "")
                  + (f"; ORT check: {r['ort_check']}" if r.get("ort_check") else "")
                  + (f"; ORT failed: {r['ort_error']}" if r.get("ort_error") else "")
                  + (f", PyTorch int8 vs kiln int8 {r['torch_vs_kiln_int8_rel_err']:.3g} (vs fp32 {r['torch_vs_fp32_rel_err']:.3g})"
                     if r.get("torch_label") else "")
                  + (f"; PyTorch int8 failed: {r['torch_error']}" if r.get("torch_error") else ""), flush=True)
    print(f"int8_bench: load at the end {os.getloadavg()[0]:.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1, default=str)


if __name__ == "__main__":
    main()
