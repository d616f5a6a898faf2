#!/usr/bin/python3
"""How a model's speed grows with tuning trials: kiln after N trials against the best peer (ONNX Runtime or PyTorch), in one run.

  bench/model_tuning_table.py [--model resnet18[,squeezenet1_1,...]] [--checkpoints 500,1000,2000] [--threads 1,2]
                              [--tune-threads 2] [--image-size 224] [--db FILE] [--workdir DIR] [--build DIR]
                              [--time-budget 60m] [--graph-share 0.25] [--graph-cost 10] [--gain-rounds 11]
                              [--tune-only | --bench-only]

Several models (comma-separated) each get their own stages and table, one after the other.

The model is exported to ONNX as bench/model_bench.py exports it (random
seeded weights, batch 1, the same opset), so its tasks have the workload keys
model_bench's compile looks up. kiln-tune MODEL.onnx tunes it in stages, one
per checkpoint (each stage resumes from the database: a stage's trials are
the checkpoint minus the previous one; kiln-tune spends --graph-share of them
on the graph-level search, each candidate plan counting --graph-cost trials),
the wall time of each stage is kept,
and the database is copied at every checkpoint (SQLite's backup API). Then
model_bench times kiln compiled with each copy against ONNX Runtime and PyTorch's best setup
(interleaved, its own default threading), and the table gives per
checkpoint: trials, cumulative tuning wall time, the tuner's estimate (sum of
the best records) and model_bench's kiln min/median, peer median and ratio
(below 1: kiln is faster). --db with an existing database resumes it:
trials already there count toward the checkpoints.

Those rows come from separate runs, and on a shared machine two runs can
differ by more than tuning gains. So each checkpoint also gets what tuning
bought, measured in one process: kiln compiled with the copy and kiln
compiled with no database (its default schedules), --gain-rounds rounds
alternating the two (each side's best of 3 runs of >= 10 ms a round), the
median of the per-round ratios tuned / default with their range (below 1:
the records are faster), after both outputs are checked against PyTorch.
"""
import argparse
import json
import os
import re
import sqlite3
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "peers"))
import model_bench  # noqa: E402
import peer_timing  # noqa: E402
import torch_models  # noqa: E402


def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="model_tuning_table.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="resnet18", help=f"one of {', '.join(torch_models.MODELS)}")
    ap.add_argument("--checkpoints", type=lambda s: model_bench._int_list(s, "--checkpoints"), default=[500, 1000, 2000])
    ap.add_argument("--threads", type=lambda s: model_bench._int_list(s, "--threads"), default=[1, 2], help="model_bench's threads")
    ap.add_argument("--tune-threads", type=int, default=os.cpu_count() or 1, help="kernel threads while tuning (the target's cores)")
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--opset", type=int, default=14)
    ap.add_argument("--db", help="the session's database (default: WORKDIR/MODEL.db)")
    ap.add_argument("--workdir", default="model_tuning", help="where the ONNX file, the database and its copies go")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--time-budget", default=None, help="per stage, passed to kiln-tune --time-budget")
    ap.add_argument("--graph-share", type=float, default=0.25, help="kiln-tune --graph-share: the trials' share for graph-level choices")
    ap.add_argument("--graph-cost", type=int, default=10, help="kiln-tune --graph-cost: trials one graph candidate counts")
    ap.add_argument("--repeat", type=int, default=7, help="model_bench's interleaved rounds")
    ap.add_argument("--tune-only", action="store_true", help="tune and copy the database at each checkpoint; no timing")
    ap.add_argument("--bench-only", action="store_true", help="time the copies an earlier --tune-only run left (its stages.json)")
    ap.add_argument("--gain-rounds", type=int, default=11, help="rounds of tuned against default kiln per checkpoint (0: skip)")
    ap.add_argument("--tol", type=float, default=1e-3, help="largest relative error against PyTorch of either compile")
    return ap.parse_args(argv)


