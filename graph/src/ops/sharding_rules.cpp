// The shared sharding rules and their helpers (sharding_rules.h), and the
// cost model every rule weighs choices with (reshard_cost).
#include "sharding_rules.h"

#include <algorithm>

#include "kiln/support/error.h"

namespace kiln::graph {

using namespace ops_detail;

namespace {

RuleOutput propagate_replicated(const RuleInput& r) {
  RuleOutput o = with_inputs_default(r);
  for (const auto& t : r.node.types) o.out.push_back(R(t.ndim()));
  return o;
}

// How many splits a spec has (a tie-break: on size-1 axes every choice costs nothing, and keeping splits is what was asked).
int64_t pieces(const ShardingSpec& s) {
  int64_t p = 0;
  for (const auto& d : s.dims) p += static_cast<int64_t>(d.size());
  return p;
}

// The output takes one operand's spec (or none), the one whose resharding of
// the others costs least (ties: the more split).
RuleOutput propagate_elementwise(const RuleInput& r) {
  const OpDef* op = r.node.op;
  const auto& oshape = r.node.types[0].shape;
  auto operand = [&](size_t i) { return has(r, static_cast<int>(i)) && !op->reads_at_compile_time(static_cast<int>(i)); };
  std::vector<ShardingSpec> cands{R(static_cast<int>(oshape.size()))};
  for (size_t i = 0; i < r.node.inputs.size(); ++i) {
    if (!operand(i) || r.free[i]) continue;
    ShardingSpec c = R(static_cast<int>(oshape.size()));
    const auto& ishape = input_type(r, i).shape;
    int off = static_cast<int>(oshape.size() - ishape.size());
    for (size_t k = 0; k < ishape.size(); ++k)
      if (ishape[k] == oshape[k + off]) c.dims[k + off] = r.in[i].dims[k];
    cands.push_back(fit_to(c, oshape, r.mesh));
  }
  auto cost_of = [&](const ShardingSpec& c) {
    double cost = 0;
    for (size_t i = 0; i < r.node.inputs.size(); ++i)
      if (operand(i) && !r.free[i]) cost += reshard_cost(r.in[i], project(c, oshape, input_type(r, i).shape), input_type(r, i), r.mesh);
    return cost;
  };
  ShardingSpec best = cands[0];
  double best_cost = cost_of(best);
  for (const auto& c : cands) {
    double cc = cost_of(c);
    if (cc < best_cost || (cc == best_cost && pieces(c) > pieces(best))) best = c, best_cost = cc;
  }
  RuleOutput o = with_inputs_default(r);
  for (size_t i = 0; i < r.node.inputs.size(); ++i)
    if (operand(i)) o.in[i] = project(best, oshape, input_type(r, i).shape);
  for (const auto& t : r.node.types) o.out.push_back(project(best, oshape, t.shape));
  return o;
}

}  // namespace

ShardingRule replicated_rule() { return {"replicated", propagate_replicated, nullptr}; }
ShardingRule elementwise_rule() { return {"elementwise", propagate_elementwise, nullptr}; }

ShardingSpec fit_to(ShardingSpec spec, const std::vector<int64_t>& shape, const Mesh& mesh) {
  for (int d = 0; d < spec.ndim(); ++d)
    while (!spec.dims[d].empty() && shape[d] % spec.split_factor(d, mesh) != 0) spec.dims[d].pop_back();
  return spec;
}

double reshard_cost(const ShardingSpec& from, const ShardingSpec& to, const TensorType& type, const Mesh& mesh) {
  if (from == to || from.ndim() != type.ndim()) return 0;
  double bytes = static_cast<double>(type.bytes());
  for (int d = 0; d < from.ndim(); ++d) bytes /= static_cast<double>(from.split_factor(d, mesh));
  double cost = 0;
  for (int a : from.partial)
    if (!to.is_partial(a)) cost += 2.0 * (mesh.axis_size(a) - 1) / mesh.axis_size(a) * bytes;
  for (int d = 0; d < from.ndim(); ++d)
    for (int a : from.dims[d]) {
      int e = to.dim_of_axis(a);
      if (e == d) continue;
      int n = mesh.axis_size(a);
      // all-to-all moves (n-1)/n of the block; an all-gather receives n-1 blocks.
      cost += e >= 0 ? bytes * (n - 1) / n : bytes * (n - 1);
    }
  return cost;
}

namespace ops_detail {

ShardingSpec seen(const RuleInput& r, int i) { return r.free[i] ? R(input_type(r, i).ndim()) : r.in[i].without_partial(); }

void dedupe(std::vector<Axes*> groups) {
  std::vector<int> used;
  for (Axes* g : groups) {
    Axes kept;
    for (int a : *g)
      if (std::find(used.begin(), used.end(), a) == used.end()) {
        kept.push_back(a);
        used.push_back(a);
      }
    *g = kept;
  }
}

RuleOutput with_inputs_default(const RuleInput& r) {
  RuleOutput o;
  for (size_t i = 0; i < r.node.inputs.size(); ++i) o.in.push_back(has(r, static_cast<int>(i)) ? R(input_type(r, i).ndim()) : ShardingSpec{});
  return o;
}

ShardingSpec project(const ShardingSpec& out, const std::vector<int64_t>& out_shape, const std::vector<int64_t>& in_shape) {
  ShardingSpec s = R(static_cast<int>(in_shape.size()));
  int off = static_cast<int>(out_shape.size() - in_shape.size());
  for (int k = 0; k < s.ndim(); ++k)
    if (in_shape[k] == out_shape[k + off]) s.dims[k] = out.dims[k + off];
  return s;
}

bool splits(int64_t size, const Axes& axes, const Mesh& mesh) {
  int64_t f = 1;
  for (int a : axes) f *= mesh.axis_size(a);
  return size % f == 0;
}

std::vector<int64_t> localized(std::vector<int64_t> shape, const ShardingSpec& spec, const Mesh& mesh) {
  for (int j = 0; j < spec.ndim() && j < static_cast<int>(shape.size()); ++j)
    if (shape[j] > 0) shape[j] /= spec.split_factor(j, mesh);
  return shape;
}

Value int64_constant(const std::string& name, const std::vector<int64_t>& v) {
  NDArray c = NDArray::empty({static_cast<int64_t>(v.size())}, DataType::Int(64));
  if (!v.empty()) c.copy_from(v.data(), static_cast<int64_t>(v.size() * sizeof(int64_t)));
  return make_constant(name, c)->output();
}

RuleOutput channel_propagate(const RuleInput& r) {
  if (r.node.types.size() != 1) return propagate_replicated(r);
  ShardingSpec x = seen(r, 0);
  ShardingSpec out = R(r.node.types[0].ndim());
  for (int d = 0; d < std::min(2, out.ndim()); ++d) out.dims[d] = x.dims[d];
  out = fit_to(out, r.node.types[0].shape, r.mesh);
  RuleOutput o = with_inputs_default(r);
  for (size_t i = 0; i < r.node.inputs.size(); ++i) {
    if (!has(r, static_cast<int>(i))) continue;
    if (input_type(r, i).ndim() == out.ndim())  // the data, and the pool gradients' second operand (argmax, forward output)
      for (int d = 0; d < std::min(2, out.ndim()); ++d) o.in[i].dims[d] = out.dims[d];
    else if (input_type(r, i).ndim() == 1 && out.ndim() > 1)  // per-channel parameters
      o.in[i].dims[0] = out.dims[1];
  }
  o.out.push_back(out);
  return o;
}

ShardingRule channel_rule() { return {"channel", channel_propagate, nullptr}; }
ShardingRule channel_rule_with_input_shape() { return {"channel", channel_propagate, input_shape_localize}; }

Ref<OpNode> input_shape_localize(const OpNode& g, std::vector<Value> ins, const std::vector<ShardingSpec>& outs, const Mesh& mesh) {
  Attrs a = g.attrs;
  a.set("input_shape", localized(a.get_ints("input_shape"), outs[0], mesh));
  return make_op(g.op, ins, a, g.name);
}

}  // namespace ops_detail
}  // namespace kiln::graph
