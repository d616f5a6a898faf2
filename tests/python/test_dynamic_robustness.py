"""Robustness of models compiled once with symbolic dims (issue 49, items 7 and 8 and "Tests"):
- ResNet-18 and a small CNN compiled once over (batch, h, w), run at many shapes (1, primes) against PyTorch;
- randomized shapes (0, 1, primes) through an MLP, an attention layer, the CNN, a small GPT (arange positions,
  causal and padding masks) and a decoder step with a KV cache, every
  buffer of every step in its own guard-paged array (nothing read or written out of bounds), shapes
  alternating large and small (a stale arena does not leak into results), and the memory plan checked at each
  shape (no two live buffers share bytes), in a subprocess so that a fault fails the test instead of pytest;
- shapes that break the model's constraints named (variable, value, constraint) in Python, through an
  exported library and through the C API;
- the exported dynamic library called from C at three shapes, each output's shape read back.
"""
import os
import shutil
import signal
import subprocess
import sys

import numpy as np
import pytest
import torch

import kiln
import kiln.graph as kg

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import dynamic_guard  # noqa: E402


def close(got, want, rtol=1e-4):
    """Relative error <= rtol against the reference's scale (the issue's 1e-4)."""
    assert got.shape == want.shape, (got.shape, want.shape)
    scale = max(float(np.abs(want).max()) if want.size else 0.0, 1e-6)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * scale)


def run_torch(m, xs):
    with torch.no_grad():
        out = m(*xs)
    return [o.numpy() for o in (out if isinstance(out, tuple) else (out,))]


# ------------------------------------------------------------------ models

class SmallCnn(torch.nn.Module):
    """Strided, padded, depthwise and 1x1 convolutions, batch norm, max and average pools (clipped windows, ceil
    rounding), a residual add, global pooling, flatten and a linear layer: what an image model needs over symbolic h, w."""

    def __init__(self):
        super().__init__()
        nn = torch.nn
        self.c1, self.bn = nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16)
        self.c2, self.c3 = nn.Conv2d(16, 16, 3, padding=1, groups=16), nn.Conv2d(16, 32, 1)
        self.pool, self.avg = nn.MaxPool2d(3, 2, padding=1), nn.AvgPool2d(2, padding=1, count_include_pad=False)
        self.ceil = nn.AvgPool2d(3, 2, padding=1, ceil_mode=True)
        self.fc = nn.Linear(32, 10)
        with torch.no_grad():
            self.bn.weight.uniform_(0.5, 1.5)
            self.bn.running_mean.uniform_(-0.5, 0.5)
            self.bn.running_var.uniform_(0.5, 1.5)

    def forward(self, x):
        y = self.pool(torch.relu(self.bn(self.c1(x))))
        y = self.c3(y + torch.relu(self.c2(y)))
        y = torch.nn.functional.adaptive_avg_pool2d(self.ceil(self.avg(y)), 1)
        return self.fc(torch.flatten(y, 1))


class TinyGpt(torch.nn.Module):
    """Token and position embeddings (torch.arange over the symbolic length), a causal mask built from two aranges,
    a padding mask input sharing (batch, seq), attention, and the last position's logits."""

    def __init__(self, d=32, heads=4, vocab=50, max_len=64):
        super().__init__()
        nn = torch.nn
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(max_len, d)
        self.qkv, self.out, self.ln, self.head = nn.Linear(d, 3 * d), nn.Linear(d, d), nn.LayerNorm(d), nn.Linear(d, vocab)
        self.heads = heads

    def forward(self, ids, mask):
        b, t = ids.shape
        x = self.tok(ids) + self.pos(torch.arange(t))
        q, k, v = self.qkv(self.ln(x)).chunk(3, dim=-1)
        hd = q.shape[-1] // self.heads
        q, k, v = [z.reshape(b, t, self.heads, hd).transpose(1, 2) for z in (q, k, v)]
        r = torch.arange(t)
        att = (q @ k.transpose(-1, -2) / hd ** 0.5).masked_fill(r[None, :] > r[:, None], float("-inf"))
        att = att + (1.0 - mask[:, None, None, :]) * -1e4
        y = (att.softmax(-1) @ v).transpose(1, 2).reshape(b, t, self.heads * hd)
        return self.head((x + self.out(y))[:, -1])