def export_model(args, path):
    import torch
    torch.set_num_threads(1)
    module, x = torch_models.build(args.model, args.image_size, args.seq_len)
    with torch.enable_grad():
        torch.onnx.export(module, (x,), path, input_names=["input"], output_names=["output"], opset_version=args.opset)


def task_keys(args, onnx_path):
    """The workload keys of the model's tasks (every layout variant) and the model's key, from kiln-tune --list-tasks."""
    tool = os.path.join(args.build, "tuner", "kiln-tune")
    out = subprocess.run([tool, onnx_path, "--list-tasks", "--threads", str(args.tune_threads)], capture_output=True, text=True, check=True)
    keys = [line.split()[1] for line in out.stdout.splitlines() if re.match(r"^\d+\s+[0-9a-f]{16}\s", line)]
    m = re.search(r"^model key: (\S+)", out.stdout, re.M)
    return keys, m.group(1) if m else None


def graph_candidates(db, model_key):
    """Candidate plans the graph-level search measured for the model (each counts --graph-cost trials)."""
    if not model_key or not os.path.exists(db):
        return 0
    with sqlite3.connect(db) as c:
        if not c.execute("SELECT COUNT(*) FROM sqlite_schema WHERE name = 'graph_candidates'").fetchone()[0]:
            return 0
        return c.execute("SELECT COUNT(*) FROM graph_candidates WHERE model_key = ?", (model_key,)).fetchone()[0]


def measured_records(args, db, keys):
    """Trials spent: measurements (valid and failed) of the model's tasks in the database, and its graph candidates at
    --graph-cost each. Records of groups only a tuned graph plan has (a direct conv where the default runs Winograd)
    are not among the listed tasks and do not count: a stage may run a little over its checkpoint."""
    keys, model_key = keys
    if not os.path.exists(db):
        return 0
    with sqlite3.connect(db) as c:
        marks = ",".join("?" * len(keys))
        n = c.execute(f"SELECT COUNT(*) FROM records r JOIN workloads w ON r.workload_id = w.id WHERE w.workload_key IN ({marks})",
                      keys).fetchone()[0]
    return n + graph_candidates(db, model_key) * args.graph_cost


def snapshot(db, path):
    """A consistent copy of the database, written under a temporary name and renamed."""
    tmp = path + ".tmp"
    if os.path.exists(tmp):
        os.remove(tmp)
    src, dst = sqlite3.connect(db), sqlite3.connect(tmp)
    with dst:
        src.backup(dst)
    src.close()
    dst.close()
    os.replace(tmp, path)


def tune_stage(args, onnx_path, db, trials):
    """Runs kiln-tune for `trials` more measurements; returns (wall seconds, the tuner's estimate in ms or None)."""
    tool = os.path.join(args.build, "tuner", "kiln-tune")
    cmd = [tool, onnx_path, "--trials", str(trials), "--db", db, "--threads", str(args.tune_threads), "--quiet",
           "--graph-share", str(args.graph_share), "--graph-cost", str(args.graph_cost)]
    if args.time_budget:
        cmd += ["--time-budget", args.time_budget]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        raise SystemExit(f"kiln-tune failed ({out.returncode}):\n{out.stderr[-3000:]}")
    m = re.search(r"estimated model latency \(per group, the best of its tasks, summed\): ([0-9.]+) ms", out.stdout)
    for line in out.stdout.splitlines():
        if line.startswith("warning:") or line.startswith("graph search:"):
            print(line, file=sys.stderr)
    return wall, float(m.group(1)) if m else None


def bench(args, db, tmp_json):
    cmd = [sys.executable, os.path.join(HERE, "model_bench.py"), "--models", args.model, "--threads", ",".join(map(str, args.threads)),
           "--image-size", str(args.image_size), "--seq-len", str(args.seq_len), "--opset", str(args.opset), "--db", db,
           "--repeat", str(args.repeat), "--json", tmp_json, "--build", args.build]
    if os.path.exists(tmp_json):
        os.remove(tmp_json)  # an earlier run's rows must not pass for this one's
    proc = subprocess.run(cmd, stdout=sys.stderr, check=False)
    if not os.path.exists(tmp_json):
        raise SystemExit(f"model_bench.py wrote no rows (status {proc.returncode}; its messages are above)")
    with open(tmp_json) as f:
        return json.load(f)


