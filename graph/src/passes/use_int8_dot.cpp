// use_int8_dot (passes.h): MatMulInteger, QLinearMatMul and the QDQ pattern
// QuantizeLinear([Relu](MatMul(DequantizeLinear(a), DequantizeLinear(b))))
// become one kiln.QMatMulI8x4 kernel (graph/src/ops/i8_dot.cpp): both
// operands packed as byte quads along K, the products on the target's dot
// instruction (vpdpbusd: unsigned activations x signed weights; AArch64
// sdot: signed x signed), int32 accumulation, and the zero points and
// requantization in the kernel's epilogue.
//
// A Gemm of two DequantizeLinear (a classifier: float out, as kiln.quantize
// leaves a model's result) becomes the same kernel with int32 out and
//   y = float32(acc) * (a_scale * b_scale[n]) + C
// in its epilogue (Cast, Mul, Add fuse into its group): the weights stream
// as bytes, not float32 (MobileNetV2's 1280 x 1000: 1.3 against 5.1 MB).
//
// On AMX targets constant weights are packed at compile time in panels
// [N/nb, K/4, nb] (nb 32 or 16), so that each AMX tile's rows of B are
// contiguous: B [K/4, N] with N a power of two put the 16 rows of a tile in
// one cache set (4 KiB apart at N = 1024).
//
// Operands of the other signedness are shifted by 128 on packing (x ^ 0x80
// as a byte), which moves their zero point by the same 128, so that
//   sum (a - za)(b - zb) = sum (a' - za')(b' - zb'),  a' = a + sa, za' = za + sa
// and the kernel's zero-point terms (row sums of a', column sums of b', the
// latter folded at compile time for constant weights) keep it exact.
#include <cmath>
#include <optional>
#include <vector>

#include "kiln/graph/op_registry.h"
#include "kiln/graph/passes.h"
#include "kiln/graph/rewrite.h"
#include "kiln/ops/cpu_amx.h"
#include "kiln/ops/i8_dot.h"
#include "match_helpers.h"

