"""KILN_DUMP_IR: one logger for the graph, loop and GPU passes (kiln/support/ir_log.h)."""
import os
import re
import subprocess
import sys

_LOOP = ("import kiln\nfrom kiln import te\nA = te.placeholder((64,), name='A')\n"
         "B = te.compute((64,), lambda i: A[i] * 2, name='B')\ns = te.create_schedule(B.op)\n"
         "s[B].split(B.op.axis[0], factor=8)\nkiln.lower(s, [A, B])\n")
_GRAPH = ("import kiln\nfrom kiln import graph as G\nb = G.Builder()\nx = b.input('x', (4,))\n"
          "kiln.compile(b.build(b.op('Relu', b.op('Relu', x))))\n")


def _stderr(code, value):
    env = dict(os.environ, KILN_DUMP_IR=value)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stderr


def _after(text):
    """The pass names printed, in order, each with its time."""
    found = re.findall(r"^// after (\w+) \((\d[\d.e+-]*) ms\)", text, re.M)
    return [name for name, _ in found]


def test_every_loop_pass_is_printed_with_its_time():
    err = _stderr(_LOOP, "1")
    assert "// schedule to loop nest" in err
    assert _after(err)[:4] == ["storage_flatten", "simplify", "loop_partition", "simplify"]
    assert "storage_reuse" in _after(err)


def test_a_pass_name_filters_the_loop_passes_too():
    err = _stderr(_LOOP, "loop_partition")
    assert _after(err) == ["loop_partition"]
    assert "schedule to loop nest" not in err


def test_graph_and_loop_passes_share_the_log():
    err = _stderr(_GRAPH, "1")
    names = _after(err)
    assert names[0] == "remove_identity" and "fuse_ops" in names and "storage_flatten" in names
    only = _after(_stderr(_GRAPH, "fuse_ops"))
    assert only == ["fuse_ops"]
    assert _stderr(_GRAPH, "0") == ""
