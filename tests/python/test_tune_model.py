"""Tuning a whole model: task extraction, the task scheduler, resuming from the DB, kiln.compile with the records, kiln-tune model.onnx."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import kiln
import kiln._ffi as ffi
from kiln.tuner import extract_tasks

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


# AVX2 + FMA, which every machine of ours runs (AVX-512 hosts too).
AVX2 = "llvm -mcpu=znver3 -num-cores=2"


def _model_proto():
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((16, 8, 3, 3)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((16, 16, 3, 3)).astype(np.float32), "w2")
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["a"], ["b"]),
             helper.make_node("Conv", ["b", "w2"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["d"]),
             helper.make_node("Conv", ["d", "w2"], ["e"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["e"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 12, 12])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w1, w2])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def test_tasks_scheduler_resume_and_compile(tmp_path):
    db = str(tmp_path / "model.db")
    model = kiln.graph.from_onnx(_model_proto())
    tasks, table = extract_tasks(model, db=db)
    default_cap = max(t["layout_cap"] for t in tasks)
    convs = [t for t in tasks if "ConvNCHWc" in t["ops"] and t["layout_cap"] == default_cap]
    # The two 16->16 convolutions are one task of weight 2 (in each layout).
    assert sorted(t["weight"] for t in convs) == [1, 2]
    assert all(t["records"] == 0 and t["best_time"] == 0 for t in tasks)
    assert "weight" in table and "unknown" in table
    r = kiln.tune_model(model, trials=16, batch=8, db=db, progress=False)
    assert r["trials"] == 16 and r["rounds"] == 2
    # The warm-up took the heaviest tasks first: both convolution tasks have records now.
    tuned = {t["workload_key"]: t for t in r["tasks"]}
    assert all(tuned[t["workload_key"]]["best_time"] > 0 for t in convs)
    # A new session resumes from the DB: no warm-up round for what has records.
    tasks2, _ = extract_tasks(model, db=db)
    assert all(t["records"] > 0 for t in tasks2 if "ConvNCHWc" in t["ops"] and t["layout_cap"] == default_cap)
    exe = kiln.compile(model, db=db)
    assert exe.tuned_groups()[0] == 3
    sources = [g["schedule"] for g in exe.groups() if "ConvNCHWc" in g["ops"]]
    assert sources == ["database"] * 3
    x = np.random.default_rng(1).standard_normal((1, 8, 12, 12)).astype(np.float32)
    got, ref = exe(x)[0], kiln.compile(model, fuse=False, plain=True, layout=False)(x)[0]
    assert np.max(np.abs(got - ref)) <= 1e-5 * np.max(np.abs(ref))
    with pytest.raises(kiln.KilnError, match="time budget"):
        kiln.tune_model(model, trials=8, db=db, time_budget="soon")


def test_compile_on_another_core_count_says_whose_records_it_left(tmp_path, capfd):
    db = str(tmp_path / "model.db")
    model = kiln.graph.from_onnx(_model_proto())
    kiln.tune_model(model, target=AVX2, trials=8, batch=8, db=db, progress=False, confirm_top=0)
    tuned = [g["name"] for g in kiln.compile(model, target=AVX2, db=db, quiet=True).groups() if g["schedule"] == "database"]
    assert tuned
    one_core = AVX2.replace("-num-cores=2", "-num-cores=1")
    tasks, _ = extract_tasks(model, target=one_core, db=db)
    assert any(t["records"] > 0 for t in tasks) and all(t["best_time"] == 0 for t in tasks), "no best time is 1 core's own"
    capfd.readouterr()
    exe = kiln.compile(model, target=one_core, db=db)
    said = capfd.readouterr().err
    assert all(g["schedule"] == "default" for g in exe.groups()), "a schedule tuned for 2 cores is not taken for 1"
    named = [g["name"] for g in exe.groups() if g["records_only_for"]]
    assert named == tuned and all("-num-cores=2" in g["records_only_for"] for g in exe.groups() if g["records_only_for"])
    assert f"{len(tuned)} of those have records only for" in said and "-num-cores=2" in said, said
    x = np.random.default_rng(2).standard_normal((1, 8, 12, 12)).astype(np.float32)
    got, ref = exe(x)[0], kiln.compile(model, fuse=False, plain=True, layout=False)(x)[0]
    assert np.max(np.abs(got - ref)) <= 1e-5 * np.max(np.abs(ref))


def test_kiln_tune_model_cli(tmp_path):
    build = os.path.dirname(os.path.dirname(os.path.abspath(ffi._kiln.__file__)))
    tool = os.path.join(build, "tuner", "kiln-tune")
    if not os.path.exists(tool):
        pytest.skip("kiln-tune is not built here")
    path = str(tmp_path / "m.onnx")
    onnx.save(_model_proto(), path)
    db = str(tmp_path / "cli.db")
    r = subprocess.run([tool, path, "--list-tasks", "--db", db, "--threads", "1"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "kiln.ConvNCHWc+Relu" in r.stdout and "weight" in r.stdout
    r = subprocess.run([tool, path, "--trials", "8", "--batch", "8", "--db", db, "--threads", "1", "--quiet"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "8 trials in 1 rounds" in r.stdout
    r = subprocess.run([tool, path, "--time-budget", "soon", "--db", db], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "time-budget" in r.stderr


def test_layout_variants_are_tuned_and_chosen(tmp_path):
    """Each convolution is a task under every channel-block cap; compiling with the DB takes, per
    convolution, the cap whose record (plus the relayout of its input) is cheapest, and stays correct."""
    db = str(tmp_path / "layout.db")
    model = kiln.graph.from_onnx(_model_proto())
    # An AVX2 target on any host: its caps (8 and 16 lanes) both split the 16 channels; AVX-512's 32 would not.
    T = AVX2
    tasks, table = extract_tasks(model, target=T, db=db)
    caps = sorted({t["layout_cap"] for t in tasks if t["layout_cap"]})
    assert len(caps) == 2 and caps[1] == 2 * caps[0], caps
    convs = [t for t in tasks if "ConvNCHWc" in t["ops"]]
    # Both convolution tasks (16 output channels) have a variant per cap; conv names are their groups.
    for name in {g for t in convs for g in t["groups"]}:
        assert sorted(t["layout_cap"] for t in convs if name in t["groups"]) == caps
    assert "layout" in table and f"c{caps[0]}" in table
    # Without records for a variant, compiling keeps the default (two vectors) for every convolution.
    kiln.tune_model(model, target=T, trials=16, batch=8, db=db, progress=False)
    exe = kiln.compile(model, target=T, db=db)
    assert [d["cap"] for d in exe.layout_decisions()] == [caps[1]] * 3
    # Every variant tuned: each convolution takes the cheaper of its two, as the records say.
    r = kiln.tune_model(model, target=T, trials=40, batch=8, db=db, progress=False, graph_share=0)  # the records' choice, not a measured plan
    tasks, _ = extract_tasks(model, target=T, db=db)
    assert all(t["best_time"] > 0 for t in tasks if "ConvNCHWc" in t["ops"])
    exe = kiln.compile(model, target=T, db=db)
    decisions = exe.layout_decisions()
    assert len(decisions) == 3
    for d in decisions:
        options = {t["layout_cap"]: t["best_time"] for t in convs_of(tasks, d["conv"])}
        assert d["conv_time"] == pytest.approx(options[d["cap"]])
    # The plan is costed whole, by the records of every group it compiles to: the chosen one runs tuned kernels only.
    assert all("plan total" in d["why"] for d in decisions), decisions
    tuned, total = exe.tuned_groups()
    assert tuned == total, exe.groups()
    assert r["estimated_latency"] > 0
    x = np.random.default_rng(2).standard_normal((1, 8, 12, 12)).astype(np.float32)
    got, ref = exe(x)[0], kiln.compile(model, fuse=False, plain=True, layout=False)(x)[0]
    assert np.max(np.abs(got - ref)) <= 1e-5 * np.max(np.abs(ref))


def convs_of(tasks, conv):
    return [t for t in tasks if "ConvNCHWc" in t["ops"] and conv in t["groups"]]


def test_remeasure_warm_records_cold(tmp_path):
    """A warm session's best records measured again with cold inputs become cold records, which
    compile then uses; the compiled model stays correct."""
    from kiln.tuner import remeasure
    db = str(tmp_path / "warm.db")
    model = kiln.graph.from_onnx(_model_proto())
    kiln.tune_model(model, trials=16, batch=8, db=db, progress=False, cold_inputs=False)
    rows = remeasure(model, db, top=3, rounds=2, progress=False)
    assert rows and all(r["after"] > 0 and r["before"] > 0 for r in rows)
    tasks = {t["workload_key"]: t for t in extract_tasks(model, db=db)[0]}
    with kiln.tuning_db.open(db) as d:
        for r in rows:
            cold = [x for x in d.records(r["workload_key"]) if x.target.target.endswith(" [cold inputs] [confirmed]")]
            # Only the winner is stored, with all its times: 2 rounds x 3 repeats.
            assert len(cold) == 1 and len(cold[0].run_times) == 6
            assert 2 <= r["contenders"] <= 4  # top 3 and the default (unless it is among them)
            default = ffi._kiln.tuner.default_trace(tasks[r["workload_key"]]["task"])
            assert (cold[0].trace == default) == r["default_won"]
    exe = kiln.compile(model, db=db)
    assert exe.tuned_groups()[0] == 3
    x = np.random.default_rng(2).standard_normal((1, 8, 12, 12)).astype(np.float32)
    got, ref = exe(x)[0], kiln.compile(model, fuse=False, plain=True, layout=False)(x)[0]
    assert np.max(np.abs(got - ref)) <= 1e-5 * np.max(np.abs(ref))


def test_default_plan_of_seven_wide_convolutions_is_tuned_first(tmp_path):
    """On AVX2 a 7 x 7 output takes one-vector channel blocks by default (two vectors fit a
    tile of 6 pixels): extraction marks that variant as the default plan's, the warm-up tunes it first, and the
    compiled model, tuned or not, matches the unblocked reference."""
    rng = np.random.default_rng(3)
    w = numpy_helper.from_array(rng.standard_normal((16, 16, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["a"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["a"], ["b"]),
             helper.make_node("Conv", ["b", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 7, 7])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    model = kiln.graph.from_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]))
    db = str(tmp_path / "seven.db")
    tasks, table = extract_tasks(model, target=AVX2, db=db)
    convs = [t for t in tasks if "ConvNCHWc" in t["ops"]]
    assert sorted((t["layout_cap"], t["in_default_plan"], t["weight"]) for t in convs) == [(8, True, 2), (16, False, 2)], table
    assert "c8*" in table and "c16*" not in table and "compiling without records" in table
    x = rng.standard_normal((1, 16, 7, 7)).astype(np.float32)
    ref = kiln.compile(model, fuse=False, plain=True, layout=False)(x)[0]
    got = kiln.compile(model, target=AVX2)(x)[0]
    assert np.max(np.abs(got - ref)) <= 1e-5 * np.max(np.abs(ref))
    # One warm-up round of 8 trials: it goes to the default plan's convolution, not to the variant.
    r = kiln.tune_model(model, target=AVX2, trials=8, batch=8, db=db, progress=False, confirm_top=0)
    tuned = {t["layout_cap"]: t["best_time"] for t in r["tasks"] if "ConvNCHWc" in t["ops"]}
    assert tuned[8] > 0 and tuned[16] == 0, r["table"] if "table" in r else r["tasks"]
    exe = kiln.compile(model, target=AVX2, db=db, quiet=True)
    got = exe(x)[0]
    assert np.max(np.abs(got - ref)) <= 1e-5 * np.max(np.abs(ref))


def test_ranking_ceiling_bench(tmp_path):
    """bench/ranking_ceiling.py measures a model session's records again and scores their agreement: the pair
    arithmetic by hand, then a run over a tiny session (every task with enough records gets a row)."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
    import ranking_ceiling
    # Times 1, 2, 3 against 1, 3, 2: pairs (1,2) and (1,3) agree, (2,3) does not; 1.005 is within the tie.
    assert ranking_ceiling.pairwise_accuracy([1, 2, 3], [1, 3, 2], 0.01) == (2 / 3, 3)
    assert ranking_ceiling.pairwise_accuracy([1, 1.005], [2, 1], 0.01) == (-1.0, 0)
    assert ranking_ceiling.pairwise_accuracy([1, 2], [5, 5], 0.01) == (0.5, 1)
    assert abs(ranking_ceiling.single_measurement_accuracy(0.8) - 0.8873) < 1e-4
    assert ranking_ceiling.single_measurement_accuracy(1.0) == 1.0
    path, db, out = str(tmp_path / "m.onnx"), str(tmp_path / "s.db"), str(tmp_path / "c.json")
    onnx.save(_model_proto(), path)
    kiln.tune_model(kiln.graph.from_onnx(path), target=AVX2, trials=24, batch=8, db=db, progress=False, confirm_top=0)
    ranking_ceiling.main([path, "--db", db, "--target", AVX2, "--per-task", "6", "--min-records", "4", "--json", out])
    with open(out) as f:
        report = json.load(f)
    assert report["rows"], report
    for row in report["rows"]:
        assert 4 <= row["measured"] <= 6 and row["records"] >= 4
        assert row["accuracy"] == -1.0 or 0.0 <= row["accuracy"] <= 1.0
    with pytest.raises(SystemExit, match="no tuning database"):
        ranking_ceiling.main([path, "--db", str(tmp_path / "none.db")])


