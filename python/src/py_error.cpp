// kiln's two exceptions in Python. kiln::Error (bad input) surfaces as
// kiln.KilnError with the C++ message; it subclasses ValueError because these
// errors are about values given by the user (a shape, a schedule step, an
// argument), so `except ValueError` code keeps working. kiln::InternalError (a
// broken invariant: a kiln bug) surfaces as kiln.InternalError, a
// RuntimeError and deliberately not a KilnError, so that code which handles
// misuse does not swallow a bug.
#include "kiln/support/error.h"
#include "kiln_py.h"

namespace kiln::python {

void throw_user_error(const std::string& message) { throw Error(message); }

void define_error(py::module_& m) {
  // Translators run newest first, and each runs before pybind11's generic
  // std::exception one: InternalError is registered after Error so that it is
  // tried first (it derives from Error in C++).
  py::exception<Error>& user = py::register_exception<Error>(m, "KilnError", PyExc_ValueError);
  user.attr("__doc__") = "Raised for bad input to kiln (a user error); the message names the object and the fix.";
  user.attr("__module__") = "kiln";
  py::exception<InternalError>& internal = py::register_exception<InternalError>(m, "InternalError", PyExc_RuntimeError);
  internal.attr("__doc__") =
      "Raised when kiln breaks one of its own invariants: a bug in kiln, not misuse. The message names the C++ file, "
      "line and failed check; please report it.";
  internal.attr("__module__") = "kiln";
}

}  // namespace kiln::python
