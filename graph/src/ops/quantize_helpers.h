// Pieces of the quantized operators' arithmetic that the ONNX ops
// (quantize.cpp) and kiln's int8 dot-product ops (i8_dot.cpp) share, so that
// both round and saturate alike.
#ifndef KILN_GRAPH_OPS_QUANTIZE_HELPERS_H
#define KILN_GRAPH_OPS_QUANTIZE_HELPERS_H

#include <cstdint>

#include <string>

#include "kiln/graph/op_registry.h"
#include "kiln/ir/op.h"
#include "kiln/te/operation.h"

namespace kiln::graph::ops_detail {

struct QRange {
  int64_t lo, hi;
};
inline QRange range_of(DataType t) {
  if (t.is_uint()) return {0, (int64_t{1} << t.bits()) - 1};
  return {-(int64_t{1} << (t.bits() - 1)), (int64_t{1} << (t.bits() - 1)) - 1};
}

// One value of a scale or zero point: per tensor (index 0) or at the channel index c.
inline Expr param_at(const te::Tensor& p, const Expr& c) {
  if (p.ndim() == 0) return p(std::vector<Expr>{});
  if (is_const_int(p.shape()[0], 1)) return p(Expr(0));
  return p(c);
}

// round half to even, then the zero point, then saturation to `q`; v and the result of the sum are float32.
// NaN (which ONNX leaves undefined, and a cast to an integer would make
// poison) becomes the zero point: it dequantizes to 0, on every target alike.
inline Expr saturate_to(DataType q, Expr v, Expr zero_point) {
  const DataType f32 = DataType::Float(32);
  Expr zp = zero_point.defined() ? cast(f32, zero_point) : make_const(f32, 0.0);
  Expr y = round(std::move(v)) + zp;
  QRange r = range_of(q);
  Expr clamped = min(max(y, make_const(f32, static_cast<double>(r.lo))), make_const(f32, static_cast<double>(r.hi)));
  return cast(q, select(y == y, clamped, zp));
}

// Input i of `call`, a scale: float32, and where it is a constant every value finite and non-zero; fails naming `what`.
void check_scale(const OpCall& call, int i, const std::string& what);
// Input i, a zero point of quantized type q (or an integer constant whose values fit q); fails naming `what`.
void check_zero_point(const OpCall& call, int i, DataType q, const std::string& what);

}  // namespace kiln::graph::ops_detail

#endif  // KILN_GRAPH_OPS_QUANTIZE_HELPERS_H
