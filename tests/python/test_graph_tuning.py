"""Graph-level tuning (kiln/tuner/graph_search.h): each convolution's channel block and Winograd form measured on the
whole model, the winner stored in the tuning database and taken by kiln.compile(db=), resumable, and a damaged stored
plan ignored with a warning."""
import json
import sqlite3

import numpy as np
import pytest

import kiln

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

if not hasattr(kiln, "tune_model"):
    pytest.skip("kiln was built without the tuner", allow_module_level=True)

# AVX2 + FMA, which every machine of ours runs: caps of 8 and 16 lanes, both of which split 16 channels.
AVX2 = "llvm -mcpu=znver3 -num-cores=2"


def _two_convs(names=("conv1", "conv2")):
    """Two 3x3 convs at 28x28: each takes Winograd F(4x4) by default (49 tiles), and either cap blocks its 16 channels."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array((0.2 * rng.standard_normal((16, 16, 3, 3))).astype(np.float32), "w1")
    w2 = numpy_helper.from_array((0.2 * rng.standard_normal((16, 16, 3, 3))).astype(np.float32), "w2")
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1], name=names[0]), helper.make_node("Relu", ["a"], ["b"]),
             helper.make_node("Conv", ["b", "w2"], ["y"], pads=[1, 1, 1, 1], name=names[1])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 28, 28])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w1, w2])
    return kiln.graph.from_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]))


def _x():
    return np.random.default_rng(1).standard_normal((1, 16, 28, 28)).astype(np.float32)


def _reference(model, x):
    """An independent reference: each operator as its plain loop nest, NCHW, unfused."""
    return kiln.compile(model, target=AVX2, fuse=False, plain=True, layout=False)(x)[0]


def _rows(db, table):
    with sqlite3.connect(db) as c:
        c.row_factory = sqlite3.Row
        return [dict(r) for r in c.execute(f"SELECT * FROM {table} ORDER BY rowid")]


def _checksum(text):
    """FNV-1a 64 of the text, as tuning_db's graph_plan_checksum writes it."""
    h = 0xcbf29ce484222325
    for b in text.encode():
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return f"fnv1a64:{h:016x}"


def _store_plan(db, model, plan):
    """Writes `plan` as the model's tuned plan (a row like the search's, with its checksum) over the one a search left."""
    text = json.dumps(plan, sort_keys=True, separators=(",", ":"))
    with sqlite3.connect(db) as c:
        n = c.execute("UPDATE graph_plans SET plan = ?, checksum = ? WHERE model_key = ?",
                      (text, _checksum(text), kiln.tuner.model_key(model))).rowcount
    assert n == 1


def _groups_ops(exe):
    return [g["ops"] for g in exe.groups()]


def test_tune_model_stores_the_plan_and_compile_takes_it(tmp_path):
    db = str(tmp_path / "g.db")
    model = _two_convs()
    # 24 trials: half to the graph (3 candidates of 4 trials), 12 to the loop schedules.
    r = kiln.tune_model(model, target=AVX2, trials=24, batch=8, db=db, progress=False, confirm_top=0, graph_share=0.5,
                        graph_candidate_trials=4)
    g = r["graph"]
    assert g["skipped"] == "" and g["measured"] == 3 and r["graph_trials"] == 12, g
    assert r["trials"] + r["graph_trials"] <= 24
    assert g["model_key"] == kiln.tuner.model_key(model)
    plans = _rows(db, "graph_plans")
    assert len(plans) == 1 and plans[0]["plan"] == g["plan"] and plans[0]["model_key"] == g["model_key"]
    assert len(_rows(db, "graph_candidates")) == 3
    assert json.loads(g["plan"])["version"] == 1
    # compile(db=) takes the stored plan, and its output is the untuned model's.
    exe = kiln.compile(model, target=AVX2, db=db)
    decisions = exe.layout_decisions()
    assert [d["conv"] for d in decisions] == ["conv1", "conv2"]
    assert all("tuned graph plan" in d["why"] for d in decisions), decisions
    x = _x()
    got, untuned, ref = exe(x)[0], kiln.compile(model, target=AVX2)(x)[0], _reference(model, x)
    scale = np.max(np.abs(ref))
    assert np.max(np.abs(got - ref)) <= 1e-4 * scale and np.max(np.abs(untuned - ref)) <= 1e-4 * scale


