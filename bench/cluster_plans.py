"""Plans for clusters this machine cannot hold (issue 50 item 6): GPT training steps planned by kiln.dist.plan
(tensor x pipeline x data parallel, microbatches, recomputation, bfloat16 with float32 master weights, ZeRO-1),
beside what Megatron-LM publishes. Run: PYTHONPATH=python:build/python python3 bench/cluster_plans.py

Two tables. (1) The issue's presets: GPT-3 1.3B, 13B and 175B on 8 and 64 H100s (NVLink in a host, 400 Gb/s
InfiniBand between). (2) Like with like: Megatron-LM's own GPT rows planned on its own cluster (Cluster.a100:
DGX A100 nodes, 200 Gb/s HDR InfiniBand per GPU), its batch, beside its measured share of peak.

Published figures: Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using
Megatron-LM", SC'21, Table 1 (weak scaling, A100 80 GB, peak 312 TFLOP/s, sequence 2048, vocabulary 51200):
  1.7B  (24 layers, hidden 2304, 24 heads) on   32 GPUs, TP 1 PP 1, batch  512: 137 TFLOP/s per GPU, 44% of peak
  18.4B (40 layers, hidden 6144, 48 heads) on  256 GPUs, TP 8 PP 1, batch 1024: 135 TFLOP/s, 43%
  145.6B (80 layers, hidden 12288, 96 heads) on 1536 GPUs, TP 8 PP 8, batch 2304: 148 TFLOP/s, 47%
Those runs recompute activations and count the recomputed forward pass (their eq. 3: 96 B s l h^2 (...)); kiln's
share counts the model's FLOPs only (72 B s l h^2 (...): the forward and backward once), so their share of model
FLOPs is 3/4 of the published one: 33%, 32%, 35%, the column "Megatron (model FLOPs)". The H100 rows have no
published twin; beside them the same 3/4-converted share of Megatron's nearest row. An H100's peak is 3.2x an
A100's while its NVLink is 1.5x and its network 2x, so the same schedule reaches a lower share on the H100.
Alpa (Zheng et al., OSDI'22, Fig. 7) publishes GPT only as a plot (up to 39B on 64 V100s), reported there as
matching Megatron-LM; no number of it is quoted here.
"""
import argparse
import time

import kiln
from kiln.dist import GPT, Cluster

# (label, model, cluster, published share of peak (hardware FLOPs, with recomputation), published (TP, PP))
H100_CASES = [("1.3B", dict(size="1.3B", batch=64), Cluster.h100(8), 0.44, None),
              ("13B", dict(size="13B", batch=64), Cluster.h100(8), 0.43, None),
              ("13B", dict(size="13B", batch=512), Cluster.h100(64), 0.43, None),
              ("175B", dict(size="175B", batch=1536), Cluster.h100(64), 0.47, (8, 8))]
A100_CASES = [("1.7B", dict(layers=24, hidden=2304, heads=24, batch=512), Cluster.a100(32), 0.44, (1, 1)),
              ("18.4B", dict(layers=40, hidden=6144, heads=48, batch=1024), Cluster.a100(256), 0.43, (8, 1)),
              ("145.6B", dict(layers=80, hidden=12288, heads=96, batch=2304), Cluster.a100(1536), 0.47, (8, 8))]


def row(label, kw, cluster, published, schedule, precision):
    t0 = time.perf_counter()
    model = GPT(**kw)
    r = kiln.dist.plan(model, cluster, precision=precision)
    took = time.perf_counter() - t0
    pub = f"{100 * published:.0f}% ({75 * published:.0f}%)" if published else "-"  # 3/4: model FLOPs
    line(label, cluster, model, r, pub, took)
    if schedule:  # the published TP x PP with recomputation, the rest searched: kiln's costs of Megatron-LM's schedule
        t0 = time.perf_counter()
        r = kiln.dist.plan(model, cluster, precision=precision, tensor=schedule[0], pipeline=schedule[1], recompute=True)
        line("  same", cluster, model, r, "as published", time.perf_counter() - t0)


def line(label, cluster, model, r, pub, took):
    tflops = r.flops / r.step_s / cluster.devices / 1e12
    print(f"{label:>6} {cluster.devices:>5} {model.batch:>5} {str(r.schedule):>52} {r.step_s:8.2f} {r.memory_bytes / 1e9:6.1f} "
          f"{'yes' if r.fits else 'NO':>4} {tflops:7.0f} {100 * r.peak_share:6.1f}% {pub:>14} {took:6.1f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--precision", default="bf16", choices=["bf16", "fp32"])
    ap.add_argument("--skip-a100", action="store_true", help="only the H100 presets")
    args = ap.parse_args()
    head = (f"{'model':>6} {'GPUs':>5} {'batch':>5} {'plan (TP x PP x DP, microbatch in sequences)':>52} {'step s':>8} "
            f"{'GB/GPU':>6} {'fits':>4} {'TF/GPU':>7} {'MFU':>7} {'Megatron (mdl)':>14} {'plan s':>6}")
    print(f"# H100 presets (989 TFLOP/s bf16 peak, 80 GB); {args.precision}; Megatron: its nearest A100 row\n{head}")
    for label, kw, cluster, published, schedule in H100_CASES:
        row(label, kw, cluster, published, schedule, args.precision)
        if not args.skip_a100:  # the same model and GPU count on A100s: the share of peak the cluster itself moves
            t0 = time.perf_counter()
            a100, model = Cluster.a100(cluster.devices), GPT(**kw)
            line("  A100", a100, model, kiln.dist.plan(model, a100, precision=args.precision), "", time.perf_counter() - t0)
    if not args.skip_a100:
        print(f"# Megatron-LM's rows on its own cluster (A100 312 TFLOP/s, 80 GB; SC'21 Table 1)\n{head}")
        for case in A100_CASES:
            row(*case, args.precision)
    print("# 'A100': the row above planned on as many A100s (Cluster.a100) to show what the cluster alone changes.\n"
          "# 'same': the published TP x PP and recomputation held (as Megatron-LM ran), microbatch and ZeRO searched\n"
          "# (175B on H100s: Megatron-LM's TP 8 x PP 8 of its 145.6B row).\n"
          "# MFU: the model's FLOPs (forward + backward, no recomputation) / (step x GPUs x peak). Megatron: published\n"
          "# share of peak (hardware FLOPs, recomputation counted), in brackets 3/4 of it (model FLOPs).")


if __name__ == "__main__":
    main()