def model_zoo():
    """name -> (module, example inputs, symbolic shapes, inputs for shape values v)."""
    sys.path.insert(0, os.path.join(ROOT, "bench", "peers"))
    from torch_models import decoder_block
    torch.manual_seed(49)
    d, heads = 32, 4
    hd = d // heads
    mlp = torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.GELU(), torch.nn.Linear(96, 10)).eval()
    bert = torch.nn.TransformerEncoderLayer(d_model=32, nhead=2, dim_feedforward=64, dropout=0.0, batch_first=True).eval()
    return {
        "mlp": (mlp, (torch.randn(4, 64),), {"input0": ("batch", 64)},
                lambda v: [torch.randn(v["batch"], 64)]),
        "attention": (bert, (torch.randn(1, 8, 32),), {"input0": ("batch", "seq", 32)},
                      lambda v: [torch.randn(v["batch"], v["seq"], 32)]),
        "cnn": (SmallCnn().eval(), (torch.randn(2, 3, 16, 16),), {"input0": ("batch", 3, "h", "w")},
                lambda v: [torch.randn(v["batch"], 3, v["h"], v["w"])]),
        "gpt": (TinyGpt(d=16, heads=2).eval(), (torch.randint(0, 50, (2, 7)), torch.ones(2, 7)), {"input0": ("batch", "seq"), "input1": ("batch", "seq")},
                lambda v: [torch.randint(0, 50, (v["batch"], v["seq"])), (torch.rand(v["batch"], v["seq"]) > 0.2).float()]),
        "decoder": (decoder_block(d, heads), (torch.randn(2, 1, d), torch.randn(2, heads, 5, hd), torch.randn(2, heads, 5, hd)),
                    {"input0": ("batch", 1, d), "input1": ("batch", heads, "past", hd), "input2": ("batch", heads, "past", hd)},
                    lambda v: [torch.randn(v["batch"], 1, d), torch.randn(v["batch"], heads, v["past"], hd),
                               torch.randn(v["batch"], heads, v["past"], hd)]),
    }


# Values each variable takes in the randomized runs: 1, primes, powers of two and others.
VALUES = {"batch": [0, 1, 2, 3, 5, 7, 8, 13], "seq": [1, 2, 3, 7, 16, 31, 33, 64], "past": [0, 1, 2, 3, 7, 31, 64, 127],
          "h": list(range(1, 41)), "w": list(range(1, 41))}


def random_shapes(names, count, rng):
    """`count` shape tuples, alternating large and small (the arena left by a large call holds stale data)."""
    picks = [{n: int(rng.choice(VALUES[n])) for n in names} for _ in range(count)]
    picks.sort(key=lambda v: np.prod(list(v.values())))
    order = []
    while picks:
        order.append(picks.pop())
        if picks:
            order.append(picks.pop(0))
    return order


def guarded_main(count=8):
    """The subprocess of test_random_shapes_stay_in_bounds: every model at `count` random shapes, checked three ways."""
    import faulthandler
    faulthandler.enable()
    rng = np.random.default_rng(8)
    for name, (m, example, shapes, make) in model_zoo().items():
        g = kg.from_torch(m, example, shapes=shapes)
        names = sorted({d for dims in shapes.values() for d in dims if isinstance(d, str)})
        exe = kiln.compile(g, dims={n: (min(VALUES[n]), max(VALUES[n])) for n in names})
        runner = exe._exe.runner
        bound = exe.memory_bound()["arena_bytes"]
        for k, v in enumerate(random_shapes(exe.shape_vars, count, rng)):
            where = "after" if k % 2 else "before"
            print(f"{name} at {v}, guard {where}", flush=True)  # the last line names the shape if a fault kills us
            xs = make(v)
            want = run_torch(m, xs)
            lay = runner.layout(v)
            problems = dynamic_guard.check_layout(lay)
            assert not problems, f"{name} at {v}: " + "; ".join(problems)
            assert lay["arena_bytes"] <= bound, f"{name} at {v}: arena {lay['arena_bytes']} above memory_bound() {bound}"
            guarded = dynamic_guard.run_guarded(runner, [x.numpy() for x in xs], v, where)
            direct = exe.run([x.numpy() for x in xs])  # the real arena, after a call at another size
            for g, r, w in zip(guarded, direct, want):
                close(g, w)
                close(r, w)
            dynamic_guard.release()
    print("all in bounds", flush=True)


