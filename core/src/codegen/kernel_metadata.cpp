#include "kiln/codegen/kernel_metadata.h"

#include "kiln/ir/printer.h"
#include "kiln/support/error.h"

namespace kiln::codegen {

namespace {

// One dimension (or stride) of a buffer parameter as the runtime's ShapeExpr:
// variables are the kernel's scalar parameters.
ShapeExpr buffer_dim(const PrimFunc& func, const std::string& buffer, const char* what, size_t dim, const Expr& e) {
  std::string prefix = "kernel '" + func.name() + "': " + what + " " + std::to_string(dim) + " of buffer '" + buffer + "'";
  auto param_of = [&](const Variable* v) -> int64_t {
    const std::vector<Param>& params = func.params();
    for (size_t i = 0; i < params.size(); ++i)
      if (!params[i].is_buffer() && params[i].var.get() == v) return static_cast<int64_t>(i);
    KILN_USER_ERROR() << prefix << " uses variable '" << v->name << "', which is not a parameter of the kernel";
    return 0;
  };
  return to_shape_expr(e, param_of, prefix);
}

}  // namespace

KernelInfo kernel_info(const PrimFunc& func) {
  KernelInfo info;
  info.name = func.name();
  for (const Param& p : func.params()) {
    ParamInfo pi;
    pi.is_buffer = p.is_buffer();
    if (!p.is_buffer()) {
      pi.name = p.var.name();
      pi.dtype = p.var.dtype();
      info.params.push_back(std::move(pi));
      continue;
    }
    const Buffer& b = p.buffer;
    pi.name = b.name();
    pi.dtype = b.dtype();
    for (size_t d = 0; d < b.shape().size(); ++d) {
      ShapeExpr e = buffer_dim(func, b.name(), "dimension", d, b.shape()[d]);
      pi.shape.push_back(e.is_const() ? e.value : -1);
      pi.dims.push_back(std::move(e));
    }
    for (size_t d = 0; d < b->strides.size(); ++d) pi.strides.push_back(buffer_dim(func, b.name(), "stride", d, b->strides[d]));
    info.params.push_back(std::move(pi));
  }
  return info;
}

ShapeExpr to_shape_expr(const Expr& e, const std::function<int64_t(const Variable*)>& param_of, const std::string& what) {
  auto rec = [&](const Expr& x) { return to_shape_expr(x, param_of, what); };
  if (const int64_t* v = as_const_int(e)) return ShapeExpr::constant(*v);
  if (const auto* v = e.as<Variable>()) return ShapeExpr::param(param_of(v));
  if (const auto* c = e.as<Cast>()) {
    if (c->dtype.is_scalar() && c->dtype.is_integer() && c->value.dtype().is_integer()) return rec(c->value);
  }
  using Op = ShapeExpr::Op;
  auto binary = [&](Op op, const Expr& a, const Expr& b) { return ShapeExpr::binary(op, rec(a), rec(b)); };
  if (const auto* n = e.as<Add>()) return binary(Op::Add, n->a, n->b);
  if (const auto* n = e.as<Sub>()) return binary(Op::Sub, n->a, n->b);
  if (const auto* n = e.as<Mul>()) return binary(Op::Mul, n->a, n->b);
  if (const auto* n = e.as<Div>()) return binary(Op::Div, n->a, n->b);
  if (const auto* n = e.as<Mod>()) return binary(Op::Mod, n->a, n->b);
  if (const auto* n = e.as<FloorDiv>()) return binary(Op::FloorDiv, n->a, n->b);
  if (const auto* n = e.as<FloorMod>()) return binary(Op::FloorMod, n->a, n->b);
  if (const auto* n = e.as<Min>()) return binary(Op::Min, n->a, n->b);
  if (const auto* n = e.as<Max>()) return binary(Op::Max, n->a, n->b);
  KILN_USER_ERROR() << what << " is " << to_string(e)
                    << ", which calls cannot check against the arrays; write shapes with constants, shape "
                       "variables and +, -, *, //, %, min, max";
  return {};
}

}  // namespace kiln::codegen
