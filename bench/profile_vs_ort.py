#!/usr/bin/python3
"""Where a model's time goes in kiln and in ONNX Runtime, kernel by kernel.

  bench/profile_vs_ort.py MODEL [--threads 1] [--runs 10] [--image-size 224] [--batch 1] [--top 40] [--build DIR]

MODEL is one of bench/peers/torch_models.py's (as model_bench.py takes them).
Both run the same ONNX export: kiln its fused groups (exe.profile, one run at
a time, the minimum per group over --runs), ONNX Runtime its nodes after its
graph optimizations (its profiler on, the minimum per node over --runs; its
conv nodes carry a fused activation or sum in their op name). The minimum,
not the median, so that a loaded machine's preemptions drop out of a
kernel's time; the two sides run one after the other, not interleaved, so
memory-bound kernels (large weights) still vary with the load. Prints each
side's total and time per operator kind, then the --top slowest kernels of each.
"""
import argparse
import collections
import glob
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "peers"))
import model_bench  # noqa: E402
import ort_peer  # noqa: E402
import torch_models  # noqa: E402
from peer_env import clean_env  # noqa: E402


def kiln_kernels(args, module, x, onnx_bytes):
    """[(ms, name, kind)] of kiln's groups: the minimum of --runs single-run profiles."""
    kiln = model_bench.import_kiln(args.build)
    model = kiln.graph.from_onnx(onnx_bytes, shapes={"input": tuple(x.shape)})
    exe = kiln.compile(model, target=f"llvm -num-cores={args.threads}", quiet=True)
    xn = x.numpy()
    runs = [exe.profile(xn, repeats=1) for _ in range(args.runs)]
    return [(min(run[i]["seconds"] for run in runs) * 1e3, row["name"], row["name"].split(" @ ")[0])
            for i, row in enumerate(runs[0])]


def ort_kernels(args, x, onnx_path):
    """[(ms, node, op)] of ONNX Runtime's nodes: the minimum over --runs profiled runs (after one warm-up)."""
    why = ort_peer.unavailable()
    if why:
        raise RuntimeError(f"ONNX Runtime: {why}")
    with tempfile.TemporaryDirectory(prefix="kiln_ort_profile_") as tmp:
        cmd = ["node", os.path.join(HERE, "peers", "ort_profile.js"), ort_peer.find_module(), onnx_path, "input",
               json.dumps(list(x.shape)), str(args.threads), str(args.runs + 1), os.path.join(tmp, "ort")]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=clean_env(args.threads), timeout=args.timeout)
        if proc.returncode != 0:
            raise RuntimeError(f"ONNX Runtime's profile failed: {proc.stderr.strip()[-500:]}")
        (path,) = glob.glob(os.path.join(tmp, "ort*.json"))
        with open(path) as f:
            events = json.load(f)
    per = collections.defaultdict(list)
    for e in events:
        if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time"):
            per[(e["name"][:-len("_kernel_time")], e.get("args", {}).get("op_name", "?"))].append(e["dur"] * 1e-3)
    # The first run's times are the warm-up's (ONNX Runtime allocates and packs then).
    return [(min(v[1:] or v), node, op) for (node, op), v in per.items()]


def report(side, rows, top):
    total = sum(r[0] for r in rows)
    kinds = collections.Counter()
    for ms, _, kind in rows:
        kinds[kind] += ms
    lines = [f"{side}: {total:.3f} ms in {len(rows)} kernels (sum of per-kernel minimums)",
             "  by kind: " + ", ".join(f"{k} {v:.3f}" for k, v in kinds.most_common())]
    lines += [f"  {ms:8.3f}  {name[:100]}" for ms, name, _ in sorted(rows, reverse=True)[:top]]
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", choices=torch_models.MODELS)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runs", type=int, default=10, help="profiled runs per side; each kernel's minimum counts")
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--opset", type=int, default=14)
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--build", default=os.path.join(os.path.dirname(HERE), "build"))
    args = ap.parse_args(argv)
    if args.threads < 1 or args.runs < 1 or args.batch < 1:
        ap.error("--threads, --runs and --batch must be at least 1")
    os.environ["KILN_NUM_THREADS"] = str(args.threads)  # before kiln's thread pool starts
    import torch
    torch.set_num_threads(1)
    module, x = torch_models.build(args.model, args.image_size, args.seq_len, batch=args.batch)
    onnx_bytes = model_bench.export_onnx(module, x, args.opset)
    with tempfile.NamedTemporaryFile(suffix=".onnx") as f:
        f.write(onnx_bytes)
        f.flush()
        print(f"{args.model} {'x'.join(map(str, x.shape))}, {args.threads} thread(s), minimum of {args.runs} runs per kernel")
        print(report("kiln", kiln_kernels(args, module, x, onnx_bytes), args.top))
        print(report("ONNX Runtime", ort_kernels(args, x, f.name), args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
