"""Plans for clusters this machine cannot hold (issue 50 item 6): GPT-3-style 1.3B, 13B and 175B training
steps planned by kiln.dist.plan on presets of 8 and 64 H100s (NVLink in a host, 400 Gb/s InfiniBand between),
beside the throughput Megatron-LM publishes. Run: PYTHONPATH=python:build/python python3 bench/cluster_plans.py

The search scores plans on a 2-layer proxy of each model (the repeated layers share one decision) and
estimates the chosen plan on the whole graph; --full searches the whole graph (slow: 70 s for 1.3B)."""
import argparse
import time

import kiln
from kiln.dist.gpt import GPT_SIZES, gpt_training_graph

# Published figures (per GPU, A100 80GB, peak 312 TFLOP/s bf16; not H100: compare the share of peak):
# Megatron-LM: Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using
# Megatron-LM", SC'21. Table 1 reports roughly 44% to 52% of peak per GPU (not every row rechecked) for its 1.7B (32 GPUs) to 1T
# (3072 GPUs) GPT models with pipeline, tensor and data parallelism, activation recomputation and
# mixed precision; section 5.1 takes 140 TFLOP/s per GPU (45% of peak) for GPT-3 175B on 1024 GPUs.
# Those runs count recomputation's extra forward pass (their eq. 3, 96 B s l h^2...); the model FLOPs
# below do not (72 B s l h^2...), so their share of model FLOPs is 3/4 of the figures: 33% to 39%.
# Alpa: Zheng et al., OSDI'22, Figure 7 (GPT weak scaling, 1 to 64 V100s, models 350M to 39B) plots
# aggregate PFLOPS without a table; we quote no number from it (the text reports Alpa matching
# Megatron-LM on GPT, which it takes as the hand-tuned reference).
PUBLISHED = {"megatron": "~44-52% of peak (SC'21 Table 1; 1.7B..1T, 32..3072 A100), 45% for 175B on 1024 A100 (sec. 5.1)",
             "alpa": "no table; Fig. 7 (OSDI'22) plots GPT up to 39B on 64 V100 matching Megatron-LM"}

CASES = [("1.3B", 8, 8), ("13B", 8, 8), ("13B", 64, 64), ("175B", 64, 64)]  # model, devices, batch (sequences of 2048)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--full", action="store_true", help="search the whole graph, not the 2-layer proxy")
    ap.add_argument("--seq", type=int, default=2048)
    args = ap.parse_args()
    print(f"{'model':>5} {'GPUs':>4} {'batch':>5} {'mesh (DxM)':>10} {'step s':>8} {'tok/s':>9} {'GB/GPU':>8} {'fits':>4} "
          f"{'% peak':>6} {'plan s':>6}")
    for size, devices, batch in CASES:
        t0 = time.perf_counter()
        g, params = gpt_training_graph(size, batch=batch, seq=args.seq)
        proxy = None if args.full else gpt_training_graph(size, batch=batch, seq=args.seq, layers=2)[0]
        r = kiln.dist.plan(g, kiln.dist.Cluster.h100(devices), proxy=proxy)
        took = time.perf_counter() - t0
        d, m = r.mesh
        print(f"{size:>5} {devices:>4} {batch:>5} {f'{d}x{m}':>10} {r.step_s:8.2f} {batch * args.seq / r.step_s:9.0f} "
              f"{r.memory_bytes / 1e9:8.1f} {'yes' if r.fits else 'NO':>4} {100 * r.peak_share:6.1f} {took:6.1f}")
    print(f"# Megatron-LM: {PUBLISHED['megatron']}\n# Alpa: {PUBLISHED['alpa']}")


if __name__ == "__main__":
    main()
