/** \file
 * Shared declarations of the _kiln extension: one define_<thing> per file
 * (Halide's python_bindings layout) and the few conversions several files use.
 * The bindings hold no compiler logic: they convert Python values to kiln
 * handles, call the C++ API and convert back.
 */
#ifndef KILN_PYTHON_KILN_PY_H
#define KILN_PYTHON_KILN_PY_H

#include <pybind11/pybind11.h>
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "kiln/ir/expr.h"
#ifdef KILN_PY_WITH_GRAPH
#include "kiln/graph/dim.h"
#endif
#include "kiln/runtime/ndarray.h"
#include "kiln/te/operation.h"
#include "kiln/te/schedule.h"

namespace kiln::python {

namespace py = pybind11;

void define_error(py::module_& m);
void define_expr(py::module_& m);
void define_operation(py::module_& m);
void define_schedule(py::module_& m);
void define_lower(py::module_& m);
void define_runtime(py::module_& m);
void define_ops(py::module_& m);
void define_tuning_db(py::module_& m);
/** kiln.gpu's native part, _kiln.cuda (py_cuda.cpp). */
void define_cuda(py::module_& m);
/** kiln.tuner (py_tuner.cpp): built only with the auto-scheduler (KILN_PY_WITH_TUNER). */
void define_tuner(py::module_& m);

/**
 * A Python value as an expression: an Expr, an IterVar (its variable), a
 * bool, an int (int32, or int64 when it does not fit), a float (float32) or
 * a numpy scalar (its own dtype). Anything else raises kiln.KilnError.
 */
Expr to_expr(py::handle value);

/** A dtype given as a string ("float32"), a numpy dtype or type, or a torch dtype. */
DataType to_dtype(py::handle dtype);
#ifdef KILN_PY_WITH_GRAPH
/** A graph shape from Python: ints for static dims, str names of shape variables ("batch") for symbolic ones. */
graph::Shape to_graph_shape(const py::sequence& dims);
/** The reverse: an int per static dim, the expression's text per symbolic one. */
py::tuple shape_tuple(const graph::Shape& shape);
#endif

/** A shape given as a tuple or list of ints / expressions, or one int. */
std::vector<Expr> to_shape(py::handle shape);

/** A tensor, or the output tensor of an operation. */
te::Tensor to_tensor(py::handle value, const char* what);

/** One tensor or a list / tuple of them (or of ops). */
std::vector<te::Tensor> to_tensor_list(py::handle value, const char* what);

/**
 * A stage as Python sees it: the stage and the schedule that owns it, so the
 * stage cannot outlive its schedule (Stage* stays valid while the state lives:
 * the state keeps stages in unique_ptrs).
 */
struct PyStage {
  te::Schedule sch;
  te::Stage* stage;
};

/** A numpy copy of an array (py_runtime.cpp). */
pybind11::array ndarray_to_numpy(const NDArray& nd);
/** A new array holding a copy of a numpy array (or anything numpy converts). */
NDArray numpy_to_ndarray(pybind11::handle obj);
/** kiln.graph (py_graph.cpp): built with the graph compiler (KILN_PY_WITH_GRAPH). */
void define_graph(py::module_& m);
/** kiln.tuner.extract_tasks / tune_model (py_tune_model.cpp): after define_graph, with the tuner (KILN_PY_WITH_TUNER). */
void define_tune_model(py::module_& m);
void define_onnx(py::module_& m);
void define_dist(py::module_& m);

/** Raises kiln::Error (kiln.KilnError in Python) with the message. */
[[noreturn]] void throw_user_error(const std::string& message);

}  // namespace kiln::python

#endif  // KILN_PYTHON_KILN_PY_H
