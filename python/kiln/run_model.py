"""kiln-run: compile an ONNX model, run it on random input, check it, time it.

    kiln-run model.onnx [--shape input=1x3x224x224] [--db FILE] [--threads N]
    kiln-run model.so [--threads N] [--repeat N]


Compiles the model (fused, default schedules or the DB's best records),
runs it on random input, checks the result against the same graph run op by
op with plain kernels (no fusion, no schedules: an independent reference),
and prints the time per run, the fused groups and the memory figures.
"""
import argparse
import os
import sys
import time


def parse_shapes(items):
    """--shape NAME=D0xD1x... options as {name: shape} (kiln-run and kiln-compile)."""
    shapes = {}
    for item in items or []:
        name, sep, dims = item.rpartition("=")
        if not sep or not name:
            raise SystemExit(f"kiln-run: --shape takes NAME=D0xD1x..., got {item!r}")
        try:
            shapes[name] = tuple(int(d) for d in dims.lower().split("x"))
        except ValueError:
            raise SystemExit(f"kiln-run: --shape {item!r}: dimensions must be integers separated by 'x'")
    return shapes


def _random_inputs(model, rng):
    import numpy as np
    feed = []
    for (shape, dtype) in model.input_types:
        if dtype.startswith("float"):
            feed.append(rng.standard_normal(shape).astype(dtype))
        elif dtype == "bool":
            feed.append(rng.integers(0, 2, shape).astype(bool))
        else:
            feed.append(rng.integers(0, 4, shape).astype(dtype))
    return feed


def _time(exe, feed, repeat):
    times = []
    exe(*feed)  # warm-up
    for _ in range(repeat):
        t0 = time.perf_counter()
        exe(*feed)
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[0], times[len(times) // 2]


def main(argv=None):
    ap = argparse.ArgumentParser(prog="kiln-run", description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="an ONNX file, or a model library exported by Executor.export_library (.so)")
    ap.add_argument("--shape", action="append", metavar="NAME=D0xD1x...", help="an input's shape (for dynamic dimensions, or to override)")
    ap.add_argument("--db", default=None, help="tuning database: groups take their workload's best record")
    ap.add_argument("--threads", type=int, default=None, help="kernel threads (default: the cores available)")
    ap.add_argument("--target", default="llvm")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--no-check", action="store_true", help="skip the op-by-op reference run")
    ap.add_argument("--profile", action="store_true", help="print the time of every group")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.threads is not None:
        if args.threads < 1:
            raise SystemExit("kiln-run: --threads must be at least 1")
        os.environ["KILN_NUM_THREADS"] = str(args.threads)  # read when kiln's thread pool starts
    import numpy as np
    import kiln

    if not os.path.exists(args.model):
        raise SystemExit(f"kiln-run: no such file: {args.model}")
    if args.model.endswith(".so"):
        return _run_library(args)
    try:
        model = kiln.graph.from_onnx(args.model, shapes=parse_shapes(args.shape))
        # Random inputs need sizes: a symbolic dimension must be given one (kiln-compile keeps it symbolic).
        for name, (shape, _) in zip(model.input_names, model.input_types):
            symbolic = [d for d in shape if isinstance(d, str)]
            if symbolic:
                example = "x".join(str(d) if isinstance(d, int) else "1" for d in shape)
                print(f"kiln-run: input '{name}' has the symbolic dimension '{symbolic[0]}' (shape {list(shape)}); "
                      f"give its size to run on random data: --shape {name}={example}", file=sys.stderr)
                return 2
        exe = kiln.compile(model, target=args.target, db=args.db, quiet=True)
    except kiln.KilnError as e:
        print(f"kiln-run: {e}", file=sys.stderr)
        return 2
    rng = np.random.default_rng(args.seed)
    feed = _random_inputs(model, rng)
    outs = exe(*feed)
    groups = exe.groups()
    n_ops = len(model.op_types())
    print(f"model: {args.model}")
    print("inputs: " + ", ".join(f"{n} {t[1]}{list(t[0])}" for n, t in zip(model.input_names, model.input_types)))
    print(f"compile: {exe.compile_seconds:.2f} s; {n_ops} operators -> {len(groups)} fused groups, {exe.num_kernels} distinct kernels")
    sources = {}
    for g in groups:
        sources[g["schedule"]] = sources.get(g["schedule"], 0) + 1
    print("schedules: " + ", ".join(f"{v} {k}" for k, v in sorted(sources.items())))
    if not args.no_check:
        ref = kiln.compile(model, target=args.target, fuse=False, plain=True, layout=False)(*feed)
        worst = 0.0
        for o, r in zip(outs, ref):
            o64, r64 = np.asarray(o, np.float64), np.asarray(r, np.float64)
            worst = max(worst, float(np.max(np.abs(o64 - r64)) / (np.max(np.abs(r64)) + 1e-12)) if r64.size else 0.0)
        status = "ok" if worst <= 1e-4 else "MISMATCH"
        print(f"check vs op-by-op plain kernels: max error {worst:.2e} (relative to the largest output) {status}")
    tmin, tmed = _time(exe, feed, args.repeat)
    threads = os.environ.get("KILN_NUM_THREADS", "all cores")
    print(f"time per run ({threads} threads, {args.repeat} runs): min {tmin * 1e3:.3f} ms, median {tmed * 1e3:.3f} ms")
    m = exe.memory()
    mb = 1 / (1 << 20)
    print(f"memory: arena {m['arena_bytes'] * mb:.2f} MB, naive sum of intermediates {m['naive_bytes'] * mb:.2f} MB, "
          f"peak live {m['peak_bytes'] * mb:.2f} MB, weights {m['weight_bytes'] * mb:.2f} MB, in-place groups {m['inplace']}")
    if args.profile:
        print(f"{'group':60s} {'ms':>9s} {'GFLOP/s':>9s} {'share':>6s}")
        for row in exe.profile(*feed, repeats=args.repeat):
            print(f"{row['name'][:60]:60s} {row['seconds'] * 1e3:9.3f} {row['gflops']:9.1f} {row['share'] * 100:5.1f}%")
    else:
        print("groups: " + "; ".join(g["ops"] for g in groups[:12]) + (" ..." if len(groups) > 12 else ""))
    if not args.no_check and worst > 1e-4:
        return 1
    return 0


def _run_library(args):
    """An exported model: loaded by the runtime alone, run on random input and timed (no reference to check against)."""
    import numpy as np
    import kiln.runtime

    try:
        t0 = time.perf_counter()
        m = kiln.runtime.load_model(args.model)
        load_s = time.perf_counter() - t0
    except kiln.runtime.KilnError as e:
        print(f"kiln-run: {e}", file=sys.stderr)
        return 2
    feed = _random_inputs(m, np.random.default_rng(args.seed))
    outs = m(*feed)
    print(f"model library: {args.model} (loaded in {load_s * 1e3:.1f} ms; {m.num_kernels} kernels)")
    print("inputs: " + ", ".join(f"{t['name']} {t['dtype']}{list(t['shape'])}" for t in m.inputs))
    print("outputs: " + ", ".join(f"{t['name']} {t['dtype']}{list(t['shape'])}" for t, o in zip(m.outputs, outs)))
    tmin, tmed = _time(m, feed, args.repeat)
    threads = os.environ.get("KILN_NUM_THREADS", "all cores")
    print(f"time per run ({threads} threads, {args.repeat} runs): min {tmin * 1e3:.3f} ms, median {tmed * 1e3:.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