def test_search_vs_random_bench(tmp_path, capsys):
    """bench/search_vs_random.py tunes a task under both policies and prints a row per policy with the trials to
    the goal (here a tiny CNN's heaviest task, 6 trials a run); its curves go to --json as each run ends."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
    import search_vs_random
    out = str(tmp_path / "curves.json")
    search_vs_random.main(["--model", "tiny_cnn", "--image-size", "16", "--tasks", "1", "--trials", "6", "--batch", "3",
                           "--seeds", "1", "--threads", "1", "--checkpoints", "3,6", "--json", out])
    printed = capsys.readouterr().out
    table = printed.split("trials to within")[1].splitlines()[1:]
    rows = [line for line in table if " evolutionary " in line or " random " in line]
    assert len(rows) == 2, printed
    for row in rows:
        reach = row.split()[-1]
        assert reach.isdigit() and 1 <= int(reach) <= 6 or reach == ">6", row
    with open(out) as f:
        saved = json.load(f)
    assert [c["policy"] for c in saved["curves"]] == ["evolutionary", "random"]
    for c in saved["curves"]:
        assert len(c["runs"]) == 1 and len(c["runs"][0]) == 6
        finite = [v for v in c["runs"][0] if v is not None]
        assert finite and all(a >= b for a, b in zip(finite, finite[1:]))  # best so far never rises


def _bench_module(name):
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
    return __import__(name)


def test_model_tuning_table_measures_what_tuning_bought(tmp_path, capfd):
    """bench/model_tuning_table.py tunes a tiny CNN to one checkpoint, times it against PyTorch and, in one process,
    kiln with the checkpoint's records against kiln's default schedules: the row and the saved rows carry that gain."""
    table = _bench_module("model_tuning_table")
    build = os.environ.get("KILN_BUILD_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "build"))
    common = ["--model", "tiny_cnn", "--checkpoints", "8", "--threads", "1", "--tune-threads", "1", "--repeat", "1",
              "--gain-rounds", "3", "--build", os.path.abspath(build)]
    assert table.main(common + ["--image-size", "32", "--workdir", str(tmp_path / "ok")]) == 0
    printed = capfd.readouterr().out
    row = [line for line in printed.splitlines() if ("PyTorch" in line or "ONNX Runtime" in line) and line.split()[0].isdigit()]
    assert len(row) == 1, printed
    fields = row[0].split()  # trials, graph candidates, tune s, estimate, T, kiln min, kiln med, peer med, kiln/peer, its range, tuned/default
    assert fields[1] == "0", row  # 8 trials: too few for a graph candidate
    assert fields[9].startswith("(") and not fields[10].startswith("("), row
    assert float(fields[10]) > 0, row
    with open(tmp_path / "ok" / "rows_tiny_cnn_8.json") as f:
        saved = json.load(f)["rows"][0]["gain"]
    assert saved["gain_min"] <= saved["gain_median"] <= saved["gain_max"], saved
    assert saved["gain_rounds"] == 3 and saved["tuned_min"] > 0 and saved["default_min"] > 0
    assert saved["max_err"] < 1e-3
    # model_bench refusing the arguments (an image below 32) is an error that says so, not a missing file.
    with pytest.raises(SystemExit, match="model_bench.py wrote no rows"):
        table.main(common + ["--image-size", "16", "--workdir", str(tmp_path / "small")])
