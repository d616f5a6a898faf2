"""kiln's segmented ring all-reduce (dist/src/ring_all_reduce.cpp) equals MPI's own sum, float32 and
bfloat16, on counts that do not divide into ranks x segments, several in flight at once: on 2 and
3 ranks across the two "hosts" of the test bed (TCP), and on 2 ranks of one host (shared memory)."""
import pytest

import kiln
from hostbed import Launcher
from test_dist import expect_ok

pytestmark = pytest.mark.skipif(not hasattr(kiln, "dist"), reason="kiln was built without the distribution pass")


@pytest.mark.parametrize("np_", [2, 3])
def test_ring_sum_equals_mpi_across_hosts(host_bed, np_):
    expect_ok("ring_sum.py", np_, timeout=120, launcher=Launcher(host_bed))


def test_ring_sum_equals_mpi_on_one_host():
    expect_ok("ring_sum.py", 2, timeout=120)


def test_ring_options_are_checked():
    before = kiln.dist.ring()
    with pytest.raises(kiln.KilnError, match="segment_bytes >= 1"):
        kiln.dist.set_ring(1, 0, 2)
    assert kiln.dist.ring() == before
