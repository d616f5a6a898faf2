// The Analyzer: the facts it has been told and the questions it answers,
// each delegated to its module (const_int_bound.cpp, int_set.cpp, the
// simplifier).

#include "kiln/arith/analyzer.h"

#include "simplify_internal.h"

namespace kiln::arith {

Analyzer::Analyzer() : impl_(std::make_unique<Impl>()) {}
Analyzer::~Analyzer() = default;

void Analyzer::bind(const Var& var, const Range& range) {
  KILN_USER_CHECK(var.defined() && range.min.defined() && range.extent.defined()) << "bind needs a variable and a defined range";
  KILN_USER_CHECK(range.min.dtype() == range.extent.dtype() && range.min.dtype().is_integer() && range.min.dtype().is_scalar())
      << "range of " << var.name() << " must have scalar integer min and extent of one type, got " << range.min.dtype().str() << " and " << range.extent.dtype().str();
  detail::Simplifier& s = impl_->simplifier;
  impl_->facts[var.get()] = s.range_fact(var, s.mutate(range.min), s.mutate(range.extent));
}

void Analyzer::bind(const Var& var, const Expr& value) {
  KILN_USER_CHECK(var.defined() && value.defined()) << "bind needs a variable and a defined value";
  KILN_USER_CHECK(var.dtype() == value.dtype()) << "cannot bind " << var.name() << " of " << var.dtype().str() << " to a value of " << value.dtype().str();
  Expr v = impl_->simplifier.mutate(value);
  impl_->facts[var.get()] = detail::VarFact{var, impl_->simplifier.bound(v), v, Expr(), Expr()};
}

ConstIntBound Analyzer::const_int_bound(const Expr& e) {
  KILN_USER_CHECK(e.defined()) << "const_int_bound of an undefined expression";
  return detail::const_int_bound(e, impl_->facts);
}

IntervalSet Analyzer::eval_interval(const Expr& e, const std::unordered_map<const Variable*, IntervalSet>& dom) {
  KILN_USER_CHECK(e.defined()) << "eval_interval of an undefined expression";
  return detail::eval_interval(&impl_->simplifier, e, dom);
}

bool Analyzer::can_prove(const Expr& cond) {
  KILN_USER_CHECK(cond.defined() && cond.dtype().is_bool()) << "can_prove needs a bool condition";
  return impl_->simplifier.prove(cond);
}

Expr Analyzer::simplify(const Expr& e) {
  if (!e.defined()) return e;
  return impl_->simplifier.mutate(e);
}

Expr simplify(const Expr& e) {
  Analyzer analyzer;
  return analyzer.simplify(e);
}

}  // namespace kiln::arith
