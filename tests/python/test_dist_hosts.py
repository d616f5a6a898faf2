"""The two-"host" test bed itself (scripts/hosts.sh, hostbed.py): it comes up and goes down cleanly,
ranks land in different network namespaces and talk over the hosts' link, and a host lost mid-step
makes the survivors stop with kiln's timeout error. The training scripts run across it from their own
tests (the `launcher` fixture: test_dist.py, test_dist_pipeline.py, test_dist_auto.py, test_tutorial_dist.py)."""
import os
import subprocess
import sys
import time

import pytest

import kiln
from hostbed import HOSTS_SH, Launcher
from test_dist import expect_ok, mpi

pytestmark = pytest.mark.skipif(not hasattr(kiln, "dist"), reason="kiln was built without the distribution pass")


def namespaces():
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return sorted(line.split()[0] for line in out.splitlines() if line.startswith("kiln-"))


def test_up_is_idempotent_and_down_removes_everything(host_bed):
    host_bed.up()  # again, over the running bed
    assert namespaces() == ["kiln-bed", "kiln-h0", "kiln-h1"]
    addr = subprocess.run(["ip", "-n", "kiln-h1", "-4", "-br", "addr", "show", "kiln0"], capture_output=True, text=True).stdout
    assert "10.213.0.2/24" in addr, addr
    # Nothing of the bed in the root namespace: no interface, no route.
    assert "10.213." not in subprocess.run(["ip", "-4", "addr"], capture_output=True, text=True).stdout
    assert "10.213." not in subprocess.run(["ip", "route"], capture_output=True, text=True).stdout
    # No route out of a host: only the bed's /24.
    routes = subprocess.run(["ip", "-n", "kiln-h0", "route"], capture_output=True, text=True).stdout
    assert "default" not in routes and routes.strip().startswith("10.213.0.0/24"), routes
    host_bed.down(release=False)
    host_bed.down(release=False)  # idempotent
    assert namespaces() == [] and not os.path.exists("/tmp/kiln-bed")
    host_bed.up()


def test_a_failed_up_leaves_nothing_behind(host_bed):
    host_bed.down(release=False)
    try:  # an invalid host name fails after the bridge's namespace is made
        p = subprocess.run(["bash", HOSTS_SH, "up", "2"], env=dict(os.environ, KILN_BED_PREFIX="bad/x"), capture_output=True, text=True)
        assert p.returncode != 0 and "removing the partial bed" in p.stderr, p.stderr
        assert namespaces() == [] and not os.path.exists("/tmp/kiln-bed")
    finally:
        host_bed.up()


def test_without_root_the_bed_is_skipped_with_the_reason(monkeypatch):
    from hostbed import Bed, BedUnavailable
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(BedUnavailable, match="needs root"):
        Bed(2).up()


@pytest.mark.parametrize("np_", [2, 4])
def test_ranks_sit_on_different_hosts_and_talk_over_tcp(host_bed, np_):
    out = expect_ok("where.py", np_, launcher=Launcher(host_bed))
    assert "namespaces:" in out


def test_the_agent_refuses_an_unknown_host(host_bed):
    p = subprocess.run([os.path.join(os.path.dirname(HOSTS_SH), "netns_agent.sh"), "kiln-h9", "true"], capture_output=True, text=True)
    assert p.returncode == 255 and "no namespace 'kiln-h9'" in p.stderr


def wait_for_text(path, text, seconds):
    """Seconds until `text` shows in the file at `path`, or None after `seconds`."""
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        if os.path.exists(path) and text in open(path, errors="replace").read():
            return time.monotonic() - start
        time.sleep(0.05)
    return None


def test_a_host_taken_down_mid_step_stops_the_survivors(host_bed, tmp_path):
    # Each rank writes its own files (on a real cluster: a shared or local disk), so the survivor's
    # message is read as it writes it, not after mpirun, which may still wait on the lost daemon.
    wrap = f"exec {sys.executable} host_down.py >{tmp_path}/out.$OMPI_COMM_WORLD_RANK 2>{tmp_path}/err.$OMPI_COMM_WORLD_RANK"
    proc = mpi(["/bin/sh", "-c", wrap], 2, env={"KILN_DIST_TIMEOUT": "5"}, launcher=Launcher(host_bed), popen=True)
    try:
        assert wait_for_text(tmp_path / "out.1", "step 3 rank 1", 90) is not None, proc.poll()
        host_bed.kill(1)
        stopped = wait_for_text(tmp_path / "err.0", "KILN_DIST_TIMEOUT", 30)
        err = (tmp_path / "err.0").read_text(errors="replace")
        assert stopped is not None, err[-3000:]
        assert "rank 0: " in err and "did not complete within 5 s (KILN_DIST_TIMEOUT)" in err and "aborting all ranks" in err, err[-3000:]
        print(f"survivor stopped {stopped:.1f} s after host kiln-h1 went down (KILN_DIST_TIMEOUT=5)")
        assert stopped < 5 + 10, f"the survivor stopped {stopped:.1f} s after the host went down"
    finally:
        if proc.poll() is None:
            proc.kill()  # mpirun may wait on the lost host's daemon as it would on a real machine's ssh
            proc.wait()
        host_bed.up()  # the other tests get a whole bed again
