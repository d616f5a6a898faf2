#!/usr/bin/env python3
"""Data-parallel training throughput of kiln.dist on 1, 2 and 4 ranks, and what its collectives cost.

  PYTHONPATH=python:build/python /usr/bin/python3 bench/dist_bench.py [--ranks 1,2,4] [--models mlp,cnn]
      [--steps 10] [--algorithm default|ring|...] [--bucket-mb 1] [--json out.json]

The driver (this script without mpirun) starts `mpirun -np N` on itself for
each rank count, one thread per rank (KILN_NUM_THREADS=1, OMP_NUM_THREADS=1).
Each rank trains with a fixed batch per rank (weak scaling, as
DistributedDataParallel is used): the global batch grows with N. It reports

  - samples/s of the global batch: the min and median over the timed steps
    (rank 0's step time, from the call to the returned loss), and the
    median over the 1-rank run's ("vs 1": N ranks would ideally give N x)
  - the share of the runner's time spent inside collectives (waiting for
    the peers included: on an oversubscribed host, a rank that waits for
    a descheduled peer counts it as communication), from the runner's
    stats (kiln.dist Runner.stats())
  - the bytes each rank sent for collectives per step, against a ring
    all-reduce's 2(N-1)/N of the gradient bytes (the least an all-reduce
    can send per rank). They are the bytes Open MPI's point-to-point layer
    moved for collectives (its monitoring: --mca pml_monitoring_enable 2,
    written at exit), so they depend on the algorithm MPI picked. A run is
    repeated without steps to subtract the setup's traffic (parameter
    broadcast, communicator splits); and each distinct all-reduce size is
    probed alone (kiln.dist.all_reduce, the same MPI call) for the
    per-collective table. (Open MPI's coll_monitoring counters are a model,
    (N-1) x payload whatever the algorithm, not a measurement.)

--algorithm picks Open MPI's non-blocking all-reduce algorithm (kiln's
communicator issues MPI_Iallreduce, i.e. coll/libnbc): default (libnbc's
own choice), ring, binomial, rabenseifner, recursive_doubling.
--bucket-mb repeats each multi-rank run with the gradient all-reduces
overlapped with the backward pass (kiln.dist.train(bucket_mb=...)) and
reports the share of the in-turn collective time that hides.
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "peers"))
import blas_choice  # noqa: E402
HOSTS_SH = os.path.join(os.path.dirname(HERE), "scripts", "hosts.sh")
ALGORITHMS = {"default": 0, "ring": 1, "binomial": 2, "rabenseifner": 3, "recursive_doubling": 4}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ranks", default="1,2,4", help="rank counts, comma separated")
    p.add_argument("--models", default="mlp,cnn", help="mlp and/or cnn")
    p.add_argument("--steps", type=int, default=10, help="timed steps per run")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    p.add_argument("--algorithm", default="default", choices=sorted(ALGORITHMS), help="Open MPI's MPI_Iallreduce algorithm")
    p.add_argument("--bucket-mb", type=float, default=None,
                   help="also run with the gradient all-reduces overlapped with the backward pass in buckets of this many MiB "
                        "(kiln.dist.train(bucket_mb=...)) and report how much of the all-reduce time that hides")
    p.add_argument("--json", default=None, help="also write the results here")
    p.add_argument("--timeout", type=int, default=180, help="seconds per mpirun (retried once past it)")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)  # the model, inside mpirun
    p.add_argument("--worker-bucket-mb", type=float, default=0, help=argparse.SUPPRESS)
    p.add_argument("--probe", type=int, default=None, help=argparse.SUPPRESS)  # bytes of one all-reduce, inside mpirun
    p.add_argument("--no-probe", action="store_true", help="skip the per-collective byte probes")
    p.add_argument("--hosts", action="store_true",
                   help="multi-rank runs across the two-host test bed (scripts/hosts.sh, TCP only; N/2 ranks per host)")
    return p.parse_args()


# ---------------------------------------------------------------------------------------------- the models
def mlp(kiln, np, batch):
    """784-1024-1024-10 (1.86 M parameters, 7.5 MB of float32 gradients): big enough that the all-reduce matters."""
    rng = np.random.default_rng(0)
    b = kiln.graph.Builder()
    x = b.input("x", (batch, 784))
    dims = [784, 1024, 1024, 10]
    h = x
    for i in range(3):
        w = b.constant(f"fc{i}.weight", (rng.standard_normal((dims[i], dims[i + 1])) * (2 / dims[i]) ** 0.5).astype("float32"))
        bias = b.constant(f"fc{i}.bias", np.zeros(dims[i + 1], "float32"))
        h = b.op("Add", b.op("MatMul", h, w), bias)
        if i < 2:
            h = b.op("Relu", h)
    return b.build(h), (batch, 784)


def cnn(kiln, np, batch):
    """conv 3->16 -> pool -> conv 16->32 -> pool -> fc 2048->10 on 32x32 images (small gradients: latency-bound all-reduces)."""
    rng = np.random.default_rng(0)
    b = kiln.graph.Builder()
    x = b.input("x", (batch, 3, 32, 32))

    def conv(h, name, cin, cout):
        w = b.constant(f"{name}.weight", (rng.standard_normal((cout, cin, 3, 3)) * (2 / (9 * cin)) ** 0.5).astype("float32"))
        h = b.op("Conv", h, w, b.constant(f"{name}.bias", np.zeros(cout, "float32")), pads=[1, 1, 1, 1])
        return b.op("MaxPool", b.op("Relu", h), kernel_shape=[2, 2], strides=[2, 2])

    h = b.op("Flatten", conv(conv(x, "conv1", 3, 16), "conv2", 16, 32))
    w = b.constant("fc.weight", (rng.standard_normal((10, 2048)) * (1 / 2048) ** 0.5).astype("float32"))
    return b.build(b.op("Gemm", h, w, b.constant("fc.bias", np.zeros(10, "float32")), transB=1)), (batch, 3, 32, 32)


MODELS = {"mlp": (mlp, 64), "cnn": (cnn, 16)}  # builder, batch per rank


# ---------------------------------------------------------------------------------------------- inside mpirun
PROBE_REPEATS = 8


def probe(args):
    """All-reduces of one size, PROBE_REPEATS times (0 bytes: none, the baseline of the probes)."""
    import numpy as np

    import kiln

    buf = np.zeros(max(1, args.probe // 4), "float32")
    kiln.dist.barrier()
    for _ in range(PROBE_REPEATS if args.probe else 0):
        kiln.dist.all_reduce(buf)
    kiln.dist.barrier()


def worker(args):
    import numpy as np

    import kiln

    n, rank = kiln.dist.size(), kiln.dist.rank()
    build, per_rank = MODELS[args.worker]
    batch = per_rank * n
    model, xshape = build(kiln, np, batch)
    t = time.perf_counter()
    dp = kiln.dist.train(model, kiln.dist.Mesh(("data", n)), bucket_mb=args.worker_bucket_mb, loss="cross_entropy",
                         optimizer=kiln.train.SGD(lr=0.01, momentum=0.9))
    compile_s = time.perf_counter() - t
    rng = np.random.default_rng(1)
    x = rng.standard_normal(xshape).astype("float32")
    y = rng.integers(0, 10, batch).astype("int64")
    for _ in range(args.warmup):
        dp(x, y)
    kiln.dist.barrier()
    dp.runner.reset_stats()
    times = []
    for _ in range(args.steps):
        t = time.perf_counter()
        dp(x, y)
        times.append(time.perf_counter() - t)
    st = dp.runner.stats()
    # Every rank's totals to rank 0 (the same collectives with or without steps: the setup run subtracts them).
    mine = np.array([st["seconds"], st["segment_seconds"], st["collective_seconds"], st["bucket_wait_seconds"]], "float64")
    everyone = kiln.dist.all_gather(mine)
    if rank == 0:
        params = sum(int(np.prod(p.shape)) for p in dp.parameters.values())
        result = {
            "model": args.worker, "ranks": n, "batch_per_rank": per_rank, "global_batch": batch, "params": params,
            "compile_s": compile_s, "step_s": times, "runs": st["runs"], "warmup": args.warmup,
            "runner_s": everyone[:, 0].tolist(), "segment_s": everyone[:, 1].tolist(), "collective_s": everyone[:, 2].tolist(),
            "bucket_wait_s": everyone[:, 3].tolist(),
            "bucket_mb": args.worker_bucket_mb, "buckets": st["buckets"], "segments": dp.runner._r.num_segments,
            "collectives": st["collectives"],
        }
        print("RESULT " + json.dumps(result), flush=True)


# ---------------------------------------------------------------------------------------------- the driver
BED = None  # the two-host test bed, with --hosts


def mpirun_cmd(args, n, mpirun, prof):
    start = [mpirun]
    if BED is not None and n > 1:
        start = ["bash", HOSTS_SH, "mpirun", "--hostfile", BED.hostfile, "--map-by", f"ppr:{n // 2}:node"]
    cmd = start + ["--allow-run-as-root", "--oversubscribe", "-np", str(n),
           "--mca", "pml_monitoring_enable", "2", "--mca", "pml_monitoring_enable_output", "3", "--mca", "pml_monitoring_filename", prof]
    if ALGORITHMS[args.algorithm]:
        cmd += ["--mca", "coll_libnbc_iallreduce_algorithm", str(ALGORITHMS[args.algorithm])]
    for k in ("PYTHONPATH", "KILN_NUM_THREADS", "OMP_NUM_THREADS"):
        cmd += ["-x", k]
    return cmd + [sys.executable, os.path.abspath(__file__)]


def launch(args, n, mpirun, extra):
    """Runs this script under mpirun; returns (stdout, bytes each rank sent for collectives, from the monitoring files)."""
    env = dict(os.environ, KILN_NUM_THREADS="1", OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(sys.path))
    env.setdefault("KILN_DIST_TIMEOUT", str(max(10, args.timeout // 2)))  # a hung collective aborts the job, with a message
    env.pop("KILN_DIST_BUCKET_MB", None)
    with tempfile.TemporaryDirectory(prefix="kiln_dist_bench_") as d:
        prof = os.path.join(d, "prof")
        for attempt in (1, 2):
            try:
                p = subprocess.run(mpirun_cmd(args, n, mpirun, prof) + extra, env=env, capture_output=True, text=True, timeout=args.timeout)
                break
            except subprocess.TimeoutExpired as e:
                # Seen once on this shared 2-core machine (a probe, outside any collective): retry once.
                print(f"  mpirun -np {n} {' '.join(extra)} passed {args.timeout:.0f} s (attempt {attempt}); output: "
                      f"{(e.stdout or b'')[-500:]!r} {(e.stderr or b'')[-500:]!r}", file=sys.stderr, flush=True)
                if attempt == 2:
                    sys.exit("mpirun timed out twice")
        if p.returncode != 0:
            sys.exit(f"mpirun -np {n} {' '.join(extra)} failed (exit {p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
        sent = []
        for r in range(n):
            try:
                text = open(f"{prof}.{r}.prof").read()
            except OSError:
                sent.append(-1)  # no monitoring output (not Open MPI?)
                continue
            # "I <rank> <peer> <bytes> bytes ...": point-to-point messages internal to collectives (pml_monitoring_enable 2).
            sent.append(sum(int(b) for b in re.findall(r"^I\s+\d+\s+\d+\s+(\d+) bytes", text, re.M)))
    return p.stdout, sent


def run_one(args, model, n, mpirun, bucket_mb=0, steps=None, warmup=None):
    steps = args.steps if steps is None else steps
    warmup = args.warmup if warmup is None else warmup
    out, sent = launch(args, n, mpirun, ["--worker", model, "--steps", str(steps), "--warmup", str(warmup), "--worker-bucket-mb", str(bucket_mb)])
    m = re.search(r"^RESULT (.*)$", out, re.M)
    if not m:
        sys.exit(f"mpirun -np {n} ({model}) printed no result:\n{out[-3000:]}")
    r = json.loads(m.group(1))
    r["sent_per_rank"] = sent
    return r


def probe_sizes(args, n, mpirun, sizes):
    """{payload bytes: bytes each rank sent per all-reduce of that size (rank mean)}."""
    _, base = launch(args, n, mpirun, ["--probe", "0"])
    out = {}
    for b in sorted(sizes):
        _, sent = launch(args, n, mpirun, ["--probe", str(b)])
        out[b] = statistics.mean(s - s0 for s, s0 in zip(sent, base)) / PROBE_REPEATS if min(sent) >= 0 else -1
    return out


def mb(b):
    return f"{b / 1e6:.3f}"


def sent_per_step(r):
    """Bytes one rank sent for collectives per training step (rank mean), the setup's traffic subtracted."""
    if r["ranks"] == 1:
        return 0.0
    if min(r["sent_per_rank"] + r["setup_sent_per_rank"]) < 0:
        return -1.0
    total = statistics.mean(a - b for a, b in zip(r["sent_per_rank"], r["setup_sent_per_rank"]))
    return total / (r["warmup"] + r["runs"])