def test_compile_follows_a_stored_plan_and_untuned_stays_as_it_was(tmp_path):
    db = str(tmp_path / "g.db")
    model = _two_convs()
    r = kiln.tuner.search_graph_plan(model, target=AVX2, db=db, max_candidates=1, rounds=1, progress=False)
    assert r["measured"] == 1
    default_ops = _groups_ops(kiln.compile(model, target=AVX2))
    assert any("Winograd" in ops for ops in default_ops), default_ops  # the default this test relies on
    # A plan with both convs direct, at one-vector blocks: compile(db=) builds exactly that.
    _store_plan(db, model, {"version": 1, "max_block": 8, "winograd": 4, "conv_max_block": {}, "conv_winograd": {"conv1": 0, "conv2": 0}})
    exe = kiln.compile(model, target=AVX2, db=db)
    assert not any("Winograd" in ops for ops in _groups_ops(exe)), _groups_ops(exe)
    assert all(d["cap"] == 8 for d in exe.layout_decisions())
    x = _x()
    ref = _reference(model, x)
    assert np.max(np.abs(exe(x)[0] - ref)) <= 1e-4 * np.max(np.abs(ref))
    # Without the database nothing changed; compile's winograd=0 still turns Winograd off over a stored plan.
    assert _groups_ops(kiln.compile(model, target=AVX2)) == default_ops
    # Tuning the model again tunes the stored plan's groups too: its direct convs are tasks, which no other plan has.
    direct = lambda tasks: [t for t in tasks if t["ops"].startswith("kiln.ConvNCHWc")]  # noqa: E731
    assert direct(kiln.tuner.extract_tasks(model, target=AVX2)[0]) == []
    assert {g for t in direct(kiln.tuner.extract_tasks(model, target=AVX2, db=db)[0]) for g in t["groups"]} == {"conv1", "conv2"}
    _store_plan(db, model, {"version": 1, "max_block": 0, "winograd": 4, "conv_max_block": {}, "conv_winograd": {}})
    assert any("Winograd" in ops for ops in _groups_ops(kiln.compile(model, target=AVX2, db=db)))
    assert not any("Winograd" in ops for ops in _groups_ops(kiln.compile(model, target=AVX2, db=db, winograd=0)))


def test_resuming_measures_no_candidate_twice(tmp_path):
    db = str(tmp_path / "g.db")
    model = _two_convs()
    # min_gain 1: no move can be taken, so the second search starts from the same plan as the first.
    first = kiln.tuner.search_graph_plan(model, target=AVX2, db=db, max_candidates=2, rounds=1, min_gain=1.0, progress=False)
    assert first["measured"] == 2 and first["taken"] == 0 and first["plan"] == first["start"]
    before = _rows(db, "graph_candidates")
    assert len(before) == 2
    second = kiln.tuner.search_graph_plan(model, target=AVX2, db=db, max_candidates=2, rounds=1, min_gain=1.0, progress=False)
    assert second["start"] == first["plan"]
    assert second["reused"] == 2 and second["measured"] == 2, second["log"]
    after = _rows(db, "graph_candidates")
    assert after[:2] == before  # the first session's outcomes kept as they were, not measured again
    assert len(after) == 4 and len({(r["plan"], r["against"]) for r in after}) == 4


