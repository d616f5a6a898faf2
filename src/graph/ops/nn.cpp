// The heavy operators: Conv, Gemm, MatMul (pattern OutputFusable: their
// elementwise consumers fuse as the reduction's epilogue).
#include "kiln/ops/graph_nn.h"

#include "kiln/support/error.h"
#include "op_helpers.h"
#include "window_attrs.h"

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
    if (ops::prefer_channels_last(g.group, call.input_types[1].shape[0]))
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
