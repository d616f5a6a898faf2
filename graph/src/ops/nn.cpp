// The heavy operators: Conv, Gemm, MatMul (pattern OutputFusable: their
// elementwise consumers fuse as the reduction's epilogue).
#include <algorithm>

#include "kiln/graph/autodiff.h"
#include "kiln/ops/graph_nn.h"

#include "kiln/support/error.h"
#include "op_helpers.h"
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
  std::vector<int64_t> out = {x.shape[0], call.input_types[1].shape[0]};
  for (const ops::WindowDim& d : g.dims) out.push_back(d.out);
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
  d.flops = [](const OpCall& call) {
    ConvGeometry g = conv_geometry(call);
    const TensorType& w = call.input_types[1];
    double outputs = static_cast<double>(call.input_types[0].shape[0] * w.shape[0]);
    for (const ops::WindowDim& dim : g.dims) outputs *= static_cast<double>(dim.out);
    double per_output = 2.0 * static_cast<double>(w.numel() / w.shape[0]);
    return outputs * (per_output + (call.has_input(2) ? 1.0 : 0.0));
  };
  d.gradient = conv_grad;
  register_op(std::move(d));
}

// ---------------------------------------------------------------- Gemm, MatMul

struct GemmDims {
  int64_t M, K, N;
};

GemmDims gemm_dims(const OpCall& call) {
  const TensorType &a = call.input_types[0], &b = call.input_types[1];
  if (a.ndim() != 2 || b.ndim() != 2) call.fail("A " + shape_str(a) + " and B " + shape_str(b) + " must be 2-D (use MatMul for batches)");
  same_dtype(call, 0, 1, "B");
  bool ta = call.attrs.get_int("transA") != 0, tb = call.attrs.get_int("transB") != 0;
  GemmDims g{ta ? a.shape[1] : a.shape[0], ta ? a.shape[0] : a.shape[1], tb ? b.shape[0] : b.shape[1]};
  int64_t kb = tb ? b.shape[1] : b.shape[0];
  if (g.K != kb)
    call.fail(std::string("A") + (ta ? "^T" : "") + " is " + std::to_string(g.M) + "x" + std::to_string(g.K) + " but B" + (tb ? "^T" : "") + " is " +
              std::to_string(kb) + "x" + std::to_string(g.N) + " (A " + shape_str(a) + ", B " + shape_str(b) + ", transA=" + std::to_string(ta) +
              ", transB=" + std::to_string(tb) + ")");
  if (call.has_input(2)) {
    const TensorType& c = call.input_types[2];
    same_dtype(call, 0, 2, "C");
    bool ok = c.ndim() <= 2;
    try {
      ok = ok && ops::broadcast_shape(c.shape, {g.M, g.N}) == std::vector<int64_t>{g.M, g.N};
    } catch (const Error&) {
      ok = false;
    }
    if (!ok) call.fail("C " + shape_str(c) + " does not broadcast to the output [" + std::to_string(g.M) + ", " + std::to_string(g.N) + "]");
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
    out[1] = b.reshape(b.op("MatMul", {swap_last(as_rows(A)), as_rows(G)}), b.in_type(1).shape);
  } else if (b.wants(1)) {
    out[1] = b.reshape(b.sum_to(b.op("MatMul", {swap_last(A), G}), bs), b.in_type(1).shape);
  }
  return out;
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
  d.flops = [](const OpCall& call) {
    GemmDims g = gemm_dims(call);
    double mn = static_cast<double>(g.M * g.N);
    return 2.0 * mn * static_cast<double>(g.K) + (call.has_input(2) ? 2.0 * mn : 0.0);
  };
  d.gradient = gemm_grad;
  register_op(std::move(d));
}

std::vector<int64_t> matmul_out(const OpCall& call) {
  same_dtype(call, 0, 1, "B");
  try {
    return ops::matmul_shape(call.input_types[0].shape, call.input_types[1].shape);
  } catch (const Error& e) {
    call.fail(e.what());
  }
}

void register_matmul() {
  OpDef d;
  d.name = "MatMul";
  d.doc = "numpy matmul: 1-D operands promoted, batch dimensions broadcast";
  d.min_inputs = d.max_inputs = 2;
  d.pattern = Pattern::OutputFusable;
  d.infer = [](const OpCall& call) { return std::vector<TensorType>{TensorType{matmul_out(call), call.input_types[0].dtype}}; };
  d.compute = [](const OpCall&, const std::vector<te::Tensor>& in) { return std::vector<te::Tensor>{ops::matmul_nd(in[0], in[1], "matmul")}; };
  d.flops = [](const OpCall& call) {
    double outputs = 1;
    for (int64_t s : matmul_out(call)) outputs *= static_cast<double>(s);
    return 2.0 * outputs * static_cast<double>(call.input_types[0].shape.back());
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
