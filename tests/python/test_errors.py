"""kiln.KilnError (misuse) against kiln.InternalError (a kiln bug), as Python sees them."""
import pytest

import kiln
from kiln import te


def test_the_two_kinds_are_distinct_exceptions():
    assert issubclass(kiln.KilnError, ValueError)
    assert issubclass(kiln.InternalError, RuntimeError)
    assert not issubclass(kiln.InternalError, kiln.KilnError)
    assert not issubclass(kiln.KilnError, kiln.InternalError)


def test_misuse_is_a_kiln_error():
    A = te.placeholder((16,), name="A")
    B = te.compute((16,), lambda i: A[i] * 2, name="B")
    s = te.create_schedule(B.op)
    with pytest.raises(kiln.KilnError, match="factor must be positive"):
        s[B].split(B.op.axis[0], factor=0)


@pytest.mark.skipif(not hasattr(kiln, "tune"), reason="kiln was built without the auto-scheduler (XGBoost)")
def test_an_internal_error_in_a_tuning_session_is_not_a_kiln_error(tmp_path):
    # The tuner counts a candidate's user error as a failed trial; an internal
    # error (injected into the build of candidate 1) ends the session as
    # kiln.InternalError, which `except kiln.KilnError` does not swallow.
    A = te.placeholder((16, 16), name="A")
    B = te.placeholder((16, 16), name="B")
    C = kiln.ops.matmul(A, B)
    with pytest.raises(kiln.InternalError, match="fault injection"):
        kiln.tune([A, B, C], db=str(tmp_path / "t.db"), trials=4, batch_size=4, progress=False,
                  population=8, generations=1, inject_faults="internal@1")
    r = kiln.tune([A, B, C], db=str(tmp_path / "u.db"), trials=4, batch_size=4, progress=False,
                  population=8, generations=1, inject_faults="invalid@1")
    assert r.trials_measured == 4 and r.errors == 1
