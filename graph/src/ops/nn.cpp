// The heavy operators: Conv, Gemm, MatMul (pattern OutputFusable: their
// elementwise consumers fuse as the reduction's epilogue), with their
// sharding rules (splits of the contracted dim leave partial sums) and
// their multiply-add counts.
#include <algorithm>

#include "kiln/graph/autodiff.h"
#include "kiln/ops/graph_nn.h"

#include "kiln/support/error.h"
#include "op_helpers.h"
#include "sharding_rules.h"
#include "window_attrs.h"
#include "window_grad.h"

namespace kiln::graph::ops_detail {
namespace {

std::string shape_str(const TensorType& t) { return t.str(); }

void same_dtype(const OpCall& call, int a, int b, const char* what) {
  if (call.has_input(b) && call.input_types[a].dtype != call.input_types[b].dtype)
    call.fail(std::string(what) + " has dtype " + call.input_types[b].dtype.str() + " but input " + std::to_string(a) + " has " +
              call.input_types[a].dtype.str() + "; they must agree (insert a Cast)");
}

// The product of the dims of `t` but dim `skip` (none when it is out of range).
double rows_without(const TensorType& t, int skip) {
  double rows = 1;
  for (int k = 0; k < t.ndim(); ++k)
    if (k != skip) rows *= static_cast<double>(t.shape[k]);
  return rows;
}

// ---------------------------------------------------------------- Conv

struct ConvGeometry {
  std::vector<ops::WindowDim> dims;
  int64_t group = 1;
};

ConvGeometry conv_geometry(const OpCall& call) {
  const TensorType &x = call.input_types[0], &w = call.input_types[1];
  int rank = x.ndim();
  if (rank < 3 || rank > 5) call.fail("X " + shape_str(x) + " must be [N, C, spatial...] with 1 to 3 spatial dims");
  if (w.ndim() != rank) call.fail("W " + shape_str(w) + " must have X's rank " + std::to_string(rank) + " ([K, C/group, kernel...])");
  same_dtype(call, 0, 1, "W");
  ConvGeometry g;
  g.group = call.attrs.get_int("group");
  int64_t C = x.shape[1], K = w.shape[0], cg = w.shape[1];
  if (g.group < 1) call.fail("group " + std::to_string(g.group) + " must be positive");
  if (C % g.group != 0) call.fail("group " + std::to_string(g.group) + " does not divide the " + std::to_string(C) + " input channels of X " + shape_str(x));
  if (K % g.group != 0) call.fail("group " + std::to_string(g.group) + " does not divide the " + std::to_string(K) + " output channels of W " + shape_str(w));
  if (cg * g.group != C)
    call.fail("X " + shape_str(x) + " has " + std::to_string(C) + " channels but W " + shape_str(w) + " expects " + std::to_string(cg) + " per group x " +
              std::to_string(g.group) + (g.group == 1 ? " group = " : " groups = ") + std::to_string(cg * g.group));
  std::vector<int64_t> kernel(w.shape.begin() + 2, w.shape.end());
  const std::vector<int64_t>& ks = call.attrs.get_ints("kernel_shape");
  if (!ks.empty() && ks != kernel) call.fail("kernel_shape " + attr_to_string(ks) + " does not match W " + shape_str(w));
  if (call.has_input(2)) {
    const TensorType& b = call.input_types[2];
    if (b.ndim() != 1 || b.shape[0] != K) call.fail("bias B " + shape_str(b) + " must be [" + std::to_string(K) + "], one per output channel");
    same_dtype(call, 0, 2, "B");
  }
  g.dims = resolve_windows(call, kernel, false);
  return g;
}

std::vector<TensorType> conv_infer(const OpCall& call) {
  ConvGeometry g = conv_geometry(call);
  const TensorType& x = call.input_types[0];
  Shape out = {x.shape[0], call.input_types[1].shape[0]};
  for (const ops::WindowDim& d : g.dims) out.push_back(out_dim(d));
  return {TensorType{out, x.dtype}};
}

// dX by kiln.ConvGradInput, dW by kiln.ConvGradWeight, dB sums dY over all but the channels.
std::vector<Value> conv_grad(GradBuilder& b, const std::vector<Value>& g) {
  ConvGeometry geo = conv_geometry(b.call());
  Attrs a = window_grad_attrs(geo.dims);
  a.set("group", geo.group);
  std::vector<Value> out(b.num_inputs());
  if (b.wants(1)) out[1] = b.op("kiln.ConvGradWeight", {b.in(0), g[0]}, a);
  if (b.wants(0)) {
    a.set("input_shape", b.in_type(0).shape);
    out[0] = b.op("kiln.ConvGradInput", {g[0], b.in(1)}, a);
  }
  if (b.wants(2)) {
    std::vector<int64_t> axes{0};
    for (int k = 2; k < g[0].type().ndim(); ++k) axes.push_back(k);
    out[2] = b.reduce_sum(g[0], axes, false);
  }
  return out;
}

// Conv: split on the batch (data parallel), on the output channels (the
// weight's dim 0) and, for groups of 1, on the input channels, which are
// contracted: partial sums (the bias then joins them, as Gemm's does). The
// last also keeps a batch split through kiln.train's weight gradient when it
// is a convolution of X and dY with batch and channels swapped.
RuleOutput conv_propagate(const RuleInput& r) {
  ShardingSpec x = seen(r, 0), w = seen(r, 1);
  bool dense = r.node.attrs.get_int_or("group", 1) == 1;
  Axes nb = x.dims[0], oc = dense ? w.dims[0] : Axes{}, ic = dense ? (!x.dims[1].empty() ? x.dims[1] : w.dims[1]) : Axes{};
  dedupe({&nb, &oc, &ic});
  if (!splits(input_type(r, 0).shape[1], ic, r.mesh)) ic.clear();
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

// Each output element: one multiply-add per weight element of its group (W's elements / K), plus its bias.
OpCost conv_cost(const OpCall& call, const std::vector<TensorType>& out) {
  const TensorType& w = call.input_types[1];
  double outputs = static_cast<double>(out[0].numel());
  OpCost c;
  c.macs = outputs * static_cast<double>(w.numel() / std::max<int64_t>(w.shape[0], 1));
  c.flops = 2 * c.macs + (call.has_input(2) ? outputs : 0.0);
  c.rows = rows_without(out[0], 1);  // N x spatial, not the channels
  return c;
}

void register_conv() {
  OpDef d;
  d.name = "Conv";
  d.doc = "N-D convolution (1 to 3 spatial dims), NCHW, groups, dilations, asymmetric pads; bias as an epilogue stage";
  d.min_inputs = 2;
  d.max_inputs = 3;
  d.attrs = {{"auto_pad", AttrKind::String, std::string("NOTSET")},
             {"dilations", AttrKind::Ints, std::vector<int64_t>{}},
             {"group", AttrKind::Int, int64_t(1)},
             {"kernel_shape", AttrKind::Ints, std::vector<int64_t>{}},
             {"pads", AttrKind::Ints, std::vector<int64_t>{}},
             {"strides", AttrKind::Ints, std::vector<int64_t>{}}};
  d.pattern = Pattern::OutputFusable;
  d.infer = conv_infer;
  d.compute = [](const OpCall& call, const std::vector<te::Tensor>& in) {
    ConvGeometry g = conv_geometry(call);
    te::Tensor B = in.size() > 2 ? in[2] : te::Tensor();
    if (!call.gpu && ops::prefer_channels_last(g.group, call.input_types[1].shape[0]))
      return std::vector<te::Tensor>{ops::conv_channels_last(in[0], in[1], B, g.dims, "conv")};
    te::Tensor y = ops::conv_nchw(in[0], in[1], g.dims, g.group, "conv");
    if (in.size() > 2 && in[2].defined()) y = ops::add_channel_bias(y, in[2], "conv.bias");
    return std::vector<te::Tensor>{y};
  };
  // Weights [K, C/group, kernel...]: output channels, and for groups of 1 input channels (partial sums).
  d.sharding = {"conv", conv_propagate, nullptr, [](const OpNode& n) {
                  if (n.inputs[1].type().ndim() < 3) return WeightSplits{};
                  return n.attrs.get_int_or("group", 1) == 1 ? WeightSplits{1, {0, 1}, 1} : WeightSplits{1, {0}, -1};
                }};
  d.cost = conv_cost;
  d.gradient = conv_grad;
  register_op(std::move(d));
}

// ---------------------------------------------------------------- Gemm, MatMul

struct GemmDims {
  Dim M, K, N;
};

GemmDims gemm_dims(const OpCall& call) {
  const TensorType &a = call.input_types[0], &b = call.input_types[1];
  if (a.ndim() != 2 || b.ndim() != 2) call.fail("A " + shape_str(a) + " and B " + shape_str(b) + " must be 2-D (use MatMul for batches)");
  same_dtype(call, 0, 1, "B");
  bool ta = call.attrs.get_int("transA") != 0, tb = call.attrs.get_int("transB") != 0;
  GemmDims g{ta ? a.shape[1] : a.shape[0], ta ? a.shape[0] : a.shape[1], tb ? b.shape[0] : b.shape[1]};
  Dim kb = tb ? b.shape[1] : b.shape[0];
  if (!(g.K == kb))
    call.fail(std::string("A") + (ta ? "^T" : "") + " is " + g.M.str() + "x" + g.K.str() + " but B" + (tb ? "^T" : "") + " is " + kb.str() + "x" +
              g.N.str() + " (A " + shape_str(a) + ", B " + shape_str(b) + ", transA=" + std::to_string(ta) + ", transB=" + std::to_string(tb) + ")" +
              same_name_hint(g.K, kb));
  if (call.has_input(2)) {
    const TensorType& c = call.input_types[2];
    same_dtype(call, 0, 2, "C");
    // C broadcasts to [M, N] without growing it: each of its dims is 1 or the output's (a symbolic one is not 1).
    bool ok = c.ndim() <= 2;
    for (int t = 0; ok && t < c.ndim(); ++t) ok = c.shape[t] == 1 || c.shape[t] == (t + c.ndim() == 2 ? g.M : g.N);
    if (!ok) call.fail("C " + shape_str(c) + " does not broadcast to the output [" + g.M.str() + ", " + g.N.str() + "]");
  }
  return g;
}

// Y = alpha A' B' + beta C: dA' = alpha g B'^T and dB' = alpha A'^T g, each
// written as one Gemm whose transposes undo A' and B' (no Transpose op).
std::vector<Value> gemm_grad(GradBuilder& b, const std::vector<Value>& g) {
  bool ta = b.attrs().get_int("transA") != 0, tb = b.attrs().get_int("transB") != 0;
  double alpha = b.attrs().get_float("alpha");
  auto gemm = [&](Value x, Value y, bool tx, bool ty) {
    return b.op("Gemm", {x, y}, Attrs({{"alpha", alpha}, {"transA", int64_t(tx)}, {"transB", int64_t(ty)}}));
  };
  Value A = b.in(0), B = b.in(1), G = g[0];
  std::vector<Value> out(b.num_inputs());
  if (b.wants(0)) out[0] = ta ? gemm(B, G, tb, true) : gemm(G, B, false, !tb);
  if (b.wants(1)) out[1] = tb ? gemm(G, A, true, ta) : gemm(A, G, !ta, false);
  if (b.wants(2)) out[2] = b.sum_to(b.scale(G, b.attrs().get_float("beta")), b.in_type(2).shape);
  return out;
}

// numpy matmul: 1-D operands become matrices ([K] -> [1, K] or [K, 1]), then
// dA = g B^T and dB = A^T g, summed back over broadcast batch dims.
std::vector<Value> matmul_grad(GradBuilder& b, const std::vector<Value>& g) {
  std::vector<int64_t> as = b.in_type(0).shape, bs = b.in_type(1).shape, gs = g[0].type().shape;
  if (as.size() == 1) as.insert(as.begin(), 1);
  if (bs.size() == 1) bs.push_back(1);
  if (b.in_type(1).ndim() == 1) gs.push_back(1);
  if (b.in_type(0).ndim() == 1) gs.insert(gs.end() - 1, 1);
  Value A = b.reshape(b.in(0), as), B = b.reshape(b.in(1), bs), G = b.reshape(g[0], gs);
  auto swap_last = [&](Value v) {
    std::vector<int64_t> perm;
    int r = v.type().ndim();
    for (int k = 0; k < r; ++k) perm.push_back(k);
    std::swap(perm[r - 1], perm[r - 2]);
    return b.transpose(v, perm);
  };
  auto as_rows = [&](Value v) {  // [..., M, K] -> [(...) * M, K]
    const std::vector<int64_t>& s = v.type().shape;
    int64_t rows = 1;
    for (size_t k = 0; k + 1 < s.size(); ++k) rows *= s[k];
    return b.reshape(v, {rows, s.back()});
  };
  std::vector<Value> out(2);
  if (b.wants(0) && bs.size() == 2) {
    // A 2-D B (a weight): the rows of G fold into one Gemm that reads B
    // transposed, which the tuner packs like any B; a Transpose of B would
    // be one more copy of the weight per step.
    Value dA = b.op("Gemm", {as_rows(G), B}, Attrs({{"transB", int64_t(1)}}));
    out[0] = b.reshape(dA, b.in_type(0).shape);
  } else if (b.wants(0)) {
    out[0] = b.reshape(b.sum_to(b.op("MatMul", {G, swap_last(B)}), as), b.in_type(0).shape);
  }
  // A weight shared by every batch (B's batch dims all 1, A's those of G): the
  // batch folds into the rows, one [K, P*M] x [P*M, N] product instead of P
  // products of depth M and a [P, K, N] intermediate summed after (a BERT
  // layer's in-projection: 905 MB of it and most of the step's time).
  bool shared = gs.size() > 2 && as.size() == gs.size() && std::equal(as.begin(), as.end() - 2, gs.begin()) &&
                std::all_of(bs.begin(), bs.end() - 2, [](int64_t d) { return d == 1; });
  if (b.wants(1) && shared) {
    // A Gemm reading A transposed (transA), as gemm_grad writes it: a
    // Transpose of A would copy the whole activation first (BERT's FFN:
    // [1024, 3072], 3% of the float32 step on one core).
    out[1] = b.reshape(b.op("Gemm", {as_rows(A), as_rows(G)}, Attrs({{"transA", int64_t(1)}})), b.in_type(1).shape);
  } else if (b.wants(1)) {
    out[1] = b.reshape(b.sum_to(b.op("MatMul", {swap_last(A), G}), bs), b.in_type(1).shape);
  }
  return out;
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
    if (ia >= 0 && input_type(r, 0).shape[ia] == oshape[k] && !a.dims[ia].empty()) out.dims[k] = a.dims[ia];
    else if (ib >= 0 && input_type(r, 1).shape[ib] == oshape[k]) out.dims[k] = b.dims[ib];
  }
  const Axes &ka = a.dims[d.a_k], &kb = b.dims[d.b_k];
  Axes m = a.dims[d.a_m], n = b.dims[d.b_n], kx = prefer_b ? (!kb.empty() ? kb : ka) : (!ka.empty() ? ka : kb);
  std::vector<Axes*> groups;
  for (int k = 0; k < ro - 2; ++k) groups.push_back(&out.dims[k]);
  groups.push_back(prefer_b ? &n : &m);
  groups.push_back(&kx);
  groups.push_back(prefer_b ? &m : &n);
  dedupe(groups);
  if (!splits(input_type(r, 0).shape[d.a_k], kx, r.mesh)) kx.clear();
  out.dims[ro - 2] = m;
  out.dims[ro - 1] = n;
  out = fit_to(out, oshape, r.mesh);
  RuleOutput o = with_inputs_default(r);
  auto operand = [&](int i, int row, int col, const Axes& rows, const Axes& cols) {
    ShardingSpec s = project(out, oshape, input_type(r, i).shape);  // batch dims
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
    o.in[bias_input] = project(out, oshape, input_type(r, bias_input).shape);
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
      if (!r.free[i]) c += reshard_cost(r.in[i], o.in[i], input_type(r, i), r.mesh);
    return c;
  };
  RuleOutput a = matmul_choice(r, d, bias_input, false), b = matmul_choice(r, d, bias_input, true);
  return cost(b) < cost(a) ? b : a;
}

RuleOutput matmul_propagate(const RuleInput& r) {
  int ra = input_type(r, 0).ndim(), rb = input_type(r, 1).ndim();
  if (ra < 2 || rb < 2) return replicated_rule().propagate(r);  // vector products: rare, kept simple
  return matmul_like(r, {ra - 2, ra - 1, rb - 2, rb - 1}, -1);
}

RuleOutput gemm_propagate(const RuleInput& r) {
  bool ta = r.node.attrs.get_int_or("transA", 0) != 0, tb = r.node.attrs.get_int_or("transB", 0) != 0;
  return matmul_like(r, {ta ? 1 : 0, ta ? 0 : 1, tb ? 1 : 0, tb ? 0 : 1}, 2);
}

// A 2-D B (a weight matrix): rows or columns; it contracts its rows (its columns when Gemm's transB).
WeightSplits matrix_weight_splits(const OpNode& n) {
  if (n.inputs[1].type().ndim() != 2) return {};
  return {1, {0, 1}, n.attrs.get_int_or("transB", 0) != 0 ? 1 : 0};
}

// Every output element: k multiply-adds, plus `epilogue` ops (Gemm's beta * C); rows: all output dims but the last.
OpCost contraction_cost(const TensorType& out, double k, double epilogue) {
  double outputs = static_cast<double>(out.numel());
  OpCost c;
  c.macs = outputs * k;
  c.flops = 2 * c.macs + epilogue * outputs;
  c.rows = rows_without(out, out.ndim() - 1);
  return c;
}

void register_gemm() {
  OpDef d;
  d.name = "Gemm";
  d.doc = "alpha * A' B' + beta * C, A' = transA ? A^T : A (likewise B'), C broadcast to [M, N]";
  d.min_inputs = 2;
  d.max_inputs = 3;
  d.attrs = {{"alpha", AttrKind::Float, 1.0}, {"beta", AttrKind::Float, 1.0}, {"transA", AttrKind::Int, int64_t(0)}, {"transB", AttrKind::Int, int64_t(0)}};
  d.pattern = Pattern::OutputFusable;
  d.infer = [](const OpCall& call) {
    GemmDims g = gemm_dims(call);
    return std::vector<TensorType>{TensorType{{g.M, g.N}, call.input_types[0].dtype}};
  };
  d.compute = [](const OpCall& call, const std::vector<te::Tensor>& in) {
    te::Tensor C = in.size() > 2 ? in[2] : te::Tensor();
    return std::vector<te::Tensor>{ops::gemm(in[0], in[1], C, call.attrs.get_float("alpha"), call.attrs.get_float("beta"), call.attrs.get_int("transA") != 0,
                                             call.attrs.get_int("transB") != 0, "gemm")};
  };
  d.sharding = {"gemm", gemm_propagate, nullptr, matrix_weight_splits};
  d.cost = [](const OpCall& call, const std::vector<TensorType>& out) {
    bool ta = call.attrs.get_int_or("transA", 0) != 0;
    const TensorType& a = call.input_types[0];
    return contraction_cost(out[0], static_cast<double>(ta ? a.shape.front() : a.shape.back()), call.has_input(2) ? 2.0 : 0.0);
  };
  d.gradient = gemm_grad;
  register_op(std::move(d));
}

Shape matmul_out(const OpCall& call) {
  same_dtype(call, 0, 1, "B");
  return matmul_dims(call, call.input_types[0].shape, call.input_types[1].shape);
}

void register_matmul() {
  OpDef d;
  d.name = "MatMul";
  d.doc = "numpy matmul: 1-D operands promoted, batch dimensions broadcast";
  d.min_inputs = d.max_inputs = 2;
  d.pattern = Pattern::OutputFusable;
  d.infer = [](const OpCall& call) { return std::vector<TensorType>{TensorType{matmul_out(call), call.input_types[0].dtype}}; };
  d.compute = [](const OpCall&, const std::vector<te::Tensor>& in) { return std::vector<te::Tensor>{ops::matmul_nd(in[0], in[1], "matmul")}; };
  d.sharding = {"matmul", matmul_propagate, nullptr, matrix_weight_splits};
  d.cost = [](const OpCall& call, const std::vector<TensorType>& out) {
    return contraction_cost(out[0], static_cast<double>(call.input_types[0].shape.back()), 0.0);
  };
  d.gradient = matmul_grad;
  register_op(std::move(d));
}

const bool registered = [] {
  register_conv();
  register_gemm();
  register_matmul();
  return true;
}();

}  // namespace
}  // namespace kiln::graph::ops_detail
