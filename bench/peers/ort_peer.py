"""ONNX Runtime as a peer: the CPU build inside npm's onnxruntime-node, run by
ort_worker.js (Node) on the same ONNX file kiln compiles.

scripts/setup.sh installs the package into third_party/onnxruntime-node
(npm install --ignore-scripts: the Linux x64 CPU library ships inside the
package; the install script only fetches GPU extras). KILN_ORT_NODE_DIR names
another onnxruntime-node folder.

OrtPeer(model_path, inputs, reference, threads) speaks launcher.Peer's
protocol (.label, .time(), .close()); its worker checks the first output
against `reference` before it is timed (check_error, relative to the largest
reference value) and runs with all graph optimizations, intra-op threads = T
and ONNX Runtime's default spinning, in the peers' clean environment.
"""
import json
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import launcher  # noqa: E402
from peer_env import clean_env  # noqa: E402

PACKAGE = os.path.join("third_party", "onnxruntime-node", "node_modules", "onnxruntime-node")


def package_in(folder):
    """The onnxruntime-node package at `folder`: the package itself, or the one npm installed under it
    (folder/node_modules/onnxruntime-node); None when neither holds it."""
    for cand in (folder, os.path.join(folder, "node_modules", "onnxruntime-node")):
        try:
            with open(os.path.join(cand, "package.json")) as f:
                if json.load(f).get("name") == "onnxruntime-node":
                    return cand
        except (OSError, ValueError):
            continue
    return None


def find_module():
    """The onnxruntime-node folder, or None: KILN_ORT_NODE_DIR, else third_party/ of this checkout
    (searched upwards from here, since the build copies bench/peers beside libkiln_tuner)."""
    given = os.environ.get("KILN_ORT_NODE_DIR")
    if given:
        return package_in(given)
    d = HERE
    while True:
        cand = os.path.join(d, PACKAGE)
        if package_in(cand):
            return cand
        parent = os.path.dirname(d)
        if parent == d:
            return None
        d = parent


def unavailable():
    """Why ONNX Runtime cannot run here, or None when it can."""
    if not shutil.which("node"):
        return "node is not installed (scripts/setup.sh installs nodejs and onnxruntime-node)"
    if find_module():
        return None
    given = os.environ.get("KILN_ORT_NODE_DIR")
    if given:
        return (f"KILN_ORT_NODE_DIR={given} holds no onnxruntime-node package (neither its package.json nor "
                "node_modules/onnxruntime-node/package.json names it); point it at either, or unset it")
    return f"onnxruntime-node is not installed ({PACKAGE}; run scripts/setup.sh, or set KILN_ORT_NODE_DIR)"


def version():
    mod = find_module()
    if not mod:
        return None
    with open(os.path.join(mod, "package.json")) as f:
        return json.load(f)["version"]


class OrtPeer(launcher.Peer):
    """ONNX Runtime on `model_path`; inputs: {name: numpy array}; reference: the first output (numpy) or None."""

    def __init__(self, model_path, inputs, reference, threads, timeout=600):
        import numpy as np
        why = unavailable()
        if why:
            raise launcher.PeerError(f"ONNX Runtime: {why}")
        self._dir = tempfile.TemporaryDirectory(prefix="kiln_ort_peer_")
        specs = []
        for i, (name, a) in enumerate(inputs.items()):
            a = np.ascontiguousarray(a)
            path = os.path.join(self._dir.name, f"input{i}.bin")
            a.tofile(path)
            specs.append({"name": name, "path": path, "shape": list(a.shape), "dtype": str(a.dtype)})
        ref = None
        if reference is not None:
            ref = {"path": os.path.join(self._dir.name, "reference.bin"), "shape": list(reference.shape)}
            np.ascontiguousarray(reference, np.float32).tofile(ref["path"])
        spec = {"module": find_module(), "model": os.path.abspath(model_path), "inputs": specs, "reference": ref,
                "threads": int(threads)}
        self._start(["node", os.path.join(HERE, "ort_worker.js"), json.dumps(spec)], clean_env(threads), "ONNX Runtime", timeout)
        if reference is not None and not (self.check_error is not None and self.check_error < 1e-3):
            err = self.check_error
            self.close()
            raise launcher.PeerError(f"ONNX Runtime's output differs from the reference: relative error {err}")

    def close(self):
        super().close()
        self._dir.cleanup()
