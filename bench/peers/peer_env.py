"""The environment a peer (and each OpenBLAS core-type probe) runs in.

kiln's own settings never reach a peer: every KILN_* variable, and
OMP_WAIT_POLICY, which kiln-tune sets to passive for its XGBoost. The thread
count asked for is set for OpenBLAS, OpenMP and MKL, and OpenBLAS's core
type and L2 size are the ones given (blas_choice.py's choice), never
inherited, so the peer that is timed is the one that was probed.
"""
import os

# Thread and core-type settings decided here; kiln's own settings are dropped too.
CONTROLLED = ("OMP_WAIT_POLICY", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "MKL_NUM_THREADS",
              "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OPENBLAS_VERBOSE")


def clean_env(threads, base=None, blas=None):
    """base (default: os.environ) without kiln's settings, with the threads and blas's coretype / l2."""
    base = os.environ if base is None else base
    env = {k: v for k, v in base.items() if k not in CONTROLLED and not k.startswith("KILN_")}
    t = str(int(threads))
    env.update(OMP_NUM_THREADS=t, OPENBLAS_NUM_THREADS=t, MKL_NUM_THREADS=t)
    if blas and blas.get("coretype"):
        env["OPENBLAS_CORETYPE"] = blas["coretype"]
    if blas and blas.get("l2"):
        env["OPENBLAS_L2_SIZE"] = blas["l2"]
    return env
