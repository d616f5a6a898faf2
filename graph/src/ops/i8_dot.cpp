// kiln's int8 dot-product operators, made by the use_int8_dot pass (never
// imported): operands packed as byte quads along K, their matmul with int32
// accumulation, and the zero-point and requantization epilogue in the same
// kernel (kiln/ops/i8_dot.h).
//
//   kiln.PackI8x4(x; axis, shift)  byte quads of int32(x) + shift along axis
//   kiln.SumI8(x; axis, shift)     int32 sums of int32(x) + shift along axis (dropped)
//   kiln.QMatMulI8x4(A4, B4, a_sum?, b_sum?, b_zero?, multiplier?; k, a_zero, y_zero, y_dtype, relu)
//     B4 [K/4, N], or in panels [N/nb, K/4, nb] (ops::matmul_packed_b's
//     layout: the AMX tiles' rows of B contiguous)
//     acc[.., m, n] = sum_k (a'[m, k] - a_zero) * (b'[k, n] - b_zero[n])
//                   = dot - b_zero[n] a_sum[.., m] - a_zero b_sum[n] + k a_zero b_zero[n]
//     a_sum (rows of a', needed where b_zero is not 0), b_sum (columns of b',
//     where a_zero is not 0); int32 out, or with the float32 multiplier
//     (per tensor or per column of B) y = saturate(round(float32(acc) *
//     multiplier) + y_zero) in y_dtype (ONNX code 2 uint8, 3 int8), ReLU
//     as y >= y_zero.
#include "kiln/ops/i8_dot.h"

#include "kiln/ops/graph_nn.h"
#include "kiln/ops/layout.h"
#include "op_helpers.h"
#include "quantize_helpers.h"