def gain_child(spec):
    """In a process with KILN_NUM_THREADS set: tuned against default kiln, interleaved; returns the gain's fields."""
    import numpy as np
    import torch
    torch.set_num_threads(1)
    kiln = model_bench.import_kiln(spec["build"])
    module, x = torch_models.build(spec["model"], spec["image_size"], spec["seq_len"])
    with torch.no_grad():
        ref = module(x).numpy()
    model = model_bench.kiln_model(kiln, module, x, model_bench.export_onnx(module, x, spec["opset"]))
    target = f"llvm -num-cores={spec['threads']}"
    xn = x.numpy()
    runs, errors = [], []
    for db in (spec["db"], None):
        exe = kiln.compile(model, target=target, db=db, quiet=True)
        if db:
            tuned, total = exe.tuned_groups()
            # Records for another core count only: both sides would be the defaults. Not so with a tuned
            # graph plan, whose groups (another channel block, a direct conv) may have no records yet.
            plan = any(d["why"].startswith("tuned graph plan") for d in exe.layout_decisions())
            if tuned == 0 and not plan:
                return {"tuned_groups": 0, "total_groups": total}
        err = torch_models.rel_err(exe(xn)[0], ref)
        if not err <= spec["tol"]:  # NaN included
            raise SystemExit(f"kiln compiled {'with ' + db if db else 'without a database'} is WRONG: relative error {err:.3g}")
        errors.append(err)
        runs.append(lambda exe=exe: exe(xn))
    # Back-to-back calls of >= 10 ms a measurement (one call of a real model), as model_bench's rounds.
    number = max(peer_timing.calls_per_repeat(peer_timing.warm_up(run, 3, 0.2), 0.01) for run in runs)
    best = [[], []]
    for r in range(spec["rounds"]):
        for side in ((0, 1) if r % 2 == 0 else (1, 0)):  # who goes first alternates
            best[side].append(min(peer_timing.time_calls(runs[side], 3, number)) * 1e3)
    ratios = [a / b for a, b in zip(*best)]
    return {"tuned_min": min(best[0]), "tuned_median": float(np.median(best[0])), "default_min": min(best[1]),
            "default_median": float(np.median(best[1])), "gain_median": float(np.median(ratios)), "gain_min": min(ratios),
            "gain_max": max(ratios), "gain_rounds": spec["rounds"], "max_err": max(errors), "tuned_groups": tuned,
            "total_groups": total}


