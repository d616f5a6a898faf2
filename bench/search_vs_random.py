"""What the cost model buys: the model-guided search against random search on
the heaviest tasks of a model, in trials to reach a given kernel time.

    PYTHONPATH=python:build/python /usr/bin/python3 bench/search_vs_random.py \
        --model resnet18 --image-size 224 --tasks 3 --trials 192 --seeds 2

The tasks are those compiling the model runs (blocked convolutions under the
default layout plan, not the plain NCHW ones). Each (task, policy, seed)
tunes from an empty database (no pre-trained model), so both policies start
from the same seed candidates and differ only in how they pick the rest:
`evolutionary` by the cost model (kiln's default), `random` by uniform
samples of the same space. Both run in one process, the
policies alternating, so a burst of load on a shared machine hits both.

Printed per task: the median over seeds of the best kernel time after each
checkpoint, and the trials each policy needed to come within --within of the
best time either found (the lower, the better). --json FILE writes each run's
best-so-far curve as it finishes, so a run cut short keeps what it measured.
"""
import argparse
import json
import os
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "peers"))
import blas_choice  # noqa: E402
import model_bench  # noqa: E402
import torch_models  # noqa: E402

POLICIES = ("evolutionary", "random")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="resnet18", help=f"one of {', '.join(torch_models.MODELS)}")
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--tasks", type=int, default=3, help="the heaviest tasks (weight x FLOPs) of the model")
    ap.add_argument("--trials", type=int, default=192)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--within", type=float, default=0.10, help="'reached' = within this share of the best time found")
    ap.add_argument("--checkpoints", type=lambda s: model_bench._int_list(s, "--checkpoints"), default=[32, 64, 128, 192])
    ap.add_argument("--json", help="write the curves here (rewritten after every run)")
    return ap.parse_args(argv)


def best_so_far(result):
    """Best kernel time (s) after each measured trial; inf until the first valid one."""
    gf = np.asarray(result.trial_gflops, dtype=float)
    t = np.where(gf > 0, result.task.flop / np.maximum(gf, 1e-30) / 1e9, np.inf)
    return np.minimum.accumulate(t) if len(t) else t


def first_within(curve, goal):
    hit = np.nonzero(curve <= goal)[0]
    return int(hit[0]) + 1 if len(hit) else None


def write_curves(path, tasks, curves):
    """Every finished run's curve (seconds; inf before the first valid trial shows as null), atomically."""
    out = {"tasks": [{"label": task_label(t), "workload_key": t["workload_key"]} for t in tasks],
           "curves": [{"task": ti, "policy": p, "runs": [[float(v) if np.isfinite(v) else None for v in c] for c in cs]}
                      for (ti, p), cs in sorted(curves.items())]}
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(out, f)
    os.replace(tmp, path)


def main(argv=None):
    args = parse_args(argv)
    os.environ.setdefault("KILN_NUM_THREADS", str(args.threads))
    import torch
    import kiln
    from kiln.tuner import extract_tasks

    torch.set_num_threads(1)
    module, x = torch_models.build(args.model, args.image_size, args.seq_len)
    model = model_bench.kiln_model(kiln, module, x, model_bench.export_onnx(module, x, 14))
    target = f"llvm -num-cores={args.threads}"
    tasks, _ = extract_tasks(model, target=target)
    tasks = sorted([t for t in tasks if t["in_default_plan"]], key=lambda t: -t["weight"] * t["flop"])[:args.tasks]
    m = blas_choice.machine()
    print(f"search vs random on {m['cpu']}, {m['isa']}; {args.model} {args.image_size}; {args.trials} trials, "
          f"batch {args.batch}, {args.seeds} seeds, {args.threads} kernel threads; fresh database per run")
    curves = {}
    with tempfile.TemporaryDirectory() as tmp:
        for ti, t in enumerate(tasks):
            for seed in range(args.seeds):
                for policy in POLICIES:
                    db = os.path.join(tmp, f"t{ti}_{policy}_{seed}.db")
                    r = kiln.tune(t["task"], target=target, trials=args.trials, db=db, seed=seed, batch_size=args.batch,
                                  early_stop_rounds=10**6, progress=False, random_search=(policy == "random"))
                    c = best_so_far(r)
                    curves.setdefault((ti, policy), []).append(c)
                    print(f"  task {ti} seed {seed} {policy:12s}: best {c[-1] * 1e3:.4f} ms after {len(c)} trials "
                          f"({r.elapsed_s:.0f} s)", flush=True)
                    if args.json:
                        write_curves(args.json, tasks, curves)
    for line in report(tasks, curves, args):
        print(line)


def task_label(t):
    """A task's operators and its first group (as extract_tasks lists them), with its weight."""
    group = t["groups"][0] if t.get("groups") else ""
    return f"{t['ops'].replace('kiln.', '')[:24]} {group[-14:]} x{t['weight']}"


def report(tasks, curves, args):
    """The table's lines: per task and policy, the median best time at each checkpoint and the trials to the goal."""
    cps = [c for c in args.checkpoints if c <= args.trials]
    head = " ".join(f"{'@' + str(c):>9s}" for c in cps)
    lines = ["", f"{'task':44s} {'policy':12s} {head} {'trials to within ' + format(args.within, '.0%'):>24s}"]
    for ti, t in enumerate(tasks):
        goal = min(float(np.min(c)) for p in POLICIES for c in curves[(ti, p)]) * (1 + args.within)
        for policy in POLICIES:
            cs = curves[(ti, policy)]
            at = [np.median([c[min(k, len(c)) - 1] for c in cs]) * 1e3 for k in cps]
            reach = [first_within(c, goal) for c in cs]
            reach_s = ", ".join(str(v) if v else f">{len(c)}" for v, c in zip(reach, cs))
            name = task_label(t)[:44] if policy == POLICIES[0] else ""
            lines.append(f"{name:44s} {policy:12s} " + " ".join(f"{v:9.4f}" for v in at) + f" {reach_s:>24s}")
    lines.append("times in ms: median over seeds of the best kernel time after N trials; "
                 "trials to within: per seed, the first trial within the goal (the best either policy found + the margin)")
    return lines


if __name__ == "__main__":
    main()
