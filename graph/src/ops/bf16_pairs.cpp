// kiln's bfloat16 dot-product operators, made by the use_bf16_dot pass
// (never imported): operands packed as bfloat16 pairs along K, and their
// matmul with float32 accumulation (kiln/ops/bf16_pairs.h).
#include "kiln/ops/bf16_pairs.h"

#include "kiln/ops/graph_nn.h"
#include "kiln/support/error.h"
#include "op_helpers.h"
#include "window_attrs.h"

namespace kiln::graph::ops_detail {
namespace {

struct PairDims {
  Dim M, K2, N;
};

// The matmul of pair-packed A2 and B2: M, K2, N of 2-D operands (for the flop count).
PairDims pair_dims(const OpCall& c) {
  const auto& a = c.input_types[0].shape;
  const auto& b = c.input_types[1].shape;
  bool ta = c.attrs.get_int("transA") != 0, tb = c.attrs.get_int("transB") != 0;
  return {ta ? a[a.size() - 1] : a[a.size() - 2], ta ? a[a.size() - 2] : a.back(), tb ? b[b.size() - 2] : b.back()};
}

const bool registered = [] {
  OpDef pack;
  pack.name = "kiln.PackBF16Pairs";
  pack.doc = "float32 or bfloat16 rounded to bfloat16 and packed in pairs along `axis` into uint32 (low half first; an odd extent pads a zero)";
  pack.attrs = {{"axis", AttrKind::Int, std::nullopt}};
  pack.pattern = Pattern::Injective;
  pack.infer = [](const OpCall& c) {
    const TensorType& x = c.input_types[0];
    if (x.dtype != DataType::Float(32) && x.dtype != DataType::BFloat16()) c.fail("packs float32 or bfloat16, got " + x.dtype.str());
    int axis = normalize_axis(c, c.attrs.get_int("axis"), x.ndim());
    Shape out = x.shape;
    out[axis] = dim_floordiv(dim_add(out[axis], 1), 2);
    return std::vector<TensorType>{{out, DataType::UInt(32)}};
  };
  pack.compute = [](const OpCall& c, const std::vector<te::Tensor>& in) {
    return std::vector<te::Tensor>{ops::pack_bf16_pairs(in[0], normalize_axis(c, c.attrs.get_int("axis"), c.input_types[0].ndim()))};
  };
  pack.sharding = replicated_rule();
  register_op(pack);

  OpDef mm;
  mm.name = "kiln.MatMulBF16Pairs";
  mm.doc = "float32 matmul of bfloat16-pair operands: numpy matmul shapes over K/2 pairs, or 2-D with transA/transB";
  mm.min_inputs = mm.max_inputs = 2;
  mm.attrs = {{"transA", AttrKind::Int, int64_t(0)}, {"transB", AttrKind::Int, int64_t(0)}};
  mm.pattern = Pattern::OutputFusable;
  mm.infer = [](const OpCall& c) {
    for (int i = 0; i < 2; ++i)
      if (c.input_types[i].dtype != DataType::UInt(32) || c.input_types[i].ndim() < 2)
        c.fail("input " + std::to_string(i) + " " + c.input_types[i].str() + " is not a matrix of bfloat16 pairs (uint32, rank 2 or more)");
    bool ta = c.attrs.get_int("transA") != 0, tb = c.attrs.get_int("transB") != 0;
    if ((ta || tb) && (c.input_types[0].ndim() != 2 || c.input_types[1].ndim() != 2)) c.fail("transposed operands must be 2-D");
    if (!ta && !tb) {
      return std::vector<TensorType>{{matmul_dims(c, c.input_types[0].shape, c.input_types[1].shape), DataType::Float(32)}};
    }
    PairDims d = pair_dims(c);
    Dim kb = tb ? c.input_types[1].shape[1] : c.input_types[1].shape[0];
    if (!(kb == d.K2)) c.fail("A holds " + d.K2.str() + " pairs of K but B " + kb.str() + same_name_hint(d.K2, kb));
    return std::vector<TensorType>{{{d.M, d.N}, DataType::Float(32)}};
  };
  mm.compute = [](const OpCall& c, const std::vector<te::Tensor>& in) {
    return std::vector<te::Tensor>{ops::matmul_bf16_pairs(in[0], in[1], c.attrs.get_int("transA") != 0, c.attrs.get_int("transB") != 0)};
  };
  // Two multiply-adds per pair (the padded zero of an odd K counted too).
  mm.cost = [](const OpCall& c, const std::vector<TensorType>& out) {
    OpCost k;
    k.rows = static_cast<double>(out[0].numel() / std::max<int64_t>(out[0].shape.back(), 1));
    k.macs = 2.0 * static_cast<double>(out[0].numel()) * static_cast<double>(pair_dims(c).K2);
    k.flops = 2 * k.macs;
    return k;
  };
  mm.sharding = replicated_rule();
  register_op(mm);

  // A group-1 convolution over pairs of input channels, computed in the
  // channels-last form (ops::conv_channels_last) with the pair dot product.
  OpDef conv;
  conv.name = "kiln.ConvBF16Pairs";
  conv.doc = "float32 convolution (group 1) of X [N, C/2, spatial...] by W [K, C/2, kernel...], both bfloat16 pairs along C; Conv's window attributes";
  conv.min_inputs = conv.max_inputs = 2;
  conv.attrs = {{"auto_pad", AttrKind::String, std::string("NOTSET")},
                {"dilations", AttrKind::Ints, std::vector<int64_t>{}},
                {"kernel_shape", AttrKind::Ints, std::vector<int64_t>{}},
                {"pads", AttrKind::Ints, std::vector<int64_t>{}},
                {"strides", AttrKind::Ints, std::vector<int64_t>{}}};
  conv.pattern = Pattern::OutputFusable;
  auto windows = [](const OpCall& c) {
    const TensorType &x = c.input_types[0], &w = c.input_types[1];
    if (x.dtype != DataType::UInt(32) || w.dtype != DataType::UInt(32) || x.ndim() < 3 || x.ndim() != w.ndim() || x.shape[1] != w.shape[1])
      c.fail("X " + x.str() + " and W " + w.str() + " must be bfloat16 pairs (uint32) of the same channel pairs, [N, C/2, ...] and [K, C/2, ...]");
    return resolve_windows(c, std::vector<int64_t>(w.shape.begin() + 2, w.shape.end()), false);
  };
  conv.infer = [windows](const OpCall& c) {
    Shape out = {c.input_types[0].shape[0], c.input_types[1].shape[0]};
    for (const ops::WindowDim& d : windows(c)) out.push_back(out_dim(d));
    return std::vector<TensorType>{{out, DataType::Float(32)}};
  };
  conv.compute = [windows](const OpCall& c, const std::vector<te::Tensor>& in) {
    return std::vector<te::Tensor>{ops::conv_channels_last(in[0], in[1], te::Tensor(), windows(c), "conv_bf16", dot_bf16x2)};
  };
  conv.cost = [](const OpCall& c, const std::vector<TensorType>& out) {
    double outputs = static_cast<double>(out[0].numel());
    OpCost k;
    k.macs = 2.0 * outputs * static_cast<double>(c.input_types[1].numel() / c.input_types[1].shape[0]);
    k.flops = 2 * k.macs;
    k.rows = outputs / static_cast<double>(std::max<int64_t>(out[0].shape[1], 1));
    return k;
  };
  conv.sharding = replicated_rule();
  register_op(conv);
  return true;
}();

}  // namespace
}  // namespace kiln::graph::ops_detail
