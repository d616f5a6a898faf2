// Dimensions and shapes of the graph IR (dim.h).
#include "kiln/graph/dim.h"

#include <limits>
#include <map>
#include <mutex>
#include <ostream>
#include <unordered_set>

#include "kiln/arith/analyzer.h"
#include "kiln/ir/functor.h"
#include "kiln/ir/op.h"
#include "kiln/ir/printer.h"
#include "kiln/ir/structural.h"
#include "kiln/support/error.h"

namespace kiln::graph {

Var shape_var(const std::string& name) {
  KILN_USER_CHECK(!name.empty()) << "a shape variable needs a name (such as \"batch\" or \"seq\")";
  static std::mutex mu;
  static std::map<std::string, Var>* vars = new std::map<std::string, Var>();  // never destroyed: Vars outlive statics
  std::lock_guard<std::mutex> lock(mu);
  auto it = vars->find(name);
  if (it == vars->end()) it = vars->emplace(name, Var(name, DataType::Int(32))).first;
  return it->second;
}

Dim::Dim(const Expr& e) {
  KILN_CHECK(e.defined() && e.dtype().is_int()) << "a dimension must be an integer expression";
  Expr s = arith::simplify(e);
  if (const int64_t* c = as_const_int(s)) {
    value_ = *c;
  } else {
    expr_ = s;
  }
}

int64_t Dim::value() const {
  KILN_USER_CHECK(is_static()) << "dimension '" << str()
                               << "' is symbolic (known only when the model runs) where a fixed size is needed; this operator does not "
                                  "support symbolic dimensions yet: give this dimension a size (shapes={...}) when importing the model";
  return value_;
}

Expr Dim::expr() const {
  if (expr_.defined()) return expr_;
  KILN_USER_CHECK(value_ >= std::numeric_limits<int32_t>::min() && value_ <= std::numeric_limits<int32_t>::max())
      << "dimension " << value_ << " does not fit the 32-bit extents kernels index with";
  return Expr(static_cast<int>(value_));
}

Var Dim::as_var() const {
  if (const Variable* v = expr_.as<Variable>()) return Var(v);
  return Var();
}

std::string Dim::str() const { return is_static() ? std::to_string(value_) : to_string(expr_); }

bool operator==(const Dim& a, const Dim& b) {
  if (a.is_static() != b.is_static()) return false;
  if (a.is_static()) return a.value_ == b.value_;
  if (structural_equal(a.expr_, b.expr_)) return true;
  // Two spellings of one expression ("seq + seq" and "seq * 2").
  return is_const_int(arith::simplify(a.expr_ - b.expr_), 0);
}

std::ostream& operator<<(std::ostream& os, const Dim& d) { return os << d.str(); }

namespace {

// Integer arithmetic of two static dims, refusing an overflow of int64.
template <typename F>
Dim static_or_symbolic(const Dim& a, const Dim& b, F&& on_values, Expr (*on_exprs)(Expr, Expr)) {
  if (a.is_static() && b.is_static()) return Dim(on_values(a.value(), b.value()));
  return Dim(on_exprs(a.expr(), b.expr()));
}

Expr add(Expr a, Expr b) { return a + b; }
Expr sub(Expr a, Expr b) { return a - b; }
Expr mul(Expr a, Expr b) { return a * b; }
Expr fdiv(Expr a, Expr b) { return floordiv(a, b); }
Expr emax(Expr a, Expr b) { return max(a, b); }
Expr emin(Expr a, Expr b) { return min(a, b); }

int64_t floordiv64(int64_t a, int64_t b) {
  KILN_USER_CHECK(b != 0) << "a dimension is divided by zero";
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

}  // namespace

Dim dim_add(const Dim& a, const Dim& b) { return static_or_symbolic(a, b, [](int64_t x, int64_t y) { return x + y; }, add); }
Dim dim_sub(const Dim& a, const Dim& b) { return static_or_symbolic(a, b, [](int64_t x, int64_t y) { return x - y; }, sub); }
Dim dim_mul(const Dim& a, const Dim& b) { return static_or_symbolic(a, b, [](int64_t x, int64_t y) { return x * y; }, mul); }
Dim dim_floordiv(const Dim& a, const Dim& b) { return static_or_symbolic(a, b, floordiv64, fdiv); }
Dim dim_max(const Dim& a, const Dim& b) { return static_or_symbolic(a, b, [](int64_t x, int64_t y) { return std::max(x, y); }, emax); }
Dim dim_min(const Dim& a, const Dim& b) { return static_or_symbolic(a, b, [](int64_t x, int64_t y) { return std::min(x, y); }, emin); }

Dim& Dim::operator+=(const Dim& o) { return *this = dim_add(*this, o); }
Dim& Dim::operator-=(const Dim& o) { return *this = dim_sub(*this, o); }
Dim& Dim::operator*=(const Dim& o) { return *this = dim_mul(*this, o); }

bool Shape::is_static() const {
  for (const Dim& d : *this)
    if (d.is_symbolic()) return false;
  return true;
}

std::vector<int64_t> Shape::values() const {
  std::vector<int64_t> v;
  v.reserve(size());
  for (const Dim& d : *this) {
    KILN_USER_CHECK(d.is_static()) << "shape " << shape_to_string(*this) << " has the symbolic dimension '" << d.str()
                                   << "' where a fixed shape is needed; this operator does not support symbolic dimensions yet: give it "
                                      "a size (shapes={...}) when importing the model";
    v.push_back(d.value());
  }
  return v;
}

Dim Shape::numel() const {
  Dim n = 1;
  for (const Dim& d : *this) n = dim_mul(n, d);
  return n;
}

std::vector<Var> Shape::vars() const {
  std::vector<Var> out;
  std::unordered_set<const Variable*> seen;
  for (const Dim& d : *this) {
    if (d.is_static()) continue;
    post_order_visit(d.expr(), [&](const Expr& e) {
      if (const Variable* v = e.as<Variable>())
        if (seen.insert(v).second) out.push_back(Var(v));
    });
  }
  return out;
}

std::string shape_to_string(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + shape[i].str();
  return s + "]";
}

}  // namespace kiln::graph
