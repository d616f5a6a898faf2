"""Size-dispatched kernel variants (graph/kernel_variants.h): a dynamic model keeps a kernel per size bucket
where the schedules differ, the runtime picks one per new shape; results match torch in every bucket and at its
edges, groups() names the variants, and no kernel is compiled after kiln.compile returns."""
import numpy as np
import pytest
import torch

import kiln
import kiln.graph as kg

# Every bucket of the policy (0-1, 2-16, 17-256, 257 up) and both sides of each edge.
SEQS = (1, 2, 7, 16, 17, 100, 256, 257, 300)


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(64, 192)
        self.b = torch.nn.Linear(192, 64)

    def forward(self, x):
        return self.b(torch.nn.functional.gelu(self.a(x)))


def mlp_executor(**compile_args):
    torch.manual_seed(0)
    m = Mlp().eval()
    g = kg.from_torch(m, torch.randn(4, 64), shapes={"input0": ("rows", 64)})
    return m, kiln.compile(g, **compile_args)


def variant_groups(exe):
    return [g for g in exe.groups() if g["variants"]]


def test_a_matmul_keeps_variants_that_match_torch_in_every_bucket():
    m, exe = mlp_executor()
    groups = variant_groups(exe)
    assert groups, "the projections' schedules depend on the rows: some group keeps variants"
    for g in groups:
        assert g["kernel"] not in [v["kernel"] for v in g["variants"]]  # a variant is another kernel than the fallback
        assert all(v["when"].startswith("rows in [") for v in g["variants"]), g["variants"]
    builds = kiln.build_count()
    for rows in SEQS:
        x = torch.randn(rows, 64)
        with torch.no_grad():
            want = m(x).numpy()
        np.testing.assert_allclose(exe.run([x.numpy()])[0], want, rtol=1e-4, atol=1e-4, err_msg=f"rows={rows}")
    assert kiln.build_count() == builds, "no kernel is compiled for a new shape"


def test_a_range_inside_one_bucket_keeps_one_kernel_per_group():
    m, exe = mlp_executor(dims={"rows": (17, 200)})
    assert variant_groups(exe) == []
    for rows in (17, 64, 200):
        x = torch.randn(rows, 64)
        with torch.no_grad():
            np.testing.assert_allclose(exe.run([x.numpy()])[0], m(x).numpy(), rtol=1e-4, atol=1e-4)


def test_groups_without_size_dependent_schedules_keep_one_kernel():
    x, y = kg.make_input("x", ("n", 8)), kg.make_input("y", ("n", 8))
    s, = kg.make_op("Add", [x, y])
    r, = kg.make_op("Relu", [s])
    e, = kg.make_op("Exp", [r])
    exe = kiln.compile(kg.make_graph([x, y], [e]))
    assert variant_groups(exe) == []


def test_bert_layer_with_variants_matches_torch_at_both_variables_edges():
    torch.manual_seed(0)
    m = torch.nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128, dropout=0.0, batch_first=True).eval()
    g = kg.from_torch(m, torch.randn(1, 16, 64), shapes={"input0": ("batch", "seq", 64)})
    exe = kiln.compile(g)
    names = {v["when"] for grp in variant_groups(exe) for v in grp["variants"]}
    assert any("batch in [0, 1]" in w for w in names), names
    builds = kiln.build_count()
    for b, s in ((1, 1), (2, 1), (1, 16), (3, 17), (1, 257), (2, 5)):
        x = torch.randn(b, s, 64)
        with torch.no_grad():
            want = m(x).numpy()
        np.testing.assert_allclose(exe.run([x.numpy()])[0], want, rtol=1e-4, atol=2e-4, err_msg=f"batch={b}, seq={s}")
    assert kiln.build_count() == builds


def test_exported_model_dispatches_its_variants(tmp_path):
    m, exe = mlp_executor()
    path = tmp_path / "variants.so"
    exe.export_library(path)
    loaded = kiln.runtime.load_model(path)
    for rows in (1, 16, 17, 257):
        x = torch.randn(rows, 64)
        with torch.no_grad():
            np.testing.assert_allclose(loaded.run([x.numpy()])[0], m(x).numpy(), rtol=1e-4, atol=1e-4)



def test_buckets_whose_code_is_the_same_share_one_kernel():
    # Attention's matmuls read batch only in their outer loop: every batch bucket of one seq bucket lowers to
    # one text and shares one kernel (two kernels, varying run to run, when same-named loop variables, split
    # twice, sorted by address in the simplifier). Width 768 gives q.kT the tiles whose loops split twice.
    torch.manual_seed(0)
    m = torch.nn.TransformerEncoderLayer(d_model=768, nhead=12, dim_feedforward=64, dropout=0.0, batch_first=True).eval()
    g = kg.from_torch(m, torch.randn(1, 16, 768), shapes={"input0": ("batch", "seq", 768)})
    matmuls = [grp for grp in variant_groups(kiln.compile(g)) if grp["ops"] == "MatMul"]
    assert matmuls
    for grp in matmuls:
        by_seq = {}
        for v in grp["variants"]:
            by_seq.setdefault(v["when"].split("seq in ")[-1], set()).add(v["kernel"])
        assert all(len(k) == 1 for k in by_seq.values()), [(v["when"], v["kernel"]) for v in grp["variants"]]
