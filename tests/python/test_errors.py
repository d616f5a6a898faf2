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


def _caught_as(kind):
    """Which handler a C++ error of `kind` reaches, tried as code that handles misuse orders them."""
    try:
        kiln._ffi._kiln._raise_error(kind, f"a {kind} error from C++")
    except kiln.KilnError:
        return "KilnError"
    except kiln.InternalError:
        return "InternalError"
    return "nothing"


def test_a_cpp_internal_error_is_never_a_kiln_error():
    assert _caught_as("internal") == "InternalError"
    assert _caught_as("user") == "KilnError"
    with pytest.raises(kiln.InternalError, match="internal error at .*py_error.cpp.*a internal error from C"):
        kiln._ffi._kiln._raise_error("internal", "a internal error from C++")
    with pytest.raises(kiln.KilnError, match="^a user error from C"):
        kiln._ffi._kiln._raise_error("user", "a user error from C++")


def test_python_code_never_catches_one_kind_as_the_other():
    # kiln's own Python handles misuse with `except KilnError` (or ValueError) only:
    # no handler there is broad enough to take a kiln.InternalError.
    import pathlib
    import re
    src = pathlib.Path(kiln.__file__).parent
    for f in src.glob("*.py"):
        for n, line in enumerate(f.read_text().splitlines(), 1):
            m = re.match(r"\s*except\s*(.*?)\s*(as \w+)?:", line)
            if m:
                caught = m.group(1)
                assert caught and not re.search(r"\b(Exception|RuntimeError|InternalError)\b", caught), f"{f.name}:{n}: {line.strip()}"