# ------------------------------------------------------------------ 1. image models over (batch, h, w)

@pytest.fixture(scope="module")
def resnet():
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    m = torchvision.models.resnet18(num_classes=10).eval()
    g = kg.from_torch(m, torch.randn(1, 3, 64, 64), shapes={"input0": ("batch", 3, "h", "w")})
    return m, kiln.compile(g, dims={"batch": (1, 16), "h": (1, 288), "w": (1, 288)})


def test_resnet18_compiled_once_runs_every_batch_and_image_size(resnet):
    m, exe = resnet
    assert exe.shape_vars == ["batch", "h", "w"]
    builds = kiln.build_count()
    for b, h, w in ((1, 224, 224), (2, 193, 160), (3, 288, 224), (5, 160, 193), (1, 33, 17)):
        x = torch.randn(b, 3, h, w)
        got = exe.run([x.numpy()])[0]
        assert got.shape == (b, 10)
        close(got, run_torch(m, [x])[0])
    assert kiln.build_count() == builds, "a new shape compiled a kernel"


def test_resnet18_plan_never_overlaps_live_buffers(resnet):
    _, exe = resnet
    bound = exe.memory_bound()["arena_bytes"]
    runner = exe._exe.runner
    for b, h, w in ((1, 1, 1), (2, 7, 3), (3, 32, 33), (16, 288, 288), (5, 97, 160), (1, 193, 288), (13, 224, 31)):
        lay = runner.layout({"batch": b, "h": h, "w": w})
        assert dynamic_guard.check_layout(lay) == [], (b, h, w)
        assert 0 < lay["arena_bytes"] <= bound


def test_small_cnn_at_many_image_sizes():
    m, example, shapes, make = model_zoo()["cnn"]
    exe = kiln.compile(kg.from_torch(m, example, shapes=shapes))
    for b, h, w in ((1, 1, 1), (1, 2, 3), (2, 13, 17), (3, 31, 29), (5, 64, 48), (1, 97, 3), (7, 8, 8), (2, 11, 1)):
        xs = make({"batch": b, "h": h, "w": w})
        close(exe.run([xs[0].numpy()])[0], run_torch(m, xs)[0])


@pytest.mark.parametrize("pool", ["max 3/2 pad 1", "avg 2/2", "avg 3/2 pad 1 uncounted", "max 2/3"])
def test_ceil_mode_pools_over_symbolic_images(pool):
    """ceil_mode over a symbolic h, w (refused before): one more window where the input leaves a part, none that
    would start in the end pad, and average windows clipped as PyTorch clips them."""
    nn = torch.nn
    p = {"max 3/2 pad 1": nn.MaxPool2d(3, 2, padding=1, ceil_mode=True), "avg 2/2": nn.AvgPool2d(2, ceil_mode=True),
         "avg 3/2 pad 1 uncounted": nn.AvgPool2d(3, 2, padding=1, ceil_mode=True, count_include_pad=False),
         "max 2/3": nn.MaxPool2d(2, 3, ceil_mode=True)}[pool]
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 8, 1), nn.ReLU(), p).eval()
    exe = kiln.compile(kg.from_torch(m, torch.randn(1, 3, 9, 9), shapes={"input0": ("batch", 3, "h", "w")}))
    for h, w in ((2, 3), (4, 5), (5, 8), (6, 13), (7, 7), (11, 2), (16, 17)):
        x = torch.randn(2, 3, h, w)
        want = run_torch(m, [x])[0]
        got = exe.run([x.numpy()])[0]
        assert got.shape == want.shape, (h, w)
        close(got, want)


