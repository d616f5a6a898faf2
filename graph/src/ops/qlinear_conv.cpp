// The ONNX quantized convolutions, QLinearConv and ConvInteger: Conv's
// window attributes and groups, the arithmetic in the integers a numpy
// reference uses:
//   ConvInteger  int32 sums of (x - x_zp) * (w - w_zp[k])          (padding adds 0)
//   QLinearConv  y = saturate(round(float32(acc + B[k]) * (x_scale * w_scale[k] / y_scale)) + y_zp)
// x's zero point and y's parameters are per tensor; w's per tensor or per
// output channel (one value per M). On VNNI targets use_int8_conv puts both
// on kiln.QConvNCHWcI8; this is the portable form.
#include "kiln/ops/graph_nn.h"
#include "op_helpers.h"
#include "quantize_helpers.h"
#include "window_attrs.h"

namespace kiln::graph::ops_detail {
namespace {

const DataType I32 = DataType::Int(32), F32 = DataType::Float(32);

bool byte_dtype(DataType t) { return t == DataType::Int(8) || t == DataType::UInt(8); }

std::vector<Expr> exprs(const std::vector<Var>& i) { return std::vector<Expr>(i.begin(), i.end()); }

struct QConvPlaces {
  int x, w, x_zero, w_zero, w_scale;  // input positions (-1: the op has none)
};
const QConvPlaces kConvInteger{0, 1, 2, 3, -1}, kQLinear{0, 3, 2, 5, 4};

// A parameter: a scalar (per tensor) or, where `per_channel`, [M]; fails naming it otherwise.
void check_param(const OpCall& c, int i, const std::string& what, bool per_channel, const Dim& M) {
  if (i < 0 || !c.has_input(i)) return;
  const TensorType& t = c.input_types[i];
  if (t.ndim() == 0 || (t.ndim() == 1 && t.shape[0] == Dim(1))) return;
  if (per_channel && t.ndim() == 1 && t.shape[0] == M) return;
  c.fail(what + " has shape " + shape_to_string(t.shape) + "; it must be a scalar" +
         (per_channel ? " or one value per output channel [" + M.str() + "]" : " (per tensor)"));
}

std::vector<ops::WindowDim> qconv_windows(const OpCall& c, const QConvPlaces& at, int64_t* group) {
  const TensorType &x = c.input_types[at.x], &w = c.input_types[at.w];
  if (!byte_dtype(x.dtype) || !byte_dtype(w.dtype)) c.fail("x " + x.str() + " and w " + w.str() + " must be uint8 or int8");
  if (x.ndim() < 3 || x.ndim() > 5 || w.ndim() != x.ndim()) c.fail("x " + x.str() + " and w " + w.str() + " must be [N, C, spatial...] and [M, C/group, kernel...]");
  if (!w.shape.is_static() || !x.shape[1].is_static()) c.fail("w " + w.str() + " and the channels of x must be static");
  *group = c.attrs.get_int("group");
  int64_t C = x.shape[1].value(), M = w.shape[0].value();
  if (*group < 1 || C % *group != 0 || M % *group != 0 || w.shape[1].value() * *group != C)
    c.fail("group " + std::to_string(*group) + " does not fit x " + x.str() + " and w " + w.str() + " (w is [M, C/group, kernel...])");
  check_param(c, at.x_zero, "x_zero_point", false, w.shape[0]);
  check_param(c, at.w_zero, "w_zero_point", true, w.shape[0]);
  check_zero_point(c, at.x_zero, x.dtype, "x_zero_point");
  check_zero_point(c, at.w_zero, w.dtype, "w_zero_point");
  std::vector<int64_t> kernel;
  for (int k = 2; k < w.ndim(); ++k) kernel.push_back(w.shape[k].value());
  if (c.attrs.has("kernel_shape") && !c.attrs.get_ints("kernel_shape").empty() && c.attrs.get_ints("kernel_shape") != kernel)
    c.fail("kernel_shape " + attr_to_string(c.attrs.get_ints("kernel_shape")) + " is not w's " + attr_to_string(kernel));
  // resolve_windows reads input 0 (x in both ops).
  return resolve_windows(c, kernel, false);
}

Shape qconv_shape(const OpCall& c, const QConvPlaces& at) {
  int64_t group = 1;
  std::vector<ops::WindowDim> dims = qconv_windows(c, at, &group);
  Shape out = {c.input_types[at.x].shape[0], c.input_types[at.w].shape[0]};
  for (const ops::WindowDim& d : dims) out.push_back(out_dim(d));
  return out;
}

// int32(v) - zero point, per tensor, or per dim-0 index (the weights' output channels).
te::Tensor minus_zero(const te::Tensor& v, const te::Tensor& z, const std::string& name) {
  return te::compute(v.shape(), [&](const std::vector<Var>& i) {
    Expr a = cast(I32, v(exprs(i)));
    return z.defined() ? a - cast(I32, param_at(z, i[0])) : a;
  }, name);
}

te::Tensor integer_conv(const OpCall& c, const QConvPlaces& at, const std::vector<te::Tensor>& in) {
  int64_t group = 1;
  std::vector<ops::WindowDim> dims = qconv_windows(c, at, &group);
  auto opt = [&](int i) { return i >= 0 && c.has_input(i) ? in[i] : te::Tensor(); };
  te::Tensor x = minus_zero(in[at.x], opt(at.x_zero), "x_shifted"), w = minus_zero(in[at.w], opt(at.w_zero), "w_shifted");
  return ops::conv_nchw(x, w, dims, group, "conv_integer");
}

OpCost qconv_cost(const OpCall& c, const QConvPlaces& at, const std::vector<TensorType>& out, double epilogue) {
  const TensorType& w = c.input_types[at.w];
  double outputs = static_cast<double>(out[0].numel());
  OpCost k;
  k.macs = outputs * static_cast<double>(w.numel() / std::max<int64_t>(w.shape[0].value(), 1));
  k.flops = 2 * k.macs + epilogue * outputs;
  k.rows = outputs / static_cast<double>(std::max<int64_t>(out[0].shape[1].value(), 1));
  return k;
}

std::vector<AttrSpec> conv_attrs() {
  return {{"auto_pad", AttrKind::String, std::string("NOTSET")}, {"dilations", AttrKind::Ints, std::vector<int64_t>{}},
          {"group", AttrKind::Int, int64_t(1)},                   {"kernel_shape", AttrKind::Ints, std::vector<int64_t>{}},
          {"pads", AttrKind::Ints, std::vector<int64_t>{}},        {"strides", AttrKind::Ints, std::vector<int64_t>{}}};
}

OpDef conv_integer_def() {
  OpDef d;
  d.name = "ConvInteger";
  d.doc = "int32 convolution of (x - x_zero_point) and (w - w_zero_point); uint8/int8 inputs, w's zero point per tensor or per output channel";
  d.min_inputs = 2;
  d.max_inputs = 4;
  d.attrs = conv_attrs();
  d.pattern = Pattern::OutputFusable;
  d.sharding = replicated_rule();
  d.infer = [](const OpCall& c) { return std::vector<TensorType>{{qconv_shape(c, kConvInteger), I32}}; };
  d.compute = [](const OpCall& c, const std::vector<te::Tensor>& in) { return std::vector<te::Tensor>{integer_conv(c, kConvInteger, in)}; };
  d.cost = [](const OpCall& c, const std::vector<TensorType>& out) { return qconv_cost(c, kConvInteger, out, 0); };
  return d;
}

// QLinearConv(x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B?).
OpDef qlinear_conv_def() {
  OpDef d;
  d.name = "QLinearConv";
  d.doc = "quantized convolution: int32 accumulation plus the int32 bias B, requantized to y's scale and zero point (w per tensor or per output channel)";
  d.min_inputs = 8;
  d.max_inputs = 9;
  d.attrs = conv_attrs();
  d.pattern = Pattern::OutputFusable;
  d.sharding = replicated_rule();
  d.infer = [](const OpCall& c) {
    Shape out = qconv_shape(c, kQLinear);
    const Dim& M = c.input_types[3].shape[0];
    DataType y = c.input_types[7].dtype;
    if (!byte_dtype(y)) c.fail("y_zero_point has dtype " + y.str() + "; it must be uint8 or int8 (the output's dtype)");
    check_param(c, 1, "x_scale", false, M);
    check_param(c, 4, "w_scale", true, M);
    check_param(c, 6, "y_scale", false, M);
    check_param(c, 7, "y_zero_point", false, M);
    for (auto [i, what] : {std::pair<int, const char*>{1, "x_scale"}, {4, "w_scale"}, {6, "y_scale"}}) check_scale(c, i, what);
    if (c.has_input(8)) {
      const TensorType& b = c.input_types[8];
      if (b.dtype != I32 || b.ndim() != 1 || !(b.shape[0] == M)) c.fail("B " + b.str() + " must be int32 [" + M.str() + "], one per output channel");
    }
    return std::vector<TensorType>{{out, y}};
  };
  d.compute = [](const OpCall& c, const std::vector<te::Tensor>& in) {
    te::Tensor acc = integer_conv(c, kQLinear, in);
    DataType q = c.input_types[7].dtype;
    te::Tensor B = c.has_input(8) ? in[8] : te::Tensor();
    return std::vector<te::Tensor>{te::compute(acc.shape(), [&](const std::vector<Var>& i) {
      Expr a = acc(exprs(i));
      if (B.defined()) a = a + B(std::vector<Expr>{i[1]});
      Expr multiplier = param_at(in[1], Expr(0)) * param_at(in[4], i[1]) / param_at(in[6], Expr(0));
      return saturate_to(q, cast(F32, a) * multiplier, param_at(in[7], Expr(0)));
    }, "requantize")};
  };
  d.cost = [](const OpCall& c, const std::vector<TensorType>& out) { return qconv_cost(c, kQLinear, out, 4); };
  return d;
}

const bool registered = [] {
  register_op(conv_integer_def());
  register_op(qlinear_conv_def());
  return true;
}();

}  // namespace
}  // namespace kiln::graph::ops_detail
