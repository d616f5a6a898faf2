"""The two-"host" test bed of scripts/hosts.sh for the MPI tests: network namespaces joined by a
bridge, ranks placed from an Open MPI hostfile and started through a launch agent that stands in
for ssh, talking TCP only (btl tcp,self; no shared memory between hosts).

`Launcher` builds the mpirun command line for either the plain local launch or the bed, so a
test runs the same script both ways by taking the `launcher` fixture (conftest.py)."""
import fcntl
import os
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HOSTS_SH = os.path.join(ROOT, "scripts", "hosts.sh")
MPIRUN = shutil.which("mpirun")


class BedUnavailable(Exception):
    """The machine forbids network namespaces (no root, no CAP_NET_ADMIN, or a sandbox)."""


def _forbidden(text):
    return any(s in text for s in ("Operation not permitted", "Permission denied", "needs root", "ip: not found",
                                   "No such file or directory: 'ip'"))


LOCK = "/tmp/kiln-bed.lock"


class Bed:
    """N hosts kiln-h0..kiln-h(N-1); up() remakes them, down() removes everything (idempotent).
    One bed per machine: a second process (another test session, a benchmark) waits for the first's down()."""

    def __init__(self, hosts=2, wait_s=900):
        self.hosts, self.wait_s = hosts, wait_s
        self.hostfile = None
        self._lock = None

    def _acquire(self):
        if self._lock is not None:
            return
        f = open(LOCK, "w")
        start = time.monotonic()
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() - start > self.wait_s:
                    f.close()
                    raise RuntimeError(f"the test bed is held by another process for over {self.wait_s} s ({LOCK}); "
                                       "wait for it or end it, then `scripts/hosts.sh down`")
                time.sleep(0.5)
        self._lock = f

    def up(self):
        if shutil.which("ip") is None:
            raise BedUnavailable("iproute2's `ip` is not installed (apt-get install iproute2)")
        if os.geteuid() != 0:
            raise BedUnavailable("making network namespaces needs root (run the tests as root or with CAP_SYS_ADMIN)")
        self._acquire()
        p = subprocess.run(["bash", HOSTS_SH, "up", str(self.hosts)], capture_output=True, text=True, timeout=60)
        if p.returncode != 0:
            self.down()  # hosts.sh removed what it made; this drops the lock
            if _forbidden(p.stderr):
                raise BedUnavailable("this machine forbids network namespaces: " + p.stderr.strip()[-300:])
            raise RuntimeError(f"scripts/hosts.sh up {self.hosts} failed:\n{p.stdout}{p.stderr}")
        self.hostfile = p.stdout.strip().splitlines()[-1]
        return self

    def down(self, release=True):
        subprocess.run(["bash", HOSTS_SH, "down"], capture_output=True, text=True, timeout=60)
        if release and self._lock is not None:
            self._lock.close()  # closing the file drops the lock
            self._lock = None

    def kill(self, i):
        """Takes host i down as a crash would: its link cut, its daemon and ranks killed."""
        subprocess.run(["bash", HOSTS_SH, "kill", f"kiln-h{i}"], check=True, capture_output=True, text=True, timeout=60)


class Launcher:
    """mpirun's command line: local (every rank on this host, shared memory allowed) or across the
    bed's hosts (the ranks split evenly, in blocks: ranks 0..k-1 on kiln-h0; else round the hosts), the environment forwarded
    with -x as on real machines."""

    def __init__(self, bed=None):
        self.bed = bed

    def command(self, np_, env):
        keys = ["PYTHONPATH", "LD_LIBRARY_PATH", "OMP_NUM_THREADS"] + sorted(k for k in env if k.startswith("KILN_"))
        fwd = [a for k in keys if k in env for a in ("-x", k)]
        if self.bed is None:
            return [MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", str(np_)] + fwd
        per_host = max(1, np_ // self.bed.hosts)
        # Ranks that do not split evenly go round the hosts (rank r on host r % hosts).
        mapping = f"ppr:{per_host}:node" if per_host * self.bed.hosts == np_ else "node"
        return ["bash", HOSTS_SH, "mpirun", "--allow-run-as-root", "--oversubscribe", "--hostfile", self.bed.hostfile,
                "-np", str(np_), "--map-by", mapping] + fwd


def python_env(extra=None):
    """The environment every rank needs: kiln importable, one thread per rank (ranks share the cores)."""
    import kiln._ffi as ffi
    import kiln
    paths = [os.path.dirname(os.path.dirname(kiln.__file__)), os.path.dirname(ffi._kiln.__file__)]
    return dict(os.environ, KILN_NUM_THREADS="1", OMP_NUM_THREADS="1",
                PYTHONPATH=os.pathsep.join(dict.fromkeys(paths + sys.path)), **(extra or {}))
