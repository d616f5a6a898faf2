// grouped_grad_input_by_phases (conv_grad_grouped.h). The transposed
// convolution of a stride-s conv as a convolution of dY dilated by s reads
// s^r - 1 zeros for each value (r spatial dims): MobileNetV2's stride-2
// depthwise input gradients ran 3 to 10 times their forward's time that way.
// Split by phase, each output element sums only the taps that reach it.
#include "conv_grad_grouped.h"

#include "kiln/ir/op.h"
#include "kiln/ops/broadcast.h"
#include "window_grad.h"

namespace kiln::graph::ops_detail {

using ops::index_imm;
using ops::shape_exprs;

te::Tensor grouped_grad_input_by_phases(const te::Tensor& dY, const te::Tensor& W, const std::vector<ops::WindowDim>& dims, int64_t G,
                                        const std::vector<int64_t>& xs) {
  size_t r = dims.size();
  bool strided = false;
  for (const ops::WindowDim& d : dims) {
    if (d.dilation != 1) return te::Tensor();
    strided |= d.stride > 1;
  }
  if (G == 1 || !strided || xs.size() != r + 2) return te::Tensor();
  std::vector<int64_t> ws = ops::const_shape(W);
  int64_t K = ws[0], Cg = ws[1], Kg = K / G;
  // Z [N, C, phases (s per dim)..., positions per phase (ceil(in / s))...]
  std::vector<int64_t> zs{xs[0], xs[1]};
  for (const ops::WindowDim& d : dims) zs.push_back(d.stride);
  for (size_t j = 0; j < r; ++j) zs.push_back((xs[j + 2] + dims[j].stride - 1) / dims[j].stride);
  std::vector<IterVar> axes;
  if (Kg > 1) axes.push_back(te::reduce_axis(Range(0, index_imm(Kg)), "kk"));
  std::vector<Expr> t(r, index_imm(0));
  for (size_t j = 0; j < r; ++j) {
    int64_t taps = (dims[j].kernel + dims[j].stride - 1) / dims[j].stride;  // the most any phase takes
    if (taps > 1) {
      axes.push_back(te::reduce_axis(Range(0, index_imm(taps)), "t" + std::to_string(j)));
      t[j] = axes.back().var();
    }
  }
  if (axes.empty()) axes.push_back(te::reduce_axis(Range(0, index_imm(1)), "one"));
  te::Tensor Z = te::compute(shape_exprs(zs), [&](const std::vector<Var>& i) {
    Expr c = i[1];
    Expr k = floordiv(c, index_imm(Cg)) * index_imm(Kg);
    if (Kg > 1) k = k + axes[0].var();
    std::vector<Expr> yi{i[0], k}, wi{k, Cg == 1 ? index_imm(0) : floormod(c, index_imm(Cg))};
    Expr valid;
    for (size_t j = 0; j < r; ++j) {
      const ops::WindowDim& d = dims[j];
      Expr p = i[2 + j], a = i[2 + r + j], s = index_imm(d.stride);
      Expr kh = floormod(p + index_imm(d.pad_begin), s) + t[j] * s;
      Expr o = a + floordiv(p + index_imm(d.pad_begin), s) - t[j];
      valid = and_maybe(valid, kh < index_imm(d.kernel) && o >= 0 && o < index_imm(d.out));
      yi.push_back(o);
      wi.push_back(kh);
    }
    return te::sum(if_then_else(valid, dY(yi) * W(wi), make_zero(dY.dtype())), axes);
  }, "conv_grad_input.phases");
  return te::compute(shape_exprs(xs), [&](const std::vector<Var>& i) {
    std::vector<Expr> zi{i[0], i[1]};
    for (size_t j = 0; j < r; ++j) zi.push_back(floormod(i[2 + j], index_imm(dims[j].stride)));
    for (size_t j = 0; j < r; ++j) zi.push_back(floordiv(i[2 + j], index_imm(dims[j].stride)));
    return Z(zi);
  }, "conv_grad_input");
}

}  // namespace kiln::graph::ops_detail
