// kiln's operators of the Winograd F(2x2, 3x3) and F(4x4, 3x3) convolutions
// (made by the alter_conv_layout pass, never imported): the input transform,
// the 16 or 36 batched products, and the output transform, which takes the conv's
// epilogue (bias, residual, activation) as a conv does.
#include "kiln/ops/winograd.h"

#include "kiln/ops/broadcast.h"
#include "op_helpers.h"

namespace kiln::graph::ops_detail {
namespace {

// The output tile m of F(m x m, 3x3): 2 or 4.
int64_t tile_of(const OpCall& c) {
  int64_t m = c.attrs.get_int_or("tile", 2);
  if (m != 2 && m != 4) c.fail("tile " + std::to_string(m) + " is not a Winograd output tile (2 or 4)");
  return m;
}

// The output transform's batch: out_nhw[0], or for 0 (a symbolic batch) the input's tile count over one image's.
Dim output_batch(const OpCall& c) {
  const auto& nhw = c.attrs.get_ints("out_nhw");
  if (nhw.size() != 3 || nhw[0] < 0 || nhw[1] <= 0 || nhw[2] <= 0) c.fail("needs 3 output extents (N, OH, OW): OH and OW positive, N positive or 0 (symbolic)");
  if (nhw[0] > 0) return Dim(nhw[0]);
  if (c.input_types[0].ndim() != 4) c.fail("input " + c.input_types[0].str() + " is not [(m+2)^2, K/kb, tiles, kb]");
  int64_t per_image = ops::winograd_tiles(1, nhw[1], nhw[2], tile_of(c)).count();
  Expr n = ops::exact_quotient({c.input_types[0].shape[2].expr()}, {Expr(static_cast<int>(per_image))});
  if (!n.defined()) c.fail("input " + c.input_types[0].str() + " does not hold a whole number of images' " + std::to_string(per_image) + " tiles");
  return Dim(n);
}

const bool registered = [] {
  OpDef in;
  in.name = "kiln.WinogradInputNCHWc";
  in.doc = "Winograd F(m x m, 3x3) input transform of [N, C/cb, H, W, cb] to [(m+2)^2, C/cb, tiles, cb] (pads: top, left; out_hw: the conv's output; tile: m, 2 or 4)";
  in.min_inputs = in.max_inputs = 1;
  in.attrs = {{"pads", AttrKind::Ints, std::nullopt}, {"out_hw", AttrKind::Ints, std::nullopt}, {"tile", AttrKind::Int, int64_t(2)}};
  in.pattern = Pattern::Injective;
  in.infer = [](const OpCall& c) {
    c.expect_rank(0, 5);
    const auto& x = c.input_types[0].shape;
    const auto& pads = c.attrs.get_ints("pads");
    const auto& hw = c.attrs.get_ints("out_hw");
    if (pads.size() != 2 || hw.size() != 2 || pads[0] < 0 || pads[1] < 0 || hw[0] <= 0 || hw[1] <= 0) c.fail("needs 2 non-negative pads and 2 positive output extents");
    ops::WinogradTiles t = ops::winograd_tiles(1, hw[0], hw[1], tile_of(c));  // one image's tiles; the batch may be symbolic
    return std::vector<TensorType>{{{t.alpha() * t.alpha(), x[1], dim_mul(x[0], t.count()), x[4]}, c.input_types[0].dtype}};
  };
  in.compute = [](const OpCall& c, const std::vector<te::Tensor>& t) {
    const auto& pads = c.attrs.get_ints("pads");
    const auto& hw = c.attrs.get_ints("out_hw");
    return std::vector<te::Tensor>{ops::winograd_input_nchwc(t[0], static_cast<int>(pads[0]), static_cast<int>(pads[1]), hw[0], hw[1], tile_of(c))};
  };
  in.sharding = replicated_rule();
  register_op(in);

  OpDef mm;
  mm.name = "kiln.WinogradMatMul";
  mm.doc = "the a = 16 or 36 products of a Winograd conv: [a, C/cb, tiles, cb] by transformed weights [a, K/kb, C/cb, cb, kb] to [a, K/kb, tiles, kb]";
  mm.min_inputs = mm.max_inputs = 2;
  mm.pattern = Pattern::OutputFusable;
  mm.infer = [](const OpCall& c) {
    c.expect_rank(0, 4);
    c.expect_rank(1, 5);
    const auto& v = c.input_types[0].shape;
    const auto& u = c.input_types[1].shape;
    if ((v[0] != 16 && v[0] != 36) || u[0] != v[0] || v[1] != u[2] || v[3] != u[3]) c.fail("input " + c.input_types[0].str() + " and weights " + c.input_types[1].str() + " do not match");
    return std::vector<TensorType>{{{v[0], u[1], v[2], u[4]}, c.input_types[0].dtype}};
  };
  mm.compute = [](const OpCall&, const std::vector<te::Tensor>& t) { return std::vector<te::Tensor>{ops::winograd_matmul(t[0], t[1])}; };
  // Per transform point: a [tiles, C] x [C, K] product, C = v[1] * v[3] (blocked).
  mm.cost = [](const OpCall& c, const std::vector<TensorType>& out) {
    const auto& v = c.input_types[0].shape;
    OpCost k;
    k.macs = static_cast<double>(c.input_types[0].numel()) / v[1] / v[3] * c.input_types[1].numel() / v[0];
    k.flops = 2 * k.macs;
    k.rows = static_cast<double>(v[2]);
    return k;
  };
  mm.sharding = replicated_rule();
  register_op(mm);

  OpDef out;
  out.name = "kiln.WinogradOutputNCHWc";
  out.doc = "Winograd F(m x m, 3x3) output transform of [(m+2)^2, K/kb, tiles, kb] to [N, K/kb, OH, OW, kb] (out_nhw: N, OH, OW, N 0 for a "
            "symbolic batch: the input's tiles over one image's; tile: m, 2 or 4)";
  out.min_inputs = out.max_inputs = 1;
  out.attrs = {{"out_nhw", AttrKind::Ints, std::nullopt}, {"tile", AttrKind::Int, int64_t(2)}};
  // Its elementwise consumers (bias, residual, activation) fuse into it, as into a conv.
  out.pattern = Pattern::OutputFusable;
  out.infer = [](const OpCall& c) {
    c.expect_rank(0, 4);
    const auto& m = c.input_types[0].shape;
    const auto& nhw = c.attrs.get_ints("out_nhw");
    Dim n = output_batch(c);
    ops::WinogradTiles t = ops::winograd_tiles(1, nhw[1], nhw[2], tile_of(c));
    if (!(m[0] == t.alpha() * t.alpha()) || !(m[2] == dim_mul(n, t.count())))
      c.fail("input " + c.input_types[0].str() + " does not hold the tiles of that output");
    return std::vector<TensorType>{{{n, m[1], nhw[1], nhw[2], m[3]}, c.input_types[0].dtype}};
  };
  out.compute = [](const OpCall& c, const std::vector<te::Tensor>& t) {
    const auto& nhw = c.attrs.get_ints("out_nhw");
    return std::vector<te::Tensor>{ops::winograd_output_nchwc(t[0], output_batch(c).expr(), nhw[1], nhw[2], tile_of(c))};
  };
  out.sharding = replicated_rule();
  register_op(out);
  return true;
}();

}  // namespace
}  // namespace kiln::graph::ops_detail