namespace kiln::graph {

namespace {

using match_detail::producer;

template <typename T>
void append(const NDArray& a, std::vector<double>* out) {
  const T* p = static_cast<const T*>(a.data());
  for (int64_t k = 0; k < a.numel(); ++k) out->push_back(static_cast<double>(p[k]));
}

// The values of a constant of at most 1-D (a scale or zero point); nullopt for anything else.
std::optional<std::vector<double>> constant_values(const Value& v) {
  if (!v.defined() || v.node->kind != NodeKind::Constant || v.type().ndim() > 1) return std::nullopt;
  const NDArray& a = static_cast<const ConstantNode&>(*v.node).data;
  std::vector<double> out;
  DataType t = a.dtype();
  if (t == DataType::Float(32)) append<float>(a, &out);
  else if (t == DataType::UInt(8)) append<uint8_t>(a, &out);
  else if (t == DataType::Int(8)) append<int8_t>(a, &out);
  else if (t == DataType::Int(32)) append<int32_t>(a, &out);
  else if (t == DataType::Int(64)) append<int64_t>(a, &out);
  else return std::nullopt;
  return out;
}

// An operand's quantization: scale and zero point, one value (per tensor) or one per column.
struct QParams {
  std::vector<double> scale = {1.0}, zero = {0.0};
};

// Input i of n as constant values of count 1 (or `n_ok` when given); absent inputs give `fallback`.
bool read_param(const OpNode& n, size_t i, int64_t n_ok, std::vector<double> fallback, std::vector<double>* out) {
  if (i >= n.inputs.size() || !n.inputs[i].defined()) {
    *out = std::move(fallback);
    return true;
  }
  auto v = constant_values(n.inputs[i]);
  if (!v || (v->size() != 1 && static_cast<int64_t>(v->size()) != n_ok)) return false;
  *out = std::move(*v);
  return true;
}

bool is_byte(DataType t) { return t == DataType::Int(8) || t == DataType::UInt(8); }

Value constant_of(const std::string& name, DataType t, const std::vector<double>& v) {
  NDArray a = v.size() == 1 ? NDArray::empty({}, t) : NDArray::empty({static_cast<int64_t>(v.size())}, t);
  for (size_t k = 0; k < v.size(); ++k) {
    if (t == DataType::Float(32)) a.data_as<float>()[k] = static_cast<float>(v[k]);
    else a.data_as<int32_t>()[k] = static_cast<int32_t>(v[k]);
  }
  return make_constant(name, a)->output();
}

struct Requant {
  std::vector<double> multiplier;  // float32 values, per tensor or per column
  int64_t y_zero = 0;
  DataType y;
  bool relu = false;
};

// The rewrite's choices for the target.
struct Dot {
  bool unsigned_acts = true;
  bool amx = false;
};

template <typename T>
int32_t shifted_byte(const NDArray& b, int64_t i, int shift) {
  return static_cast<int32_t>(static_cast<const T*>(b.data())[i]) + shift;
}

// Constant weights b [K, N] (+ shift) as byte quads in panels [N/nb, ceil(K/4), nb], or nothing when N has no panel width.
std::optional<NDArray> quad_panels(const Value& b, int shift) {
  if (!b.defined() || b.node->kind != NodeKind::Constant) return std::nullopt;
  const NDArray& w = static_cast<const ConstantNode&>(*b.node).data;
  const int64_t K = w.shape()[0], N = w.shape()[1], K4 = (K + 3) / 4;
  int64_t nb = N % 32 == 0 ? 32 : N % 16 == 0 ? 16 : 0;
  if (nb == 0 || (K4 > 16 && K4 % 16 != 0)) return std::nullopt;  // the AMX schedule takes neither (ops/cpu_amx.h)
  bool u = w.dtype().is_uint();
  NDArray out = NDArray::empty({N / nb, K4, nb}, ops::i8x4_unsigned(w.dtype(), shift) ? DataType::UInt(32) : DataType::Int(32));
  auto* o = static_cast<uint32_t*>(out.data());
  for (int64_t q = 0; q < K4; ++q)
    for (int64_t j = 0; j < N; ++j) {
      uint32_t word = 0;
      for (int64_t byte = 0; byte < 4 && 4 * q + byte < K; ++byte) {
        int64_t i = (4 * q + byte) * N + j;
        int32_t v = u ? shifted_byte<uint8_t>(w, i, shift) : shifted_byte<int8_t>(w, i, shift);
        word |= static_cast<uint32_t>(static_cast<uint8_t>(v)) << (8 * byte);
      }
      o[((j / nb) * K4 + q) * nb + j % nb] = word;
    }
  return out;
}

// The kiln.QMatMulI8x4 of a (zero point za) and 2-D b (zero points zb, 1 or N), requantized when rq is given.
Value int8_matmul(const std::string& name, const Value& a, double za, const Value& b, std::vector<double> zb, const std::optional<Requant>& rq,
                  const Dot& how) {
  bool unsigned_acts = how.unsigned_acts;
  int64_t k = a.type().shape.back().value();
  int sa = a.type().dtype.is_uint() == unsigned_acts ? 0 : unsigned_acts ? 128 : -128;
  int sb = b.type().dtype.is_uint() ? -128 : 0;  // signed weights on every dot instruction
  int64_t a_zero = static_cast<int64_t>(za) + sa;
  bool any_b_zero = false;
  for (double& z : zb) {
    z += sb;
    any_b_zero = any_b_zero || z != 0;
  }
  auto op = [&](const char* kind, const Value& x, int64_t axis, int shift, const char* suffix) {
    return make_op(kind, {x}, Attrs({{"axis", axis}, {"shift", int64_t(shift)}}), name + suffix)->output();
  };
  std::vector<Value> in = {op("kiln.PackI8x4", a, -1, sa, ".a_quads"), Value(), Value(), Value(), Value()};
  std::optional<NDArray> panels = how.amx ? quad_panels(b, sb) : std::nullopt;
  in[1] = panels ? make_constant(name + ".b_quad_panels", *panels)->output() : op("kiln.PackI8x4", b, 0, sb, ".b_quads");
  if (any_b_zero) in[2] = op("kiln.SumI8", a, -1, sa, ".a_sums");
  if (a_zero != 0) in[3] = op("kiln.SumI8", b, 0, sb, ".b_sums");
  if (any_b_zero) in[4] = constant_of(name + ".b_zero", DataType::Int(32), zb);
  Attrs attrs({{"k", k}, {"a_zero", a_zero}, {"y_zero", int64_t(0)}, {"y_dtype", int64_t(0)}, {"relu", int64_t(0)}});
  if (rq) {
    in.push_back(constant_of(name + ".multiplier", DataType::Float(32), rq->multiplier));
    attrs.set("y_zero", rq->y_zero);
    attrs.set("y_dtype", int64_t(rq->y.is_uint() ? 2 : 3));
    attrs.set("relu", int64_t(rq->relu));
  }
  while (!in.back().defined()) in.pop_back();
  return make_op("kiln.QMatMulI8x4", in, attrs, name)->output();
}

// Whether a and b suit the kernel: bytes, a [..., M, K] with static K, b [K, N] static.
bool fits(const Value& a, const Value& b) {
  const TensorType &ta = a.type(), &tb = b.type();
  return is_byte(ta.dtype) && is_byte(tb.dtype) && ta.ndim() >= 2 && tb.ndim() == 2 && ta.shape.back().is_static() && tb.is_static();
}

// multiplier[n] = a_scale * b_scale[n] / y_scale in float32, as QLinearMatMul computes it.
std::vector<double> multipliers(double as, const std::vector<double>& bs, double ys) {
  std::vector<double> m;
  for (double b : bs) m.push_back(static_cast<double>(static_cast<float>(static_cast<float>(as) * static_cast<float>(b)) / static_cast<float>(ys)));
  return m;
}

std::vector<Value> rewrite_matmul_integer(const OpNode& n, const Dot& how) {
  const Value &a = n.inputs[0], &b = n.inputs[1];
  if (!fits(a, b)) return {};
  std::vector<double> za, zb;
  int64_t cols = b.type().shape[1].value();
  if (!read_param(n, 2, 1, {0.0}, &za) || !read_param(n, 3, cols, {0.0}, &zb)) return {};
  return {int8_matmul(n.name, a, za[0], b, zb, std::nullopt, how)};
}

std::vector<Value> rewrite_qlinear_matmul(const OpNode& n, const Dot& how) {
  const Value &a = n.inputs[0], &b = n.inputs[3];
  if (!fits(a, b) || !is_byte(n.inputs[7].type().dtype)) return {};
  int64_t cols = b.type().shape[1].value();
  std::vector<double> as, za, bs, zb, ys, yz;
  if (!read_param(n, 1, 1, {}, &as) || !read_param(n, 2, 1, {}, &za) || !read_param(n, 4, cols, {}, &bs) || !read_param(n, 5, cols, {}, &zb) ||
      !read_param(n, 6, 1, {}, &ys) || !read_param(n, 7, 1, {}, &yz))
    return {};
  Requant rq{multipliers(as[0], bs, ys[0]), static_cast<int64_t>(yz[0]), n.inputs[7].type().dtype, false};
  return {int8_matmul(n.name, a, za[0], b, zb, rq, how)};
}

// A DequantizeLinear's quantized input and parameters, per tensor or (per_column) along the last axis of a 2-D input.
std::optional<std::pair<Value, QParams>> dequantized(const Value& v, bool per_column) {
  const OpNode* dq = producer(v, "DequantizeLinear");
  if (!dq) return std::nullopt;
  const Value& x = dq->inputs[0];
  int64_t cols = per_column && x.type().ndim() == 2 && x.type().shape[1].is_static() ? x.type().shape[1].value() : 1;
  QParams p;
  if (!read_param(*dq, 1, cols, {}, &p.scale) || !read_param(*dq, 2, cols, {0.0}, &p.zero)) return std::nullopt;
  int64_t axis = dq->attrs.get_int_or("axis", 1);
  if ((p.scale.size() > 1 || p.zero.size() > 1) && axis != 1 && axis != -1) return std::nullopt;
  if (p.zero.size() > 1 && p.scale.size() == 1) p.scale.assign(p.zero.size(), p.scale[0]);
  return std::make_pair(x, p);
}

std::vector<Value> rewrite_qdq(const OpNode& q, const Dot& how) {
  std::vector<double> ys, yz;
  DataType y = q.types[0].dtype;
  if (!is_byte(y) || !read_param(q, 1, 1, {}, &ys) || !read_param(q, 2, 1, {0.0}, &yz)) return {};
  const OpNode* relu = producer(q.inputs[0], "Relu");
  const OpNode* mm = producer(relu ? relu->inputs[0] : q.inputs[0], "MatMul");
  if (!mm) return {};
  auto a = dequantized(mm->inputs[0], false), b = dequantized(mm->inputs[1], true);
  if (!a || !b || !fits(a->first, b->first)) return {};
  if (a->second.zero.size() != 1 || a->second.scale.size() != 1) return {};
  Requant rq{multipliers(a->second.scale[0], b->second.scale, ys[0]), static_cast<int64_t>(yz[0]), y, relu != nullptr};
  return {int8_matmul(q.name, a->first, a->second.zero[0], b->first, b->second.zero, rq, how)};
}

// Constant [N, K] bytes as [K, N] (Gemm's transB), zero points unchanged (per column either way).
Value transposed(const Value& b, const std::string& name) {
  const NDArray& w = static_cast<const ConstantNode&>(*b.node).data;
  const int64_t N = w.shape()[0], K = w.shape()[1];
  NDArray t = NDArray::empty({K, N}, w.dtype());
  const auto* src = static_cast<const uint8_t*>(w.data());
  auto* dst = static_cast<uint8_t*>(t.data());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) dst[k * N + n] = src[n * K + k];
  return make_constant(name, t)->output();
}

// The float product of two dequantized operands computed on their codes: the int32 product of the codes (zero
// points in the kernel) cast to float and times a_scale * b_scale[n], the Mul named `out` (a classifier's logits,
// where no QuantizeLinear takes the result).
Value scaled_codes_product(const std::string& name, const std::string& out, const std::pair<Value, QParams>& a, const Value& b_codes,
                           const QParams& b, const Dot& how) {
  Value acc = int8_matmul(name + ".i8", a.first, a.second.zero[0], b_codes, b.zero, std::nullopt, how);
  Value f = make_op("Cast", {acc}, Attrs({{"to", int64_t(1)}}), name + ".float")->output();
  std::vector<double> scale;
  for (double bs : b.scale) scale.push_back(static_cast<float>(a.second.scale[0]) * static_cast<float>(bs));
  return make_op("Mul", {f, constant_of(name + ".scale", DataType::Float(32), scale)}, Attrs(), out)->output();
}

// Gemm(DequantizeLinear(a), DequantizeLinear(b)[, C]) with constant b (per tensor or per output column), alpha = beta = 1, no transA.
std::vector<Value> rewrite_gemm(const OpNode& g, const Dot& how) {
  if (g.inputs.size() < 2 || g.attrs.get_float_or("alpha", 1.0) != 1.0 || g.attrs.get_float_or("beta", 1.0) != 1.0 ||
      g.attrs.get_int_or("transA", 0) != 0 || g.types[0].dtype != DataType::Float(32))
    return {};
  const bool trans_b = g.attrs.get_int_or("transB", 0) != 0;
  const OpNode* dqb = producer(g.inputs[1], "DequantizeLinear");
  auto a = dequantized(g.inputs[0], false);
  if (!a || !dqb || dqb->inputs[0].node->kind != NodeKind::Constant || dqb->inputs[0].type().ndim() != 2) return {};
  const TensorType& wt = dqb->inputs[0].type();
  const int64_t N = wt.shape[trans_b ? 0 : 1].value();
  QParams bp;
  if (!read_param(*dqb, 1, N, {}, &bp.scale) || !read_param(*dqb, 2, N, {0.0}, &bp.zero)) return {};
  // Per column of [K, N] is axis 1, of transB's [N, K] axis 0.
  const int64_t axis = dqb->attrs.get_int_or("axis", 1);
  if ((bp.scale.size() > 1 || bp.zero.size() > 1) && axis != (trans_b ? 0 : 1) && axis != (trans_b ? -2 : -1)) return {};
  if (a->first.type().ndim() != 2 || a->second.zero.size() != 1 || a->second.scale.size() != 1) return {};
  Value bq = trans_b ? transposed(dqb->inputs[0], g.name + ".b_kn") : dqb->inputs[0];
  if (!fits(a->first, bq)) return {};
  const bool bias = g.inputs.size() > 2 && g.inputs[2].defined();
  Value y = scaled_codes_product(g.name, bias ? g.name + ".scaled" : g.name, *a, bq, bp, how);
  if (bias) y = make_op("Add", {y, g.inputs[2]}, {}, g.name)->output();
  return {y};
}

// MatMul(DQ(a), DQ(b)) whose float output no QuantizeLinear takes (rewrite_qdq's pattern goes first): a
// classifier's logits. The int32 product of the codes times a_scale * b_scale[n]: the weights' bytes are read
// instead of their floats (2048 x 1000 at batch 1 was a float GEMV bound by its 8 MB of weights).
std::vector<Value> rewrite_dq_matmul(const OpNode& mm, const Dot& how) {
  auto a = dequantized(mm.inputs[0], false), b = dequantized(mm.inputs[1], true);
  if (!a || !b || !fits(a->first, b->first) || mm.types[0].dtype != DataType::Float(32)) return {};
  if (a->second.zero.size() != 1 || a->second.scale.size() != 1) return {};
  return {scaled_codes_product(mm.name, mm.name, *a, b->first, b->second, how)};
}

}  // namespace

