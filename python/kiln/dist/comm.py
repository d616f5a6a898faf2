"""The ranks and their collectives (kiln.dist.rank, barrier, all_reduce, ...): the communicator
mpirun's ranks share, set up when kiln.dist is imported."""
import atexit
import os as _os

from .._ffi import _kiln


def _share_the_cores():
    """Each of the ranks mpirun starts on this host runs its kernels on its share of the cores the
    rank may use. Without it every rank would start one thread per core, and on oversubscribed
    cores a rank's idle threads spin where its peers need to run (a 4-rank step on 2 cores took
    1.8 ms against 0.1 on 2 ranks). Read when kiln's thread pool starts, at the first kernel."""
    local = _os.environ.get("OMPI_COMM_WORLD_LOCAL_SIZE") or _os.environ.get("MPI_LOCALNRANKS")
    if not local or _os.environ.get("KILN_NUM_THREADS"):
        return
    cores = len(_os.sched_getaffinity(0))
    # A rank bound to its own cores keeps them all; unbound, the host's are split among the ranks.
    share = cores if cores < (_os.cpu_count() or cores) else cores // max(int(local), 1)
    _os.environ["KILN_NUM_THREADS"] = str(max(1, share))


_share_the_cores()

_d = _kiln.dist
rank = _d.rank
size = _d.size
backend = _d.backend
set_timeout = _d.set_timeout
timeout = _d.timeout
barrier = _d.barrier
all_reduce = _d.all_reduce
all_gather = _d.all_gather
broadcast = _d.broadcast
send = _d.send
recv = _d.recv
mpi_built = _d.mpi_built
nccl_all_reduce = _d.nccl_all_reduce
set_ring = _d.set_ring  # (min_bytes, segment_bytes, window, pair_exchange=True): large all-reduces as kiln's segmented ring
ring = _d.ring

atexit.register(_d.finalize)
