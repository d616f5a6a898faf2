// Pair-packed bfloat16 operands and their matmul (bf16_pairs.h).
#include "kiln/ops/bf16_pairs.h"

#include "kiln/arith/analyzer.h"
#include "kiln/ir/op.h"
#include "kiln/ir/printer.h"
#include "kiln/ops/broadcast.h"
#include "kiln/ops/graph_nn.h"
#include "kiln/support/error.h"

namespace kiln::ops {

Tensor pack_bf16_pairs(const Tensor& X, int axis, const std::string& name) {
  const std::vector<Expr>& s = X.shape();  // symbolic dims allowed, the packed one too (attention's P V contracts over seq)
  int r = static_cast<int>(s.size());
  if (axis < 0) axis += r;
  KILN_USER_CHECK(axis >= 0 && axis < r) << "pack_bf16_pairs: axis out of range for a rank-" << r << " tensor";
  KILN_USER_CHECK(X.dtype() == DataType::Float(32) || X.dtype() == DataType::BFloat16())
      << "pack_bf16_pairs: packs float32 or bfloat16 values, got " << X.dtype().str();
  Expr K = s[axis];
  const int64_t* k = as_const_int(K);
  std::vector<Expr> out = s;
  out[axis] = k ? index_imm((*k + 1) / 2) : arith::simplify(floordiv(K + 1, index_imm(2)));
  return te::compute(out, [&](const std::vector<Var>& i) {
    std::vector<Expr> lo(i.begin(), i.end()), hi(i.begin(), i.end());
    lo[axis] = i[axis] * index_imm(2);
    hi[axis] = lo[axis] + index_imm(1);
    DataType f = DataType::Float(32);
    Expr high = cast(f, X(hi));
    // An odd K: the last pair's high half is zero (and X is not read past its end).
    if (!k || *k % 2 != 0) high = if_then_else(hi[axis] < K, high, make_const(f, 0.0));
    return pack_bf16x2(cast(f, X(lo)), high);
  }, name);
}

Tensor matmul_bf16_pairs(const Tensor& A2, const Tensor& B2, bool trans_a, bool trans_b, const std::string& name) {
  auto check = [](const Tensor& t, const char* what) {
    KILN_USER_CHECK(t.dtype() == DataType::UInt(32)) << "matmul_bf16_pairs: " << what << " must be uint32 bfloat16 pairs (pack_bf16_pairs), got " << t.dtype().str();
  };
  check(A2, "A");
  check(B2, "B");
  if (!trans_a && !trans_b) return matmul_nd(A2, B2, name, dot_bf16x2);
  KILN_USER_CHECK(A2.ndim() == 2 && B2.ndim() == 2) << "matmul_bf16_pairs: transposed operands must be 2-D, got ranks " << A2.ndim() << " and " << B2.ndim();
  return gemm(A2, B2, Tensor(), 1.0, 0.0, trans_a, trans_b, name, dot_bf16x2);
}

}  // namespace kiln::ops
