"""The BLAS peer at its best: which OPENBLAS_CORETYPE to run OpenBLAS with.

OpenBLAS picks its kernels from the CPU model it recognises; an OpenBLAS
older than the CPU falls back to old kernels (Debian's 0.3.21 runs Prescott's
SSE3 kernels on an Emerald Rapids Xeon, at a fifth of its speed), which a
user fixes by setting OPENBLAS_CORETYPE. So when the core type OpenBLAS
picked on its own is older than the host's vector ISA (or the environment
sets OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE, one more candidate), every core
type a user could set that the host can run is timed once, each in its own
process, checked against a float64 reference (a wrong result, a crash or a
hang disqualifies it), and the fastest correct one is used. The choice is
cached per machine in ~/.cache/kiln/openblas_coretype.json, keyed by CPU
model, OpenBLAS version, threads and the environment's settings.

  blas_choice.py choose THREADS [--force]   prints the choice (JSON); --force probes and ignores the cache
  blas_choice.py probe THREADS              (internal) times and checks this process's OpenBLAS
"""
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_env import clean_env  # noqa: E402

# ISA level a core type's kernels need: 0 SSE, 1 AVX, 2 AVX2+FMA, 3 AVX-512.
CORE_LEVEL = {"prescott": 0, "core2": 0, "penryn": 0, "dunnington": 0, "nehalem": 0, "atom": 0, "barcelona": 0, "opteron": 0,
              "bobcat": 0, "sandybridge": 1, "bulldozer": 1, "piledriver": 1, "steamroller": 1, "excavator": 2,
              "haswell": 2, "zen": 2, "skylakex": 3, "cooperlake": 3, "sapphirerapids": 3}
# What a user could set, with the CPU flags its kernels need.
CANDIDATES = [("SkylakeX", {"avx512f", "avx512bw", "avx512vl", "avx512dq"}),
              ("Cooperlake", {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_bf16"}),
              ("Haswell", {"avx2", "fma"}), ("Zen", {"avx2", "fma"})]
# The environment's own OpenBLAS settings: one more candidate, and part of the cache key.
USER_SETTINGS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


def cpu_info():
    """(model name, set of flags) from /proc/cpuinfo; ('unknown', set()) elsewhere."""
    model, flags = "unknown", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, val = line.partition(":")
                key = key.strip()
                if key == "model name" and model == "unknown":
                    model = val.strip()
                elif key == "flags" and not flags:
                    flags = set(val.split())
    except OSError:
        pass
    return model, flags


def machine():
    """The facts a benchmark prints about the host: name, CPU model, vector ISA, cores, AVX2 / AVX-512."""
    import socket
    model, flags = cpu_info()
    return {"host": socket.gethostname(), "cpu": model, "isa": vector_isa(flags), "cores": os.cpu_count(),
            "avx2": "avx2" in flags, "avx512f": "avx512f" in flags}


def host_level(flags):
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags:
        return 3
    if {"avx2", "fma"} <= flags:
        return 2
    return 1 if "avx" in flags else 0


def vector_isa(flags):
    return ["SSE", "AVX", "AVX2", "AVX-512"][host_level(flags)]


def probe():
    """Times a 1024^3 fp32 matmul in this process and checks two products against float64."""
    import numpy as np
    from threadpoolctl import threadpool_info
    rng = np.random.default_rng(1)
    err = 0.0
    for m, n, k in ((257, 263, 129), (1024, 1024, 1024)):  # an odd shape reaches the edge kernels
        a = rng.standard_normal((m, k), dtype=np.float32)
        b = rng.standard_normal((k, n), dtype=np.float32)
        c = a @ b
        ref = a.astype(np.float64) @ b.astype(np.float64)
        err = max(err, float(np.max(np.abs(c - ref)) / np.max(np.abs(ref))))
    c = np.empty_like(c)
    best = float("inf")
    for _ in range(7):
        t0 = time.perf_counter()
        np.matmul(a, b, out=c)
        best = min(best, time.perf_counter() - t0)
    blas = next((d for d in threadpool_info() if d.get("user_api") == "blas"), {})
    return {"arch": blas.get("architecture"), "version": blas.get("version"), "library": blas.get("internal_api"),
            "gflops": 2.0 * 1024 ** 3 / best * 1e-9, "error": err}


def run_probe(threads, coretype=None, l2=None, timeout=120):
    """Runs probe() in a fresh process with the given settings; returns its dict with 'ok' and 'why'."""
    # The peers' own environment, so that what is probed is what is timed later.
    env = clean_env(threads, blas={"coretype": coretype, "l2": l2})
    res = {"coretype": coretype, "l2": l2, "ok": False}
    try:
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), "probe", str(threads)], env=env, capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return dict(res, why=f"hung for {timeout} s")
    if proc.returncode != 0:
        return dict(res, why=f"crashed (status {proc.returncode}): {proc.stderr.strip()[-300:]}")
    try:
        res.update(json.loads(proc.stdout.strip().splitlines()[-1]))
    except (ValueError, IndexError):
        return dict(res, why=f"printed no result: {proc.stdout[-300:]}")
    if not res["error"] < 1e-3:
        return dict(res, why=f"wrong result: relative error {res['error']:.2g} against float64")
    res["ok"] = True
    return res


