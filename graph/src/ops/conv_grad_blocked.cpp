// The gradients of kiln.ConvNCHWc (group 1) in the blocked layout, for
// training graphs rewritten to NCHWc: kernels of their own
// (ops/conv_grad_nchwc.h), not convolutions of transposed NCHW operands.
//
//   kiln.ConvGradInputNCHWc(dY [N, ceil(K/kb), OH, OW, kb], W [K, C, KH, KW])
//       -> dX [N, ceil(C/cb), H, W, cb]
//     W may instead be the forward kiln.ConvNCHWc's packed weights
//     [ceil(K/kb), ceil(C/cb), KH, KW, cb, kb] (padded channels zero; cheaper to repack).
//     attributes: strides [sh, sw], pads [top, left, bottom, right],
//     dilations [dh, dw] (the forward's, resolved: no auto_pad), group (1, or a
//     depthwise conv's C: W [C, 1, KH, KW], dY and dX in the same whole blocks),
//     input_shape [N, C, H, W] (the forward input's plain shape: true channels),
//     block cb (0: dY's kb). W is the plain weights; dX's padded channels are 0,
//     dY's padded channels meet zero weights.
//
//   kiln.ConvGradWeightNCHWc(X [N, ceil(C/cb), H, W, cb], dY [N, ceil(K/kb), OH, OW, kb])
//       -> dW [K, C, KH, KW] (plain, X's dtype), or with packed=1 in the
//          forward kiln.ConvNCHWc's weight layout [ceil(K/kb), ceil(C/cb), KH, KW, cb, kb]
//          (padded channels zero), for an optimizer that keeps the weights packed
//     attributes: strides, pads, dilations, group (1, or C: depthwise, X and dY in the same blocks) as above,
//     weight_shape [K, C, KH, KW] (true channel counts and the kernel), packed (0).
//
// A blocked tensor may hold more channels than it has (its last block
// padded, as kiln.LayoutTransform pads it); the padded channels are never
// read into a true channel's gradient.
#include "kiln/ops/conv_grad_nchwc.h"
#include "op_helpers.h"

