"""bench/train_step_bench.py: its arguments, its table (a side's error in its
row, the first losses compared), and one small run end to end: both sides
train the same BERT layer from the same weights, so their first losses agree."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import train_step_bench as tsb  # noqa: E402


def test_arguments_defaults_and_errors(capsys):
    a = tsb.parse_args([])
    assert (a.workloads, a.threads, a.repeat, a.batch, a.image_size, a.seq_len) == (["resnet18", "bert"], 2, 5, 8, 112, 128)
    a = tsb.parse_args(["--workloads", "bert", "--threads", "1", "--repeat", "3"])
    assert (a.workloads, a.threads, a.repeat) == (["bert"], 1, 3)
    for bad in (["--workloads", "resnet18,vgg"], ["--threads", "0"], ["--image-size", "8"], ["--repeat", "0"], ["--tune-trials", "8"],
                ["--db", "x.db", "--tune-trials", "-1"]):
        with pytest.raises(SystemExit):
            tsb.parse_args(bad)
    assert "vgg" in capsys.readouterr().err


def test_table_rows_errors_and_loss_note():
    rows = [{"workload": "resnet18", "threads": 2, "kiln": {"ready": False, "error": "KilnError: no gradient for Foo\nmore", "times": []},
             "torch": {"times": [0.3, 0.2, 0.4], "loss1": 2.0, "rss_rise_mb": 100.0}},
            {"workload": "bert", "threads": 2,
             "kiln": {"times": [0.5, 0.6, 0.4], "loss1": 2.001, "compile_s": 2.5, "first_step_s": 3.0, "arena_mb": 114.0,
                      "planned_peak_mb": 114.0, "rss_rise_mb": 120.0},
             "torch": {"times": [0.3, 0.2, 0.25], "loss1": 2.0, "rss_rise_mb": 180.0}}]
    text = tsb.format_table(rows)
    lines = text.splitlines()
    first = next(line for line in lines if line.startswith("resnet18"))
    assert "200.0" in first and "300.0" in first  # torch min and median in ms
    assert "kiln FAILED: KilnError: no gradient for Foo" in text and "more" not in text
    bert = next(line for line in lines if line.startswith("bert"))
    assert " 2.00 " in bert and "114.0" in bert and "2.5s" in bert  # ratio of medians 0.5 / 0.25
    assert "differ by 5.0e-04 relative" in text
    rows[1]["kiln"]["cpu_times"], rows[1]["torch"]["cpu_times"] = [0.4, 0.5, 0.3], [0.2, 0.25, 0.1]
    assert "kiln 300.0 / 400.0, torch 100.0 / 200.0 ms (min / median), ratio of medians 2.00" in tsb.format_table(rows)


def _run_bench(*extra):
    env = dict(os.environ)
    import kiln
    import kiln._ffi as ffi
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(os.path.dirname(kiln.__file__)), os.path.dirname(ffi._kiln.__file__),
                                         env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, os.path.join(ROOT, "bench", "train_step_bench.py"), "--workloads", "bert", "--batch", "2",
                           "--seq-len", "4", "--repeat", "2", "--threads", "1", *extra],
                          env=env, capture_output=True, text=True, timeout=600)


def test_small_run_end_to_end(tmp_path):
    out = tmp_path / "rows.json"
    proc = _run_bench("--json", str(out))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "AVX" in proc.stdout.splitlines()[0] or "SSE" in proc.stdout.splitlines()[0]
    (row,) = json.loads(out.read_text())["rows"]
    k, t = row["kiln"], row["torch"]
    assert len(k["times"]) == 2 and len(t["times"]) == 2 and len(k["cpu_times"]) == 2 and all(c > 0 for c in t["cpu_times"])
    assert k["arena_mb"] > 0 and k["num_kernels"] > 0 and t["rss_rise_mb"] >= 0
    assert abs(k["loss1"] - t["loss1"]) <= 1e-4 * t["loss1"]
    assert "torch.set_num_threads(1)" in proc.stdout and "at::get_num_threads() : 1" in proc.stdout


def test_tuned_run_compiles_the_step_from_its_records(tmp_path):
    """--db with --tune-trials: the kiln side tunes the step into the database, then builds its groups from it."""
    out, db = tmp_path / "rows.json", tmp_path / "step.db"
    proc = _run_bench("--json", str(out), "--db", str(db), "--tune-trials", "24")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (row,) = json.loads(out.read_text())["rows"]
    k = row["kiln"]
    assert k["tune_trials"] >= 24 and 0 < k["tuned_groups"] <= k["groups"]
    assert f"schedules from {db} after tuning the step 24 trials into it" in proc.stdout
    assert f"of {k['groups']} groups from the database" in proc.stdout
    assert abs(k["loss1"] - row["torch"]["loss1"]) <= 1e-4 * row["torch"]["loss1"]


def test_bfloat16_run_uses_mixed_precision_on_both_sides(tmp_path):
    """--precision bfloat16: kiln's step with precision='bfloat16', PyTorch's under its CPU autocast."""
    out = tmp_path / "rows.json"
    proc = _run_bench("--json", str(out), "--precision", "bfloat16")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (row,) = json.loads(out.read_text())["rows"]
    k, t = row["kiln"], row["torch"]
    assert row["precision"] == "bfloat16" and len(k["times"]) == 2 and len(t["times"]) == 2
    assert "precision: bfloat16 mixed precision on both sides" in proc.stdout
    assert "with CPU autocast bfloat16" in t["setup"]
    # Each side rounds to bfloat16 in its own places: the first losses agree to bfloat16's precision.
    assert abs(k["loss1"] - t["loss1"]) <= 2e-2 * t["loss1"]


def test_isa_argument_picks_an_avx2_target_unless_one_is_given():
    assert tsb.parse_args([]).target == "llvm" and tsb.parse_args([]).isa == "host"
    assert tsb.parse_args(["--isa", "avx2"]).target == "llvm -mcpu=znver3"
    assert tsb.parse_args(["--isa", "avx2", "--target", "llvm -mcpu=haswell"]).target == "llvm -mcpu=haswell"
    env = tsb.peer_env(tsb.parse_args(["--isa", "avx2", "--threads", "1"]))
    assert (env["DNNL_MAX_CPU_ISA"], env["OPENBLAS_CORETYPE"], env["ATEN_CPU_CAPABILITY"], env["OMP_NUM_THREADS"]) == \
        ("AVX2", "Haswell", "avx2", "1")


def test_small_avx2_run_checks_and_prints_the_peers_limits(tmp_path):
    """--isa avx2: the header says what each of PyTorch's libraries ran, limited and not; the peer reports its limits."""
    out = tmp_path / "rows.json"
    proc = _run_bench("--json", str(out), "--isa", "avx2")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "target llvm -mcpu=znver3 -num-cores=1" in proc.stdout
    (limited,) = [line for line in proc.stdout.splitlines() if line.startswith("peer ISA check, AVX2-limited")]
    assert "core Haswell" in limited and "forward_training jit:avx2" in limited and "NOT LIMITED" not in limited
    (row,) = json.loads(out.read_text())["rows"]
    assert "DNNL_MAX_CPU_ISA=AVX2" in row["torch"]["setup"] and "OPENBLAS_CORETYPE=Haswell" in row["torch"]["setup"]
    assert abs(row["kiln"]["loss1"] - row["torch"]["loss1"]) <= 1e-4 * row["torch"]["loss1"]


