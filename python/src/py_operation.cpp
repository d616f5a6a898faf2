// Tensors and operations: placeholder, compute, reduce_axis, reductions.
// fcompute is a Python callable; the C++ compute calls it back once with the
// axis variables, and its result is converted with to_expr.
#include <pybind11/functional.h>

#include "kiln/ir/op.h"
#include "kiln/ir/printer.h"
#include "kiln/te/workload_key.h"
#include "kiln_py.h"

namespace kiln::python {

std::vector<Expr> to_shape(py::handle shape) {
  std::vector<Expr> out;
  if (py::isinstance<py::int_>(shape) || py::isinstance<Expr>(shape)) {
    out.push_back(to_expr(shape));
    return out;
  }
  if (!py::isinstance<py::sequence>(shape) || py::isinstance<py::str>(shape))
    throw_user_error("a shape must be a tuple or list of ints or expressions, got " + std::string(py::str(shape.get_type().attr("__name__"))));
  for (py::handle d : shape) {
    Expr e = to_expr(d);
    if (!e.dtype().is_integer() || !e.dtype().is_scalar()) throw_user_error("shape dimension " + to_string(e) + " has dtype " + e.dtype().str() + "; dimensions are integers");
    out.push_back(e);
  }
  return out;
}

te::Tensor to_tensor(py::handle value, const char* what) {
  if (py::isinstance<te::Tensor>(value)) return value.cast<te::Tensor>();
  if (py::isinstance<te::Operation>(value)) return value.cast<te::Operation>().output();
  throw_user_error(std::string(what) + ": expected a tensor, got " + (value.is_none() ? std::string("None") : std::string(py::str(value.get_type().attr("__name__")))));
}

std::vector<te::Tensor> to_tensor_list(py::handle value, const char* what) {
  std::vector<te::Tensor> out;
  if (py::isinstance<py::list>(value) || py::isinstance<py::tuple>(value)) {
    for (py::handle t : value) out.push_back(to_tensor(t, what));
  } else {
    out.push_back(to_tensor(value, what));
  }
  return out;
}

namespace {

const te::ComputeOpNode* as_compute(const te::Operation& op) {
  return op->kind == te::OpKind::Compute ? static_cast<const te::ComputeOpNode*>(op.get()) : nullptr;
}

std::vector<IterVar> to_axes(py::handle axis, const char* what) {
  std::vector<IterVar> out;
  if (py::isinstance<IterVar>(axis)) {
    out.push_back(axis.cast<IterVar>());
    return out;
  }
  if (py::isinstance<py::list>(axis) || py::isinstance<py::tuple>(axis)) {
    for (py::handle a : axis) {
      if (!py::isinstance<IterVar>(a)) throw_user_error(std::string(what) + ": axis must be reduce axes made by kiln.te.reduce_axis");
      out.push_back(a.cast<IterVar>());
    }
    return out;
  }
  throw_user_error(std::string(what) + ": axis must be a reduce axis or a list of them (kiln.te.reduce_axis), got " + std::string(py::str(axis.get_type().attr("__name__"))));
}

py::tuple shape_tuple(const std::vector<Expr>& shape) {
  py::list out;
  // Constant dimensions as ints (what numpy users compare against), symbolic ones as expressions.
  for (const Expr& d : shape) {
    if (const int64_t* v = as_const_int(d)) out.append(*v);
    else out.append(d);
  }
  return py::tuple(out);
}

using Reducer = Expr (*)(Expr, std::vector<IterVar>, Expr);

void def_reducer(py::module_& m, const char* name, Reducer f) {
  m.def(name, [f, name](py::handle source, py::handle axis, py::handle where) {
    Expr cond = where.is_none() ? Expr() : to_expr(where);
    return f(to_expr(source), to_axes(axis, name), cond);
  }, py::arg("expr"), py::arg("axis"), py::arg("where") = py::none());
}

}  // namespace

void define_operation(py::module_& m) {
  py::class_<te::Operation>(m, "Operation", "What computes a tensor: a placeholder (an input) or a compute op.")
      .def_property_readonly("name", &te::Operation::name)
      .def_property_readonly("kind", [](const te::Operation& op) { return op->kind == te::OpKind::Placeholder ? "placeholder" : "compute"; })
      .def_property_readonly("dtype", [](const te::Operation& op) { return op->dtype.str(); })
      .def_property_readonly("shape", [](const te::Operation& op) { return shape_tuple(op->shape); })
      .def_property_readonly("axis", [](const te::Operation& op) {
        const te::ComputeOpNode* c = as_compute(op);
        return c ? c->axis : std::vector<IterVar>{};
      }, "The data-parallel axes (one per output dimension); empty for a placeholder.")
      .def_property_readonly("reduce_axis", [](const te::Operation& op) {
        const te::ComputeOpNode* c = as_compute(op);
        return c ? c->reduce_axis : std::vector<IterVar>{};
      }, "The reduce axes of a reduction; empty otherwise.")
      .def_property_readonly("body", [](const te::Operation& op) -> py::object {
        const te::ComputeOpNode* c = as_compute(op);
        return c ? py::cast(c->body) : py::none();
      })
      .def_property_readonly("input_tensors", [](const te::Operation& op) { return op->input_tensors(); })
      .def("output", [](const te::Operation& op, int index) {
        if (index != 0) throw_user_error("operation '" + op.name() + "' has one output; output(" + std::to_string(index) + ") does not exist");
        return op.output();
      }, py::arg("index") = 0)
      .def("same_as", [](const te::Operation& a, const te::Operation& b) { return a.same_as(b); })
      .def("__eq__", [](const te::Operation& a, py::object b) { return py::isinstance<te::Operation>(b) && a.same_as(b.cast<te::Operation>()); })
      .def("__hash__", [](const te::Operation& op) { return std::hash<const void*>()(op.get()); })
      .def("__repr__", [](const te::Operation& op) {
        std::string s = std::string(op->kind == te::OpKind::Placeholder ? "PlaceholderOp(" : "ComputeOp(") + op.name();
        if (const te::ComputeOpNode* c = as_compute(op)) s += ", " + to_string(c->body);
        return s + ")";
      });

  py::class_<te::Tensor>(m, "Tensor", "The output of an operation. Read an element with A[i, j] (or A(i, j)).")
      .def_property_readonly("op", &te::Tensor::op)
      .def_property_readonly("name", &te::Tensor::name)
      .def_property_readonly("dtype", [](const te::Tensor& t) { return t.dtype().str(); })
      .def_property_readonly("shape", [](const te::Tensor& t) { return shape_tuple(t.shape()); })
      .def_property_readonly("ndim", &te::Tensor::ndim)
      .def("__getitem__", [](const te::Tensor& t, py::object index) {
        std::vector<Expr> idx;
        if (py::isinstance<py::tuple>(index)) {
          for (py::handle i : index) idx.push_back(to_expr(i));
        } else {
          idx.push_back(to_expr(index));
        }
        return t(idx);
      })
      .def("__call__", [](const te::Tensor& t, py::args index) {
        std::vector<Expr> idx;
        for (py::handle i : index) idx.push_back(to_expr(i));
        return t(idx);
      })
      .def("same_as", [](const te::Tensor& a, const te::Tensor& b) { return a.same_tensor(b); })
      .def("__eq__", [](const te::Tensor& a, py::object b) { return py::isinstance<te::Tensor>(b) && a.same_tensor(b.cast<te::Tensor>()); })
      .def("__hash__", [](const te::Tensor& t) { return std::hash<const void*>()(t.op().get()); })
      .def("__repr__", [](const te::Tensor& t) {
        return "Tensor(name=" + t.name() + ", shape=" + std::string(py::repr(shape_tuple(t.shape()))) + ", dtype=" + t.dtype().str() + ")";
      });

  m.def("placeholder", [](py::handle shape, py::handle dtype, const std::string& name) { return te::placeholder(to_shape(shape), to_dtype(dtype), name); },
        py::arg("shape"), py::arg("dtype") = "float32", py::arg("name") = "placeholder");
  m.def("compute", [](py::handle shape, py::function fcompute, const std::string& name, std::vector<std::string> axis_names) {
    te::FCompute f = [fcompute](const std::vector<Var>& vars) {
      py::tuple args(vars.size());
      for (size_t i = 0; i < vars.size(); ++i) args[i] = py::cast(vars[i]);
      py::object result = fcompute(*args);
      if (py::isinstance<py::list>(result) || py::isinstance<py::tuple>(result))
        throw_user_error("compute: fcompute returned several values; an op computes one tensor, so return one expression");
      return to_expr(result);
    };
    return te::compute(to_shape(shape), f, name, std::move(axis_names));
  }, py::arg("shape"), py::arg("fcompute"), py::arg("name") = "compute", py::arg("axis_names") = std::vector<std::string>{});
  m.def("reduce_axis", [](py::handle dom, const std::string& name) {
    if (!py::isinstance<py::sequence>(dom) || py::len(dom) != 2) throw_user_error("reduce_axis '" + name + "' needs a range (lo, hi)");
    Expr lo = to_expr(dom[py::int_(0)]), hi = to_expr(dom[py::int_(1)]);
    const int64_t *l = as_const_int(lo), *h = as_const_int(hi);
    // Fold constant bounds here so the extent prints as 64, not 64 - 0.
    Expr extent = l && h ? Expr(static_cast<int>(*h - *l)) : hi - lo;
    return te::reduce_axis(Range(lo, extent), name);
  }, py::arg("dom"), py::arg("name") = "k");
  def_reducer(m, "sum", &te::sum);
  def_reducer(m, "reduce_max", &te::max);
  def_reducer(m, "reduce_min", &te::min);
  def_reducer(m, "prod", &te::prod);

  m.def("workload_key", [](py::handle outputs) { return te::workload_key(to_tensor_list(outputs, "workload_key")); }, py::arg("outputs"));
  m.def("canonical_dag", [](py::handle outputs) { return te::canonical_dag(to_tensor_list(outputs, "canonical_dag")); }, py::arg("outputs"));
}

}  // namespace kiln::python
