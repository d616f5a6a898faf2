#include "kiln/ops/cpu_conv2d.h"

#include <algorithm>
#include <cstdlib>
#include <numeric>

#include "kiln/ir/op.h"
#include "kiln/ops/cpu_gemm.h"
#include "kiln/ops/nn.h"
#include "kiln/support/error.h"

namespace kiln::ops {

using te::compute;
using te::Tensor;

int pick_conv_tile_width(int ow, int max_width) {
  // A divisor of ow avoids a tail tile, whose variable extent would stop the
  // unrolling that keeps it in registers.
  int best = 1;
  for (int d = 1; d <= std::min(ow, max_width); ++d)
    if (ow % d == 0) best = d;
  return best;
}

// One register left free beside the tile: with the input-channel and tap
// loops unrolled, LLVM loads the next weight vector early (AVX2 measured 37
// spills for a 14-pixel x 1-vector tile that fills all 16 exactly).
constexpr int kSpareRegisters = 1;

// KB and OWB of the blocked form: KB of two vectors or one (whichever
// divides K and, with the widest OWB that then fits, fills more
// accumulators; two on a tie: half the broadcasts per multiply-add).
static void resolve_blocked_tile(Conv2dTiling& t, const RegisterBudget& b, const Conv2dShape& s) {
  const int ohb = std::max(1, t.OHB);
  int best_acc = -1, best_kb = t.KB, best_owb = t.OWB;
  for (int v : {2, 1}) {
    int kb = t.KB ? t.KB : v * b.lanes;
    if (!t.KB && s.K % kb != 0) continue;
    int vectors = (kb + b.lanes - 1) / b.lanes;
    int owb = t.OWB ? t.OWB : pick_conv_tile_width(s.OW(), std::max(1, max_tile_rows(b.registers - kSpareRegisters, vectors) / ohb));
    int acc = ohb * owb * vectors;
    if (acc > best_acc) best_acc = acc, best_kb = kb, best_owb = owb;
  }
  if (best_acc < 0) {  // K is no multiple of the lanes: its largest divisor up to two vectors
    best_kb = channel_block(s.K, 2 * b.lanes);
    int vectors = (best_kb + b.lanes - 1) / b.lanes;
    best_owb = t.OWB ? t.OWB : pick_conv_tile_width(s.OW(), std::max(1, max_tile_rows(b.registers - kSpareRegisters, vectors) / ohb));
  }
  t.KB = best_kb;
  t.OWB = best_owb;
}

Conv2dTiling resolve_conv2d_tiling(const Conv2dTiling& given, const Target& target, const Conv2dShape& s) {
  RegisterBudget b = register_budget(target);
  KILN_USER_CHECK(given.CB >= 0 && given.KB >= 0 && given.OWB >= 0 && given.MR >= 0 && given.NR >= 0)
      << "cpu_conv2d: the tile sizes CB, KB, OWB, MR and NR must be positive (or 0: from the target)";
  Conv2dTiling t = given;
  if (s.C <= 0 || s.K <= 0 || s.OW() <= 0) return t;  // check_shape names the problem
  if (!t.CB) {
    t.CB = channel_block(s.C, b.lanes);
    if (t.CU > 0) t.CU = std::gcd(t.CU, t.CB);
  }
  resolve_blocked_tile(t, b, s);
  if (t.unroll_taps < 0) t.unroll_taps = b.registers > 16 ? 1 : 0;
  GemmTiling g;
  g.MR = given.MR, g.NR = given.NR;
  g = resolve_gemm_tiling(g, target, s.K, s.H * s.W);
  t.MR = g.MR, t.NR = g.NR;
  return t;
}

Conv2dTiling default_conv2d_tiling(const Target& target, const Conv2dShape& shape) { return resolve_conv2d_tiling({}, target, shape); }

bool conv_is_pointwise_gemm(const Conv2dShape& s, const Conv2dTiling& t) {
  int64_t pixels = int64_t(s.H) * s.W;
  return t.pointwise_as_gemm && t.nchw_out && s.KH == 1 && s.KW == 1 && s.stride == 1 && s.pad == 0 && t.MR > 0 && t.NR > 0 && s.K % t.MR == 0 &&
         pixels % t.NR == 0;
}

static void check_shape(const Conv2dShape& s, const Conv2dTiling& t) {
  KILN_USER_CHECK(s.N > 0 && s.C > 0 && s.H > 0 && s.W > 0 && s.K > 0 && s.KH > 0 && s.KW > 0 && s.stride > 0 && s.pad >= 0)
      << "cpu_conv2d: sizes and stride must be positive and the padding non-negative";
  KILN_USER_CHECK(s.OH() > 0 && s.OW() > 0) << "cpu_conv2d: the " << s.KH << "x" << s.KW << " kernel is larger than the padded " << s.H << "x" << s.W << " input";
  KILN_USER_CHECK(t.CU > 0) << "cpu_conv2d: the unroll CU must be positive";
  if (conv_is_pointwise_gemm(s, t)) {
    KILN_USER_CHECK(s.C % t.CU == 0) << "cpu_conv2d: the unroll CU = " << t.CU << " must divide C = " << s.C;
    return;
  }
  KILN_USER_CHECK(t.CB > 0 && s.C % t.CB == 0) << "cpu_conv2d: C = " << s.C << " must be a multiple of the channel block CB = " << t.CB;
  KILN_USER_CHECK(t.KB > 0 && s.K % t.KB == 0) << "cpu_conv2d: K = " << s.K << " must be a multiple of the output channel block KB = " << t.KB;
  KILN_USER_CHECK(t.OWB > 0 && t.OHB > 0) << "cpu_conv2d: the tile sizes OWB and OHB must be positive";
  KILN_USER_CHECK(t.CB % t.CU == 0) << "cpu_conv2d: the unroll CU = " << t.CU << " must divide CB = " << t.CB;
}

// ---------------------------------------------------------------- GEMM form

// Y[n] = W x X[n], pixels as the columns of X and Y. Each MR x NR tile
// broadcasts MR weights against NR/lanes vectors of one input row per input
// channel; the weights are packed [K/MR, C, MR] so the MR values of one step
// are contiguous. X needs no packing: its rows are already contiguous.
static void build_pointwise(CpuConv2d& r) {
  const Conv2dShape& s = r.shape;
  const Conv2dTiling& t = r.tiling;
  const int MR = t.MR, NR = t.NR, P = s.H * s.W;
  r.pointwise = true;
  r.W = te::placeholder({s.K, s.C, 1, 1}, DataType::Float(32), "W");
  r.packed_W_out = compute({s.K / MR, s.C, MR}, [&](const std::vector<Var>& i) { return r.W(i[0] * MR + i[2], i[1], 0, 0); }, "packed_W", {"ko", "c", "ki"});
  r.weight_schedule = te::create_schedule({r.packed_W_out});
  te::Stage& w = r.weight_schedule[r.packed_W_out];
  if (t.parallel) w.parallel(w.axis("ko"));

  r.X = te::placeholder({s.N, s.C, P}, DataType::Float(32), "X");
  r.packed_W = te::placeholder({s.K / MR, s.C, MR}, DataType::Float(32), "packed_W");
  IterVar rc = te::reduce_axis(Range(0, s.C), "rc");
  r.Y = compute({s.N, s.K, P},
                [&](const std::vector<Var>& i) { return te::sum(r.packed_W(floordiv(i[1], MR), rc.var(), floormod(i[1], MR)) * r.X(i[0], rc.var(), i[2]), {rc}); },
                "conv", {"n", "f", "p"});

  te::Schedule sch = te::create_schedule({r.Y});
  Tensor YL = sch.cache_write(r.Y, "local");
  te::Stage& o = sch[r.Y];
  auto [fo, fi] = o.split(o.axis("f"), MR);
  auto [po, pi] = o.split(o.axis("p"), NR);
  // Pixel panels outside channel blocks: the C x NR panel of X stays in L1
  // while every block of output channels passes over it.
  o.reorder({o.axis("n"), po, fo, fi, pi});
  IterVar block = o.fuse({o.axis("n"), po, fo});
  if (t.parallel) o.parallel(block);
  o.vectorize(pi);
  sch[YL].compute_at(o, block);
  te::Stage& l = sch[YL];
  auto [co, ci] = l.split(l.axis("rc"), t.CU);
  l.reorder({co, ci, l.axis("n"), l.axis("f"), l.axis("p")});
  l.unroll(ci);
  l.unroll(l.axis("f"));
  l.vectorize(l.axis("p"));
  r.schedule = sch;
}

// ------------------------------------------------------------- blocked form

// OIHW -> [K/KB, C/CB, KH, KW, CB, KB]: the KB output channels of one
// (input channel, tap) are one contiguous run, the vector loads of a step.
static void build_blocked_weight_packing(CpuConv2d& r) {
  const Conv2dShape& s = r.shape;
  const int CB = r.tiling.CB, KB = r.tiling.KB;
  r.W = te::placeholder({s.K, s.C, s.KH, s.KW}, DataType::Float(32), "W");
  r.packed_W_out = compute({s.K / KB, s.C / CB, s.KH, s.KW, CB, KB},
                           [&](const std::vector<Var>& i) { return r.W(i[0] * KB + i[5], i[1] * CB + i[4], i[2], i[3]); }, "packed_W",
                           {"ko", "co", "ky", "kx", "ci", "ki"});
  r.weight_schedule = te::create_schedule({r.packed_W_out});
  te::Stage& w = r.weight_schedule[r.packed_W_out];
  if (r.tiling.parallel) w.parallel(w.axis("ko"));
}

static void build_blocked(CpuConv2d& r) {
  const Conv2dShape& s = r.shape;
  const Conv2dTiling& t = r.tiling;
  const int CB = t.CB, KB = t.KB, st = s.stride, p = s.pad;
  build_blocked_weight_packing(r);

  r.X = te::placeholder({s.N, s.C, s.H, s.W}, DataType::Float(32), "X");
  r.packed_W = te::placeholder({s.K / KB, s.C / CB, s.KH, s.KW, CB, KB}, DataType::Float(32), "packed_W");
  // Padding is materialised here, once per input element, instead of being a
  // bounds test inside the innermost loops.
  r.packed_X = compute({s.N, s.C / CB, s.H + 2 * p, s.W + 2 * p, CB},
                       [&](const std::vector<Var>& i) {
                         Expr h = i[2] - p, w = i[3] - p;
                         Expr inside = h >= 0 && h < s.H && w >= 0 && w < s.W;
                         return if_then_else(inside, r.X(i[0], i[1] * CB + i[4], h, w), make_zero(DataType::Float(32)));
                       },
                       "packed_X", {"n", "co", "h", "w", "ci"});
  // Two reduce axes for the channels (block, lane) instead of one with a
  // division: the packed layouts index them directly.
  IterVar rco = te::reduce_axis(Range(0, s.C / CB), "rco"), ry = te::reduce_axis(Range(0, s.KH), "ry"), rx = te::reduce_axis(Range(0, s.KW), "rx"),
          rci = te::reduce_axis(Range(0, CB), "rci");
  // The reduction always runs in the blocked layout [N, K/KB, OH, OW, KB]:
  // cache_write "local" keeps the layout of the tensor it caches, and this
  // one puts the KB channels of a pixel innermost, one vector per step.
  Tensor blocked = compute({s.N, s.K / KB, s.OH(), s.OW(), KB},
                           [&](const std::vector<Var>& i) {
                             Expr in = r.packed_X(i[0], rco.var(), i[2] * st + ry.var(), i[3] * st + rx.var(), rci.var());
                             return te::sum(in * r.packed_W(i[1], rco.var(), ry.var(), rx.var(), rci.var(), i[4]), {rco, ry, rx, rci});
                           },
                           t.nchw_out ? "conv.blocked" : "conv", {"n", "fo", "y", "x", "fi"});
  r.Y = t.nchw_out ? compute({s.N, s.K, s.OH(), s.OW()},
                             [&](const std::vector<Var>& i) { return blocked(i[0], floordiv(i[1], KB), i[2], i[3], floormod(i[1], KB)); }, "conv",
                             {"n", "f", "y", "x"})
                   : blocked;

  te::Schedule sch = te::create_schedule({r.Y});
  Tensor BL = sch.cache_write(blocked, "local");
  // With an NCHW output the transposing stage copies straight out of the
  // register tile, not through a blocked buffer.
  if (t.nchw_out) sch[blocked].compute_inline();
  te::Stage& o = sch[r.Y];
  IterVar fo, fi;
  if (t.nchw_out) std::tie(fo, fi) = o.split(o.axis("f"), KB);
  else fo = o.axis("fo"), fi = o.axis("fi");
  auto [yo, yi] = o.split(o.axis("y"), t.OHB);
  auto [xo, xi] = o.split(o.axis("x"), t.OWB);
  // Output channel blocks outermost: the weights of one block stay in L2
  // while every row of the image passes through.
  if (t.nchw_out) o.reorder({o.axis("n"), fo, yo, xo, fi, yi, xi});
  else o.reorder({o.axis("n"), fo, yo, xo, yi, xi, fi});
  IterVar block = o.fuse({o.axis("n"), fo, yo, xo});
  if (t.parallel) o.parallel(block);
  if (t.nchw_out) {
    // Fully unrolled, every index into the register tile is a constant, so
    // LLVM keeps the tile in registers and transposes it with shuffles; as a
    // loop it scatters each accumulator (measured 5% slower on the 3x3
    // layers, 30% on a 1x1).
    o.unroll(fi);
    o.unroll(yi);
    o.unroll(xi);
  } else {
    o.vectorize(fi);
  }
  sch[BL].compute_at(o, block);

  te::Stage& l = sch[BL];
  auto [cio, cii] = l.split(l.axis("rci"), t.CU);
  l.reorder({l.axis("rco"), l.axis("ry"), l.axis("rx"), cio, cii, l.axis("n"), l.axis("fo"), l.axis("y"), l.axis("x"), l.axis("fi")});
  if (t.unroll_taps != 0) l.unroll(l.axis("rx"));
  l.unroll(cii);
  l.unroll(l.axis("y"));
  l.unroll(l.axis("x"));
  l.vectorize(l.axis("fi"));

  // Packing is a transpose (CB rows of X into one CB-wide run per pixel).
  // Unrolled, each pixel is CB strided reads and one contiguous run of
  // writes; left as a loop, LLVM vectorises along w with scatters, which
  // measured 1.5x slower on the 64-channel 56x56 input.
  te::Stage& px = sch[r.packed_X];
  if (t.parallel) px.parallel(px.fuse({px.axis("n"), px.axis("co"), px.axis("h")}));
  px.unroll(px.axis("ci"));
  r.schedule = sch;
}

CpuConv2d cpu_conv2d(const Conv2dShape& shape, const Target& target) { return cpu_conv2d(shape, Conv2dTiling{}, target); }

CpuConv2d cpu_conv2d(const Conv2dShape& shape, const Conv2dTiling& tiling, const Target& target) {
  CpuConv2d r;
  r.shape = shape;
  r.tiling = resolve_conv2d_tiling(tiling, target, shape);
  check_shape(r.shape, r.tiling);
  if (conv_is_pointwise_gemm(r.shape, r.tiling)) build_pointwise(r);
  else build_blocked(r);
  return r;
}

}  // namespace kiln::ops
