#!/usr/bin/python3
"""How well a tuning database's own measurements rank its candidates: the ceiling of a cost model's ranking.

  bench/ranking_ceiling.py MODEL.onnx --db FILE [--target T] [--per-task 24] [--min-records 16] [--seed 0]
                           [--tie 0.01] [--warm] [--json FILE]

kiln-tune --rank-report (kiln.tuner.ranking_report) scores the cost model by
pairwise accuracy: the share of a task's candidate pairs, apart by more than
`tie` in time, that it orders as their records say. The records are single
measurements on a shared machine, so even a perfect model cannot score 1
against them. This measures the ceiling: per task of the model, up to
--per-task random valid records are measured again as the tuner measures
(its worker, repeat 3 of >= 20 ms, cold inputs unless --warm), and the
pairwise accuracy of the new medians against the recorded ones is printed
beside the task's record count, with the mean over tasks, and what that
agreement implies for a perfect model: if two independent measurements
agree on a share a of the pairs, one of them orders a pair as the true times
do with p, p^2 + (1-p)^2 = a, and p is the best score any cost model can
expect against the records.
"""
import argparse
import json
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [os.path.join(ROOT, "python"), os.path.join(ROOT, "build", "python")]
import kiln  # noqa: E402
from kiln.tuner import extract_tasks  # noqa: E402
from kiln._ffi import _kiln  # noqa: E402


def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="ranking_ceiling.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="the ONNX model the database was tuned for")
    ap.add_argument("--db", required=True)
    ap.add_argument("--target", default=f"llvm -num-cores={os.cpu_count() or 1}", help="the session's target")
    ap.add_argument("--per-task", type=int, default=24)
    ap.add_argument("--min-records", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tie", type=float, default=0.01)
    ap.add_argument("--warm", action="store_true", help="measure with warm inputs (for a session tuned without cold inputs)")
    ap.add_argument("--json", help="write the rows here")
    return ap.parse_args(argv)


def pairwise_accuracy(measured, again, tie):
    """(share, pairs): the pairs apart by more than `tie` in `measured` that `again` orders the same way (ties: half),
    as the ranking report counts them (tuner::pairwise_accuracy)."""
    return _kiln.tuner.pairwise_accuracy([float(x) for x in measured], [float(x) for x in again], float(tie))


def single_measurement_accuracy(agreement):
    """p with p^2 + (1 - p)^2 = agreement (0.5 <= agreement <= 1): one measurement's pairwise accuracy against the
    true times when two independent ones agree on `agreement` of the pairs."""
    return 0.5 * (1.0 + (2.0 * agreement - 1.0) ** 0.5)


def records_of(db, workload_key, cold):
    """(trace, median seconds) of the session's own valid records of a workload: cold-input ones carry the mark on their
    target; confirmations are left out."""
    return [(r.trace, r.median_time) for r in db.records(workload_key)
            if str(r.error_kind) == "none" and r.median_time and r.median_time > 0
            and ("[cold inputs]" in r.target.target) == cold and "[confirmed]" not in r.target.target]


def main(argv=None):
    args = parse_args(argv)
    if not os.path.exists(args.db):
        sys.exit(f"ranking_ceiling: no tuning database at {args.db!r}")
    model = kiln.graph.from_onnx(args.model)
    tasks, _ = extract_tasks(model, args.target, args.db)
    db = kiln.tuning_db.open(args.db, read_only=True)
    rng = random.Random(args.seed)
    rows = []
    print(f"ranking ceiling of {args.db}: {args.per_task} records a task measured again "
          f"({'warm' if args.warm else 'cold'} inputs), pairwise accuracy of the new medians against the recorded")
    for t in tasks:
        recs = records_of(db, t["workload_key"], not args.warm)
        if len(recs) < args.min_records:
            continue
        pick = rng.sample(recs, min(args.per_task, len(recs)))
        options = dict(repeat=3, min_repeat_ms=20.0, number=1, timeout_s=10.0, cold_inputs=not args.warm)
        out = _kiln.tuner.measure(t["task"], [trace for trace, _ in pick], options)
        kept = [(rec, sorted(o["run_times"])[len(o["run_times"]) // 2]) for (_, rec), o in zip(pick, out)
                if o["error"] == "none" and o["run_times"]]
        acc, pairs = pairwise_accuracy([r for r, _ in kept], [a for _, a in kept], args.tie)
        rows.append(dict(workload_key=t["workload_key"], ops=t.get("ops", ""), records=len(recs), measured=len(kept),
                         pairs=pairs, accuracy=acc))
        print(f"  {t['workload_key'][:16]}  {str(t.get('ops', ''))[:40]:40s} records {len(recs):5d}  "
              f"again {len(kept):3d}  pairs {pairs:4d}  accuracy {acc:.3f}", flush=True)
    scored = [r["accuracy"] for r in rows if r["accuracy"] >= 0]
    mean = sum(scored) / len(scored) if scored else -1.0
    print(f"mean over {len(scored)} tasks: {mean:.3f}")
    # Two noisy measurements agree on a pair with p^2 + (1-p)^2, p the chance that one of them orders it as the
    # true times do (independent noise): p is what a perfect cost model scores against one measurement.
    if mean >= 0.5:
        print(f"a perfect cost model would score about {single_measurement_accuracy(mean):.3f} against these records "
              f"(p with p^2 + (1-p)^2 = {mean:.3f})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(rows=rows, mean=mean, perfect_model=single_measurement_accuracy(mean) if mean >= 0.5 else -1.0), f, indent=1)


if __name__ == "__main__":
    main()