def _hooked_forward_flops(module, x):
    """Products of each Conv2d and Linear in one forward, from the layers' output sizes (an independent count)."""
    import torch
    total, first = [0], []

    def hook(m, inp, out):
        if isinstance(m, torch.nn.Conv2d):
            f = 2 * out.numel() * (m.in_channels // m.groups) * m.kernel_size[0] * m.kernel_size[1]
        else:
            f = 2 * out.numel() * m.in_features
        total[0] += f
        first.append(f)

    hs = [m.register_forward_hook(hook) for m in module.modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))]
    with torch.no_grad():
        module(x)
    for h in hs:
        h.remove()
    return total[0], first[0]


@pytest.mark.parametrize("workload", ["resnet18", "mobilenetv2"])
def test_step_flops_are_three_forwards_less_the_first_input_gradient(workload):
    """A CNN step's products: forward, input gradient and weight gradient of every layer, but no input gradient of the first."""
    import torch.nn.functional as F
    import step_flops
    module, x, y, _ = tsb.build(workload, 2, 64, 0)
    fwd, first = _hooked_forward_flops(module, x)
    assert step_flops.step_flops(module, x, y, F.cross_entropy) == 3 * fwd - first
    assert all(p.grad is None for p in module.parameters())


def test_step_flops_of_the_bert_layer():
    """The encoder layer: 4 projections and 2 FFN matmuls (x3 less the input projection's dX) and the attention's 2 batched products x3."""
    import torch.nn.functional as F
    import step_flops
    B, L, D, Fd, heads = 2, 16, 768, 3072, 12
    module, x, y, _ = tsb.build("bert", B, 32, L)
    rows = B * L
    linears = 2 * rows * (D * 3 * D + D * D + 2 * D * Fd)
    attention = 2 * 2 * B * heads * L * L * (D // heads)
    assert step_flops.step_flops(module, x, y, F.mse_loss) == 3 * linears - 2 * rows * D * 3 * D + 3 * attention


def test_fma_peak_and_the_rate_line():
    import step_flops
    assert step_flops.fma_peak(2, 16, 2.5) == 2 * 2 * 16 * 2 * 2.5
    rows = [{"workload": "resnet18", "threads": 2, "step_gflop": 20.0, "peak_gflops": 200.0,
             "kiln": {"times": [0.2, 0.25, 0.1]}, "torch": {"times": [0.4, 0.5, 0.6]}}]
    assert "20.00 GFLOP per step; kiln 100.0 GFLOP/s (50.0% of peak), torch 40.0 GFLOP/s (20.0% of peak); FMA peak 200.0" \
        in tsb.format_table(rows)
    rows[0]["kiln"]["cpu_times"], rows[0]["torch"]["cpu_times"] = [0.4, 0.4, 0.4], [0.8, 0.8, 0.8]
    assert "rate by CPU time (median CPU time / 2 threads): kiln 100.0 GFLOP/s (50.0% of peak), torch 50.0 GFLOP/s (25.0% of peak)" \
        in tsb.format_table(rows)