def test_arange_over_a_symbolic_length():
    """torch.arange(x.shape[1]) (position ids, a causal mask) was refused by the importer, and a Range of constant
    inputs but symbolic length then failed constant folding (fold_constants.cpp)."""
    class Positions(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.pos = torch.nn.Embedding(64, 8)

        def forward(self, x):
            r = torch.arange(x.shape[1])
            causal = (r[None, :] > r[:, None]).float()
            return x + self.pos(r), causal, torch.arange(1, x.shape[1] + 1, 3)

    m = Positions().eval()
    exe = kiln.compile(kg.from_torch(m, torch.randn(2, 5, 8), shapes={"input0": ("batch", "seq", 8)}))
    for b, t in ((1, 1), (2, 2), (3, 7), (1, 64)):
        x = torch.randn(b, t, 8)
        for got, want in zip(exe.run([x.numpy()]), run_torch(m, [x])):
            close(got, want)


def test_four_d_elementwise_with_a_symbolic_dim_1_compiles():
    """[batch, seq, heads, d] (attention before its transpose): the conv layout pass read dim 1 as a channel count
    for every 4-D elementwise op, and a symbolic seq there failed the compile (alter_conv_layout.cpp)."""
    x = kg.make_input("x", ("batch", "seq", 64))
    heads, = kg.make_op("Reshape", [x, kg.make_constant("s", np.array([0, 0, 4, 16], np.int64))])
    y, = kg.make_op("Relu", [heads])
    exe = kiln.compile(kg.make_graph([x], [y]))
    for b, s in ((1, 1), (2, 7), (3, 33)):
        a = rand(b, s, 64)
        np.testing.assert_array_equal(exe.run([a])[0], np.maximum(a.reshape(b, s, 4, 16), 0))


# ------------------------------------------------------------------ 2 and 5. out of bounds, stale arena, live overlap

def test_guard_pages_catch_one_element_past_the_end():
    """The guard itself: reading one float past a guarded array's end (or before its start) kills the process."""
    code = ("import sys, ctypes, numpy as np; sys.path.insert(0, %r); import dynamic_guard as g\n"
            "a = g.guarded_array((3, 5), 'float32', sys.argv[1], 1.0)\n"
            "assert a.sum() == 15\n"
            "p = a.ctypes.data + (a.nbytes if sys.argv[1] == 'after' else -4)\n"
            "print(ctypes.c_float.from_address(p).value)\n") % HERE
    for where in ("after", "before"):
        r = subprocess.run([sys.executable, "-c", code, where], capture_output=True, text=True, timeout=60)
        assert r.returncode == -signal.SIGSEGV, (where, r.returncode, r.stdout, r.stderr)


def test_layout_checker_finds_what_it_looks_for():
    """check_layout on hand-made layouts: two live buffers sharing bytes, a use outside the declared lifetime, a
    buffer past the arena's end; an in-place pair and buffers live at different steps are fine."""
    def buf(offset, first, last, inplace_of=-1, shape=(16,)):
        return {"kind": "arena", "index": 0, "shape": shape, "dtype": "float32", "offset": offset, "first_step": first,
                "last_step": last, "inplace_of": inplace_of, "view_of": -1}
    steps = [{"name": "s0", "kernel": "k", "args": [0]}, {"name": "s1", "kernel": "k", "args": [0, 1]},
             {"name": "s2", "kernel": "k", "args": [1, 2]}]
    good = {"dynamic": True, "arena_bytes": 128, "steps": steps, "buffers": [buf(0, 0, 1), buf(64, 1, 2), buf(0, 2, 2)]}
    assert dynamic_guard.check_layout(good) == []
    inplace = dict(good, buffers=[buf(0, 0, 1), buf(0, 1, 2, inplace_of=0), buf(64, 2, 2)])
    assert dynamic_guard.check_layout(inplace) == []
    overlap = dict(good, buffers=[buf(0, 0, 1), buf(32, 1, 2), buf(0, 2, 2)])
    assert any("share bytes" in p for p in dynamic_guard.check_layout(overlap))
    short = dict(good, buffers=[buf(0, 0, 0), buf(64, 1, 2), buf(0, 2, 2)])
    assert any("declared live 0..0" in p for p in dynamic_guard.check_layout(short))
    outside = dict(good, buffers=[buf(0, 0, 1), buf(96, 1, 2), buf(0, 2, 2)])
    assert any("outside the arena" in p for p in dynamic_guard.check_layout(outside))


def test_random_shapes_stay_in_bounds():
    code = "import sys; sys.path.insert(0, %r); import test_dynamic_robustness as t; t.guarded_main()" % HERE
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    tail = "\n".join((r.stdout + r.stderr).splitlines()[-25:])
    if r.returncode < 0:
        pytest.fail(f"killed by signal {-r.returncode} (out of bounds?) at:\n{tail}")
    assert r.returncode == 0, tail
    assert r.stdout.rstrip().endswith("all in bounds"), tail


# ------------------------------------------------------------------ 3. constraint violations named

def two_input_model():
    """x [batch, seq, 8] + y [seq, 8], and the sum over the last axis: two outputs of different ranks."""
    x = kg.make_input("x", ("batch", "seq", 8))
    y = kg.make_input("y", ("seq", 8))
    s, = kg.make_op("Add", [x, y])
    t, = kg.make_op("ReduceSum", [s, kg.make_constant("ax", np.array([2], np.int64))], keepdims=0)
    return kg.make_graph([x, y], [kg.make_op("Relu", [s])[0], t])


def two_input_reference(x, y):
    s = x + y
    return np.maximum(s, 0), s.sum(axis=2)


def rand(*shape):
    return np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)