@pytest.mark.parametrize("damage", ["checksum", "unknown_conv", "unknown_depthwise", "fusion_not_bool"])
def test_a_damaged_stored_plan_is_ignored_with_a_warning(tmp_path, capfd, damage):
    db = str(tmp_path / "g.db")
    model = _two_convs()
    kiln.tuner.search_graph_plan(model, target=AVX2, db=db, max_candidates=1, rounds=1, progress=False)
    if damage == "checksum":
        with sqlite3.connect(db) as c:
            c.execute("UPDATE graph_plans SET plan = replace(plan, '\"winograd\":4', '\"winograd\":2')")
        expect = "checksum does not match"
    elif damage == "unknown_conv":
        _store_plan(db, model, {"version": 1, "max_block": 0, "winograd": 4, "conv_max_block": {"gone": 8}, "conv_winograd": {}})
        expect = "no convolution 'gone'"
    elif damage == "unknown_depthwise":
        _store_plan(db, model, {"version": 1, "max_block": 0, "winograd": 4, "conv_max_block": {}, "conv_winograd": {}, "dwpw_fuse": {"gone": True}})
        expect = "no convolution 'gone'"
    else:
        _store_plan(db, model, {"version": 1, "max_block": 0, "winograd": 4, "conv_max_block": {}, "conv_winograd": {}, "dwpw_fuse": {"conv1": 1}})
        expect = "dwpw_fuse['conv1'] is not true or false"
    capfd.readouterr()
    exe = kiln.compile(model, target=AVX2, db=db)
    err = capfd.readouterr().err
    assert "warning: the tuned graph plan" in err and expect in err and kiln.tuner.model_key(model) in err, err
    assert not any("tuned graph plan" in d["why"] for d in exe.layout_decisions())
    x = _x()
    ref = _reference(model, x)
    assert np.max(np.abs(exe(x)[0] - ref)) <= 1e-4 * np.max(np.abs(ref))


def test_the_records_gate_times_a_stored_plan_against_the_untuned_model(tmp_path):
    """The gate's last step (kiln/tuner/records_gate.h): a stored plan that builds other groups than the untuned
    model is timed against it, and where it loses, the untuned plan is stored so that compile(db=) builds the
    untuned groups again; a plan that builds the untuned model's very groups is not timed."""
    db = str(tmp_path / "g.db")
    model = _two_convs()
    kiln.tuner.search_graph_plan(model, target=AVX2, db=db, max_candidates=1, rounds=1, progress=False)
    untuned = _groups_ops(kiln.compile(model, target=AVX2))
    _store_plan(db, model, {"version": 1, "max_block": 0, "winograd": 4, "conv_max_block": {}, "conv_winograd": {}})
    gate = kiln._ffi._kiln.tuner.gate_records(model, AVX2, db, rounds=3)
    assert gate["plan_ratio"] == 0 and not gate["plan_reverted"], gate
    _store_plan(db, model, {"version": 1, "max_block": 8, "winograd": 4, "conv_max_block": {}, "conv_winograd": {"conv1": 0, "conv2": 0}})
    assert _groups_ops(kiln.compile(model, target=AVX2, db=db)) != untuned
    gate = kiln._ffi._kiln.tuner.gate_records(model, AVX2, db, rounds=3)
    assert gate["skipped"] == "no group of the model runs a record" and gate["plan_ratio"] > 0, gate
    after = _groups_ops(kiln.compile(model, target=AVX2, db=db))
    assert (after == untuned) == gate["plan_reverted"], (gate, after)
    if gate["plan_reverted"]:
        assert gate["plan_ratio"] > 1, gate


