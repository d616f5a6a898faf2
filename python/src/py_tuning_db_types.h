/** \file
 * The tuning database's value types (tuning_db/include/kiln/tuning_db/types.h)
 * as Python classes, and the checked conversions py_tuning_db.cpp uses for
 * the Database's arguments. Private to the _kiln extension.
 */
#ifndef KILN_PYTHON_PY_TUNING_DB_TYPES_H
#define KILN_PYTHON_PY_TUNING_DB_TYPES_H

#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/support/error.h"
#include "kiln/tuning_db/types.h"
#include "kiln_py.h"

namespace kiln::python {

/** The name of a Python value's type, for error messages. */
inline std::string type_name(py::handle v) { return py::str(v.get_type().attr("__name__")); }

// What a field must hold, for the error messages.
template <typename T>
const char* expected() {
  if constexpr (std::is_same_v<T, std::string>) return "a string";
  else if constexpr (std::is_same_v<T, bool>) return "a bool";
  else if constexpr (std::is_integral_v<T>) return "an integer";
  else if constexpr (std::is_same_v<T, double>) return "a number";
  else if constexpr (std::is_same_v<T, std::optional<double>>) return "a number or None";
  else if constexpr (std::is_same_v<T, std::vector<double>>) return "a list of numbers";
  else if constexpr (std::is_same_v<T, std::vector<std::string>>) return "a list of strings";
  else if constexpr (std::is_same_v<T, std::vector<int64_t>>) return "a list of integers";
  else return "a value of another type";
}

/**
 * `v` as a T, or kiln::Error saying that `what` must be a T (naming the bad
 * element of a sequence): never a TypeError from inside pybind11.
 */
template <typename T>
T cast_value(py::handle v, const std::string& what) {
  // A str is a sequence of str: without this, "avx2" would become {"a","v","x","2"}.
  if constexpr (std::is_same_v<T, std::vector<std::string>>) {
    if (py::isinstance<py::str>(v)) throw Error(what + " must be a list of strings, not a single str");
  }
  try {
    return v.cast<T>();
  } catch (const py::cast_error&) {
  }
  // A sequence with one bad element: name the element, not just the container.
  if constexpr (std::is_same_v<T, std::vector<double>> || std::is_same_v<T, std::vector<int64_t>> ||
                std::is_same_v<T, std::vector<std::string>>) {
    if (py::isinstance<py::sequence>(v) && !py::isinstance<py::str>(v) && !py::isinstance<py::bytes>(v)) {
      auto seq = py::reinterpret_borrow<py::sequence>(v);
      for (size_t i = 0; i < seq.size(); ++i) {
        try {
          (void)seq[i].template cast<typename T::value_type>();
        } catch (const py::cast_error&) {
          throw Error(what + " must be " + expected<T>() + ", but element " + std::to_string(i) + " is a " + type_name(seq[i]));
        }
      }
    }
  }
  throw Error(what + " must be " + expected<T>() + ", not " + type_name(v));
}

/** Binds Record, TargetInfo, Workload, ... into `t` (kiln.tuning_db's native module). */
void define_tuning_db_types(py::module_& t);

/**
 * A struct from a Python value: an instance of its class, or a dict of its
 * fields (every field checked; an unknown one is an error). A TargetInfo may
 * also be a bare target string. Errors are kiln::Error naming `what`.
 */
tuning_db::TargetInfo to_target(py::handle v, const std::string& what);
tuning_db::Record to_record(py::handle v, const std::string& what);
tuning_db::Workload to_workload(py::handle v, const std::string& what);
tuning_db::TuningRun to_run(py::handle v, const std::string& what);
tuning_db::FeatureSet to_features(py::handle v, const std::string& what);

}  // namespace kiln::python

#endif  // KILN_PYTHON_PY_TUNING_DB_TYPES_H
