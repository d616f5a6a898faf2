#!/usr/bin/python3
"""Where a training step's time goes: kiln's groups (exe.profile) and PyTorch's operators (torch.profiler), the top rows of each.

  bench/train_step_profile.py [--workload resnet18|bert|mobilenetv2] [--threads 1] [--isa host|avx2] [--target T]
                              [--batch 8] [--image-size 112] [--seq-len 128] [--repeat 3] [--top 25] [--side kiln|torch|both]
                              [--precision float32|bfloat16]

The same workloads and settings as bench/train_step_bench.py (its build(),
its --isa avx2 limits for PyTorch's libraries); each side in its own process.
kiln: the compiled step's groups, timed one at a time by exe.profile (ms,
GFLOP/s, share), summed by kind too (the group's first operator). PyTorch:
self CPU time per operator over --repeat steps after 3 warm-up steps.
--precision bfloat16 profiles both sides in the bench's mixed precision
(kiln precision="bfloat16", PyTorch's CPU autocast).
"""
import argparse
import collections
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import train_step_bench as tsb  # noqa: E402


def kiln_profile(args):
    spec = {"side": "kiln", "workload": args.workload, "threads": args.threads, "batch": args.batch, "image_size": args.image_size,
            "seq_len": args.seq_len, "build": args.build, "target": args.target, "precision": args.precision}
    step_fn, facts = tsb.kiln_side(spec)
    step_fn()
    # The step's own feed (parameters, state, scalars), caught as it goes to the executor.
    step = step_fn.__closure__[0].cell_contents if step_fn.__closure__ else None
    fed = []
    real = step._run
    step._run = lambda feed, a, b: fed.append(list(feed)) or real(feed, a, b)
    step_fn()
    rows = step._exe.profile(*fed[-1], repeats=args.repeat)
    total = sum(r["seconds"] for r in rows)
    print(f"kiln {args.workload} {args.precision}, target {args.target}, {args.threads} thread(s): {len(rows)} groups, {total * 1e3:.1f} ms summed")
    kinds = collections.Counter()
    for r in rows:
        kinds[r["name"].split("(")[0].split("+")[0].strip()[:40]] += r["seconds"]
    for k, s in kinds.most_common(args.top):
        print(f"  kind {k:40s} {s * 1e3:9.2f} ms {s / total * 100:5.1f}%")
    for r in sorted(rows, key=lambda r: -r["seconds"])[: args.top]:
        print(f"  {r['name'][:90]:90s} {r['seconds'] * 1e3:8.2f} ms {r['gflops']:7.1f} GF/s {r['share'] * 100:5.1f}%")


def torch_profile(args):
    import torch
    from torch.profiler import ProfilerActivity, profile
    step, _ = tsb.torch_side({"workload": args.workload, "threads": args.threads, "batch": args.batch, "image_size": args.image_size,
                              "seq_len": args.seq_len, "precision": args.precision})
    for _ in range(3):
        step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(args.repeat):
            step()
    print(f"PyTorch {args.workload} {args.precision}, {args.threads} thread(s), {torch.__version__}, {args.repeat} steps (per step below):")
    events = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
    total = sum(e.self_cpu_time_total for e in events)
    print(f"  total self CPU {total / 1e3 / args.repeat:.1f} ms per step")
    for e in events[: args.top]:
        print(f"  {e.key[:60]:60s} {e.self_cpu_time_total / 1e3 / args.repeat:8.2f} ms {e.count // args.repeat:5d} calls")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload", default="resnet18", choices=tsb.WORKLOADS)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--isa", choices=("host", "avx2"), default="host")
    ap.add_argument("--target", default=None)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--image-size", type=int, default=112)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--precision", choices=("float32", "bfloat16"), default="float32")
    ap.add_argument("--side", choices=("kiln", "torch", "both"), default="both")
    ap.add_argument("--build", default=os.path.join(tsb.ROOT, "build"))
    args = ap.parse_args()
    if args.target is None:
        args.target = "llvm -mcpu=znver3" if args.isa == "avx2" else "llvm"
    if args.side == "kiln":
        return kiln_profile(args)
    if args.side == "torch":
        return torch_profile(args)
    for side in ("kiln", "torch"):
        argv = [sys.executable, os.path.abspath(__file__), *sys.argv[1:], "--side", side]
        if side == "kiln":
            env = dict(os.environ, KILN_NUM_THREADS=str(args.threads))
        else:
            env = tsb.peer_env(tsb.parse_args(["--isa", args.isa, "--threads", str(args.threads)]))
            env["PYTHONPATH"] = os.environ.get("PYTHONPATH", "")
        subprocess.run(argv, env=env, check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
