// use_bf16_packed_weights (passes.h): constant weights in bfloat16, in the
// layouts alter_conv_layout gives float32 ones, where autocast rounded the
// operands (kiln.compile's precision="bfloat16").
//   Blocked convolutions: the weights, already bfloat16 values stored as
//   float32, are repacked as pairs along the block's channels ([K/kb, C/cb,
//   KH, KW, cb/2, kb] uint32), the input packed the same way
//   (kiln.PackBF16Pairs, which rounds, so autocast's Cast pair goes).
//   Matmuls (use_bf16_dot made them, their constant B folded into pairs):
//   B's pairs in panels of nb columns [N/nb, K/2, nb], as kiln.MatMulPackedB
//   (on AMX targets nb is 32 or 16: a panel is a block of the AMX schedule).
// Half the weight bytes; the products on vdpbf16ps, float32 accumulation.
#include <optional>

#include "kiln/graph/op_registry.h"
#include "kiln/ops/cpu_amx.h"
#include "kiln/graph/passes.h"
#include "kiln/graph/rewrite.h"

namespace kiln::graph {

namespace {

const NDArray* constant_of(const Value& v) {
  return v.defined() && v.node->kind == NodeKind::Constant ? &static_cast<const ConstantNode&>(*v.node).data : nullptr;
}

// The constant float32 weights packed in bfloat16 pairs along axis 4, when
// every value is a bfloat16 (its low 16 bits zero); nothing otherwise.
std::optional<NDArray> conv_pairs(const Value& w) {
  const NDArray* a = constant_of(w);
  if (!a || a->dtype() != DataType::Float(32) || a->ndim() != 6 || a->shape()[4] % 2 != 0) return std::nullopt;
  std::vector<int64_t> s = a->shape();
  const auto* bits = static_cast<const uint32_t*>(a->data());
  for (int64_t i = 0; i < a->numel(); ++i)
    if (bits[i] & 0xffffu) return std::nullopt;  // not rounded to bfloat16: the float32 conv keeps it
  const int64_t outer = s[0] * s[1] * s[2] * s[3], cb = s[4], kb = s[5];
  s[4] = cb / 2;
  NDArray out = NDArray::empty(s, DataType::UInt(32));
  auto* o = out.data_as<uint32_t>();
  for (int64_t r = 0; r < outer; ++r)
    for (int64_t p = 0; p < cb / 2; ++p)
      for (int64_t k = 0; k < kb; ++k) {
        uint32_t lo = bits[(r * cb + 2 * p) * kb + k], hi = bits[(r * cb + 2 * p + 1) * kb + k];
        o[(r * (cb / 2) + p) * kb + k] = (lo >> 16) | (hi & 0xffff0000u);  // low half first, as pack_bf16x2
      }
  return out;
}

std::vector<Value> rewrite_conv(const OpNode& n) {
  if (n.attrs.get_int_or("group_blocks", 0) != 0) return {};
  Value x = bfloat16_source(n.inputs[0]);
  if (!x.defined() || x.type().ndim() != 5) return {};
  std::optional<NDArray> w = conv_pairs(n.inputs[1]);
  if (!w) return {};
  Value xp = make_op("kiln.PackBF16Pairs", {x}, Attrs({{"axis", int64_t(4)}}), n.name + ".x_pairs")->output();
  Value wp = make_constant(n.inputs[1].node->name + ".bf16_pairs", *w)->output();
  Attrs a;
  for (const char* name : {"strides", "pads", "dilations"}) a.set(name, n.attrs.values().at(name));
  return {make_op("kiln.ConvNCHWcBF16Pairs", {xp, wp}, a, n.name)->output()};
}

// The panel width: four vectors where the target has 32 registers and A rows enough (the
// seeds' four-vector tile for pair dot products), else two, else one; 0 when none divides N.
int64_t panel_width(int64_t N, const TensorType& a, const Target& target) {
  // AMX: a panel per block of C (ops::amx_schedule's columns, up to 32).
  if (ops::target_has_amx(target, "bf16"))
    for (int64_t w : {32, 16})
      if (N % w == 0) return w;
  const int64_t lanes = target.natural_lanes(DataType::Float(32));
  int64_t rows = 1;
  bool symbolic = false;
  for (size_t k = 0; k + 1 < a.shape.size(); ++k) {
    if (a.shape[k].is_static()) rows *= a.shape[k].value();
    else symbolic = true;
  }
  if (target.num_vector_registers() >= 32 && N % (4 * lanes) == 0 && (symbolic || rows >= 128)) return 4 * lanes;
  for (int64_t v : {2, 1})
    if (N % (v * lanes) == 0) return v * lanes;
  return 0;
}

std::vector<Value> rewrite_matmul(const OpNode& n, const Target& target) {
  const NDArray* B = constant_of(n.inputs[1]);
  const TensorType& a = n.inputs[0].type();
  if (!B || B->ndim() != 2 || B->dtype() != DataType::UInt(32) || n.attrs.get_int("transA") != 0 || a.ndim() < 2) return {};
  bool tb = n.attrs.get_int("transB") != 0;
  const int64_t K2 = tb ? B->shape()[1] : B->shape()[0], N = tb ? B->shape()[0] : B->shape()[1];
  const int64_t nb = panel_width(N, a, target);
  if (nb == 0) return {};
  NDArray packed = NDArray::empty({N / nb, K2, nb}, DataType::UInt(32));
  const auto* b = static_cast<const uint32_t*>(B->data());
  auto* p = packed.data_as<uint32_t>();
  for (int64_t k = 0; k < K2; ++k)
    for (int64_t j = 0; j < N; ++j) p[((j / nb) * K2 + k) * nb + j % nb] = tb ? b[j * K2 + k] : b[k * N + j];
  Value panels = make_constant(n.inputs[1].node->name + ".panels", packed)->output();
  return {make_op("kiln.MatMulPackedBBF16Pairs", {n.inputs[0], panels}, {}, n.name)->output()};
}

}  // namespace

Graph use_bf16_packed_weights(const Graph& g, const Target& target) {
  return rewrite_graph(g, [&](const Ref<OpNode>& n) -> std::vector<Value> {
    if (n->op->name == "kiln.ConvNCHWc") return rewrite_conv(*n);
    if (n->op->name == "kiln.MatMulBF16Pairs") return rewrite_matmul(*n, target);
    return {};
  });
}

}  // namespace kiln::graph