Graph use_int8_dot(const Graph& g, const Target& target) {
  // AArch64's sdot multiplies signed bytes; x86's vpdpbusd unsigned by signed.
  bool arm = target.triple.rfind("aarch64", 0) == 0 || target.triple.rfind("arm64", 0) == 0;
  bool unsigned_acts = !arm;
  // Without the instruction the quads' widening code (unpacking each word
  // again) lost to the plain integer matmul: 4.3 against 14.6 GOP/s for
  // 512^3 on znver3 code (Sapphire Rapids host, loaded). Leave those as they are.
  bool dot = arm ? target.has_feature("dotprod") : target.has_feature("avx512vnni") || target.has_feature("avxvnni");
  if (!dot) return g;
  Dot how{unsigned_acts, ops::target_has_amx(target, "i8")};
  Graph fused = rewrite_graph(g, [how](const Ref<OpNode>& n) -> std::vector<Value> {
    if (n->num_outputs() != 1) return {};
    const std::string& op = n->op->name;
    if (op == "MatMulInteger") return rewrite_matmul_integer(*n, how);
    if (op == "QLinearMatMul") return rewrite_qlinear_matmul(*n, how);
    if (op == "QuantizeLinear") return rewrite_qdq(*n, how);
    if (op == "Gemm") return rewrite_gemm(*n, how);
    return {};
  });
  // Then the float-output products the quantized patterns above did not take.
  return rewrite_graph(fused, [how](const Ref<OpNode>& n) -> std::vector<Value> {
    if (n->num_outputs() != 1) return {};
    if (n->op->name == "MatMul") return rewrite_dq_matmul(*n, how);
    return {};
  });
}

}  // namespace kiln::graph