def _inverted_residual(side):
    """MobileNetV2's inverted residual block (24 -> 144 -> 24 channels, random batch norms) at side x side, as an
    ONNX model, with the PyTorch module, and the name of its depthwise conv (the key of the plan's dwpw_fuse)."""
    import io

    torch = pytest.importorskip("torch")
    mobilenetv2 = pytest.importorskip("torchvision.models.mobilenetv2")
    from kiln_helpers import randomize_batch_norms
    torch.manual_seed(side)
    net = randomize_batch_norms(mobilenetv2.InvertedResidual(24, 24, 1, 6).eval(), seed=side)
    x = torch.randn(1, 24, side, side)
    buf = io.BytesIO()
    torch.onnx.export(net, x, buf, input_names=["input"], output_names=["output"], opset_version=13)
    proto = onnx.load_from_string(buf.getvalue())
    depthwise = [n.name for n in proto.graph.node if n.op_type == "Conv" and any(a.name == "group" and a.i > 1 for a in n.attribute)]
    assert len(depthwise) == 1, depthwise
    return kiln.graph.from_onnx(buf.getvalue()), net, x, depthwise[0]


def _fused_pairs(exe):
    return [g["ops"] for g in exe.groups() if "DepthwiseConvNCHWc" in g["ops"] and "+kiln.ConvNCHWc" in g["ops"]]


def test_depthwise_pointwise_fusion_is_a_plan_decision(tmp_path, monkeypatch):
    """A plan's dwpw_fuse fuses (or keeps apart) the depthwise conv and its 1x1 conv against the size rule and
    KILN_FUSE_DWPW; it goes through the database as the plan's text, compile(db=) builds one group fewer, and the
    outputs stay PyTorch's. The search measures the move (its candidate stored with the decision)."""
    monkeypatch.delenv("KILN_FUSE_DWPW", raising=False)
    torch = pytest.importorskip("torch")
    model, net, x, dw = _inverted_residual(12)  # 144 x 12 x 12 floats: far below the size rule's 1 MiB, so apart by default
    with torch.no_grad():
        ref = net(x).numpy()
    untuned = kiln.compile(model, target=AVX2)
    assert _fused_pairs(untuned) == [], _groups_ops(untuned)
    db = str(tmp_path / "g.db")
    r = kiln.tuner.search_graph_plan(model, target=AVX2, db=db, max_candidates=2, rounds=1, min_gain=1.0, progress=False)
    assert any(line.startswith("every depthwise conv fused with its 1x1 conv: ") and "failed" not in line for line in r["log"]), r["log"]
    fused_candidates = [json.loads(c["plan"]) for c in _rows(db, "graph_candidates") if "dwpw_fuse" in c["plan"]]
    assert fused_candidates and fused_candidates[0]["dwpw_fuse"] == {dw: True}, _rows(db, "graph_candidates")
    base = {"version": 1, "max_block": 0, "winograd": 4, "conv_max_block": {}, "conv_winograd": {}}
    _store_plan(db, model, dict(base, dwpw_fuse={dw: True}))
    fused = kiln.compile(model, target=AVX2, db=db)
    assert len(_fused_pairs(fused)) == 1 and len(fused.groups()) == len(untuned.groups()) - 1, _groups_ops(fused)
    assert all("tuned graph plan" in d["why"] for d in fused.layout_decisions())
    for exe in (fused, untuned):
        err = np.max(np.abs(exe(x.numpy())[0] - ref)) / np.max(np.abs(ref))
        assert err <= 1e-4, f"relative error {err:.2e}"
    # The plan's decision beats the environment's global switch both ways.
    monkeypatch.setenv("KILN_FUSE_DWPW", "0")
    assert len(_fused_pairs(kiln.compile(model, target=AVX2, db=db))) == 1
    monkeypatch.setenv("KILN_FUSE_DWPW", "1")
    assert len(_fused_pairs(kiln.compile(model, target=AVX2))) == 1  # the rule, switched to every size
    _store_plan(db, model, dict(base, dwpw_fuse={dw: False}))
    apart = kiln.compile(model, target=AVX2, db=db)
    assert _fused_pairs(apart) == [] and len(apart.groups()) == len(untuned.groups()), _groups_ops(apart)
    err = np.max(np.abs(apart(x.numpy())[0] - ref)) / np.max(np.abs(ref))
    assert err <= 1e-4, f"relative error {err:.2e}"