# (inputs, what the message must say): one variable two values, a static dim, a value outside its range.
BAD_CALLS = [
    ((rand(2, 5, 8), rand(6, 8)), ["input 'y'", "dimension 0", "seq", "= 5", "6"]),
    ((rand(2, 5, 8), rand(5, 9)), ["input 'y'", "dimension 1", "9", "expects 8"]),
    ((rand(2, 5, 9), rand(5, 8)), ["input 'x'", "dimension 2", "9", "expects 8"]),
    ((rand(17, 5, 8), rand(5, 8)), ["batch", "17", "range [1, 16]"]),
    ((rand(2, 65, 8), rand(65, 8)), ["seq", "65", "range [1, 64]"]),
]


@pytest.fixture(scope="module")
def two_inputs():
    return kiln.compile(two_input_model(), dims={"batch": (1, 16), "seq": (1, 64)})


def expect_named(err, words):
    for w in words:
        assert w in err, f"'{w}' missing from: {err}"


def test_bad_shapes_are_named_in_python(two_inputs):
    for xs, words in BAD_CALLS:
        with pytest.raises(kiln.KilnError) as e:
            two_inputs.run(list(xs))
        expect_named(str(e.value), words)
    with pytest.raises(kiln.KilnError, match="rank"):
        two_inputs.run([rand(2, 5), rand(5, 8)])
    # After refusals the model still runs, at a shape it never saw.
    x, y = rand(3, 7, 8), rand(7, 8)
    for got, want in zip(two_inputs.run([x, y]), two_input_reference(x, y)):
        close(got, want)


def test_bad_shapes_are_named_by_an_exported_library(two_inputs, tmp_path):
    path = tmp_path / "two.so"
    two_inputs.export_library(path)
    m = kiln.runtime.load_model(path)
    assert m.shape_vars == {"batch": (1, 16), "seq": (1, 64)}
    for xs, words in BAD_CALLS:
        with pytest.raises(kiln.KilnError) as e:
            m.run(list(xs))
        expect_named(str(e.value), words)
    with pytest.raises(kiln.KilnError, match="seq.*65.*range|range.*seq"):
        m.arena_bytes({"batch": 1, "seq": 65})
    # The library's kernels, each on guard-paged arrays, and its plan's layout, at a few shapes.
    for b, s in ((1, 1), (2, 7), (16, 64)):
        x, y = rand(b, s, 8), rand(s, 8)
        shapes = {"batch": b, "seq": s}
        assert dynamic_guard.check_layout(m._native.layout(shapes)) == []
        for got, want in zip(dynamic_guard.run_guarded(m._native, [x, y], shapes, "after"), two_input_reference(x, y)):
            close(got, want)
        dynamic_guard.release()


