"""Exported models: Executor.export_library, then kiln.runtime.load_model in
a fresh process that only loads and runs (no compiling), compared bitwise
with the in-process executor; and the error cases."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import kiln
from kiln.graph import from_torch


class Small(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.fc = torch.nn.Linear(4 * 6 * 6, 5)

    def forward(self, x):
        y = torch.relu(self.conv(x)) + 0.5
        return self.fc(y.flatten(1))


@pytest.fixture(scope="module")
def exe():
    x = torch.randn(2, 3, 6, 6)
    return kiln.compile(from_torch(Small().eval(), (x,)))


LOADER = """
import json, sys
import numpy as np
from kiln.runtime import load_model
m = load_model(sys.argv[1])
x = np.load(sys.argv[2])
out = m(x)
np.save(sys.argv[3], out[0])
print(json.dumps({"inputs": m.inputs, "outputs": m.outputs}))
"""


@pytest.mark.parametrize("weights", ["embed", "beside"])
def test_round_trip_in_subprocess(exe, tmp_path, weights):
    so = tmp_path / "model.so"
    exe.export_library(so, weights=weights)
    assert os.path.exists(str(so) + ".weights") == (weights == "beside")
    x = np.random.default_rng(1).standard_normal((2, 3, 6, 6)).astype("float32")
    np.save(tmp_path / "x.npy", x)
    env = dict(os.environ)
    res = subprocess.run([sys.executable, "-c", LOADER, str(so), str(tmp_path / "x.npy"), str(tmp_path / "y.npy")],
                         capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    info = json.loads(res.stdout.strip().splitlines()[-1])
    assert info["inputs"][0]["shape"] == [2, 3, 6, 6] and info["inputs"][0]["dtype"] == "float32"
    assert info["outputs"][0]["shape"] == [2, 5]
    got = np.load(tmp_path / "y.npy")
    want = exe(x)[0]
    assert got.tobytes() == np.asarray(want).tobytes()
    # A sanity check against torch too (the exported model is the model).
    ref = Small().eval()(torch.from_numpy(x)).detach().numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_errors(exe, tmp_path):
    so = tmp_path / "m.so"
    with pytest.raises(kiln.KilnError, match="weights must be"):
        exe.export_library(so, weights="nowhere")
    exe.export_library(so, weights="beside")
    m = kiln.runtime.load_model(so)
    # A model library through the kernel loader: told which loader to use, not "expected 2 arguments".
    with pytest.raises(kiln.KilnError, match=r"is a model library .*kiln.runtime.load_model"):
        kiln.runtime.load(so)
    with pytest.raises(kiln.KilnError, match=r"has shape \[2, 3, 7, 6\]; the model was compiled for \[2, 3, 6, 6\]"):
        m(np.zeros((2, 3, 7, 6), "float32"))
    with pytest.raises(kiln.KilnError, match="dtype float64"):
        m(np.zeros((2, 3, 6, 6)))
    out = m.run({m.input_names[0]: np.zeros((2, 3, 6, 6), "float32")})
    assert out[0].shape == (2, 5)
    os.remove(str(so) + ".weights")
    with pytest.raises(kiln.KilnError, match="weights file .*m.so.weights' is missing"):
        kiln.runtime.load_model(so)


STANDALONE_C = r"""
/* Runs a model library that carries its own runtime: only libc and dlopen, no kiln library linked. */
#include <dlfcn.h>
#include <dlpack/dlpack.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
typedef struct KilnModel KilnModel;
int main(int argc, char** argv) {
  void* so = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!so) { printf("dlopen: %s\n", dlerror()); return 1; }
  int (*load)(const char*, KilnModel**) = (int (*)(const char*, KilnModel**))dlsym(so, "kiln_model_load");
  int (*set_input)(KilnModel*, int, const DLTensor*) = (int (*)(KilnModel*, int, const DLTensor*))dlsym(so, "kiln_model_set_input");
  int (*run)(KilnModel*) = (int (*)(KilnModel*))dlsym(so, "kiln_model_run");
  int (*output)(const KilnModel*, int, const DLTensor**) = (int (*)(const KilnModel*, int, const DLTensor**))dlsym(so, "kiln_model_output");
  const char* (*last_error)(void) = (const char* (*)(void))dlsym(so, "kiln_last_error");
  if (!load || !set_input || !run || !output || !last_error) { printf("the library has no C API\n"); return 1; }
  KilnModel* m = NULL;
  if (load(argv[1], &m)) { printf("load: %s\n", last_error()); return 1; }
  float x[2 * 3 * 6 * 6];
  FILE* f = fopen(argv[2], "rb");
  if (!f || fread(x, sizeof x, 1, f) != 1) return 1;
  fclose(f);
  int64_t shape[4] = {2, 3, 6, 6};
  DLTensor t = {x, {kDLCPU, 0}, 4, {kDLFloat, 32, 1}, shape, NULL, 0};
  const DLTensor* y = NULL;
  if (set_input(m, 0, &t) || run(m) || output(m, 0, &y)) { printf("run: %s\n", last_error()); return 1; }
  for (int i = 0; i < 10; ++i) printf("%.9g\n", ((const float*)y->data)[i]);
  return 0;
}
"""


def test_static_runtime_library_needs_only_libc(tmp_path, exe):
    import shutil
    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    so = str(tmp_path / "static.so")
    exe.export_library(so, static_runtime=True)
    deps = subprocess.run(["ldd", so], capture_output=True, text=True).stdout
    assert "libkiln" not in deps and "libstdc++" not in deps and "LLVM" not in deps, deps
    x = np.random.default_rng(2).standard_normal((2, 3, 6, 6)).astype(np.float32)
    (want,) = exe(x)
    src, prog, xin = tmp_path / "run.c", tmp_path / "run", tmp_path / "x.bin"
    src.write_text(STANDALONE_C)
    x.tofile(xin)
    subprocess.run(["cc", "-std=c99", "-o", str(prog), str(src), "-ldl"], check=True, capture_output=True)
    r = subprocess.run([str(prog), so, str(xin)], capture_output=True, text=True, timeout=60, env={"PATH": os.environ.get("PATH", "")})
    assert r.returncode == 0, r.stdout + r.stderr
    got = np.array([float(v) for v in r.stdout.split()], np.float32)
    np.testing.assert_array_equal(got, want.reshape(-1)[:10])


# ---------------------------------------------------------------- damaged files
# A library or weights file damaged or swapped after export is refused, by its
# checksum or its export id, before any of its code runs.

LOAD_AND_RUN = """
import sys
import numpy as np
import kiln
from kiln.runtime import load_model
try:
    m = load_model(sys.argv[1])
    m(np.zeros((2, 3, 6, 6), "float32"))
