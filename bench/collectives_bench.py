#!/usr/bin/env python3
"""kiln's all-reduce against Open MPI's own MPI_Allreduce and the link's bound, across two "hosts".

  PYTHONPATH=python:build/python /usr/bin/python3 bench/collectives_bench.py [--sizes-mb 1,4,16,64]
      [--local] [--per-host 1] [--rounds 3] [--ring MIN,SEGMENT,WINDOW[,PAIRS]] [--json out.json]

The driver (this script without mpirun) brings up the two-host test bed (scripts/hosts.sh: network
namespaces on a bridge, TCP only; --local: one host, shared memory) and starts itself under mpirun,
one rank per host. Each rank then measures, on the same float32 buffers:

  - the link: a ping-pong of 64 MB between rank 0 and the last rank (MPI_Send/MPI_Recv in a small C
    helper built with mpicc), one-way bytes/s = size / (round trip / 2);
  - kiln: kiln.dist's all-reduce in place (the communicator the runner uses: from 256 KB on its
    segmented ring, dist/src/ring_all_reduce.cpp; two ranks exchange whole segments), and the same
    in bfloat16 (half the bytes);
  - kiln Iallreduce: the same call with the ring off (kiln.dist.set_ring(0, ...)): MPI_Iallreduce,
    what kiln ran before the ring;
  - MPI: MPI_Allreduce(MPI_IN_PLACE, MPI_FLOAT, MPI_SUM) on MPI_COMM_WORLD, from the C helper;
  - the ring bound: a ring all-reduce sends 2(n-1)/n of the bytes per rank, so it needs at least
    2(n-1)/n * size / link bytes/s.

Times are medians (and minima) over the repeats of --rounds rounds (after one warm-up each), every
call after a barrier, the contenders interleaved round by round; the table is rank 0's.
--ring MIN,SEGMENT,WINDOW[,PAIRS] tries other ring settings.
"""
import argparse
import ctypes
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

HELPER_C = r"""
#include <mpi.h>
/* MPI's own all-reduce, n floats in place, `reps` times after a barrier each: the median is the caller's. */
void mpi_allreduce_times(float* buf, int n, int reps, double* out) {
  for (int i = 0; i < reps; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t = MPI_Wtime();
    MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    out[i] = MPI_Wtime() - t;
  }
}
/* Round trips of `bytes` between rank 0 and rank `peer`; others only meet the barriers. */
void ping_pong_times(char* buf, int bytes, int peer, int reps, double* out) {
  int r;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  for (int i = 0; i < reps; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t = MPI_Wtime();
    if (r == 0) {
      MPI_Send(buf, bytes, MPI_BYTE, peer, 7, MPI_COMM_WORLD);
      MPI_Recv(buf, bytes, MPI_BYTE, peer, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else if (r == peer) {
      MPI_Recv(buf, bytes, MPI_BYTE, 0, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Send(buf, bytes, MPI_BYTE, 0, 7, MPI_COMM_WORLD);
    }
    out[i] = MPI_Wtime() - t;
  }
}
"""


def build_helper(folder):
    mpicc = shutil.which("mpicc")
    if mpicc is None:
        sys.exit("collectives_bench: mpicc not found (apt-get install libopenmpi-dev)")
    src, lib = os.path.join(folder, "mpi_helper.c"), os.path.join(folder, "mpi_helper.so")
    with open(src, "w") as f:
        f.write(HELPER_C)
    subprocess.run([mpicc, "-O2", "-shared", "-fPIC", src, "-o", lib], check=True)
    return lib


def reps_for(mb):
    return max(3, int(40 / max(mb, 1)))


