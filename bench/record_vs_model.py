"""Do tuning records predict the model? Per fused group of a compiled model:
its time inside the model (exe.profile), the best record's time in the DB,
and that record's schedule re-measured alone, warm (inputs in cache, as the
tuner measures) and cold (every input but the first evicted before each call,
as a layer's weights are inside a model run).

    PYTHONPATH=python:build/python /usr/bin/python3 bench/record_vs_model.py MODEL.onnx --db FILE [--threads 2]

Times are min and median over --rounds interleaved rounds (model, then each
group warm, then cold), so a burst of load on a shared machine hits all columns.
"""
import argparse
import os
import sys

import numpy as np

import kiln
from kiln.tuner import extract_tasks


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers"))
import blas_choice  # noqa: E402


def cpu_name():
    m = blas_choice.machine()
    return f"{m['cpu']}, {m['isa']}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--db", required=True)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    os.environ.setdefault("KILN_NUM_THREADS", str(args.threads))
    target = f"llvm -num-cores={args.threads}"
    model = kiln.graph.from_onnx(args.model)
    exe = kiln.compile(model, target=target, db=args.db, quiet=True)
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(t[0]).astype(t[1]) for t in model.input_types]
    tasks, _ = extract_tasks(model, target=target, db=args.db)
    by_key = {t["workload_key"]: t for t in tasks}
    groups = exe.groups()
    best = {}
    for g in groups:
        t = by_key.get(g["workload_key"])
        if t is not None and t["records"] and g["workload_key"] not in best:
            found = kiln._ffi._kiln.tuner.best_record(t["task"], args.db)
            if found:
                best[g["workload_key"]] = (t["task"], found[1], found[3])
    in_model = [[] for _ in groups]
    alone = {k: {False: [], True: []} for k in best}
    for _ in range(args.rounds):
        for i, row in enumerate(exe.profile(*inputs, repeats=5)):
            in_model[i].append(row["seconds"])
        for k, (task, trace, _) in best.items():
            for cold in (False, True):
                r = kiln.tuner.measure(task, [trace], repeat=3, min_repeat_ms=10, cold_inputs=cold)[0]
                alone[k][cold].append(min(r["run_times"]) if r["run_times"] else float("nan"))
    print(f"kiln record vs model on {cpu_name()}, {args.threads} threads; {args.rounds} rounds; ms as min/median")
    print(f"{'group':56s} {'model':>15s} {'db best':>8s} {'warm':>15s} {'cold':>15s} {'model/warm':>10s} {'model/cold':>10s}")
    sums = np.zeros(4)
    fmt = lambda v: f"{min(v) * 1e3:7.3f}/{np.median(v) * 1e3:<7.3f}"
    for g, m in zip(groups, in_model):
        k = g["workload_key"]
        if k not in best:
            print(f"{g['name'][:56]:56s} {fmt(m)} {'(no record)':>8s}")
            continue
        w, c, db = alone[k][False], alone[k][True], best[k][2]
        sums += [np.median(m), db, np.median(w), np.median(c)]
        print(f"{g['name'][:56]:56s} {fmt(m)} {db * 1e3:8.3f} {fmt(w)} {fmt(c)} {np.median(m) / np.median(w):10.2f} {np.median(m) / np.median(c):10.2f}")
    print(f"sum of medians over groups with a record: model {sums[0] * 1e3:.2f} ms, db {sums[1] * 1e3:.2f} ms, "
          f"warm {sums[2] * 1e3:.2f} ms, cold {sums[3] * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
