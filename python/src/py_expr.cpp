// Expressions, variables and iteration variables, with Python operators.
//
// The operators follow op.h's promotion rules; the only Python-specific
// choices are those Python's own operators imply (documented on kiln.te):
//  - `/` is true division: two integer operands are cast to float32 first;
//  - `//` and `%` round toward negative infinity (floordiv / floormod) for
//    integers; for floats `//` is floor(a / b) and `%` is a - floor(a / b) * b;
//  - a Python float next to a float expression takes that expression's dtype
//    (so x_f64 * 0.1 keeps 0.1's double precision); elsewhere it is float32;
//  - `&`, `|`, `~` are logical and / or / not of bool expressions;
//  - `==` builds an EQ expression; its truth value (in `if`, `in`) is
//    identity of the two sides, so `x == x` is True and lists of expressions work.
#include <pybind11/numpy.h>
#include <pybind11/operators.h>

#include <limits>
#include <type_traits>

#include "kiln/ir/op.h"
#include "kiln/ir/printer.h"
#include "kiln/support/error.h"
#include "kiln_py.h"

namespace kiln::python {

DataType to_dtype(py::handle dtype) {
  if (py::isinstance<py::str>(dtype)) return DataType::parse(dtype.cast<std::string>());
  std::string text = py::str(dtype);
  // torch.float32 prints as "torch.float32".
  if (text.rfind("torch.", 0) == 0) return DataType::parse(text.substr(6));
  try {
    // numpy dtypes and scalar types (np.float32, np.dtype("int8")) and anything numpy understands.
    py::object np_dtype = py::module_::import("numpy").attr("dtype")(dtype);
    std::string name = py::str(np_dtype.attr("name"));
    return DataType::parse(name);
  } catch (py::error_already_set&) {
    throw_user_error("cannot use " + text + " as a dtype; give a string such as \"float32\", \"int32\" or \"bool\"");
  }
}

Expr to_expr(py::handle value) {
  if (py::isinstance<Expr>(value)) return value.cast<Expr>();
  if (py::isinstance<IterVar>(value)) return value.cast<IterVar>().var();
  if (py::isinstance<py::bool_>(value)) return value.cast<bool>() ? const_true() : const_false();
  if (py::isinstance<py::int_>(value)) {
    // Python ints are unbounded: int32 when it fits (kiln's index type), else int64.
    long long v = 0;
    try {
      v = value.cast<long long>();
    } catch (py::cast_error&) {
      throw_user_error("integer " + std::string(py::str(value)) + " does not fit in int64");
    }
    if (v >= std::numeric_limits<int32_t>::min() && v <= std::numeric_limits<int32_t>::max()) return Expr(static_cast<int>(v));
    return IntImm::make(DataType::Int(64), v);
  }
  if (py::isinstance<py::float_>(value)) return Expr(static_cast<float>(value.cast<double>()));
  py::module_ np = py::module_::import("numpy");
  if (py::isinstance(value, np.attr("generic"))) {
    DataType t = to_dtype(value.attr("dtype"));
    if (t.is_float()) return make_const(t, value.attr("item")().cast<double>());
    return IntImm::make(t, value.attr("item")().cast<long long>());
  }
  if (py::isinstance<te::Tensor>(value))
    throw_user_error("tensor '" + value.cast<te::Tensor>().name() + "' cannot be used as a value; read an element of it, e.g. A[i, j]");
  if (value.is_none()) throw_user_error("None cannot be used as an expression");
  throw_user_error("cannot use a value of type " + std::string(py::str(value.get_type().attr("__name__"))) + " as an expression; use an expression, an int or a float");
}

namespace {

// The other operand of a binary operator, given the expression it meets.
Expr operand(py::handle value, const Expr& other) {
  if (py::isinstance<py::float_>(value) && other.dtype().is_float()) return make_const(other.dtype().element_of(), value.cast<double>());
  return to_expr(value);
}

Expr true_div(Expr a, Expr b) {
  if (!a.dtype().is_float() && !b.dtype().is_float()) {
    // Python's / on integers gives a float: use kiln's default float.
    a = cast(DataType::Float(32, a.dtype().lanes()), a);
    b = cast(DataType::Float(32, b.dtype().lanes()), b);
  }
  return a / b;
}

Expr py_floordiv(Expr a, Expr b) {
  binary_promote(&a, &b);
  if (a.dtype().is_float()) return kiln::floor(a / b);
  return floordiv(a, b);
}

Expr py_floormod(Expr a, Expr b) {
  binary_promote(&a, &b);
  if (a.dtype().is_float()) return a - kiln::floor(a / b) * b;
  return floormod(a, b);
}

Expr logical(Expr a, Expr b, bool is_and) {
  if (!a.dtype().is_bool() || !b.dtype().is_bool())
    throw_user_error(std::string(is_and ? "&" : "|") + " needs bool operands (comparisons), got " + a.dtype().str() + " and " + b.dtype().str() +
                     "; kiln has no bitwise operators");
  return is_and ? (a && b) : (a || b);
}

// The truth value Python asks for in `if`, `in`, `==` of lists.
bool truth(const Expr& e) {
  if (const EQ* eq = e.as<EQ>()) return eq->a.same_as(eq->b);
  if (const NE* ne = e.as<NE>()) return !ne->a.same_as(ne->b);
  if (const IntImm* imm = e.as<IntImm>()) return imm->value != 0;
  throw_user_error("the truth value of the expression " + to_string(e) + " is not known until the kernel runs; use kiln.te.if_then_else or kiln.te.select");
}

Expr as_expr(const Expr& e) { return e; }
Expr as_expr(const IterVar& v) { return v.var(); }

// Python operators for a class whose values convert to Expr (Expr itself, IterVar).
template <typename Cls>
void def_operators(Cls& cls) {
  using T = typename Cls::type;
  auto self = [](const T& v) { return as_expr(v); };
  auto bin = [&cls, self](const char* name, Expr (*f)(Expr, Expr), bool reflected) {
    cls.def(name, [self, f, reflected](const T& v, py::object other) {
      Expr a = self(v);
      Expr b = operand(other, a);
      return reflected ? f(b, a) : f(a, b);
    }, py::is_operator());
  };
  using F = Expr (*)(Expr, Expr);
  F add = [](Expr a, Expr b) { return a + b; };
  F sub = [](Expr a, Expr b) { return a - b; };
  F mul = [](Expr a, Expr b) { return a * b; };
  F lt = [](Expr a, Expr b) { return a < b; };
  F le = [](Expr a, Expr b) { return a <= b; };
  F gt = [](Expr a, Expr b) { return a > b; };
  F ge = [](Expr a, Expr b) { return a >= b; };
  F eq = [](Expr a, Expr b) { return a == b; };
  F ne = [](Expr a, Expr b) { return a != b; };
  F land = [](Expr a, Expr b) { return logical(a, b, true); };
  F lor = [](Expr a, Expr b) { return logical(a, b, false); };
  F pw = [](Expr a, Expr b) { return kiln::pow(a, b); };
  for (bool r : {false, true}) {
    bin(r ? "__radd__" : "__add__", add, r);
    bin(r ? "__rsub__" : "__sub__", sub, r);
    bin(r ? "__rmul__" : "__mul__", mul, r);
    bin(r ? "__rtruediv__" : "__truediv__", true_div, r);
    bin(r ? "__rfloordiv__" : "__floordiv__", py_floordiv, r);
    bin(r ? "__rmod__" : "__mod__", py_floormod, r);
    bin(r ? "__rpow__" : "__pow__", pw, r);
    bin(r ? "__rand__" : "__and__", land, r);
    bin(r ? "__ror__" : "__or__", lor, r);
  }
  bin("__lt__", lt, false);
  bin("__le__", le, false);
  bin("__gt__", gt, false);
  bin("__ge__", ge, false);
  // Comparing with None is a Python idiom (`x in [None, e]`): answer it instead of raising.
  for (bool is_eq : {true, false}) {
    cls.def(is_eq ? "__eq__" : "__ne__", [self, is_eq, eq, ne](const T& v, py::object other) -> py::object {
      if (other.is_none()) return py::bool_(!is_eq);
      // Two IterVars compare by identity (so `axis in stage.leaf_iter_vars`
      // works); against anything else `==` builds an expression, as for Expr.
      if constexpr (std::is_same_v<T, IterVar>) {
        if (py::isinstance<IterVar>(other)) return py::bool_(v.same_as(other.cast<IterVar>()) == is_eq);
      }
      Expr a = self(v);
      return py::cast(is_eq ? eq(a, operand(other, a)) : ne(a, operand(other, a)));
    }, py::is_operator());
  }
  cls.def("__neg__", [self](const T& v) { return -self(v); });
  cls.def("__pos__", [self](const T& v) { return self(v); });
  cls.def("__abs__", [self](const T& v) { return kiln::abs(self(v)); });
  cls.def("__invert__", [self](const T& v) {
    Expr e = self(v);
    if (!e.dtype().is_bool()) throw_user_error("~ needs a bool operand (a comparison), got " + e.dtype().str() + "; kiln has no bitwise operators");
    return !e;
  });
  cls.def("astype", [self](const T& v, py::handle dtype) { return cast(to_dtype(dtype), self(v)); }, py::arg("dtype"), "The expression converted to `dtype`.");
}

py::object const_value(const Expr& e) {
  if (const IntImm* i = e.as<IntImm>()) return e.dtype().is_bool() ? py::object(py::bool_(i->value != 0)) : py::object(py::int_(i->value));
  if (const FloatImm* f = e.as<FloatImm>()) return py::float_(f->value);
  return py::none();
}

std::string iter_var_kind(IterVarKind k) {
  switch (k) {
    case IterVarKind::DataPar: return "data_par";
    case IterVarKind::Reduce: return "reduce";
    case IterVarKind::ThreadIndex: return "thread_index";
    case IterVarKind::Opaque: return "opaque";
  }
  return "?";
}

}  // namespace

void define_expr(py::module_& m) {
  py::class_<Expr> expr(m, "Expr", "An immutable expression of the kiln IR. Build them with Python operators and kiln.te functions.");
  expr.def(py::init([](py::object v) { return to_expr(v); }), py::arg("value"), "An expression from a Python number (int32 / int64 / float32 / bool).")
      .def_property_readonly("dtype", [](const Expr& e) { return e.dtype().str(); })
      .def_property_readonly("kind", [](const Expr& e) { return std::string(ir_node_kind_name(e->kind)); }, "The node kind: 'Add', 'IntImm', ...")
      .def_property_readonly("value", &const_value, "The value of a constant (IntImm / FloatImm), else None.")
      .def("same_as", [](const Expr& a, const Expr& b) { return a.same_as(b); }, "Identity (the very same node).")
      .def("__bool__", &truth)
      .def("__int__", [](const Expr& e) {
        const int64_t* v = as_const_int(e);
        if (!v) throw_user_error("int() of the non-constant expression " + to_string(e));
        return *v;
      })
      .def("__float__", [](const Expr& e) {
        if (const FloatImm* f = e.as<FloatImm>()) return f->value;
        if (const int64_t* v = as_const_int(e)) return static_cast<double>(*v);
        throw_user_error("float() of the non-constant expression " + to_string(e));
      })
      .def("__hash__", [](const Expr& e) { return std::hash<const void*>()(e.get()); })
      .def("__str__", [](const Expr& e) { return to_string(e); })
      .def("__repr__", [](const Expr& e) { return to_string(e); });
  def_operators(expr);

  py::class_<Var, Expr>(m, "Var", "A scalar variable (a shape parameter or a loop variable).")
      .def(py::init([](const std::string& name, py::handle dtype) { return Var(name, to_dtype(dtype)); }), py::arg("name"), py::arg("dtype") = "int32")
      .def_property_readonly("name", &Var::name)
      .def("__hash__", [](const Var& v) { return std::hash<const void*>()(v.get()); });

  py::class_<IterVar> iv(m, "IterVar", "A loop axis: a variable and its domain. Usable in expressions as its variable.");
  iv.def_property_readonly("var", [](const IterVar& v) { return v.var(); })
      .def_property_readonly("name", &IterVar::name)
      .def_property_readonly("kind", [](const IterVar& v) { return iter_var_kind(v.kind()); })
      .def_property_readonly("thread_tag", [](const IterVar& v) { return v->thread_tag; })
      .def_property_readonly("dom", [](const IterVar& v) -> py::object {
        if (!v.dom().min.defined()) return py::none();
        return py::make_tuple(v.dom().min, v.dom().extent);
      }, "(min, extent) of the domain, or None for axes made by split/fuse (bound inference finds those).")
      .def("same_as", [](const IterVar& a, const IterVar& b) { return a.same_as(b); })
      .def("__hash__", [](const IterVar& v) { return std::hash<const void*>()(v.get()); })
      .def("__repr__", [](const IterVar& v) {
        std::string s = "IterVar(" + v.name();
        if (v.dom().min.defined()) {
          const int64_t *lo = as_const_int(v.dom().min), *ext = as_const_int(v.dom().extent);
          std::string hi = lo && ext ? std::to_string(*lo + *ext) : to_string(v.dom().min + v.dom().extent);
          s += ", [" + to_string(v.dom().min) + ", " + hi + ")";
        }
        return s + ", " + iter_var_kind(v.kind()) + ")";
      });
  def_operators(iv);

  // Free functions: argument sugar over op.h.
  m.def("const", [](py::handle value, py::handle dtype) {
    DataType t = to_dtype(dtype);
    if (t.is_float()) return make_const(t, value.cast<double>());
    if (py::isinstance<py::float_>(value)) throw_user_error("const: " + std::string(py::str(value)) + " is not an integer, but the dtype is " + t.str());
    return IntImm::make(t, value.cast<long long>());
  }, py::arg("value"), py::arg("dtype") = "int32");
  m.def("cast", [](py::handle value, py::handle dtype) { return cast(to_dtype(dtype), to_expr(value)); }, py::arg("value"), py::arg("dtype"));
  using F2 = Expr (*)(Expr, Expr);
  auto def2 = [&m](const char* name, F2 f) {
    m.def(name, [f](py::handle a, py::handle b) {
      Expr ea = to_expr(a);
      return f(ea, operand(b, ea));
    }, py::arg("a"), py::arg("b"));
  };
  def2("min", [](Expr a, Expr b) { return kiln::min(a, b); });
  def2("max", [](Expr a, Expr b) { return kiln::max(a, b); });
  def2("floordiv", [](Expr a, Expr b) { return floordiv(a, b); });
  def2("floormod", [](Expr a, Expr b) { return floormod(a, b); });
  def2("truncdiv", [](Expr a, Expr b) { return truncdiv(a, b); });
  def2("truncmod", [](Expr a, Expr b) { return truncmod(a, b); });
  def2("pow", [](Expr a, Expr b) { return kiln::pow(a, b); });
  def2("pack_bf16x2", [](Expr lo, Expr hi) { return kiln::pack_bf16x2(lo, hi); });
  def2("dot_bf16x2", [](Expr a, Expr b) { return kiln::dot_bf16x2(a, b); });
  def2("dot_i8x4", [](Expr a, Expr b) { return kiln::dot_i8x4(a, b); });
  def2("logical_and", [](Expr a, Expr b) { return a && b; });
  def2("logical_or", [](Expr a, Expr b) { return a || b; });
  m.def("logical_not", [](py::handle a) { return !to_expr(a); });
  m.def("select", [](py::handle c, py::handle t, py::handle f) { return select(to_expr(c), to_expr(t), to_expr(f)); }, py::arg("cond"), py::arg("t"), py::arg("f"));
  m.def("if_then_else", [](py::handle c, py::handle t, py::handle f) { return if_then_else(to_expr(c), to_expr(t), to_expr(f)); }, py::arg("cond"), py::arg("t"), py::arg("f"));
  m.def("likely", [](py::handle c) { return likely(to_expr(c)); });
  using F1 = Expr (*)(Expr);
  const std::pair<const char*, F1> math[] = {
      {"exp", &kiln::exp}, {"log", &kiln::log}, {"sqrt", &kiln::sqrt}, {"rsqrt", &kiln::rsqrt}, {"tanh", &kiln::tanh}, {"erf", &kiln::erf},
      {"sigmoid", &kiln::sigmoid}, {"fabs", &kiln::fabs}, {"abs", &kiln::abs}, {"floor", &kiln::floor}, {"ceil", &kiln::ceil},
      {"round", &kiln::round}, {"trunc", &kiln::trunc}, {"sin", &kiln::sin}, {"cos", &kiln::cos},
  };
  for (const auto& [name, f] : math) m.def(name, [f = f](py::handle x) { return f(to_expr(x)); }, py::arg("x"));
  m.def("dtype_str", [](py::handle dtype) { return to_dtype(dtype).str(); }, "The canonical name of a dtype (\"float32\"); raises KilnError for unknown ones.");
}

}  // namespace kiln::python