def tuning_gain(args, db, threads):
    """gain_child in a fresh process at `threads` kernel threads; a failure is a dict with an error."""
    spec = {"model": args.model, "image_size": args.image_size, "seq_len": args.seq_len, "opset": args.opset, "build": args.build,
            "db": db, "threads": threads, "rounds": args.gain_rounds, "tol": args.tol}
    env = dict(os.environ, KILN_NUM_THREADS=str(threads), OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--gain-child", json.dumps(spec)], env=env, capture_output=True,
                         text=True)
    if out.returncode != 0:
        return {"error": (out.stderr.strip().splitlines() or [f"status {out.returncode}"])[-1]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--gain-child"]:
        print(json.dumps(gain_child(json.loads(argv[1]))))
        return 0
    args = parse_args(argv)
    os.makedirs(args.workdir, exist_ok=True)
    status = 0
    for model in [m for m in args.model.split(",") if m]:
        args.model = model
        status = model_table(args) or status
    return status


def model_table(args):
    """One model's stages and table (main's loop over --model)."""
    onnx_path = os.path.join(args.workdir, f"{args.model}_{args.image_size}.onnx")
    db = args.db or os.path.join(args.workdir, f"{args.model}.db")
    if not os.path.exists(onnx_path):
        export_model(args, onnx_path)
    stages_file = os.path.join(args.workdir, f"{args.model}_stages.json")
    if args.bench_only:
        with open(stages_file) as f:
            return print_table(args, json.load(f))
    keys = task_keys(args, onnx_path)
    stages = []
    wall = 0.0
    for n in sorted(args.checkpoints):
        have = measured_records(args, db, keys)
        estimate = None
        if n > have:
            seconds, estimate = tune_stage(args, onnx_path, db, n - have)
            wall += seconds
        copy = os.path.join(args.workdir, f"{args.model}_{n}.db")
        snapshot(db, copy)
        stages.append({"trials": measured_records(args, copy, keys), "graph_candidates": graph_candidates(copy, keys[1]), "checkpoint": n, "wall_s": wall, "estimate_ms": estimate, "db": copy})
        print(f"model_tuning_table: checkpoint {n}: {stages[-1]['trials']} trials ({stages[-1]['graph_candidates']} graph candidates), "
              f"{wall:.0f} s of tuning", file=sys.stderr, flush=True)
        with open(stages_file, "w") as f:
            json.dump(stages, f, indent=1)
    if args.tune_only:
        return 0
    return print_table(args, stages)


def print_table(args, stages):
    m = model_bench.machine()
    print(f"{args.model} {args.image_size}x{args.image_size}, batch 1; tuned with {args.tune_threads} thread(s); "
          f"CPU {m['cpu']} ({m['isa']}, {m['cores']} cores)")
    fmt = "{:>7} {:>5} {:>9} {:>10} {:>2} {:>9} {:>9} {:>9}  {:<18} {:<29} {}"
    print(fmt.format("trials", "graph", "tune (s)", "est. (ms)", "T", "kiln min", "kiln med", "peer med", "kiln/peer (range)",
                     "tuned/default (range; mins)", "best peer"))
    for st in stages:
        rows_file = os.path.join(args.workdir, f"rows_{args.model}_{st['checkpoint']}.json")
        data = bench(args, st["db"], rows_file)
        for r in data["rows"]:
            ratio = "-" if r.get("ratio_median") is None else f"{r['ratio_median']:.2f} ({r['ratio_min']:.2f}..{r['ratio_max']:.2f})"
            est = "-" if st["estimate_ms"] is None else f"{st['estimate_ms']:.2f}"
            gain = "-"
            if args.gain_rounds > 0:
                g = r["gain"] = tuning_gain(args, st["db"], r["threads"])
                gain = ("failed: " + g["error"][:60] if "error" in g else "- (no group tuned for it)" if "gain_median" not in g else
                        f"{g['gain_median']:.2f} ({g['gain_min']:.2f}..{g['gain_max']:.2f}; {g['tuned_min']:.3g}/{g['default_min']:.3g})")
            print(fmt.format(st["trials"], st.get("graph_candidates", "-"), f"{st['wall_s']:.0f}", est, r["threads"], model_bench._f(r.get("kiln_min"), ".2f"),
                             model_bench._f(r.get("kiln_median"), ".2f"), model_bench._f(r.get("peer_median"), ".2f"), ratio, gain,
                             r.get("peer") or r.get("kiln_error", "-")[:80]), flush=True)
        with open(rows_file + ".tmp", "w") as f:  # the rows with their gains, never half-written
            json.dump(data, f, indent=1)
        os.replace(rows_file + ".tmp", rows_file)
    print(f"trials: loop measurements plus graph candidates at {args.graph_cost} trials each; graph: the graph-level candidates "
          "measured (each a whole-model compile and timing; the winner is the plan kiln.compile(db=) takes). "
          "est.: kiln-tune's estimated model latency after the stage (per group, the best record of its tasks, summed); "
          "each stage ends by measuring every task's best few schedules again side by side, which replaces its luckiest "
          "single measurements, so the estimate can rise between checkpoints; tuned/default: kiln with the checkpoint's "
          f"records and graph plan against kiln's default schedules and plan (untuned), {args.gain_rounds} interleaved rounds in one process, median of "
          "per-round ratios (range; the two minima in ms), below 1 the records are faster")
    return 0


if __name__ == "__main__":
    sys.exit(main())