def report(results, probes, cores):
    by_model = {}
    for r in results:
        by_model.setdefault(r["model"], []).append(r)
    for model, rows in by_model.items():
        r0 = rows[0]
        grad_bytes = sum(c["bytes"] for c in r0["collectives"] if c["op"] == "kiln.AllReduce")
        print(f"\n## {model}: {r0['params']:,} parameters, {len(r0['collectives'])} all-reduces per step "
              f"({mb(grad_bytes)} MB: the gradients and the loss), batch {r0['batch_per_rank']} per rank")
        print(f"{'ranks':>5} {'global':>6} {'samples/s min':>13} {'median':>9} {'vs 1':>7} {'step ms':>8} "
              f"{'comm share':>10} {'sent MB/rank':>12} {'ring ideal':>10} {'sent/ideal':>10} {'compile s':>9}")
        one = [statistics.median(r["global_batch"] / s for s in r["step_s"]) for r in rows if r["ranks"] == 1]
        for r in rows:
            n = r["ranks"]
            sps = [r["global_batch"] / s for s in r["step_s"]]
            med = statistics.median(sps)
            speedup = f"{med / one[0]:>6.2f}x" if one else f"{'-':>7}"
            sent = sent_per_step(r)
            ideal = sum(2 * (n - 1) / n * c["bytes"] for c in r["collectives"] if c["op"] == "kiln.AllReduce")
            share = statistics.mean(c / s for c, s in zip(r["collective_s"], r["runner_s"]))
            ratio = f"{sent / ideal:.2f}" if ideal and sent >= 0 else "-"
            flag = " *" if n > cores else ""
            print(f"{n:>5} {r['global_batch']:>6} {min(sps):>13.1f} {med:>9.1f} {speedup} {statistics.median(r['step_s']) * 1e3:>8.2f} "
                  f"{share * 100:>9.1f}% {mb(sent) if sent >= 0 else '?':>12} {mb(ideal):>10} {ratio:>10} {r['compile_s']:>9.1f}{flag}")
        multi = [r for r in rows if r["ranks"] > 1 and r["ranks"] in probes]
        if not multi:
            continue
        print("\n  each all-reduce, per call: bytes one rank sent (probed alone: the same MPI call and size), a ring's "
              "2(N-1)/N x payload, their ratio, and ms per call in the timed steps")
        head = f"  {'#':>3} {'payload B':>10}"
        for r in multi:
            head += f" | N={r['ranks']}: {'sent B':>9} {'ideal B':>9} {'ratio':>5} {'ms':>7}"
        print(head)
        for i, c in enumerate(r0["collectives"]):
            line = f"  {i:>3} {c['bytes']:>10}"
            for r in multi:
                n, rc = r["ranks"], r["collectives"][i]
                sent = probes[n].get(c["bytes"], -1)
                ideal = 2 * (n - 1) / n * c["bytes"]
                line += f" |      {sent:>9.0f} {ideal:>9.0f} {sent / ideal if ideal and sent >= 0 else float('nan'):>5.2f} " \
                        f"{rc['seconds'] / max(1, rc['calls']) * 1e3:>7.3f}"
            print(line)