def test_a_large_depthwise_output_fused_by_the_rule_can_be_kept_apart(tmp_path, monkeypatch):
    """The other way: 144 x 56 x 56 floats (1.8 MB) fuse by the size rule; a plan that keeps them apart builds two groups."""
    monkeypatch.delenv("KILN_FUSE_DWPW", raising=False)
    torch = pytest.importorskip("torch")
    model, net, x, dw = _inverted_residual(56)
    assert len(_fused_pairs(kiln.compile(model, target=AVX2))) == 1
    db = str(tmp_path / "g.db")
    kiln.tuner.search_graph_plan(model, target=AVX2, db=db, max_candidates=1, rounds=1, min_gain=1.0, progress=False)
    _store_plan(db, model, {"version": 1, "max_block": 0, "winograd": 4, "conv_max_block": {}, "conv_winograd": {}, "dwpw_fuse": {dw: False}})
    exe = kiln.compile(model, target=AVX2, db=db)
    assert _fused_pairs(exe) == [], _groups_ops(exe)
    with torch.no_grad():
        ref = net(x).numpy()
    err = np.max(np.abs(exe(x.numpy())[0] - ref)) / np.max(np.abs(ref))
    assert err <= 1e-4, f"relative error {err:.2e}"


def test_the_graph_search_gets_its_share_of_a_time_budget(tmp_path):
    """Under time_budget the loop tuning stops at its (1 - graph_share) share of the time, so loops that could use the
    whole budget (200 trials of two convs take longer than 20 s here) leave the graph search its half: before, the
    search got what the loops left, 1 s, and measured one candidate (MobileNetV2 on a loaded machine: none)."""
    import time
    db = str(tmp_path / "g.db")
    t0 = time.time()
    r = kiln.tune_model(_two_convs(), target=AVX2, trials=400, batch=2, db=db, time_budget=40, progress=False, confirm_top=0,
                        graph_share=0.5, graph_candidate_trials=10, gate_records=False)
    elapsed = time.time() - t0
    g = r["graph"]
    assert g["skipped"] == "", g
    if r["trials"] >= 200:
        pytest.skip(f"the loops finished their 200 trials inside their share ({elapsed:.0f} s): nothing to check")
    assert g["measured"] >= 2, (r["trials"], g["log"])


def test_same_shape_winograd_matmuls_named_apart_are_one_workload(tmp_path):
    """The workload key leaves names out, so conv1's and conv2's Winograd matmuls share one while their DAGs name
    different tensors (conv1.winograd_input, conv2.winograd_input). Which one a session tunes first follows the plan
    it starts from (a graph search's, timed); the other, tuned into the same database, was refused as "already stored
    with a different compute DAG". Here: the conv2-first twin of the model, tuned after the model, takes its records."""
    db = str(tmp_path / "w.db")
    model, twin = _two_convs(), _two_convs(names=("conv2", "conv1"))

    def winograd_matmul(m):
        return next(t for t in kiln.tuner.extract_tasks(m, target=AVX2, db=db)[0] if t["ops"] == "kiln.WinogradMatMul")

    first, second = winograd_matmul(model), winograd_matmul(twin)
    assert first["workload_key"] == second["workload_key"]
    tuning = dict(target=AVX2, trials=4, batch_size=4, db=db, progress=False, population=8, generations=1)
    kiln.tune(first["task"], **tuning)
    kiln.tune(second["task"], **tuning)
    with kiln.tuning_db.open(db) as d:
        assert len(d.records(first["workload_key"])) == 8
        assert "conv1.winograd_input" in d.workload(first["workload_key"]).compute_dag  # the first stored stays
    exe = kiln.compile(twin, target=AVX2, db=db, quiet=True)
    assert any(g["workload_key"] == first["workload_key"] and g["schedule"] == "database" for g in exe.groups()), exe.groups()
    x = _x()
    ref = _reference(twin, x)
    assert np.max(np.abs(exe(x)[0] - ref)) <= 1e-4 * np.max(np.abs(ref))