namespace kiln::graph::ops_detail {
namespace {

const DataType I32 = DataType::Int(32), F32 = DataType::Float(32);

bool byte_dtype(DataType t) { return t == DataType::Int(8) || t == DataType::UInt(8); }
bool word_dtype(DataType t) { return t == DataType::Int(32) || t == DataType::UInt(32); }

OpDef pack_def() {
  OpDef d;
  d.name = "kiln.PackI8x4";
  d.doc = "int8/uint8 plus `shift` packed four bytes to a word along `axis` (uint32 for unsigned bytes, int32 for signed; zeros pad)";
  d.attrs = {{"axis", AttrKind::Int, std::nullopt}, {"shift", AttrKind::Int, int64_t(0)}};
  d.pattern = Pattern::Injective;
  d.infer = [](const OpCall& c) {
    const TensorType& x = c.input_types[0];
    if (!byte_dtype(x.dtype)) c.fail("packs int8 or uint8, got " + x.dtype.str());
    int axis = normalize_axis(c, c.attrs.get_int("axis"), x.ndim());
    bool u = ops::i8x4_unsigned(x.dtype, static_cast<int>(c.attrs.get_int("shift")));
    Shape out = x.shape;
    out[axis] = dim_floordiv(dim_add(out[axis], 3), 4);
    return std::vector<TensorType>{{out, u ? DataType::UInt(32) : I32}};
  };
  d.compute = [](const OpCall& c, const std::vector<te::Tensor>& in) {
    int axis = normalize_axis(c, c.attrs.get_int("axis"), c.input_types[0].ndim());
    return std::vector<te::Tensor>{ops::pack_i8x4(in[0], axis, static_cast<int>(c.attrs.get_int("shift")))};
  };
  d.sharding = replicated_rule();
  return d;
}

OpDef sum_def() {
  OpDef d;
  d.name = "kiln.SumI8";
  d.doc = "int32 sums of int32(x) + shift along `axis`, which the result drops (the zero-point terms of an int8 matmul)";
  d.attrs = {{"axis", AttrKind::Int, std::nullopt}, {"shift", AttrKind::Int, int64_t(0)}};
  d.pattern = Pattern::Reduction;
  d.infer = [](const OpCall& c) {
    const TensorType& x = c.input_types[0];
    if (!byte_dtype(x.dtype)) c.fail("sums int8 or uint8, got " + x.dtype.str());
    int axis = normalize_axis(c, c.attrs.get_int("axis"), x.ndim());
    Shape out;
    for (int k = 0; k < x.ndim(); ++k)
      if (k != axis) out.push_back(x.shape[k]);
    return std::vector<TensorType>{{out, I32}};
  };
  d.compute = [](const OpCall& c, const std::vector<te::Tensor>& in) {
    int axis = normalize_axis(c, c.attrs.get_int("axis"), c.input_types[0].ndim());
    return std::vector<te::Tensor>{ops::sum_i8(in[0], axis, static_cast<int>(c.attrs.get_int("shift")))};
  };
  d.sharding = replicated_rule();
  return d;
}

// The output dtype: int32 without a multiplier, else the y_dtype code's.
DataType qmatmul_out(const OpCall& c) {
  if (!c.has_input(5)) return I32;
  int64_t code = c.attrs.get_int("y_dtype");
  if (code != 2 && code != 3) c.fail("y_dtype " + std::to_string(code) + " is not 2 (uint8) or 3 (int8)");
  return code == 2 ? DataType::UInt(8) : DataType::Int(8);
}

// A per-column input: a scalar or [N] of dtype t.
void check_column(const OpCall& c, int i, DataType t, const Dim& n, const char* what) {
  if (!c.has_input(i)) return;
  const TensorType& p = c.input_types[i];
  if (p.dtype != t || p.ndim() > 1 || (p.ndim() == 1 && !(p.shape[0] == n) && !(p.shape[0] == Dim(1))))
    c.fail(std::string(what) + " " + p.str() + " must be a " + t.str() + " scalar or one value per column (" + n.str() + ")");
}

te::Tensor qmatmul_compute(const OpCall& c, const std::vector<te::Tensor>& in) {
  te::Tensor dot = in[1].ndim() == 3 ? ops::matmul_packed_b(in[0], in[1], "matmul_i8x4", dot_i8x4) : ops::matmul_i8x4(in[0], in[1], "matmul_i8x4");
  auto opt = [&](int k) { return c.has_input(k) ? in[k] : te::Tensor(); };
  te::Tensor a_sum = opt(2), b_sum = opt(3), b_zero = opt(4), mult = opt(5);
  int64_t k = c.attrs.get_int("k"), a_zero = c.attrs.get_int("a_zero");
  DataType q = qmatmul_out(c);
  bool relu = c.attrs.get_int("relu") != 0;
  Expr y_zero = make_const(F32, static_cast<double>(c.attrs.get_int("y_zero")));
  return te::compute(dot.shape(), [&](const std::vector<Var>& i) {
    std::vector<Expr> at(i.begin(), i.end());
    Expr n = i.back();
    Expr acc = dot(at);
    Expr zb = b_zero.defined() ? param_at(b_zero, n) : Expr();
    if (a_sum.defined() && zb.defined()) acc = acc - zb * a_sum(std::vector<Expr>(at.begin(), at.end() - 1));
    if (a_zero != 0 && b_sum.defined()) acc = acc - make_const(I32, static_cast<double>(a_zero)) * b_sum(std::vector<Expr>{n});
    if (a_zero != 0 && zb.defined()) acc = acc + make_const(I32, static_cast<double>(k * a_zero)) * zb;
    if (!mult.defined()) return acc;
    Expr y = saturate_to(q, cast(F32, acc) * param_at(mult, n), y_zero);
    return relu ? max(y, cast(q, y_zero)) : y;
  }, "requantize_i8x4");
}

OpDef qmatmul_def() {
  OpDef d;
  d.name = "kiln.QMatMulI8x4";
  d.doc = "int8 matmul of byte quads with int32 accumulation, its zero-point terms and optional requantization and ReLU (see i8_dot.cpp)";
  d.min_inputs = 2;
  d.max_inputs = 6;
  d.attrs = {{"k", AttrKind::Int, std::nullopt}, {"a_zero", AttrKind::Int, int64_t(0)}, {"y_zero", AttrKind::Int, int64_t(0)},
             {"y_dtype", AttrKind::Int, int64_t(0)}, {"relu", AttrKind::Int, int64_t(0)}};
  d.pattern = Pattern::OutputFusable;
  d.infer = [](const OpCall& c) {
    const TensorType &a = c.input_types[0], &b = c.input_types[1];
    if (!word_dtype(a.dtype) || !word_dtype(b.dtype) || a.ndim() < 2 || (b.ndim() != 2 && b.ndim() != 3))
      c.fail("A4 " + a.str() + " and B4 " + b.str() + " must be byte quads (pack_i8x4), A4 [..., M, K/4] and B4 [K/4, N] or panels [N/nb, K/4, nb]");
    bool panels = b.ndim() == 3;
    const Dim& k4 = b.shape[panels ? 1 : 0];
    if (!(a.shape.back() == k4)) c.fail("A4 holds " + a.shape.back().str() + " quads of K but B4 " + k4.str());
    if (panels && !b.is_static()) c.fail("panels B4 " + b.str() + " must have a static shape");
    Shape out = a.shape;
    out.back() = panels ? Dim(b.shape[0].value() * b.shape[2].value()) : b.shape[1];
    const Dim n = out.back();
    if (c.has_input(2)) {
      Shape rows(a.shape.begin(), a.shape.end() - 1);
      if (c.input_types[2].dtype != I32 || !(c.input_types[2].shape == rows)) c.fail("a_sum " + c.input_types[2].str() + " must be int32 " + shape_to_string(rows));
    }
    check_column(c, 3, I32, n, "b_sum");
    check_column(c, 4, I32, n, "b_zero");
    check_column(c, 5, F32, n, "multiplier");
    return std::vector<TensorType>{{out, qmatmul_out(c)}};
  };
  d.compute = [](const OpCall& c, const std::vector<te::Tensor>& in) { return std::vector<te::Tensor>{qmatmul_compute(c, in)}; };
  d.cost = [](const OpCall& c, const std::vector<TensorType>& out) {
    OpCost k;
    double outputs = static_cast<double>(out[0].numel());
    const Dim& k4 = c.input_types[1].shape[c.input_types[1].ndim() == 3 ? 1 : 0];
    k.macs = outputs * 4.0 * static_cast<double>(k4.is_static() ? k4.value() : 1);
    k.flops = 2 * k.macs + 6 * outputs;
    k.rows = outputs / static_cast<double>(std::max<int64_t>(out[0].shape.back().is_static() ? out[0].shape.back().value() : 1, 1));
    return k;
  };
  d.sharding = replicated_rule();
  return d;
}

const bool registered = [] {
  register_op(pack_def());
  register_op(sum_def());
  register_op(qmatmul_def());
  return true;
}();

}  // namespace
}  // namespace kiln::graph::ops_detail
