// Quad-packed int8 operands and their matmul (i8_dot.h).
#include "kiln/ops/i8_dot.h"

#include "kiln/arith/analyzer.h"
#include "kiln/ir/op.h"
#include "kiln/ops/broadcast.h"
#include "kiln/ops/graph_nn.h"
#include "kiln/support/error.h"

namespace kiln::ops {

bool i8x4_unsigned(DataType x, int shift) {
  KILN_USER_CHECK(x == DataType::Int(8) || x == DataType::UInt(8)) << "pack_i8x4: packs int8 or uint8 values, got " << x.str();
  bool u = x.is_uint();
  KILN_USER_CHECK(shift == 0 || (shift == 128 && !u) || (shift == -128 && u))
      << "pack_i8x4: " << x.str() << " shifted by " << shift << " fits no byte type; the shift is 0, +128 (int8 to uint8) or -128 (uint8 to int8)";
  return shift == 0 ? u : !u;
}

Tensor pack_i8x4(const Tensor& X, int axis, int shift, const std::string& name) {
  bool out_unsigned = i8x4_unsigned(X.dtype(), shift);
  const std::vector<Expr>& s = X.shape();
  int r = static_cast<int>(s.size());
  if (axis < 0) axis += r;
  KILN_USER_CHECK(axis >= 0 && axis < r) << "pack_i8x4: axis out of range for a rank-" << r << " tensor";
  Expr K = s[axis];
  const int64_t* k = as_const_int(K);
  std::vector<Expr> out = s;
  out[axis] = k ? index_imm((*k + 3) / 4) : arith::simplify(floordiv(K + 3, index_imm(4)));
  const DataType u32 = DataType::UInt(32), i32 = DataType::Int(32);
  return te::compute(out, [&](const std::vector<Var>& i) {
    Expr word;
    for (int j = 0; j < 4; ++j) {
      std::vector<Expr> at(i.begin(), i.end());
      at[axis] = i[axis] * index_imm(4) + index_imm(j);
      Expr v = cast(i32, X(at));
      if (shift) v = v + make_const(i32, shift);
      // The byte's two's-complement bits, as a uint32 digit of base 256.
      Expr byte = cast(u32, cast(DataType::UInt(8), v));
      if (!k || (*k % 4 != 0 && 4 * (*k / 4) + j >= *k)) byte = if_then_else(at[axis] < K, byte, make_const(u32, 0));
      if (j) byte = byte * make_const(u32, double(uint32_t{1} << (8 * j)));
      word = j ? word + byte : byte;
    }
    return out_unsigned ? word : cast(i32, word);
  }, name);
}

Tensor sum_i8(const Tensor& X, int axis, int shift, const std::string& name) {
  int r = X.ndim();
  if (axis < 0) axis += r;
  KILN_USER_CHECK(axis >= 0 && axis < r) << "sum_i8: axis out of range for a rank-" << r << " tensor";
  std::vector<Expr> out;
  for (int d = 0; d < r; ++d)
    if (d != axis) out.push_back(X.shape()[d]);
  IterVar k = te::reduce_axis(Range(index_imm(0), X.shape()[axis]), "k");
  const DataType i32 = DataType::Int(32);
  return te::compute(out, [&](const std::vector<Var>& i) {
    std::vector<Expr> at(i.begin(), i.end());
    at.insert(at.begin() + axis, k.var());
    Expr v = cast(i32, X(at));
    if (shift) v = v + make_const(i32, shift);
    return te::sum(v, {k});
  }, name);
}

Tensor matmul_i8x4(const Tensor& A4, const Tensor& B4, const std::string& name) {
  auto word = [](const Tensor& t, const char* what) {
    DataType d = t.dtype();
    KILN_USER_CHECK((d.is_int() || d.is_uint()) && d.bits() == 32 && d.is_scalar())
        << "matmul_i8x4: " << what << " must be int32/uint32 byte quads (pack_i8x4), got " << d.str();
  };
  word(A4, "A");
  word(B4, "B");
  return matmul_nd(A4, B4, name, dot_i8x4);
}

}  // namespace kiln::ops