namespace kiln::graph::ops_detail {
namespace {

std::vector<AttrSpec> grad_specs() {
  return {{"strides", AttrKind::Ints, std::vector<int64_t>{1, 1}},
          {"pads", AttrKind::Ints, std::vector<int64_t>{0, 0, 0, 0}},
          {"dilations", AttrKind::Ints, std::vector<int64_t>{1, 1}},
          {"group", AttrKind::Int, int64_t(1)}};
}

ops::Conv2dParams params_of(const OpCall& c) {
  const auto &s = c.attrs.get_ints("strides"), &p = c.attrs.get_ints("pads"), &d = c.attrs.get_ints("dilations");
  if (s.size() != 2 || p.size() != 4 || d.size() != 2) c.fail("needs 2 strides, 4 pads [top, left, bottom, right] and 2 dilations");
  if (s[0] < 1 || s[1] < 1 || d[0] < 1 || d[1] < 1 || p[0] < 0 || p[1] < 0 || p[2] < 0 || p[3] < 0)
    c.fail("strides and dilations must be positive and pads non-negative, got strides " + attr_to_string(s) + ", dilations " + attr_to_string(d) + ", pads " +
           attr_to_string(p));
  ops::Conv2dParams q;
  q.stride_h = static_cast<int>(s[0]), q.stride_w = static_cast<int>(s[1]);
  q.pad_top = static_cast<int>(p[0]), q.pad_left = static_cast<int>(p[1]), q.pad_bottom = static_cast<int>(p[2]), q.pad_right = static_cast<int>(p[3]);
  q.dilation_h = static_cast<int>(d[0]), q.dilation_w = static_cast<int>(d[1]);
  return q;
}

// The group: 1, or a depthwise conv's C (W [C, 1, KH, KW], C in whole blocks of b); others stay in NCHW.
int64_t group_of(const OpCall& c, int64_t C, int64_t w1, int64_t blocks, int64_t b) {
  const int64_t g = c.attrs.get_int("group");
  if (g == 1) return 1;
  if (g != C || w1 != 1 || blocks * b != C)
    c.fail("group " + std::to_string(g) + " is supported in the blocked layout only as a depthwise conv's (group = channels = " + std::to_string(C) +
           ", weights [C, 1, KH, KW], the channels in whole blocks of " + std::to_string(b) + "); use kiln.ConvGradInput / kiln.ConvGradWeight (NCHW)");
  return g;
}

int64_t out_extent(int64_t in, int64_t pads, int64_t kernel, int64_t dilation, int64_t stride) { return (in + pads - dilation * (kernel - 1) - 1) / stride + 1; }

// The static shape of input i, rank 5 (a blocked tensor) or as given.
std::vector<int64_t> static_input(const OpCall& c, int i, int rank, const char* what) {
  c.expect_rank(i, rank);
  if (!c.input_types[i].is_static()) c.fail(std::string(what) + " " + c.input_types[i].str() + " must have a static shape");
  std::vector<int64_t> s;
  for (const Dim& d : c.input_types[i].shape) s.push_back(d.value());
  return s;
}

void check_blocks(const OpCall& c, const char* what, const std::vector<int64_t>& t, int64_t channels) {
  if (channels < 1 || t[1] * t[4] < channels || (t[1] - 1) * t[4] >= channels)
    c.fail(std::string(what) + " " + attr_to_string(t) + " does not hold " + std::to_string(channels) + " channels in blocks of " + std::to_string(t[4]) +
           " (ceil(channels / block) blocks)");
}

// dY's spatial extents against the conv of an H x W input by a KH x KW kernel.
void check_output(const OpCall& c, const ops::Conv2dParams& p, const std::vector<int64_t>& dy, int64_t H, int64_t W, int64_t KH, int64_t KW) {
  const int64_t oh = out_extent(H, p.pad_top + p.pad_bottom, KH, p.dilation_h, p.stride_h), ow = out_extent(W, p.pad_left + p.pad_right, KW, p.dilation_w, p.stride_w);
  if (oh < 1 || ow < 1) c.fail("the " + std::to_string(KH) + "x" + std::to_string(KW) + " kernel is larger than the padded " + std::to_string(H) + "x" + std::to_string(W) + " input");
  if (dy[2] != oh || dy[3] != ow)
    c.fail("dY " + attr_to_string(dy) + " is not the output of the " + std::to_string(KH) + "x" + std::to_string(KW) + " conv over " + std::to_string(H) + "x" +
           std::to_string(W) + " (expected " + std::to_string(oh) + "x" + std::to_string(ow) + ")");
}

int64_t block_of(const OpCall& c) {
  const int64_t b = c.attrs.get_int("block");
  if (b < 0) c.fail("block must be positive (0: dY's block), got " + std::to_string(b));
  return b > 0 ? b : c.input_types[0].shape[4].value();
}

std::vector<TensorType> infer_grad_input(const OpCall& c) {
  ops::Conv2dParams p = params_of(c);
  std::vector<int64_t> dy = static_input(c, 0, 5, "dY"), w = static_input(c, 1, c.input_types[1].ndim() == 6 ? 6 : 4, "W");
  const auto& in = c.attrs.get_ints("input_shape");
  if (in.size() != 4) c.fail("input_shape must be the forward input's plain shape [N, C, H, W], got " + attr_to_string(in));
  if (w.size() == 6) {  // the forward's packed weights [K/kb, C/cb, KH, KW, cb, kb]
    const int64_t cb = block_of(c);
    if (w[0] != dy[1] || w[5] != dy[4] || w[4] != cb || w[1] != (in[1] + cb - 1) / cb)
      c.fail("packed W " + attr_to_string(w) + " does not match dY " + attr_to_string(dy) + " and input_shape " + attr_to_string(in) + " in blocks of " + std::to_string(cb));
    w = {w[0] * w[5], in[1], w[2], w[3]};
  }
  if (c.attrs.get_int("group") != 1) {  // depthwise: dX in dY's blocks
    group_of(c, in[1], w[1], dy[1], dy[4]);
    if (w.size() != 4 || w[0] != in[1] || in[0] != dy[0] || block_of(c) != dy[4])
      c.fail("depthwise: W " + attr_to_string(w) + ", dY " + attr_to_string(dy) + " and input_shape " + attr_to_string(in) +
             " must be [C, 1, KH, KW], [N, C/b, OH, OW, b] and [N, C, H, W], with block b (0)");
    check_output(c, p, dy, in[2], in[3], w[2], w[3]);
    return {TensorType{{in[0], dy[1], in[2], in[3], dy[4]}, c.input_types[0].dtype}};
  }
  if (in[0] != dy[0] || in[1] != w[1]) c.fail("input_shape " + attr_to_string(in) + ", dY " + attr_to_string(dy) + " and W " + attr_to_string(w) + " disagree in batch or input channels");
  check_blocks(c, "dY", dy, w[0]);
  check_output(c, p, dy, in[2], in[3], w[2], w[3]);
  const int64_t cb = block_of(c);
  return {TensorType{{in[0], (in[1] + cb - 1) / cb, in[2], in[3], cb}, c.input_types[0].dtype}};
}

std::vector<TensorType> infer_grad_weight(const OpCall& c) {
  ops::Conv2dParams p = params_of(c);
  std::vector<int64_t> x = static_input(c, 0, 5, "X"), dy = static_input(c, 1, 5, "dY");
  const auto& ws = c.attrs.get_ints("weight_shape");
  if (ws.size() != 4) c.fail("weight_shape must be [K, C, KH, KW], got " + attr_to_string(ws));
  if (x[0] != dy[0]) c.fail("X " + attr_to_string(x) + " and dY " + attr_to_string(dy) + " differ in batch");
  if (c.input_types[0].dtype != c.input_types[1].dtype) c.fail("X and dY differ in dtype");
  if (c.attrs.get_int("group") != 1) {  // depthwise: X and dY in the same blocks, dW plain
    group_of(c, ws[1] == 1 ? ws[0] : ws[1], ws[1], x[1], x[4]);
    if (x[1] != dy[1] || x[4] != dy[4] || c.attrs.get_int("packed") != 0)
      c.fail("depthwise: X " + attr_to_string(x) + " and dY " + attr_to_string(dy) + " must be in the same blocks, and packed 0");
    check_output(c, p, dy, x[2], x[3], ws[2], ws[3]);
    return {TensorType{{ws[0], ws[1], ws[2], ws[3]}, c.input_types[0].dtype}};
  }
  check_blocks(c, "X", x, ws[1]);
  check_blocks(c, "dY", dy, ws[0]);
  if (ws[2] < 1 || ws[3] < 1) c.fail("the kernel extents of weight_shape " + attr_to_string(ws) + " must be positive");
  check_output(c, p, dy, x[2], x[3], ws[2], ws[3]);
  const int64_t packed = c.attrs.get_int("packed");
  if (packed != 0 && packed != 1) c.fail("packed must be 0 (plain [K, C, KH, KW]) or 1 (the forward's packed layout), got " + std::to_string(packed));
  if (packed) return {TensorType{{dy[1], x[1], ws[2], ws[3], x[4], dy[4]}, c.input_types[0].dtype}};
  return {TensorType{{ws[0], ws[1], ws[2], ws[3]}, c.input_types[0].dtype}};
}

// N x OH x OW x K x C x KH x KW multiply-adds, for either gradient.
OpCost grad_cost(double n, double pixels, double K, double C, double taps) {
  OpCost k;
  k.macs = n * pixels * K * C * taps;
  k.flops = 2 * k.macs;
  k.rows = n * pixels;
  return k;
}

const bool registered = [] {
  OpDef gi;
  gi.name = "kiln.ConvGradInputNCHWc";
  gi.doc = "dX [N, C/cb, H, W, cb] of a blocked conv (group 1) from dY [N, K/kb, OH, OW, kb] and plain W [K, C, KH, KW]: "
           "a transposed convolution split by stride phase (W also as ConvNCHWc's packed [K/kb, C/cb, KH, KW, cb, kb]); input_shape [N, C, H, W], block cb (0: dY's)";
  gi.min_inputs = gi.max_inputs = 2;
  gi.attrs = grad_specs();
  gi.attrs.push_back({"input_shape", AttrKind::Ints, std::nullopt});
  gi.attrs.push_back({"block", AttrKind::Int, int64_t(0)});
  gi.pattern = Pattern::OutputFusable;
  gi.infer = infer_grad_input;
  gi.compute = [](const OpCall& c, const std::vector<te::Tensor>& in) {
    const auto& s = c.attrs.get_ints("input_shape");
    if (c.attrs.get_int("group") != 1) return std::vector<te::Tensor>{ops::depthwise_nchwc_grad_input(in[0], in[1], params_of(c), s[2], s[3])};
    return std::vector<te::Tensor>{ops::conv2d_nchwc_grad_input(in[0], in[1], params_of(c), s[2], s[3], block_of(c), "conv_grad_input", s[1])};
  };
  gi.cost = [](const OpCall& c, const std::vector<TensorType>&) {
    const auto& dy = c.input_types[0].shape;
    const auto& w = c.input_types[1].shape;
    const double C = double(c.attrs.get_ints("input_shape")[1]) / double(c.attrs.get_int("group")),
                 K = w.size() == 6 ? double(w[0].value() * w[5].value()) : double(w[0].value());
    return grad_cost(double(dy[0].value()), double(dy[2].value() * dy[3].value()), K, C, double(w[2].value() * w[3].value()));
  };
  gi.sharding = replicated_rule();  // made after distribution, as the forward's blocked convs
  register_op(gi);

  OpDef gw;
  gw.name = "kiln.ConvGradWeightNCHWc";
  gw.doc = "dW [K, C, KH, KW] of a blocked conv (group 1) from X [N, C/cb, H, W, cb] and dY [N, K/kb, OH, OW, kb]: "
           "a reduction over the batch and the output pixels; weight_shape [K, C, KH, KW]; packed 1: dW in ConvNCHWc's weight layout";
  gw.min_inputs = gw.max_inputs = 2;
  gw.attrs = grad_specs();
  gw.attrs.push_back({"weight_shape", AttrKind::Ints, std::nullopt});
  gw.attrs.push_back({"packed", AttrKind::Int, int64_t(0)});
  gw.pattern = Pattern::OutputFusable;
  gw.infer = infer_grad_weight;
  gw.compute = [](const OpCall& c, const std::vector<te::Tensor>& in) {
    const auto& ws = c.attrs.get_ints("weight_shape");
    if (c.attrs.get_int("group") != 1) return std::vector<te::Tensor>{ops::depthwise_nchwc_grad_weight(in[0], in[1], params_of(c), ws[2], ws[3])};
    return std::vector<te::Tensor>{ops::conv2d_nchwc_grad_weight(in[0], in[1], params_of(c), ws[0], ws[1], ws[2], ws[3], "conv_grad_weight",
                                                                 c.attrs.get_int("packed") == 1)};
  };
  gw.cost = [](const OpCall& c, const std::vector<TensorType>&) {
    const auto& dy = c.input_types[1].shape;
    const auto& ws = c.attrs.get_ints("weight_shape");
    return grad_cost(double(dy[0].value()), double(dy[2].value() * dy[3].value()), double(ws[0]), double(ws[1]), double(ws[2] * ws[3]));
  };
  gw.sharding = replicated_rule();
  register_op(gw);
  return true;
}();

}  // namespace
}  // namespace kiln::graph::ops_detail
