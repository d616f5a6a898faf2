// kiln.PackConvWeights: a convolution's weights [K, C, KH, KW] in the packed
// form kiln.ConvNCHWc reads, [K/kb, C/cb, KH, KW, cb, kb], as a kernel of the
// graph. The inference pass packs constant weights at compile time; a
// training step's weights change every step, so the training layout
// (train_layout.cpp) packs them once per step with this op, from the plain
// weights the optimizer updates. Channels past K or C (a block that pads
// them) get zero weights, so padded lanes contribute nothing.
#include "kiln/ops/broadcast.h"
#include "op_helpers.h"

namespace kiln::graph::ops_detail {
namespace {

using ops::index_imm;

const bool registered = [] {
  OpDef d;
  d.name = "kiln.PackConvWeights";
  d.doc = "weights [K, C, KH, KW] packed for kiln.ConvNCHWc: [ceil(K/out_block), ceil(C/in_block), KH, KW, in_block, out_block], zero past K and C";
  d.min_inputs = d.max_inputs = 1;
  d.attrs = {{"in_block", AttrKind::Int, std::nullopt}, {"out_block", AttrKind::Int, std::nullopt}};
  d.pattern = Pattern::Injective;
  d.infer = [](const OpCall& c) {
    c.expect_rank(0, 4);
    const TensorType& w = c.input_types[0];
    const int64_t cb = c.attrs.get_int("in_block"), kb = c.attrs.get_int("out_block");
    if (cb < 1 || kb < 1) c.fail("in_block and out_block must be positive, got " + std::to_string(cb) + " and " + std::to_string(kb));
    for (int k = 0; k < 4; ++k)
      if (!w.shape[k].is_static()) c.fail("weights " + w.str() + " must have a static shape");
    const int64_t K = w.shape[0], C = w.shape[1];
    Shape out{(K + kb - 1) / kb, (C + cb - 1) / cb, w.shape[2], w.shape[3], cb, kb};
    return std::vector<TensorType>{{out, w.dtype}};
  };
  d.compute = [](const OpCall& c, const std::vector<te::Tensor>& in) {
    const te::Tensor W = in[0];
    const TensorType& w = c.input_types[0];
    const int64_t cb = c.attrs.get_int("in_block"), kb = c.attrs.get_int("out_block"), K = w.shape[0], C = w.shape[1];
    std::vector<int64_t> out{(K + kb - 1) / kb, (C + cb - 1) / cb, w.shape[2], w.shape[3], cb, kb};
    return std::vector<te::Tensor>{te::compute(ops::shape_exprs(out), [&](const std::vector<Var>& i) {
      Expr k = i[0] * index_imm(kb) + i[5], ch = i[1] * index_imm(cb) + i[4];
      Expr v = W({k, ch, i[2], i[3]});
      if (K % kb == 0 && C % cb == 0) return v;
      return if_then_else(k < index_imm(K) && ch < index_imm(C), v, make_zero(W.dtype()));
    }, "pack_conv_weights")};
  };
  d.sharding = replicated_rule();  // made after distribution (train_layout)
  register_op(std::move(d));
  return true;
}();

}  // namespace
}  // namespace kiln::graph::ops_detail
