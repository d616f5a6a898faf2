"""The one way kiln's benchmarks, kiln-tune and the tutorials run a peer library.

  launcher.py serve SPEC_JSON
      SPEC: {"kind": "gemm", "impl": "numpy", "args": [1024, 1024, 1024], "threads": 2, "paths": {...}}
      Starts worker.py for that peer in a clean environment and hands it this
      process's stdin/stdout (JSON lines, see worker.py).

The clean environment: kiln's own settings never reach the peer (every
KILN_* variable, OMP_WAIT_POLICY, which kiln-tune sets to passive for its
XGBoost), the thread count asked for is set for OpenBLAS and OpenMP (and
torch.set_num_threads by the worker), and OpenBLAS runs with the core type
blas_choice.py found fastest and correct on this machine (cached per machine).

kiln-tune and the benchmarks find this directory beside libkiln_tuner: the
build copies it there on every build (tuner/CMakeLists.txt), an install puts
it in the kiln package; KILN_PEERS_DIR overrides both.

From Python, Peer(kind, impl, args, threads) starts one and interleave()
times kiln and the peers round by round (A B A B ...), so a drifting shared
machine slows both alike; summarize() gives the min and median of each and
the median of the per-round ratios with its range.
"""
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import blas_choice  # noqa: E402
from peer_env import clean_env  # noqa: E402


def serve(spec_text):
    spec = json.loads(spec_text)
    threads = int(spec["threads"])
    if threads < 1:
        raise ValueError(f"threads must be at least 1, got {threads}")
    # A forced core type (e.g. Haswell beside kiln's AVX2 code) replaces the machine's best choice.
    forced = spec.get("blas_coretype")
    blas = {"coretype": forced} if forced else blas_choice.choose(threads)
    env = clean_env(threads, blas=blas)
    os.execve(sys.executable, [sys.executable, os.path.join(HERE, "worker.py"), spec_text], env)


class PeerError(RuntimeError):
    pass


class Peer:
    """A running peer worker (through the launcher)."""

    def __init__(self, kind, impl, args, threads, paths=None, timeout=300):
        spec = json.dumps({"kind": kind, "impl": impl, "args": list(args), "threads": int(threads), "paths": paths})
        self._start([sys.executable, os.path.join(HERE, "launcher.py"), "serve", spec], None, f"peer {kind}/{impl}", timeout)

    def _start(self, argv, env, what, timeout):
        """Starts the worker `argv` (in `env`; None: this one's) and reads its hello line; PeerError naming `what` if it is not ready."""
        self.timeout = timeout
        self._err = tempfile.TemporaryFile(mode="w+")
        self._proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err, text=True, bufsize=1, env=env)
        hello = self._read()
        if not hello.get("ready"):
            self.close()
            raise PeerError(f"{what} did not start: {hello.get('error')}")
        self.label, self.check_error, self.env = hello["label"], hello.get("check_error"), hello.get("env", {})

    def _read(self):
        line = self._proc.stdout.readline()
        if not line:
            self._proc.wait(timeout=self.timeout)
            self._err.seek(0)
            raise PeerError(f"the peer exited (status {self._proc.returncode}): {self._err.read()[-500:]}")
        return json.loads(line)

    def time(self, repeats=1, repeat_ms=50):
        self._proc.stdin.write(json.dumps({"op": "time", "repeats": repeats, "repeat_ms": repeat_ms}) + "\n")
        self._proc.stdin.flush()
        reply = self._read()
        if "times" not in reply:
            raise PeerError(f"peer {self.label}: {reply.get('error')}")
        return reply["times"]

    def close(self):
        if self._proc.poll() is None:
            try:
                self._proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
                self._proc.stdin.close()
                self._proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self._proc.kill()
                self._proc.wait()
        self._err.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def median(v):
    s = sorted(v)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def interleave(kiln_round, peers, rounds=7, repeat_ms=50, settle_s=0.15):
    """Rounds of kiln_round() (seconds per call) then each peer's time(); returns summarize()'s dict.

    After each peer's measurement a pause of settle_s lets its idle threads
    stop spinning (OpenBLAS's spin for about 2^28 cycles after a call).
    """
    kiln, times = [], {p.label: [] for p in peers}
    for _ in range(max(5, rounds)):
        kiln.append(kiln_round())
        for p in peers:
            times[p.label].extend(p.time(1, repeat_ms))
            time.sleep(settle_s)
    return summarize(kiln, times)


def summarize(kiln, peer_times):
    """kiln: seconds per round; peer_times: {label: seconds per round}. The best peer is the one with the lowest median."""
    best = min(peer_times, key=lambda k: median(peer_times[k]))
    ratios = {label: [k / p for k, p in zip(kiln, v)] for label, v in peer_times.items()}
    r = ratios[best]
    return {"kiln_min": min(kiln), "kiln_median": median(kiln), "peer": best, "peer_min": min(peer_times[best]),
            "peer_median": median(peer_times[best]), "ratio_median": median(r), "ratio_min": min(r),
            "ratio_max": max(r), "rounds": len(kiln),
            "peers": {k: {"min": min(v), "median": median(v), "ratio_median": median(ratios[k]), "ratio_min": min(ratios[k]),
                          "ratio_max": max(ratios[k])} for k, v in peer_times.items()}}


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "serve":
        try:
            serve(sys.argv[2])
        except Exception as err:  # the caller reads one JSON line whatever happens
            print(json.dumps({"ready": False, "error": f"launcher: {type(err).__name__}: {err}"}), flush=True)
            return 1
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
