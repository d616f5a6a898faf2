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
  // Each translator runs before pybind11's generic std::exception one. The
  // two C++ classes are siblings (under kiln::Exception), as the two Python
  // classes are: neither is ever translated as the other.
  py::exception<Error>& user = py::register_exception<Error>(m, "KilnError", PyExc_ValueError);
  user.attr("__doc__") = "Raised for bad input to kiln (a user error); the message names the object and the fix.";
  user.attr("__module__") = "kiln";
  py::exception<InternalError>& internal = py::register_exception<InternalError>(m, "InternalError", PyExc_RuntimeError);
  internal.attr("__doc__") =
      "Raised when kiln breaks one of its own invariants: a bug in kiln, not misuse. The message names the C++ file, "
      "line and failed check; please report it.";
  internal.attr("__module__") = "kiln";
  // A test hook: raises either kind from C++ through the checks kiln's code uses.
  m.def("_raise_error", [](const std::string& kind, const std::string& message) {
    KILN_USER_CHECK(kind == "user" || kind == "internal") << "_raise_error: kind must be 'user' or 'internal', got '" << kind << "'";
    KILN_CHECK(kind != "internal") << message;
    KILN_USER_ERROR() << message;
  }, py::arg("kind"), py::arg("message"));
}

}  // namespace kiln::python