def test_threads_at_different_shapes_share_one_model():
    """Four threads call one dynamic model at their own shapes at once (one arena, one plan cache)."""
    from concurrent.futures import ThreadPoolExecutor
    exe = kiln.compile(two_input_model())

    def work(t):
        for k in range(12):
            b, s = 1 + (t * 7 + k) % 9, 1 + (t * 5 + k * 3) % 17
            x, y = rand(b, s, 8), rand(s, 8)
            for got, want in zip(exe.run([x, y]), two_input_reference(x, y)):
                close(got, want)
        return t

    with ThreadPoolExecutor(4) as pool:
        assert sorted(pool.map(work, range(4))) == [0, 1, 2, 3]


def test_more_shapes_than_the_plan_cache_holds():
    """A run plans each new shape and caches 16: 40 batch sizes twice over (evicted ones planned again, the
    arena grown and reused at every size) all match numpy."""
    exe = kiln.compile(two_input_model())
    sizes = list(range(1, 41))
    np.random.default_rng(3).shuffle(sizes)
    for b in sizes + sizes[::-1]:
        x, y = rand(b, 3, 8), rand(3, 8)
        for got, want in zip(exe.run([x, y]), two_input_reference(x, y)):
            close(got, want)


def reshape_model():
    """x [batch, n] seen as [batch, 4, n / 4] (n must divide by 4) and as [batch * n / 6, 6] (batch * n by 6)."""
    x = kg.make_input("x", ("batch", "n"))
    a, = kg.make_op("Reshape", [x, kg.make_constant("s1", np.array([0, 4, -1], np.int64))], name="quarters")
    b, = kg.make_op("Reshape", [x, kg.make_constant("s2", np.array([-1, 6], np.int64))], name="sixes")
    return kg.make_graph([x], [kg.make_op("Relu", [a])[0], kg.make_op("Neg", [b])[0]])


# (shape, what the message must say): the node, the constraint, the variables and their values.
BAD_RESHAPES = [
    ((2, 6), ["Reshape 'quarters'", "batch*n == ", "batch = 2", "n = 6", "differs"]),
    ((5, 8), ["Reshape 'sixes'", "batch*n % 6 == 0", "batch = 5", "n = 8", "40 is not a multiple of 6"]),
]


def test_reshape_constraints_are_checked_by_each_run(tmp_path):
    exe = kiln.compile(reshape_model())
    path = tmp_path / "reshape.so"
    exe.export_library(path)
    loaded = kiln.runtime.load_model(path)
    for m in (exe, loaded):
        for b, n in ((3, 4), (1, 12), (6, 8), (5, 36)):  # n by 4 and b * n by 6
            x = rand(b, n)
            got = m.run([x])
            close(got[0], np.maximum(x.reshape(b, 4, -1), 0))
            close(got[1], -x.reshape(-1, 6))
        for shape, words in BAD_RESHAPES:
            with pytest.raises(kiln.KilnError) as e:
                m.run([rand(*shape)])
            expect_named(str(e.value), words)


# ------------------------------------------------------------------ 4. the exported library from C, three shapes

