#!/usr/bin/python3
"""One dynamic compile against a static compile per shape, and against ONNX Runtime on the same dynamic ONNX file.

  bench/dynamic_shapes_bench.py [--threads 2] [--rounds 7] [--repeat-ms 40] [--seqs 1,7,33,64,100,128,200,384]
                                [--batches 1,4] [--no-ort] [--quick] [--build DIR]

BERT-base encoder layer (nn.TransformerEncoderLayer(768, 12, 3072), batch_first) exported once with
batch and seq dynamic. kiln compiles that graph ONCE (kiln.compile of from_onnx's symbolic graph) and,
for comparison, once per (batch, seq) with the shape fixed (shapes={...}). Per shape, rounds interleave
the dynamic executor, the static one and ONNX Runtime (its own process, the same dynamic ONNX file,
graph optimization all, intra-op threads T, default spinning); the table shows ms (min / median) and the
median of the per-round ratios dyn/static and dyn/ORT. Also printed: compile seconds of the dynamic model
against the mean static compile, kernels compiled after kiln.compile returned (the JIT counter; must be 0),
and the first call at a new shape minus a call at that shape once seen, both after a pause and a cache flush
(first_call_cost), beside kiln's own planning time (Executor.run_stats); the arena is grown beforehand by one
call at the largest shape, as a server's first large request would.
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(HERE, "peers"))


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--repeat-ms", type=float, default=40)
    ap.add_argument("--seqs", default="1,7,33,64,100,128,200,384")
    ap.add_argument("--batches", default="1,4")
    ap.add_argument("--no-ort", action="store_true", help="leave ONNX Runtime out")
    ap.add_argument("--quick", action="store_true", help="a small layer (d 128) and three shapes: a smoke run")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    return ap.parse_args()


def import_kiln(build):
    try:
        import kiln
    except ImportError:
        sys.path[:0] = [os.path.join(ROOT, "python"), os.path.join(build, "python")]
        import kiln
    return kiln


def time_per_call(run, repeat_ms):
    """Seconds per call over at least repeat_ms of back-to-back calls."""
    calls, start = 0, time.perf_counter()
    while True:
        run()
        calls += 1
        elapsed = time.perf_counter() - start
        if elapsed * 1e3 >= repeat_ms:
            return elapsed / calls


FLUSH_BYTES = 64 << 20  # read before each call of first_call_cost: more than the last-level cache


def first_call_cost(exe, run, seen_calls=5, pause_s=0.2):
    """The first call of `run` (a call of dynamic executor `exe` at a shape it has not seen) against a call at
    that shape once seen, each after a pause (kiln's threads asleep) and after reading FLUSH_BYTES (cold
    caches), so that the difference is what a new shape costs: kiln's planning (run_stats' last_plan_seconds:
    bind, check, place, each step's kernel and scalars; and any arena growth) and what remains, the kernels'
    first run at these sizes. Returns a dict of ms: extra (first minus the median seen), plan, first, seen;
    and arena_allocations (0 or 1) and plans (1: the shape was new)."""
    import numpy as np
    flush = np.ones(FLUSH_BYTES // 8)

    def cold_call():
        time.sleep(pause_s)
        flush.sum()
        t = time.perf_counter()
        run()
        return time.perf_counter() - t
    before = exe.run_stats()
    first = cold_call()
    after = exe.run_stats()
    seen = statistics.median(cold_call() for _ in range(seen_calls))
    plans = after["plans"] - before["plans"]
    return {"extra": (first - seen) * 1e3, "plan": after["last_plan_seconds"] * 1e3 if plans else 0.0, "first": first * 1e3,
            "seen": seen * 1e3, "plans": plans, "arena_allocations": after["arena_allocations"] - before["arena_allocations"]}


def main():
    args = parse_args()
    os.environ.setdefault("KILN_NUM_THREADS", str(args.threads))
    import numpy as np
    import torch
    kiln = import_kiln(args.build)
    import blas_choice
    import ort_peer

    d, heads, ff = (128, 4, 256) if args.quick else (768, 12, 3072)
    seqs = [int(s) for s in args.seqs.split(",")]
    batches = [int(b) for b in args.batches.split(",")]
    shapes = [(b, s) for b in batches for s in seqs]
    if args.quick:
        shapes = [(1, 7), (1, 64), (2, 33)]
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model=d, nhead=heads, dim_feedforward=ff, dropout=0.0, batch_first=True).eval()
    tmp = tempfile.TemporaryDirectory(prefix="kiln_dyn_bench_")
    onnx_path = os.path.join(tmp.name, "bert_layer_dynamic.onnx")
    torch.onnx.export(layer, (torch.randn(1, 16, d),), onnx_path, input_names=["input"], opset_version=13,
                      dynamic_axes={"input": {0: "batch", 1: "seq"}}, do_constant_folding=True)
    target = f"llvm -num-cores={args.threads}"

    m = blas_choice.machine()
    print(f"kiln dynamic-shape bench on {m['host']}: {m['cpu']}, {m['isa']}, {m['cores']} cores; kiln threads {args.threads}")
    print(f"model: BERT encoder layer d={d}, heads={heads}, ff={ff}, float32, batch_first; ONNX opset 13, batch and seq dynamic")
    ort_why = None if not args.no_ort else "--no-ort"
    ort_why = ort_why or ort_peer.unavailable()
    print(f"ONNX Runtime {ort_peer.version() or '-'}: " + (f"not run ({ort_why})" if ort_why else
          f"onnxruntime-node CPU provider, graph optimization all, intra-op threads {args.threads}, default spinning, "
          "the same dynamic ONNX file, its own process, warmed up"))

    t0 = time.perf_counter()
    dyn = kiln.compile(kiln.graph.from_onnx(onnx_path), target=target)
    dyn_compile = time.perf_counter() - t0
    dyn_builds = 0  # kernels compiled while the dynamic executor ran new shapes (kiln.build_count)

    # The largest shape first, so that the arena has grown already: the first call at each shape
    # below then costs its planning (bind, check, place, cache), not first-touch page faults.
    big = max(shapes, key=lambda bs: bs[0] * bs[1])
    dyn.run([np.zeros((big[0], big[1], d), np.float32)])
    rows, static_compiles, first_call = [], [], []
    for b, s in shapes:
        rng = np.random.default_rng(b * 1000 + s)
        x = rng.standard_normal((b, s, d)).astype(np.float32)
        with torch.no_grad():
            want = layer(torch.from_numpy(x)).numpy()
        # First call at a new shape against a call at a seen shape, both cold: what a new shape costs.
        before = kiln.build_count()
        first_call.append(first_call_cost(dyn, lambda: dyn.run([x])))
        dyn_builds += kiln.build_count() - before
        got = dyn.run([x])[0]
        err = float(np.max(np.abs(got - want)) / max(1e-6, float(np.max(np.abs(want)))))
        t = time.perf_counter()
        static = kiln.compile(kiln.graph.from_onnx(onnx_path, shapes={"input": (b, s, d)}), target=target)
        static_compiles.append(time.perf_counter() - t)
        peer = None
        if not ort_why:
            try:
                peer = ort_peer.OrtPeer(onnx_path, {"input": x}, want, args.threads)
            except Exception as e:  # noqa: BLE001 -- report and go on without the peer
                print(f"  ONNX Runtime at {(b, s)}: {e}")
        td, ts, to = [], [], []
        for _ in range(args.rounds):
            # A pause before each side: ONNX Runtime's threads spin on after its last call (its default), and
            # kiln's own for a while too; timed right after, the next side would share the cores with them.
            time.sleep(0.2)
            td.append(time_per_call(lambda: dyn.run([x]), args.repeat_ms))
            time.sleep(0.2)
            ts.append(time_per_call(lambda: static.run([x]), args.repeat_ms))
            if peer:
                time.sleep(0.2)
                to.append(min(peer.time(1, args.repeat_ms)))
        if peer:
            peer.close()
        rows.append((b, s, td, ts, to, err))

    print(f"\n{'batch':>5} {'seq':>4} | {'dyn ms min/med':>15} | {'static ms min/med':>17} | {'dyn/static':>10} |"
          f" {'ORT ms min/med':>15} | {'dyn/ORT':>7} | rel err")
    for b, s, td, ts, to, err in rows:
        r_static = statistics.median(a / c for a, c in zip(td, ts))
        line = (f"{b:>5} {s:>4} | {min(td)*1e3:6.3f} / {statistics.median(td)*1e3:6.3f} | {min(ts)*1e3:7.3f} / {statistics.median(ts)*1e3:7.3f} |"
                f" {r_static:10.3f} |")
        if to:
            line += f" {min(to)*1e3:6.3f} / {statistics.median(to)*1e3:6.3f} | {statistics.median(a / c for a, c in zip(td, to)):7.3f} |"
        else:
            line += f" {'-':>15} | {'-':>7} |"
        print(line + f" {err:.1e}")
    print(f"\ncompile: dynamic {dyn_compile:.2f} s, static {statistics.mean(static_compiles):.2f} s mean per shape "
          f"(dynamic / static {dyn_compile / statistics.mean(static_compiles):.2f})")
    print(f"kernels compiled by the dynamic executor after kiln.compile returned, over {len(rows)} new shapes: {dyn_builds} "
          "(kiln.build_count around its first call at each shape)")
    print_first_call(first_call)


def print_first_call(costs):
    """The summary of first_call_cost() over the shapes."""
    extra, plan = [c["extra"] for c in costs], [c["plan"] for c in costs]
    print(f"first call at a new shape minus a call at that shape once seen (each after a pause and a {FLUSH_BYTES >> 20} MB cache flush), "
          f"over {len(costs)} shapes: median {statistics.median(extra):.3f} ms (range {min(extra):.3f} to {max(extra):.3f}); of it kiln's "
          f"planning (bind, check, place, kernels' scalars, arena growth; run_stats): median {statistics.median(plan):.3f} ms, max {max(plan):.3f} ms; "
          f"arena allocations at new shapes: {sum(c['arena_allocations'] for c in costs)}; the rest is the kernels' first run at those sizes (cold caches, and first touch of output arrays the allocator takes fresh from the system)")


if __name__ == "__main__":
    main()
