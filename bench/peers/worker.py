"""A peer worker: one peer kernel, warmed up once, timed on request.

Started by launcher.py (never directly: the launcher gives it its clean
environment). Speaks JSON lines on stdin/stdout:

  -> (at start)  {"ready": true, "label": "...", "check_error": 1e-7, "env": {...}}
                 or {"ready": false, "error": "..."}
  <- {"op": "time", "repeats": 1, "repeat_ms": 50}
  -> {"times": [seconds per call, ...]}      (or {"error": "..."})
  <- {"op": "quit"}                           (or end of input)

One "time" request is one round of an interleaved comparison: the caller
times kiln, then asks the peer, then kiln again, so both see the same drift
of a shared machine. Each repeat runs `number` back-to-back calls, with
`number` fixed at warm-up so that a repeat lasts about repeat_ms.
"""
import json
import os
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_timing import calls_per_repeat, time_calls, warm_up  # noqa: E402


def reply(obj, out):
    out.write(json.dumps(obj) + "\n")
    out.flush()


def serve(spec, inp, out):
    import peer_kernels
    kernel = peer_kernels.make(spec["kind"], spec["impl"], spec.get("args", []), int(spec["threads"]), spec.get("paths"))
    check = kernel.check() if kernel.check else None
    if check is not None and not check < 1e-3:  # NaN included
        raise ArithmeticError(f"{kernel.label} computes a wrong result: relative error {check:.3g} against float64")
    one = warm_up(kernel.run, *kernel.warm)
    env = {k: v for k, v in os.environ.items() if k.startswith(("OPENBLAS_", "OMP_", "MKL_", "KILN_"))}
    reply({"ready": True, "label": kernel.label, "check_error": check, "env": env, "seconds_per_call": one}, out)
    for line in inp:
        if not line.strip():
            continue
        req = json.loads(line)
        if req.get("op") == "quit":
            return
        if req.get("op") != "time":
            reply({"error": f"unknown op {req.get('op')!r}"}, out)
            continue
        number = calls_per_repeat(one, float(req.get("repeat_ms", 50)) * 1e-3)
        reply({"times": time_calls(kernel.run, int(req.get("repeats", 1)), number), "number": number}, out)


def main():
    out = sys.stdout
    # Library chatter must not corrupt the protocol: everything else goes to stderr.
    sys.stdout = sys.stderr
    try:
        spec = json.loads(sys.argv[1])
    except (IndexError, ValueError) as err:
        reply({"ready": False, "error": f"worker.py: bad spec ({err})"}, out)
        return 2
    try:
        serve(spec, sys.stdin, out)
    except Exception as err:  # reported to the caller, which keeps running without this peer
        reply({"ready": False, "error": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc(limit=4)}, out)
        return 1
    return 0


def serve_module(make, spec_json):
    """main() for a peer module that makes its own kernels (`MODULE.py serve SPEC`): serve() asks the module
    named peer_kernels for its kernel, so `make` stands in for it."""
    import types
    shim = types.ModuleType("peer_kernels")
    shim.make = make
    sys.modules["peer_kernels"] = shim
    sys.argv = [sys.argv[0], spec_json]
    return main()


if __name__ == "__main__":
    sys.exit(main())