C_PROGRAM = r"""
/* Runs a dynamic model library at the shapes given on the command line (batch,seq ...): sets each input's
 * shape per call, runs, and writes each output's shape and values to out_<k>.bin; then makes bad calls and
 * prints their status and message. */
#include <stdio.h>
#include <stdlib.h>
#include "kiln/runtime/c_api.h"

#define CHECK(call) do { int rc_ = (call); if (rc_ != KILN_OK) { printf("FAIL %s: %s\n", kiln_status_name(rc_), kiln_last_error()); return 1; } } while (0)

static float* fill(int64_t n, int seed) {
  float* v = malloc((size_t)(n ? n : 1) * sizeof(float));
  for (int64_t i = 0; i < n; ++i) v[i] = (float)((i * 7 + seed) % 23) / 11.0f - 1.0f;
  return v;
}

static int bad_call(KilnModel* m, int64_t b, int64_t s, int64_t ys, int64_t yd) {
  int64_t xshape[3] = {b, s, 8}, yshape[2] = {ys, yd};
  float* x = fill(b * s * 8, 1); float* y = fill(ys * yd, 2);
  DLTensor tx = {x, {kDLCPU, 0}, 3, {kDLFloat, 32, 1}, xshape, NULL, 0};
  DLTensor ty = {y, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, yshape, NULL, 0};
  int rc = kiln_model_set_input(m, 0, &tx);
  if (rc == KILN_OK) rc = kiln_model_set_input(m, 1, &ty);
  if (rc == KILN_OK) rc = kiln_model_run(m);
  printf("BAD %s: %s\n", kiln_status_name(rc), rc ? kiln_last_error() : "");
  free(x); free(y);
  return rc;
}

/* `run model.so reshape B,N ...`: a one-input model run at [B, N] each; prints the status and the output's shape. */
static int reshape_mode(KilnModel* m, int argc, char** argv) {
  for (int k = 3; k < argc; ++k) {
    long long b, n;
    if (sscanf(argv[k], "%lld,%lld", &b, &n) != 2) return 2;
    int64_t shape[2] = {b, n};
    float* x = fill(b * n, 3);
    DLTensor t = {x, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, shape, NULL, 0};
    int rc = kiln_model_set_input(m, 0, &t);
    if (rc == KILN_OK) rc = kiln_model_run(m);
    free(x);
    const DLTensor* out;
    if (rc == KILN_OK && kiln_model_output(m, 0, &out) == KILN_OK) {
      printf("OK");
      for (int d = 0; d < out->ndim; ++d) printf(" %lld", (long long)out->shape[d]);
      printf("\n");
    } else {
      printf("BAD %s: %s\n", kiln_status_name(rc), kiln_last_error());
    }
  }
  kiln_model_free(m);
  return 0;
}

int main(int argc, char** argv) {
  KilnModel* m; int nvars, nout; const char* name; int64_t lo, hi;
  CHECK(kiln_model_load(argv[1], &m));
  if (argc > 2 && argv[2][0] == 'r') return reshape_mode(m, argc, argv);
  CHECK(kiln_model_num_shape_vars(m, &nvars));
  for (int v = 0; v < nvars; ++v) { CHECK(kiln_model_shape_var(m, v, &name, &lo, &hi)); printf("VAR %s %lld %lld\n", name, (long long)lo, (long long)hi); }
  CHECK(kiln_model_num_outputs(m, &nout));
  for (int k = 2; k < argc; ++k) {
    long long b, s;
    if (sscanf(argv[k], "%lld,%lld", &b, &s) != 2) return 2;
    int64_t xshape[3] = {b, s, 8}, yshape[2] = {s, 8}, values[2] = {b, s}, arena;
    float* x = fill(b * s * 8, 1); float* y = fill(s * 8, 2);
    DLTensor tx = {x, {kDLCPU, 0}, 3, {kDLFloat, 32, 1}, xshape, NULL, 0};
    DLTensor ty = {y, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, yshape, NULL, 0};
    CHECK(kiln_model_set_input(m, 0, &tx));
    CHECK(kiln_model_set_input(m, 1, &ty));
    free(x); free(y);  /* set_input copied them */
    CHECK(kiln_model_run(m));
    CHECK(kiln_model_memory(m, values, 2, &arena));
    printf("RUN %lld %lld arena %lld\n", b, s, (long long)arena);
    for (int o = 0; o < nout; ++o) {
      const DLTensor* out;
      CHECK(kiln_model_output(m, o, &out));
      char path[64]; snprintf(path, sizeof path, "out_%d_%d.bin", k - 2, o);
      FILE* f = fopen(path, "wb");
      int64_t n = 1;
      fwrite(&out->ndim, sizeof(int), 1, f);
      for (int d = 0; d < out->ndim; ++d) { int64_t e = out->shape[d]; fwrite(&e, 8, 1, f); n *= e; }
      fwrite(out->data, 4, (size_t)n, f);
      fclose(f);
    }
  }
  bad_call(m, 2, 5, 6, 8);   /* y's seq disagrees with x's */
  bad_call(m, 2, 5, 5, 9);   /* a static dim */
  bad_call(m, 17, 5, 5, 8);  /* batch out of range */
  int64_t big[2] = {1, 65}, arena;
  int rc = kiln_model_memory(m, big, 2, &arena);
  printf("BAD %s: %s\n", kiln_status_name(rc), rc ? kiln_last_error() : "");
  kiln_model_free(m);
  return 0;
}
"""


