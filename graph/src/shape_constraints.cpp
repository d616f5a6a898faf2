// Reshape constraints a run checks (shape_constraints.h).
#include "kiln/graph/shape_constraints.h"

#include <algorithm>
#include <set>

#include "kiln/codegen/kernel_metadata.h"
#include "kiln/graph/op_registry.h"
#include "kiln/ir/structural.h"
#include "kiln/ops/broadcast.h"
#include "kiln/support/error.h"

namespace kiln::graph {

namespace {

std::vector<Expr> exprs_of(const Shape& s) {
  std::vector<Expr> e;
  for (const Dim& d : s) e.push_back(d.expr());
  return e;
}

// K when the output is the input's count split as [floordiv(count, K), the rest] with the rest's
// product the constant K (the -1 of [-1, 6]): equal counts then mean count % K == 0. Else 0.
int64_t constant_divisor(const Shape& in, const Shape& res) {
  Expr count = in.numel().expr();
  int64_t rest = 1;
  bool split = false;
  for (const Dim& d : res) {
    const FloorDiv* q = d.is_symbolic() ? d.expr().as<FloorDiv>() : nullptr;
    if (q && !split && structural_equal(q->a, count)) {
      split = true;
      continue;
    }
    if (!d.is_static()) return 0;
    rest *= d.value();
  }
  if (!split) return 0;
  for (const Dim& d : res)
    if (const FloorDiv* q = d.is_symbolic() ? d.expr().as<FloorDiv>() : nullptr; q && !(as_const_int(q->b) && *as_const_int(q->b) == rest)) return 0;
  return rest;
}

void collect(const Graph& g, const std::vector<std::string>& shape_vars, std::set<std::string>* seen, std::vector<ShapeConstraint>* out) {
  auto param_of = [&](const Variable* v) -> int64_t {
    auto it = std::find(shape_vars.begin(), shape_vars.end(), v->name);
    KILN_USER_CHECK(it != shape_vars.end()) << "a reshape's element count reads the shape variable '" << v->name
                                            << "', which is no dimension of any model input, so a run could not check it";
    return it - shape_vars.begin();
  };
  for (const OpNode* n : g.op_nodes()) {
    if (n->body.defined()) collect(Graph(n->body), shape_vars, seen, out);
    if (n->op->name != "Reshape" || n->inputs.empty() || n->types.empty()) continue;
    const Shape& in = n->inputs[0].type().shape;
    const Shape& res = n->types[0].shape;
    if (in.is_static() && res.is_static()) continue;
    if (ops::same_product(exprs_of(in), exprs_of(res))) continue;
    ShapeConstraint c;
    std::string what = "Reshape '" + n->name + "' of " + shape_to_string(in) + " to " + shape_to_string(res);
    c.lhs = codegen::to_shape_expr(in.numel().expr(), param_of, what);
    if (int64_t k = constant_divisor(in, res); k > 1) {  // a -1 beside constant entries: the count must divide
      c.kind = ShapeConstraint::Kind::Divisible;
      c.divisor = k;
      c.text = what + ": " + in.numel().str() + " % " + std::to_string(k) + " == 0";
    } else {
      c.kind = ShapeConstraint::Kind::Equal;
      c.rhs = codegen::to_shape_expr(res.numel().expr(), param_of, what);
      c.text = what + ": " + in.numel().str() + " == " + res.numel().str();
    }
    if (seen->insert(c.text).second) out->push_back(std::move(c));
  }
}

}  // namespace

std::vector<ShapeConstraint> reshape_constraints(const Graph& g, const std::vector<std::string>& shape_vars) {
  std::vector<ShapeConstraint> out;
  std::set<std::string> seen;
  collect(g, shape_vars, &seen, &out);
  return out;
}

}  // namespace kiln::graph
