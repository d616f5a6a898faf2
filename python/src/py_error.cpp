// kiln.KilnError: every kiln::Error thrown by the C++ API surfaces in Python
// as this exception with the C++ message. It subclasses ValueError because
// kiln's errors are about bad values given by the user (a shape, a schedule
// step, an argument), so `except ValueError` code keeps working.
#include "kiln/support/error.h"
#include "kiln_py.h"

namespace kiln::python {

void throw_user_error(const std::string& message) { throw Error(message); }

void define_error(py::module_& m) {
  // The translator registered here runs before pybind11's generic
  // std::exception one, so the type is KilnError rather than RuntimeError.
  py::exception<Error>& exc = py::register_exception<Error>(m, "KilnError", PyExc_ValueError);
  exc.attr("__doc__") = "Raised for every error kiln's C++ core reports; the message names the object and the fix.";
  exc.attr("__module__") = "kiln";
}

}  // namespace kiln::python