def cache_path():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "kiln", "openblas_coretype.json")


def cache_key(threads):
    import numpy  # noqa: F401  (loads OpenBLAS, so threadpoolctl sees it)
    from threadpoolctl import threadpool_info
    model, flags = cpu_info()
    blas = next((d for d in threadpool_info() if d.get("user_api") == "blas"), {})
    env = ",".join(f"{k}={os.environ[k]}" for k in USER_SETTINGS if os.environ.get(k))
    return f"{model}|{vector_isa(flags)}|{blas.get('internal_api')} {blas.get('version')} {blas.get('filepath')}|{threads}T|{env}"


def choose(threads, force=False, log=sys.stderr):
    """The settings to run OpenBLAS with: {"coretype": str|None, "l2": str|None, "arch": ..., "candidates": [...]}."""
    key = cache_key(threads)
    path = cache_path()
    try:
        with open(path) as f:
            cache = json.load(f)
    except (OSError, ValueError):
        cache = {}
    if not force and key in cache:
        return cache[key]
    _, flags = cpu_info()
    auto = run_probe(threads)
    env_ct, env_l2 = os.environ.get("OPENBLAS_CORETYPE"), os.environ.get("OPENBLAS_L2_SIZE")
    older = CORE_LEVEL.get(str(auto.get("arch")).lower(), 0) < host_level(flags)
    candidates = [auto]
    if older or env_ct or env_l2 or force:
        print(f"kiln peers: OpenBLAS picked {auto.get('arch')} on this {vector_isa(flags)} host; timing the core types a user could set "
              f"({threads} thread(s), once per machine)", file=log)
        if env_ct or env_l2:
            candidates.append(run_probe(threads, env_ct, env_l2))
        for name, needs in CANDIDATES:
            if not needs <= flags:
                candidates.append({"coretype": name, "ok": False, "why": "skipped: the host lacks " + " ".join(sorted(needs - flags))})
                continue
            if name != env_ct:
                candidates.append(run_probe(threads, name))
        for c in candidates:
            state = f"{c['gflops']:.1f} GFLOP/s, error {c['error']:.1e}" if c.get("ok") else "disqualified: " + c.get("why", "")
            print(f"  OPENBLAS_CORETYPE={c.get('coretype') or '(automatic)'}: {c.get('arch', '-')}: {state}", file=log)
    good = [c for c in candidates if c.get("ok")]
    best = max(good, key=lambda c: c["gflops"]) if good else {"coretype": None, "l2": None, "arch": auto.get("arch")}
    if auto.get("ok") and best is not auto and best["gflops"] < 1.05 * auto["gflops"]:
        best = auto  # one timing each is noisy: leave the automatic choice only for a clear gain
    choice = {"coretype": best.get("coretype"), "l2": best.get("l2"), "arch": best.get("arch"), "candidates": candidates}
    cache[key] = choice
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump(cache, f, indent=1)
        os.replace(tmp, path)
    except OSError as err:
        print(f"kiln peers: cannot cache the OpenBLAS choice in {path}: {err}", file=log)
    return choice


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "probe":
        print(json.dumps(probe()))
        return 0
    if len(sys.argv) >= 3 and sys.argv[1] == "choose":
        print(json.dumps(choose(int(sys.argv[2]), force="--force" in sys.argv), indent=1))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