except kiln.KilnError as e:
    print("KilnError:", e)
    sys.exit(3)
print("loaded and ran")
"""


def load_in_subprocess(so):
    """Loads and runs the model at `so` in a fresh process (damaged code must
    not crash this one): its exit status and output."""
    r = subprocess.run([sys.executable, "-c", LOAD_AND_RUN, str(so)], capture_output=True, text=True, timeout=120)
    return r.returncode, r.stdout + r.stderr


@pytest.fixture(scope="module")
def exports(exe, tmp_path_factory):
    """Three exports of the same model: one embedding its weights, two with a weights file."""
    d = tmp_path_factory.mktemp("exports")
    for name, weights in [("embed.so", "embed"), ("a.so", "beside"), ("b.so", "beside")]:
        exe.export_library(d / name, weights=weights)
    return d


def copy_export(exports, name, to):
    """A copy of export `name` (library and weights file, if any) in directory `to`."""
    import shutil
    for suffix in ("", ".weights"):
        if os.path.exists(exports / (name + suffix)):
            shutil.copy(exports / (name + suffix), to / (name + suffix))
    return to / name


def test_damaged_embedded_weights_are_refused(exports, tmp_path):
    from kiln_helpers import flip_bytes
    so = copy_export(exports, "embed.so", tmp_path)
    blob = (exports / "a.so.weights").read_bytes()[64:]  # the same bytes the embedding library carries
    at = so.read_bytes().find(blob[:256])
    assert at >= 0
    flip_bytes(so, at + len(blob) // 2)
    with pytest.raises(kiln.KilnError, match="checksum does not match"):
        kiln.runtime.load_model(so)


def test_damaged_weights_file_is_refused(exports, tmp_path):
    from kiln_helpers import flip_bytes
    so = copy_export(exports, "a.so", tmp_path)
    weights = str(so) + ".weights"
    kiln.runtime.load_model(so)
    flip_bytes(weights, 64 + (os.path.getsize(weights) - 64) // 2)
    with pytest.raises(kiln.KilnError, match="weights file .*a.so.weights' is corrupt.*checksum"):
        kiln.runtime.load_model(so)


def test_weights_file_of_another_export_is_refused(exports, tmp_path):
    import shutil
    so = copy_export(exports, "a.so", tmp_path)
    other = exports / "b.so.weights"
    assert os.path.getsize(other) == os.path.getsize(str(so) + ".weights")
    shutil.copy(other, str(so) + ".weights")
    other_id = other.read_bytes()[16:48].decode("ascii", "replace")
    with pytest.raises(kiln.KilnError, match=f"belongs to another export \\(export id {other_id}\\)"):
        kiln.runtime.load_model(so)


@pytest.mark.parametrize("name", ["embed.so", "a.so"])
def test_damaged_code_is_refused_before_it_runs(exports, tmp_path, name):
    from kiln_helpers import elf_section, flip_bytes
    so = copy_export(exports, name, tmp_path)
    assert load_in_subprocess(so) == (0, "loaded and ran\n")
    offset, size = elf_section(so, ".text")
    flip_bytes(so, offset + size // 2)
    rc, out = load_in_subprocess(so)
    assert rc == 3 and "checksum does not match" in out, (rc, out)


def test_truncated_files_are_refused(exports, tmp_path):
    for name in ("embed.so", "a.so", "a.so.weights"):
        so = copy_export(exports, name.replace(".weights", ""), tmp_path)
        path = tmp_path / name
        os.truncate(path, os.path.getsize(path) - 1)
        with pytest.raises(kiln.KilnError, match="cut short|truncated|no kiln seal"):
            kiln.runtime.load_model(so)
