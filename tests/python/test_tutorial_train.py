"""tutorials/05_train_mlp.py as a user runs it: it writes its PNG where --out
says, kiln's losses follow PyTorch's to the end, and the loss falls."""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TUTORIAL = os.path.join(ROOT, "tutorials", "05_train_mlp.py")


def child_env():
    # The child finds kiln where this process found it (conftest may have extended sys.path).
    import kiln
    import kiln._ffi as ffi
    env = dict(os.environ)
    env.pop("KILN_TUTORIAL_SMALL", None)
    paths = [os.path.dirname(os.path.dirname(kiln.__file__)), os.path.dirname(ffi._kiln.__file__)]
    env["PYTHONPATH"] = os.pathsep.join(paths + [env.get("PYTHONPATH", "")])
    return env


def test_train_tutorial_follows_torch_and_plots(tmp_path):
    out = tmp_path / "curves.png"
    proc = subprocess.run([sys.executable, TUTORIAL, "--steps", "120", "--out", str(out)], env=child_env(), cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"the tutorial failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    with open(out, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert os.path.getsize(out) > 10000  # two curves, axes and labels, not an empty canvas
    assert os.listdir(tmp_path) == ["curves.png"]  # nothing else written to the working directory
    last = proc.stdout.strip().splitlines()[-1]
    m = re.fullmatch(r"final loss kiln=(\S+) torch=(\S+) first kiln=(\S+) torch=(\S+)", last)
    assert m, f"unexpected last line: {last!r}"
    final_kiln, final_torch, first_kiln, first_torch = map(float, m.groups())
    assert abs(final_kiln - final_torch) <= 1e-4 * max(1.0, final_torch), last
    assert abs(first_kiln - first_torch) <= 1e-5, last
    assert final_kiln < 0.8 * first_kiln, f"the loss did not fall: {last}"
    assert "step  119" in proc.stdout  # the periodic report reached the last step