def report_overlap(pairs, cores):
    """In turn vs overlapped, per model and rank count: the all-reduce time a step still spends blocked."""
    print(f"\n## overlap of the gradient all-reduces with the backward pass (bucket_mb={pairs[0][1]['bucket_mb']})")
    print("  comm ms = a step's time inside collectives (rank mean; overlapped: packing, starting, waiting, unpacking);"
          " hidden = 1 - overlapped comm / in-turn comm")
    print(f"  {'model':<5} {'ranks':>5} {'buckets':>7} {'segments':>8} {'step ms in turn':>15} {'overlapped':>10} "
          f"{'comm ms in turn':>15} {'overlapped':>10} {'hidden':>7} {'blocked waiting ms':>18}")
    for base, over in pairs:
        n = base["ranks"]
        steps = base["runs"]
        comm_b = statistics.mean(base["collective_s"]) / steps * 1e3
        comm_o = statistics.mean(over["collective_s"]) / over["runs"] * 1e3
        wait_o = statistics.mean(over["bucket_wait_s"]) / over["runs"] * 1e3
        hidden = f"{(1 - comm_o / comm_b) * 100:>6.0f}%" if comm_b > 0 else "      -"
        flag = " *" if n > cores else ""
        print(f"  {base['model']:<5} {n:>5} {over['buckets']:>7} {base['segments']:>3} -> {over['segments']:<2} "
              f"{statistics.median(base['step_s']) * 1e3:>15.2f} {statistics.median(over['step_s']) * 1e3:>10.2f} "
              f"{comm_b:>15.2f} {comm_o:>10.2f} {hidden} {wait_o:>18.2f}{flag}")


