// The propagation rules, one per op family, in a table keyed by op name.
// Ops not in the table: Elementwise/Broadcast ops (by their registry
// pattern) get the elementwise rule, all others the replicated rule.
#include <algorithm>
#include <numeric>
#include <unordered_map>

#include "kiln/graph/op_registry.h"
#include "kiln/support/error.h"
#include "propagation.h"

namespace kiln::dist {

using graph::OpNode;
using graph::TensorType;

namespace {

using Axes = std::vector<int>;
ShardingSpec R(int n) { return ShardingSpec::replicated(n); }
const TensorType& in_type(const RuleInput& r, int i) { return r.node.inputs[i].type(); }
bool has(const RuleInput& r, int i) { return i < static_cast<int>(r.node.inputs.size()) && r.node.inputs[i].defined(); }
// A free input (an unassigned weight) brings no spec of its own: the rule decides it.
ShardingSpec seen(const RuleInput& r, int i) { return r.free[i] ? R(in_type(r, i).ndim()) : r.in[i].without_partial(); }

// Removes axes used twice (keeps the first use), so a rule's merged choice is a valid spec.
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

// Inputs that the rule leaves alone (absent or compile-time inputs) get an empty spec.
RuleOutput with_inputs_default(const RuleInput& r) {
  RuleOutput o;
  for (size_t i = 0; i < r.node.inputs.size(); ++i) o.in.push_back(has(r, i) ? R(in_type(r, i).ndim()) : ShardingSpec{});
  return o;
}

RuleOutput replicated_rule(const RuleInput& r) {
  RuleOutput o = with_inputs_default(r);
  for (const auto& t : r.node.types) o.out.push_back(R(t.ndim()));
  return o;
}

// The output spec `out` seen from an input aligned to the right (numpy broadcasting): broadcast dims replicated.
ShardingSpec project(const ShardingSpec& out, const std::vector<int64_t>& out_shape, const std::vector<int64_t>& in_shape) {
  ShardingSpec s = R(static_cast<int>(in_shape.size()));
  int off = static_cast<int>(out_shape.size() - in_shape.size());
  for (int k = 0; k < s.ndim(); ++k)
    if (in_shape[k] == out_shape[k + off]) s.dims[k] = out.dims[k + off];
  return s;
}

// How many splits a spec has (a tie-break: on size-1 axes every choice costs nothing, and keeping splits is what was asked).
int64_t pieces(const ShardingSpec& s, const Mesh&) {
  int64_t p = 0;
  for (const auto& d : s.dims) p += static_cast<int64_t>(d.size());
  return p;
}

// Elementwise and broadcast ops: the output takes one operand's spec, the
// one whose resharding of the others costs least (ties: the more split).
RuleOutput elementwise_rule(const RuleInput& r) {
  const graph::OpDef* op = r.node.op;
  const auto& oshape = r.node.types[0].shape;
  std::vector<ShardingSpec> cands{R(static_cast<int>(oshape.size()))};
  for (size_t i = 0; i < r.node.inputs.size(); ++i) {
    if (!has(r, i) || op->reads_at_compile_time(i) || r.free[i]) continue;
    ShardingSpec c = R(static_cast<int>(oshape.size()));
    const auto& ishape = in_type(r, i).shape;
    int off = static_cast<int>(oshape.size() - ishape.size());
    for (size_t k = 0; k < ishape.size(); ++k)
      if (ishape[k] == oshape[k + off]) c.dims[k + off] = r.in[i].dims[k];
    cands.push_back(fit_to(c, oshape, r.mesh));
  }
  auto cost_of = [&](const ShardingSpec& c) {
    double cost = 0;
    for (size_t i = 0; i < r.node.inputs.size(); ++i)
      if (has(r, i) && !op->reads_at_compile_time(i) && !r.free[i])
        cost += reshard_cost(r.in[i], project(c, oshape, in_type(r, i).shape), in_type(r, i), r.mesh);
    return cost;
  };
  ShardingSpec best = cands[0];
  double best_cost = cost_of(best);
  for (const auto& c : cands) {
    double cc = cost_of(c);
    if (cc < best_cost || (cc == best_cost && pieces(c, r.mesh) > pieces(best, r.mesh))) best = c, best_cost = cc;
  }
  RuleOutput o = with_inputs_default(r);
  for (size_t i = 0; i < r.node.inputs.size(); ++i)
    if (has(r, i) && !op->reads_at_compile_time(i)) o.in[i] = project(best, oshape, in_type(r, i).shape);
  for (const auto& t : r.node.types) o.out.push_back(project(best, oshape, t.shape));
  return o;
}

// MatMul and Gemm share this: A [batch.., M, K] x B [batch.., K, N]. Batch
// and M splits of A and N splits of B carry to the output; a split of K (on
// either operand; the other is sliced for free) leaves partial sums.
struct MatmulDims {
  int a_m, a_k, b_k, b_n;
};

// prefer_b: on a conflict (both operands split K differently, or M and N on
// one axis) B's splits win instead of A's; the rule tries both.
RuleOutput matmul_choice(const RuleInput& r, MatmulDims d, int bias_input, bool prefer_b) {
  ShardingSpec a = seen(r, 0), b = seen(r, 1);
  const auto& oshape = r.node.types[0].shape;
  int ro = static_cast<int>(oshape.size()), ra = a.ndim(), rb = b.ndim();
  ShardingSpec out = R(ro);
  // Batch dims (MatMul only: Gemm is 2-D): from A where not broadcast, else from B.
  for (int k = 0; k < ro - 2; ++k) {
    int ia = k - (ro - ra), ib = k - (ro - rb);
    if (ia >= 0 && in_type(r, 0).shape[ia] == oshape[k] && !a.dims[ia].empty()) out.dims[k] = a.dims[ia];
    else if (ib >= 0 && in_type(r, 1).shape[ib] == oshape[k]) out.dims[k] = b.dims[ib];
  }
  const Axes &ka = a.dims[d.a_k], &kb = b.dims[d.b_k];
  Axes m = a.dims[d.a_m], n = b.dims[d.b_n], kx = prefer_b ? (!kb.empty() ? kb : ka) : (!ka.empty() ? ka : kb);
  std::vector<Axes*> groups;
  for (int k = 0; k < ro - 2; ++k) groups.push_back(&out.dims[k]);
  groups.push_back(prefer_b ? &n : &m);
  groups.push_back(&kx);
  groups.push_back(prefer_b ? &m : &n);
  dedupe(groups);
  int64_t K = in_type(r, 0).shape[d.a_k];
  ShardingSpec kcheck{{kx}, {}};
  if (K % kcheck.split_factor(0, r.mesh) != 0) kx.clear();
  out.dims[ro - 2] = m;
  out.dims[ro - 1] = n;
  out = fit_to(out, oshape, r.mesh);
  RuleOutput o = with_inputs_default(r);
  auto operand = [&](int i, int row, int col, const Axes& rows, const Axes& cols) {
    ShardingSpec s = project(out, oshape, in_type(r, i).shape);  // batch dims
    s.dims[row] = rows;
    s.dims[col] = cols;
    return s;
  };
  o.in[0] = d.a_m < d.a_k ? operand(0, d.a_m, d.a_k, out.dims[ro - 2], kx) : operand(0, d.a_k, d.a_m, kx, out.dims[ro - 2]);
  o.in[1] = d.b_k < d.b_n ? operand(1, d.b_k, d.b_n, kx, out.dims[ro - 1]) : operand(1, d.b_n, d.b_k, out.dims[ro - 1], kx);
  out.partial = kx;
  std::sort(out.partial.begin(), out.partial.end());
  if (bias_input >= 0 && has(r, bias_input)) {
    // The bias joins the partial sum: one rank of each K group adds it.
    o.in[bias_input] = project(out, oshape, in_type(r, bias_input).shape);
    o.in[bias_input].partial = out.partial;
  }
  o.out.push_back(out);
  return o;
}

// Both conflict resolutions, the one whose operand resharding costs less (ties: A's).
RuleOutput matmul_like(const RuleInput& r, MatmulDims d, int bias_input) {
  auto cost = [&](const RuleOutput& o) {
    double c = 0;
    for (int i = 0; i < 2; ++i)
      if (!r.free[i]) c += reshard_cost(r.in[i], o.in[i], in_type(r, i), r.mesh);
    return c;
  };
  RuleOutput a = matmul_choice(r, d, bias_input, false), b = matmul_choice(r, d, bias_input, true);
  return cost(b) < cost(a) ? b : a;
}

RuleOutput matmul_rule(const RuleInput& r) {
  int ra = in_type(r, 0).ndim(), rb = in_type(r, 1).ndim();
  if (ra < 2 || rb < 2) return replicated_rule(r);  // vector products: rare, kept simple
  return matmul_like(r, {ra - 2, ra - 1, rb - 2, rb - 1}, -1);
}

RuleOutput gemm_rule(const RuleInput& r) {
  bool ta = r.node.attrs.get_int_or("transA", 0) != 0, tb = r.node.attrs.get_int_or("transB", 0) != 0;
  return matmul_like(r, {ta ? 1 : 0, ta ? 0 : 1, tb ? 1 : 0, tb ? 0 : 1}, 2);
}

// Conv: split on the batch (data parallel), on the output channels (the
// weight's dim 0) and, for groups of 1, on the input channels, which are
// contracted: partial sums (the bias then joins them, as Gemm's does). The
// last also keeps a batch split through kiln.train's weight gradient when it
// is a convolution of X and dY with batch and channels swapped.
RuleOutput conv_rule(const RuleInput& r) {
  ShardingSpec x = seen(r, 0), w = seen(r, 1);
  bool dense = r.node.attrs.get_int_or("group", 1) == 1;
  Axes nb = x.dims[0], oc = dense ? w.dims[0] : Axes{}, ic = dense ? (!x.dims[1].empty() ? x.dims[1] : w.dims[1]) : Axes{};
  dedupe({&nb, &oc, &ic});
  ShardingSpec probe = R(1);
  probe.dims[0] = ic;
  if (in_type(r, 0).shape[1] % probe.split_factor(0, r.mesh) != 0) ic.clear();
  ShardingSpec out = R(r.node.types[0].ndim());
  out.dims[0] = nb;
  out.dims[1] = oc;
  out = fit_to(out, r.node.types[0].shape, r.mesh);
  RuleOutput o = with_inputs_default(r);
  o.in[0].dims[0] = out.dims[0];
  o.in[0].dims[1] = ic;
  o.in[1].dims[0] = out.dims[1];
  o.in[1].dims[1] = ic;
  out.partial = ic;
  std::sort(out.partial.begin(), out.partial.end());
  if (has(r, 2)) {
    o.in[2].dims[0] = out.dims[1];
    o.in[2].partial = out.partial;
  }
  o.out.push_back(out);
  return o;
}

// Pools, their gradients and inference batch norm: batch and channels carry, spatial dims are gathered; per-channel inputs follow the channels.
RuleOutput channel_rule(const RuleInput& r) {
  if (r.node.types.size() != 1) return replicated_rule(r);
  ShardingSpec x = seen(r, 0);
  ShardingSpec out = R(r.node.types[0].ndim());
  for (int d = 0; d < std::min(2, out.ndim()); ++d) out.dims[d] = x.dims[d];
  out = fit_to(out, r.node.types[0].shape, r.mesh);
  RuleOutput o = with_inputs_default(r);
  for (size_t i = 0; i < r.node.inputs.size(); ++i) {
    if (!has(r, i)) continue;
    if (in_type(r, i).ndim() == out.ndim())  // the data, and the pool gradients' second operand (argmax, forward output)
      for (int d = 0; d < std::min(2, out.ndim()); ++d) o.in[i].dims[d] = out.dims[d];
    else if (in_type(r, i).ndim() == 1 && out.ndim() > 1)  // per-channel parameters
      o.in[i].dims[0] = out.dims[1];
  }
  o.out.push_back(out);
  return o;
}

// Reshape-like ops. Dims of size > 1 are grouped where the element counts
// before them agree on both sides; a group of one input dim and one output
// dim keeps its split; one input dim cut into several output dims passes its
// split to the outer one (heads out of a hidden dim); several input dims
// merged into one pass the outer one's split (the others must be whole).
RuleOutput reshape_rule(const RuleInput& r) {
  const auto& is = in_type(r, 0).shape;
  const auto& os = r.node.types[0].shape;
  ShardingSpec x = seen(r, 0), out = R(static_cast<int>(os.size()));
  RuleOutput o = with_inputs_default(r);
  std::vector<int> id, od;  // dims of size > 1
  for (int i = 0; i < static_cast<int>(is.size()); ++i)
    if (is[i] > 1) id.push_back(i);
  for (int j = 0; j < static_cast<int>(os.size()); ++j)
    if (os[j] > 1) od.push_back(j);
  size_t a = 0, b = 0;
  while (a < id.size() && b < od.size()) {
    size_t a1 = a + 1, b1 = b + 1;
    int64_t pi = is[id[a]], po = os[od[b]];
    while (pi != po) {
      if (pi < po && a1 < id.size()) pi *= is[id[a1++]];
      else if (po < pi && b1 < od.size()) po *= os[od[b1++]];
      else break;
    }
    if (pi != po) break;
    if (a1 - a == 1 || b1 - b == 1) {
      // One side is a single dim: the outer dim of the other side carries the split.
      const Axes& axes = x.dims[id[a]];
      ShardingSpec probe = R(1);
      probe.dims[0] = axes;
      if (os[od[b]] % probe.split_factor(0, r.mesh) == 0) {
        out.dims[od[b]] = axes;
        o.in[0].dims[id[a]] = axes;
      }
    }
    a = a1;
    b = b1;
  }
  o.out.push_back(out);
  return o;
}

Ref<OpNode> reshape_localize(const OpNode& g, std::vector<graph::Value> ins, const std::vector<ShardingSpec>& outs, const Mesh& mesh) {
  // The target shape holds global sizes: divide the split dims (-1 and 0 keep their meaning).
  std::vector<int64_t> shape = graph::op_call(g).constant_ints(1, "shape");
  for (int j = 0; j < outs[0].ndim() && j < static_cast<int>(shape.size()); ++j)
    if (shape[j] > 0) shape[j] /= outs[0].split_factor(j, mesh);
  NDArray c = NDArray::empty({static_cast<int64_t>(shape.size())}, DataType::Int(64));
  c.copy_from(shape.data(), static_cast<int64_t>(shape.size() * sizeof(int64_t)));
  ins[1] = graph::make_constant(g.name + ".local_shape", c)->output();
  return graph::make_op(g.op, ins, g.attrs, g.name);
}

RuleOutput transpose_rule(const RuleInput& r) {
  ShardingSpec x = seen(r, 0);
  int n = x.ndim();
  std::vector<int64_t> perm(n);
  if (r.node.attrs.has("perm") && !r.node.attrs.get_ints("perm").empty()) perm = r.node.attrs.get_ints("perm");
  else for (int i = 0; i < n; ++i) perm[i] = n - 1 - i;
  RuleOutput o = with_inputs_default(r);
  o.in[0] = x;
  ShardingSpec out = R(n);
  for (int j = 0; j < n; ++j) out.dims[j] = x.dims[perm[j]];
  o.out.push_back(out);
  return o;
}

// Softmax and LayerNormalization normalize over some axes: those are gathered, the others keep their splits.
RuleOutput normalize_rule(const RuleInput& r, bool to_end) {
  ShardingSpec x = seen(r, 0);
  int n = x.ndim();
  int axis = static_cast<int>(r.node.attrs.get_int_or("axis", -1));
  if (axis < 0) axis += n;
  for (int d = axis; d < (to_end ? n : axis + 1); ++d) x.dims[d].clear();
  RuleOutput o = with_inputs_default(r);
  o.in[0] = x;
  for (const auto& t : r.node.types) o.out.push_back(project(x, in_type(r, 0).shape, t.shape));
  return o;
}

// Reductions: split reduced dims are gathered first, except for ReduceSum, whose blocks sum to a partial result.
RuleOutput reduce_rule(const RuleInput& r, bool sum) {
  ShardingSpec x = seen(r, 0);
  int n = x.ndim();
  std::vector<int64_t> axes;
  if (has(r, 1)) {
    graph::OpCall call = graph::op_call(r.node);
    axes = call.constant_ints(1, "axes");
  } else if (r.node.attrs.has("axes")) {
    axes = r.node.attrs.get_ints("axes");
  }
  bool noop = axes.empty() && r.node.attrs.get_int_or("noop_with_empty_axes", 0) != 0;
  std::vector<bool> reduced(n, axes.empty() && !noop);
  for (int64_t a : axes) reduced[a < 0 ? a + n : a] = true;
  bool keep = r.node.attrs.get_int_or("keepdims", 1) != 0;
  ShardingSpec out{{}, {}};
  for (int d = 0; d < n; ++d) {
    if (!reduced[d]) out.dims.push_back(x.dims[d]);
    else {
      if (sum) out.partial.insert(out.partial.end(), x.dims[d].begin(), x.dims[d].end());
      else x.dims[d].clear();
      if (keep) out.dims.push_back({});
    }
  }
  std::sort(out.partial.begin(), out.partial.end());
  RuleOutput o = with_inputs_default(r);
  o.in[0] = x;
  o.out.push_back(out);
  return o;
}

// Gather on axis 0 of a table (embedding): the indices' splits carry; the table keeps a split of its last dim.
RuleOutput gather_rule(const RuleInput& r) {
  if (r.node.attrs.get_int_or("axis", 0) != 0 || in_type(r, 0).ndim() != 2) return replicated_rule(r);
  ShardingSpec table = seen(r, 0), idx = seen(r, 1);
  ShardingSpec out{idx.dims, {}};
  Axes last = table.dims[1];
  std::vector<Axes*> groups;
  for (auto& d : out.dims) groups.push_back(&d);
  groups.push_back(&last);
  dedupe(groups);
  out.dims.push_back(last);
  RuleOutput o = with_inputs_default(r);
  o.in[0].dims[1] = last;
  o.in[1] = ShardingSpec{std::vector<Axes>(out.dims.begin(), out.dims.end() - 1), {}};
  o.out.push_back(out);
  return o;
}

// kiln.ConvGradWeight(X, dY): the batch is contracted, so batch-split operands give a partial weight gradient.
RuleOutput conv_grad_weight_rule(const RuleInput& r) {
  Axes nb = seen(r, 0).dims[0];
  if (nb.empty()) nb = seen(r, 1).dims[0];
  ShardingSpec probe = R(1);
  probe.dims[0] = nb;
  if (in_type(r, 0).shape[0] % probe.split_factor(0, r.mesh) != 0) nb.clear();
  RuleOutput o = with_inputs_default(r);
  o.in[0].dims[0] = nb;
  o.in[1].dims[0] = nb;
  ShardingSpec out = R(r.node.types[0].ndim());
  out.partial = nb;
  std::sort(out.partial.begin(), out.partial.end());
  o.out.push_back(out);
  return o;
}

// kiln.ConvGradInput(dY, W): dX keeps dY's batch split.
RuleOutput conv_grad_input_rule(const RuleInput& r) {
  ShardingSpec out = R(r.node.types[0].ndim());
  out.dims[0] = seen(r, 0).dims[0];
  out = fit_to(out, r.node.types[0].shape, r.mesh);
  RuleOutput o = with_inputs_default(r);
  o.in[0].dims[0] = out.dims[0];
  o.out.push_back(out);
  return o;
}

// Expand: the input's whole (not broadcast) dims keep their splits.
RuleOutput expand_rule(const RuleInput& r) {
  const auto& os = r.node.types[0].shape;
  const auto& is = in_type(r, 0).shape;
  ShardingSpec x = seen(r, 0), out = R(static_cast<int>(os.size()));
  int off = static_cast<int>(os.size() - is.size());
  for (int k = 0; k < x.ndim(); ++k)
    if (is[k] == os[k + off] && is[k] > 1) out.dims[k + off] = x.dims[k];
  RuleOutput o = with_inputs_default(r);
  o.in[0] = project(out, os, is);
  o.out.push_back(out);
  return o;
}

// Global sizes in attributes or compile-time inputs become the rank's block sizes.
std::vector<int64_t> localized(std::vector<int64_t> shape, const ShardingSpec& spec, const Mesh& mesh) {
  for (int j = 0; j < spec.ndim() && j < static_cast<int>(shape.size()); ++j)
    if (shape[j] > 0) shape[j] /= spec.split_factor(j, mesh);
  return shape;
}

Ref<OpNode> input_shape_localize(const OpNode& g, std::vector<graph::Value> ins, const std::vector<ShardingSpec>& outs, const Mesh& mesh) {
  graph::Attrs a = g.attrs;
  a.set("input_shape", localized(a.get_ints("input_shape"), outs[0], mesh));
  return graph::make_op(g.op, ins, a, g.name);
}

Ref<OpNode> expand_localize(const OpNode& g, std::vector<graph::Value> ins, const std::vector<ShardingSpec>& outs, const Mesh& mesh) {
  std::vector<int64_t> shape = graph::op_call(g).constant_ints(1, "shape");
  // The shape aligns to the output's trailing dims.
  ShardingSpec tail = R(static_cast<int>(shape.size()));
  int off = outs[0].ndim() - tail.ndim();
  for (int k = 0; k < tail.ndim(); ++k)
    if (k + off >= 0) tail.dims[k] = outs[0].dims[k + off];
  shape = localized(shape, tail, mesh);
  NDArray c = NDArray::empty({static_cast<int64_t>(shape.size())}, DataType::Int(64));
  c.copy_from(shape.data(), static_cast<int64_t>(shape.size() * sizeof(int64_t)));
  ins[1] = graph::make_constant(g.name + ".local_shape", c)->output();
  return graph::make_op(g.op, ins, g.attrs, g.name);
}

// Mean losses (kiln.SoftmaxCrossEntropy over the batch, kiln.MeanSquaredError
// over every element): on split inputs each rank's mean, scaled by its share,
// is an addend of the global mean, so the loss is a partial sum and the
// batch is never gathered (its gradient ops scale by the global count).
RuleOutput mean_loss_rule(const RuleInput& r, bool batch_only) {
  ShardingSpec x = seen(r, 0);
  if (batch_only)
    for (int d = 1; d < x.ndim(); ++d) x.dims[d].clear();
  RuleOutput o = with_inputs_default(r);
  o.in[0] = x;
  o.in[1] = batch_only ? ShardingSpec{{x.dims[0]}, {}} : x;
  ShardingSpec out = R(r.node.types[0].ndim());
  for (const auto& d : x.dims) out.partial.insert(out.partial.end(), d.begin(), d.end());
  std::sort(out.partial.begin(), out.partial.end());
  o.out.push_back(out);
  return o;
}

Ref<OpNode> mean_loss_localize(const OpNode& g, std::vector<graph::Value> ins, const std::vector<ShardingSpec>& outs, const Mesh& mesh) {
  Ref<OpNode> local = graph::make_op(g.op, ins, g.attrs, g.name);
  int64_t k = 1;
  for (int a : outs[0].partial) k *= mesh.axis_size(a);
  if (k == 1) return local;
  DataType t = g.types[0].dtype;
  NDArray c = NDArray::empty({}, t);
  if (t == DataType::Float(64)) *static_cast<double*>(c.data()) = 1.0 / static_cast<double>(k);
  else *static_cast<float*>(c.data()) = 1.0f / static_cast<float>(k);
  return graph::make_op("Mul", {local->output(), graph::make_constant(g.name + ".share", c)->output()}, {}, g.name + ".share");
}

const std::unordered_map<std::string, ShardingRule>& table() {
  static const auto* t = [] {
    auto* m = new std::unordered_map<std::string, ShardingRule>();
    (*m)["MatMul"] = {matmul_rule, nullptr};
    (*m)["Gemm"] = {gemm_rule, nullptr};
    (*m)["Conv"] = {conv_rule, nullptr};
    for (const char* p : {"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "BatchNormalization"}) (*m)[p] = {channel_rule, nullptr};
    for (const char* p : {"Reshape", "Flatten", "Squeeze", "Unsqueeze"}) (*m)[p] = {reshape_rule, nullptr};
    (*m)["Reshape"].localize = reshape_localize;
    (*m)["Transpose"] = {transpose_rule, nullptr};
    (*m)["Softmax"] = {[](const RuleInput& r) { return normalize_rule(r, false); }, nullptr};
    (*m)["LogSoftmax"] = (*m)["Softmax"];
    (*m)["LayerNormalization"] = {[](const RuleInput& r) { return normalize_rule(r, true); }, nullptr};
    (*m)["ReduceSum"] = {[](const RuleInput& r) { return reduce_rule(r, true); }, nullptr};
    for (const char* p : {"ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL2", "ReduceL1", "ReduceSumSquare", "ReduceLogSumExp"})
      (*m)[p] = {[](const RuleInput& r) { return reduce_rule(r, false); }, nullptr};
    (*m)["Gather"] = {gather_rule, nullptr};
    // Gradient ops (kiln.train): data-parallel steps keep the batch split through the backward pass.
    (*m)["kiln.ConvGradWeight"] = {conv_grad_weight_rule, nullptr};
    (*m)["kiln.ConvGradInput"] = {conv_grad_input_rule, input_shape_localize};
    (*m)["kiln.MaxPoolArgmax"] = {channel_rule, nullptr};
    for (const char* p : {"kiln.MaxPoolGrad", "kiln.AveragePoolGrad"}) (*m)[p] = {channel_rule, input_shape_localize};
    (*m)["Expand"] = {expand_rule, expand_localize};
    (*m)["kiln.SoftmaxCrossEntropy"] = {[](const RuleInput& r) { return mean_loss_rule(r, true); }, mean_loss_localize};
    (*m)["kiln.MeanSquaredError"] = {[](const RuleInput& r) { return mean_loss_rule(r, false); }, mean_loss_localize};
    return m;
  }();
  return *t;
}

}  // namespace

const ShardingRule& sharding_rule(const std::string& op_name) {
  static const ShardingRule elementwise{elementwise_rule, nullptr}, replicated{replicated_rule, nullptr};
  auto it = table().find(op_name);
  if (it != table().end()) return it->second;
  const graph::OpDef* op = graph::find_op(op_name);
  if (op && (op->pattern == graph::Pattern::Elementwise || op->pattern == graph::Pattern::Broadcast)) return elementwise;
  return replicated;
}

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

}  // namespace kiln::dist
