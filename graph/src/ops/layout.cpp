// kiln's own operators of the blocked-channel layout, made by the
// alter_conv_layout pass (never imported): the layout change and the
// blocked convolutions. Attributes are resolved already (no auto_pad).
#include "kiln/ops/layout.h"

#include "op_helpers.h"

namespace kiln::graph::ops_detail {
namespace {

ops::Conv2dParams conv_params(const Attrs& a) {
  const auto& s = a.get_ints("strides");
  const auto& p = a.get_ints("pads");
  const auto& d = a.get_ints("dilations");
  ops::Conv2dParams c;
  c.stride_h = static_cast<int>(s[0]), c.stride_w = static_cast<int>(s[1]);
  c.pad_top = static_cast<int>(p[0]), c.pad_left = static_cast<int>(p[1]), c.pad_bottom = static_cast<int>(p[2]), c.pad_right = static_cast<int>(p[3]);
  c.dilation_h = static_cast<int>(d[0]), c.dilation_w = static_cast<int>(d[1]);
  return c;
}

// floor((in + pad - span) / stride) + 1; symbolic when `in` is (a dynamic image size).
Dim out_extent(const Dim& in, int64_t pad, int64_t kernel, int64_t dilation, int64_t stride) {
  return dim_add(dim_floordiv(dim_add(in, pad - dilation * (kernel - 1) - 1), stride), 1);
}

// What the blocked convolutions share: two inputs, resolved window attributes, output-fusable.
OpDef blocked_conv_def(const std::string& name, const std::string& doc) {
  OpDef d;
  d.name = name;
  d.doc = doc;
  d.min_inputs = d.max_inputs = 2;
  d.attrs = {{"strides", AttrKind::Ints, std::vector<int64_t>{1, 1}},
             {"pads", AttrKind::Ints, std::vector<int64_t>{0, 0, 0, 0}},
             {"dilations", AttrKind::Ints, std::vector<int64_t>{1, 1}}};
  d.pattern = Pattern::OutputFusable;
  d.sharding = replicated_rule();  // made after distribution (alter_conv_layout)
  return d;
}

void check_conv_attrs(const OpCall& c) {
  if (c.attrs.get_ints("strides").size() != 2 || c.attrs.get_ints("pads").size() != 4 || c.attrs.get_ints("dilations").size() != 2)
    c.fail("needs 2 strides, 4 pads and 2 dilations");
}

// [N, K/kb, OH, OW, kb] from the blocked input and the kernel extents.
TensorType conv_out(const OpCall& c, int64_t k_blocks, int64_t kb, int64_t KH, int64_t KW) {
  check_conv_attrs(c);
  const auto& x = c.input_types[0].shape;
  ops::Conv2dParams p = conv_params(c.attrs);
  Dim OH = out_extent(x[2], p.pad_top + p.pad_bottom, KH, p.dilation_h, p.stride_h);
  Dim OW = out_extent(x[3], p.pad_left + p.pad_right, KW, p.dilation_w, p.stride_w);
  if ((OH.is_static() && OH.value() <= 0) || (OW.is_static() && OW.value() <= 0)) c.fail("the kernel is larger than the padded input");
  return TensorType{{x[0], k_blocks, OH, OW, kb}, c.input_types[0].dtype};
}

// A [..., M, K] times panels [N/nb, K, nb]: [..., M, N].
Shape packed_b_out(const Shape& a, const Shape& b) {
  Shape out(a.begin(), a.end() - 1);
  out.push_back(dim_mul(b[0], b[2]));
  return out;
}

// The multiply-adds of a packed-B matmul: each row of A meets every panel element, with
// `products` per element (2 for bfloat16 pairs: one 32-bit word holds two values along K).
OpCost packed_b_cost(const OpCall& c, double products) {
  OpCost k;
  k.rows = static_cast<double>(c.input_types[0].numel() / c.input_types[0].shape.back());
  k.macs = products * k.rows * static_cast<double>(c.input_types[1].numel());
  k.flops = 2 * k.macs;
  return k;
}

const bool registered = [] {
  OpDef lt;
  lt.name = "kiln.LayoutTransform";
  lt.doc = "changes the channel blocking: src_block/dst_block 0 is NCHW, b is [N, ceil(C/b), H, W, b]; "
           "channels (0: all the input holds) is C where a blocked side pads its last block";
  lt.attrs = {{"src_block", AttrKind::Int, std::nullopt}, {"dst_block", AttrKind::Int, std::nullopt}, {"channels", AttrKind::Int, int64_t{0}}};
  lt.pattern = Pattern::Injective;
  lt.infer = [](const OpCall& c) {
    int64_t from = c.attrs.get_int("src_block"), to = c.attrs.get_int("dst_block"), channels = c.attrs.get_int_or("channels", 0);
    const auto& s = c.input_types[0].shape;
    if (!((from == 0 && s.size() == 4) || (from > 0 && s.size() == 5 && s[4] == from))) c.fail("input " + c.input_types[0].str() + " is not in the layout of block " + std::to_string(from));
    const int64_t held = from == 0 ? int64_t(s[1]) : s[1] * s[4];
    const int64_t C = channels > 0 ? channels : held;
    if (channels < 0 || C > held || (from == 0 && C != held) || held - C >= std::max<int64_t>(from, 1))
      c.fail("input " + c.input_types[0].str() + " does not hold " + std::to_string(C) + " channels; give channels of at most a block less than it holds");
    if (to < 0 || (to > 0 && channels == 0 && C % to != 0)) c.fail(std::to_string(C) + " channels do not split into blocks of " + std::to_string(to) + "; give channels to pad the last block");
    Shape out = to == 0 ? Shape{s[0], C, s[2], s[3]} : Shape{s[0], (C + to - 1) / to, s[2], s[3], to};  // batch, H and W may be symbolic
    return std::vector<TensorType>{{out, c.input_types[0].dtype}};
  };
  lt.compute = [](const OpCall& c, const std::vector<te::Tensor>& in) {
    return std::vector<te::Tensor>{ops::change_channel_block(in[0], static_cast<int>(c.attrs.get_int("src_block")), static_cast<int>(c.attrs.get_int("dst_block")), "layout",
                                                             c.attrs.get_int_or("channels", 0))};
  };
  lt.sharding = replicated_rule();
  register_op(lt);

  OpDef conv = blocked_conv_def("kiln.ConvNCHWc", "conv2d of [N, C/cb, H, W, cb] by packed weights [K/kb, C/cb, KH, KW, cb, kb] to [N, K/kb, OH, OW, kb]; "
                                                  "grouped where group_blocks > 0: each group_blocks output blocks read their own C/cb input blocks");
  conv.attrs.push_back({"group_blocks", AttrKind::Int, int64_t(0)});
  conv.infer = [](const OpCall& c) {
    c.expect_rank(0, 5);
    c.expect_rank(1, 6);
    const auto& x = c.input_types[0].shape;
    const auto& w = c.input_types[1].shape;
    const int64_t gb = c.attrs.get_int_or("group_blocks", 0);
    if (gb < 0 || (gb > 0 && w[0] % gb != 0)) c.fail("group_blocks " + std::to_string(gb) + " does not divide the " + std::to_string(w[0]) + " output blocks");
    const int64_t chunks = gb > 0 ? w[0] / gb : 1;
    // The input's block may be a multiple of the weights' (the same channels, read across blocks).
    if (x[4] % w[4] != 0 || x[1] * x[4] != chunks * w[1] * w[4])
      c.fail("input " + c.input_types[0].str() + " and weights " + c.input_types[1].str() + " do not match");
    return std::vector<TensorType>{conv_out(c, w[0], w[5], w[2], w[3])};
  };
  conv.compute = [](const OpCall& c, const std::vector<te::Tensor>& in) {
    return std::vector<te::Tensor>{ops::conv2d_nchwc_general(in[0], in[1], conv_params(c.attrs), "conv", c.attrs.get_int_or("group_blocks", 0))};
  };
  // Each output element: C x KH x KW multiply-adds (C = C/cb x cb of the packed weights).
  conv.cost = [](const OpCall& c, const std::vector<TensorType>& out) {
    const auto& w = c.input_types[1].shape;
    const auto& y = out[0].shape;
    OpCost k;
    k.macs = static_cast<double>(out[0].numel()) * w[1] * w[2] * w[3] * w[4];
    k.flops = 2 * k.macs;
    k.rows = static_cast<double>(y[0] * y[2] * y[3]);
    return k;
  };
  register_op(conv);

  // The bfloat16 form (use_bf16_dot's blocked pass): input and packed weights hold
  // bfloat16 pairs (uint32) along each block's channels; float32 out, accumulated in float32.
  OpDef pairs = blocked_conv_def("kiln.ConvNCHWcBF16Pairs", "conv2d of [N, C/cb, H, W, cb/2] by packed weights [K/kb, C/cb, KH, KW, cb/2, kb], "
                                                            "both bfloat16 pairs (uint32) along the block's channels, to float32 [N, K/kb, OH, OW, kb]");
  pairs.infer = [](const OpCall& c) {
    c.expect_rank(0, 5);
    c.expect_rank(1, 6);
    const auto& x = c.input_types[0].shape;
    const auto& w = c.input_types[1].shape;
    if (c.input_types[0].dtype != DataType::UInt(32) || c.input_types[1].dtype != DataType::UInt(32) || x[1] != w[1] || x[4] != w[4])
      c.fail("input " + c.input_types[0].str() + " and weights " + c.input_types[1].str() + " must be bfloat16 pairs (uint32) of the same channel blocks");
    TensorType y = conv_out(c, w[0], w[5], w[2], w[3]);
    y.dtype = DataType::Float(32);
    return std::vector<TensorType>{y};
  };
  pairs.compute = [](const OpCall& c, const std::vector<te::Tensor>& in) {
    return std::vector<te::Tensor>{ops::conv2d_nchwc_general(in[0], in[1], conv_params(c.attrs), "conv_bf16", 0, dot_bf16x2)};
  };
  // Two multiply-adds per pair.
  pairs.cost = [](const OpCall& c, const std::vector<TensorType>& out) {
    const auto& w = c.input_types[1].shape;
    const auto& y = out[0].shape;
    OpCost k;
    k.macs = 2.0 * static_cast<double>(out[0].numel()) * w[1] * w[2] * w[3] * w[4];
    k.flops = 2 * k.macs;
    k.rows = static_cast<double>(y[0] * y[2] * y[3]);
    return k;
  };
  register_op(pairs);

  OpDef dw = blocked_conv_def("kiln.DepthwiseConvNCHWc", "depthwise conv2d of [N, C/b, H, W, b] by weights [C/b, KH, KW, b]");
  dw.infer = [](const OpCall& c) {
    c.expect_rank(0, 5);
    c.expect_rank(1, 4);
    const auto& x = c.input_types[0].shape;
    const auto& w = c.input_types[1].shape;
    if (x[1] != w[0] || x[4] != w[3]) c.fail("input " + c.input_types[0].str() + " and weights " + c.input_types[1].str() + " do not match");
    return std::vector<TensorType>{conv_out(c, x[1], x[4], w[1], w[2])};
  };
  dw.compute = [](const OpCall& c, const std::vector<te::Tensor>& in) {
    return std::vector<te::Tensor>{ops::depthwise_conv2d_nchwc(in[0], in[1], conv_params(c.attrs))};
  };
  register_op(dw);

  OpDef mm;
  mm.name = "kiln.MatMulPackedB";
  mm.doc = "A [..., M, K] times weights packed into panels [N/nb, K, nb]: [..., M, N]";
  mm.min_inputs = mm.max_inputs = 2;
  mm.pattern = Pattern::OutputFusable;
  mm.infer = [](const OpCall& c) {
    c.expect_rank(1, 3);
    const auto& a = c.input_types[0].shape;
    const auto& b = c.input_types[1].shape;
    if (a.size() < 2 || a.back() != b[1]) c.fail("A " + c.input_types[0].str() + " and panels " + c.input_types[1].str() + " do not match");
    return std::vector<TensorType>{{packed_b_out(a, b), c.input_types[0].dtype}};
  };
  mm.compute = [](const OpCall&, const std::vector<te::Tensor>& in) { return std::vector<te::Tensor>{ops::matmul_packed_b(in[0], in[1])}; };
  mm.cost = [](const OpCall& c, const std::vector<TensorType>&) { return packed_b_cost(c, 1); };
  mm.sharding = replicated_rule();
  register_op(mm);

  // The bfloat16 form (use_bf16_packed_weights'): A and the panels hold bfloat16 pairs along K.
  OpDef mp;
  mp.name = "kiln.MatMulPackedBBF16Pairs";
  mp.doc = "A [..., M, K/2] times weights packed into panels [N/nb, K/2, nb], both bfloat16 pairs (uint32) along K: float32 [..., M, N]";
  mp.min_inputs = mp.max_inputs = 2;
  mp.pattern = Pattern::OutputFusable;
  mp.infer = [](const OpCall& c) {
    c.expect_rank(1, 3);
    const auto& a = c.input_types[0].shape;
    const auto& b = c.input_types[1].shape;
    if (a.size() < 2 || a.back() != b[1] || c.input_types[0].dtype != DataType::UInt(32) || c.input_types[1].dtype != DataType::UInt(32))
      c.fail("A " + c.input_types[0].str() + " and panels " + c.input_types[1].str() + " must be bfloat16 pairs (uint32) of the same K/2");
    return std::vector<TensorType>{{packed_b_out(a, b), DataType::Float(32)}};
  };
  mp.compute = [](const OpCall&, const std::vector<te::Tensor>& in) {
    return std::vector<te::Tensor>{ops::matmul_packed_b(in[0], in[1], "matmul_bf16", dot_bf16x2)};
  };
  mp.cost = [](const OpCall& c, const std::vector<TensorType>&) { return packed_b_cost(c, 2); };
  mp.sharding = replicated_rule();
  register_op(mp);
  return true;
}();

}  // namespace
}  // namespace kiln::graph::ops_detail