def rank_main(args):
    import numpy as np

    import kiln
    r, n = kiln.dist.rank(), kiln.dist.size()
    lib = ctypes.CDLL(os.environ["KILN_BENCH_MPI_HELPER"])
    dbl = ctypes.POINTER(ctypes.c_double)

    def mpi_times(buf, reps):
        out = np.zeros(reps + 1)
        lib.mpi_allreduce_times(buf.ctypes.data_as(ctypes.c_void_p), ctypes.c_int(buf.size), ctypes.c_int(reps + 1), out.ctypes.data_as(dbl))
        return list(out[1:])

    def kiln_times(buf, reps, fn):
        times = []
        for i in range(reps + 1):
            kiln.dist.barrier()
            t = time.perf_counter()
            fn(buf)
            times.append(time.perf_counter() - t)
        return times[1:]

    # The link: one-way bytes/s from 64 MB round trips.
    pp = np.zeros(64 << 20, "uint8")
    out = np.zeros(6)
    lib.ping_pong_times(pp.ctypes.data_as(ctypes.c_void_p), ctypes.c_int(pp.size), ctypes.c_int(n - 1), ctypes.c_int(6), out.ctypes.data_as(dbl))
    link = pp.size / (float(np.median(out[1:])) / 2)
    small, lat = np.zeros(8, "uint8"), np.zeros(21)
    lib.ping_pong_times(small.ctypes.data_as(ctypes.c_void_p), ctypes.c_int(8), ctypes.c_int(n - 1), ctypes.c_int(21), lat.ctypes.data_as(dbl))
    latency = float(np.median(lat[1:])) / 2
    d = kiln._ffi._kiln.dist
    ring = d.ring()
    if args.ring:
        ring = tuple(int(v) for v in args.ring.split(","))  # min_bytes,segment_bytes,window[,pair_exchange 0/1]
        ring = ring[:3] + tuple(bool(v) for v in ring[3:])
    old = (0,) + tuple(ring[1:])  # min_bytes 0: MPI_Iallreduce for every size (kiln before the ring)
    rows = []
    for mb in args.sizes:
        buf = np.ones(int(mb * (1 << 20)) // 4, "float32")
        reps = reps_for(mb)
        got = {"mpi": [], "kiln": [], "iallreduce": [], "bf16": []}
        for _ in range(args.rounds):  # the contenders interleaved, round after round: drift in load hits all alike
            got["mpi"] += mpi_times(buf, reps)
            d.set_ring(*ring)
            got["kiln"] += kiln_times(buf, reps, d.all_reduce_in_place)
            got["bf16"] += kiln_times(buf, reps, d.all_reduce_bf16_in_place)
            d.set_ring(*old)
            got["iallreduce"] += kiln_times(buf, reps, d.all_reduce_in_place)
        d.set_ring(*ring)
        bound = 2 * (n - 1) / n * buf.nbytes / link
        row = dict(mb=mb, ring_bound_s=bound, runs=len(got["mpi"]))
        for k, ts in got.items():
            row[f"{k}_s"], row[f"{k}_min_s"] = float(np.median(ts)), float(np.min(ts))
        rows.append(row)
    if r == 0:
        sys.path.insert(0, os.path.join(HERE, "peers"))
        import blas_choice
        m = blas_choice.machine()
        print(f"machine: {m['cpu']}, {m['isa']}, {m['cores']} cores; peer: Open MPI's own MPI_Allreduce on the same buffers "
              f"(its default algorithm choice), the same communicator and transport as kiln's")
        print(f"ranks: {n}; link (ping-pong, 64 MB): {link / 1e9:.2f} GB/s one way, latency {latency * 1e6:.1f} us (8 B); "
              f"load average {os.getloadavg()[0]:.1f}" + (" (other processes share the cores: timings disturbed)" if os.getloadavg()[0] > 1 else ""))
        print(f"medians (min in brackets) over {rows[0]['runs']} runs each ({args.rounds} rounds, the contenders interleaved), "
              f"rank 0's times; kiln: the segmented ring (min {ring[0]} B, segments of {ring[1]} B, {ring[2]} in flight"
              f"{', 2 ranks: one exchange' if ring[3:4] == (True,) else ''}); "
              "kiln Iallreduce: kiln before the ring (MPI_Iallreduce)")
        print(f"{'MB':>5} {'kiln ms':>16} {'MPI ms':>16} {'Iallreduce ms':>16} {'kiln/MPI':>9} {'kiln/best':>10} {'min/min':>8} "
              f"{'ring bound ms':>14} {'kiln bf16 ms':>13}")
        for w in rows:
            cell = lambda k: f"{w[k + '_s'] * 1e3:.2f} ({w[k + '_min_s'] * 1e3:.2f})"
            best = min(w["mpi_s"], w["iallreduce_s"])
            print(f"{w['mb']:>5g} {cell('kiln'):>16} {cell('mpi'):>16} {cell('iallreduce'):>16} {w['kiln_s'] / w['mpi_s']:>9.2f} "
                  f"{w['kiln_s'] / best:>10.2f} {w['kiln_min_s'] / w['mpi_min_s']:>8.2f} {w['ring_bound_s'] * 1e3:>14.2f} "
                  f"{w['bf16_s'] * 1e3:>13.2f}")
        if args.json:
            with open(args.json, "w") as f:
                json.dump(dict(ranks=n, link_bytes_per_s=link, latency_s=latency, rows=rows), f, indent=1)


def driver(args):
    sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
    from hostbed import Bed, Launcher, python_env
    tmp = tempfile.mkdtemp(prefix="kiln-collectives-")
    bed = None
    try:
        env = python_env({"KILN_BENCH_MPI_HELPER": build_helper(tmp)})
        if args.local:
            launcher = Launcher()
        else:
            bed = Bed(2).up()
            launcher = Launcher(bed)
        n = 2 * args.per_host  # the same ranks either way: 2 hosts x per_host, or all on this one
        cmd = launcher.command(n, env) + [sys.executable, os.path.abspath(__file__), "--rank", "--rounds", str(args.rounds),
                                          "--sizes-mb", ",".join(f"{s:g}" for s in args.sizes)]
        if args.ring:
            cmd += ["--ring", args.ring]
        if args.json:
            cmd += ["--json", os.path.abspath(args.json)]
        print(f"# {'one host (shared memory allowed)' if args.local else '2 hosts of the test bed (TCP over veth)'}: {' '.join(cmd[:12])} ...")
        p = subprocess.run(cmd, env=env, cwd=tmp, timeout=args.timeout)
        return p.returncode
    finally:
        if bed is not None:
            bed.down()
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes-mb", default="1,4,16,64", help="buffer sizes in MiB, comma separated")
    p.add_argument("--local", action="store_true", help="all ranks on this host (shared memory) instead of the bed")
    p.add_argument("--per-host", type=int, default=1, help="ranks per host")
    p.add_argument("--json", default=None, help="write the rows here")
    p.add_argument("--rounds", type=int, default=3, help="rounds of every contender, interleaved")
    p.add_argument("--ring", default=None, help="min_bytes,segment_bytes,window of kiln's ring (default: kiln's own)")
    p.add_argument("--timeout", type=int, default=600)
    p.add_argument("--rank", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    args.sizes = [float(s) for s in args.sizes_mb.split(",")]
    if args.rank:
        rank_main(args)
        return 0
    return driver(args)


if __name__ == "__main__":
    sys.exit(main())