def runtime_library_dir():
    ext = os.path.dirname(os.path.abspath(kiln._ffi._kiln.__file__))
    build = os.path.dirname(ext)
    for d in (os.path.join(build, "runtime"), build, ext):
        if os.path.isdir(d) and any(f.startswith("libkiln_runtime.so") for f in os.listdir(d)):
            return d
    return None


def read_output(path):
    with open(path, "rb") as f:
        ndim = int(np.frombuffer(f.read(4), np.int32)[0])
        shape = tuple(int(e) for e in np.frombuffer(f.read(8 * ndim), np.int64))
        return np.frombuffer(f.read(), np.float32).reshape(shape)


def c_pattern(n, seed):
    i = np.arange(n, dtype=np.int64)
    return (((i * 7 + seed) % 23).astype(np.float32) / np.float32(11.0) - np.float32(1.0)).astype(np.float32)


def test_exported_dynamic_library_from_c_at_three_shapes(two_inputs, tmp_path):
    cc = os.environ.get("CC", "cc")
    libdir = runtime_library_dir()
    if libdir is None or shutil.which(cc) is None:
        pytest.skip("no libkiln_runtime.so or no C compiler")
    so = tmp_path / "two.so"
    two_inputs.export_library(so)
    src, prog = tmp_path / "run.c", tmp_path / "run"
    src.write_text(C_PROGRAM)
    subprocess.run([cc, "-std=c99", "-Wall", "-I" + os.path.join(ROOT, "runtime", "include"), str(src), "-o", str(prog),
                    "-L" + libdir, "-lkiln_runtime", "-Wl,-rpath," + libdir], check=True, capture_output=True)
    shapes = [(1, 1), (3, 7), (16, 64)]
    r = subprocess.run([str(prog), str(so)] + [f"{b},{s}" for b, s in shapes], capture_output=True, text=True,
                       timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert lines[:2] == ["VAR batch 1 16", "VAR seq 1 64"], lines
    for k, (b, s) in enumerate(shapes):
        x = c_pattern(b * s * 8, 1).reshape(b, s, 8)
        y = c_pattern(s * 8, 2).reshape(s, 8)
        for o, want in enumerate(two_input_reference(x, y)):
            got = read_output(tmp_path / f"out_{k}_{o}.bin")
            assert got.shape == want.shape, (b, s, o)
            close(got, want)
        assert f"RUN {b} {s} arena {two_inputs.memory({'batch': b, 'seq': s})['arena_bytes']}" in lines
    bad = [line for line in lines if line.startswith("BAD")]
    assert len(bad) == 4, lines
    for line, words in zip(bad[:3], [BAD_CALLS[0][1], BAD_CALLS[1][1], BAD_CALLS[3][1]]):
        assert line.startswith("BAD KILN_ERR_MISMATCH: "), line
        expect_named(line, words)
    assert bad[3].startswith("BAD KILN_ERR_MISMATCH: "), bad[3]
    expect_named(bad[3], ["seq", "65", "range [1, 64]"])
    # A reshape's constraint through the C API: named, and the model still runs after it.
    so = tmp_path / "reshape.so"
    kiln.compile(reshape_model()).export_library(so)
    r = subprocess.run([str(prog), str(so), "reshape", "3,4", "2,6", "5,8", "6,8"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "OK 3 4 1" and lines[3] == "OK 6 4 2", lines
    for line, (_, words) in zip(lines[1:3], BAD_RESHAPES):
        assert line.startswith("BAD KILN_ERR_MISMATCH: "), line
        expect_named(line, words)