def driver(args):
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        sys.exit("mpirun is not installed (apt-get install openmpi-bin libopenmpi-dev)")
    import kiln
    if not kiln.dist.mpi_built():
        sys.exit("kiln was built without MPI (libopenmpi-dev missing at configure time)")
    m = blas_choice.machine()
    cpu, cores = f"{m['cpu']}, {m['isa']}", m["cores"]
    ranks = [int(r) for r in args.ranks.split(",")]
    print(f"CPU: {cpu} ({cores} logical CPUs)")
    ver = subprocess.run([mpirun, "--version"], capture_output=True, text=True).stdout.splitlines()
    print(f"MPI: {ver[0] if ver else '?'}; MPI_Iallreduce algorithm: {args.algorithm}; one thread per rank "
          f"(KILN_NUM_THREADS=1, OMP_NUM_THREADS=1); ranks {ranks}, {args.warmup} warm-up + {args.steps} timed steps; "
          f"optimizer SGD(momentum); weak scaling (fixed batch per rank)")
    if args.bucket_mb:
        print(f"each multi-rank run is repeated with the gradient all-reduces overlapped, bucket_mb={args.bucket_mb}")
    load = os.getloadavg()[0]
    print(f"load average before the runs: {load:.2f}" + (" (other processes share the cores: the timings are disturbed)" if load > 0.5 else ""))
    over = [n for n in ranks if n > cores]
    if over:
        print(f"NOTE: this machine has {cores} cores: {', '.join(map(str, over))} ranks oversubscribe it (rows marked *): "
              f"ranks share cores, so their throughput cannot scale and time waiting for a descheduled peer counts as communication.")
    results, pairs = [], []
    for model in args.models.split(","):
        for n in ranks:
            t = time.perf_counter()
            r = run_one(args, model, n, mpirun)
            # The same run without steps: its traffic is the setup's (subtracted from the bytes per step).
            r["setup_sent_per_rank"] = run_one(args, model, n, mpirun, steps=0, warmup=0)["sent_per_rank"] if n > 1 else [0] * n
            results.append(r)
            if args.bucket_mb and n > 1:
                pairs.append((r, run_one(args, model, n, mpirun, args.bucket_mb)))
            print(f"  ran {model} on {n} rank(s) in {time.perf_counter() - t:.0f} s", file=sys.stderr, flush=True)
    probes = {}
    if not args.no_probe:
        sizes = {c["bytes"] for r in results for c in r["collectives"] if c["op"] == "kiln.AllReduce"}
        for n in ranks:
            if n > 1:
                t = time.perf_counter()
                probes[n] = probe_sizes(args, n, mpirun, sizes)
                print(f"  probed {len(sizes)} all-reduce sizes on {n} ranks in {time.perf_counter() - t:.0f} s", file=sys.stderr, flush=True)
    report(results, probes, cores)
    if pairs:
        report_overlap(pairs, cores)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"cpu": cpu, "cores": cores, "algorithm": args.algorithm, "results": results,
                       "overlap": [p[1] for p in pairs], "probes": {str(n): {str(b): v for b, v in p.items()} for n, p in probes.items()}},
                      f, indent=1)


def driver_on_bed(args):
    """driver() with its multi-rank runs across the two-host bed, brought up for it and removed after."""
    global BED
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "python"))
    from hostbed import Bed
    bad = [n for n in map(int, args.ranks.split(",")) if n > 1 and n % 2]
    if bad:
        sys.exit(f"--hosts splits the ranks over 2 hosts: {bad} rank(s) do not split evenly")
    BED = Bed(2).up()
    try:
        print("multi-rank runs across 2 hosts of the test bed (network namespaces, TCP over a veth bridge); 1 rank runs locally")
        driver(args)
    finally:
        BED.down()


if __name__ == "__main__":
    a = parse_args()
    if a.probe is not None:
        probe(a)
    elif a.worker:
        worker(a)
    elif a.hosts:
        driver_on_bed(a)
    else:
        driver(a)
