// The gradients of a blocked conv2d (conv_grad_nchwc.h).
#include "kiln/ops/conv_grad_nchwc.h"

#include <algorithm>
#include <numeric>

#include "kiln/ir/op.h"
#include "kiln/ops/broadcast.h"
#include "kiln/runtime/ndarray.h"
#include "kiln/support/error.h"

namespace kiln::ops {

namespace {

Expr E(int64_t v) { return index_imm(v); }

int64_t mod(int64_t a, int64_t b) { return ((a % b) + b) % b; }

// One spatial dim of the data gradient, for the input positions
// h = stride * q + phase (q < count): the kernel taps that reach them,
// r = first + j * step (j < taps), flipped so that flipped tap j of
// position q reads dY at q + offset + j * dilation (a stride-1 convolution).
struct Phase {
  int64_t count = 0, taps = 0, first = 0, step = 1, offset = 0, dilation = 1;
  Expr tap(const Expr& j) const { return E(first + (taps - 1) * step) - j * E(step); }
  int64_t last_read() const { return count - 1 + offset + (taps - 1) * dilation; }
};

Phase phase_of(int64_t phase, int64_t in, int64_t kernel, int64_t stride, int64_t dilation, int64_t pad) {
  Phase f;
  f.count = phase < in ? (in - phase + stride - 1) / stride : 0;
  const int64_t g = std::gcd(stride, dilation);
  f.step = stride / g;
  f.dilation = dilation / g;
  int64_t r0 = 0;
  while (r0 < kernel && mod(phase + pad - r0 * dilation, stride) != 0) ++r0;
  if (r0 == kernel || f.count == 0) return f;  // no tap: the phase's gradient is zero
  f.first = r0;
  f.taps = (kernel - 1 - r0) / f.step + 1;
  // The output position the first tap meets at q = 0 (exact: the tap was chosen so).
  const int64_t e0 = (phase + pad - r0 * dilation) / stride;
  f.offset = e0 - (f.taps - 1) * f.dilation;
  return f;
}

// The taps of phase `phase` (an index expression) among fs.
Expr fs_taps(const std::vector<Phase>& fs, const Expr& phase) {
  Expr t = E(fs.back().taps);
  for (size_t k = fs.size() - 1; k-- > 0;) t = select(phase == E(static_cast<int64_t>(k)), E(fs[k].taps), t);
  return t;
}

std::vector<Phase> phases_of(int64_t in, int64_t kernel, int64_t stride, int64_t dilation, int64_t pad) {
  std::vector<Phase> v;
  for (int64_t p = 0; p < stride; ++p) v.push_back(phase_of(p, in, kernel, stride, dilation, pad));
  return v;
}

// The zeros dY needs on each side so that every phase's reads stay inside: [before, after].
std::pair<int64_t, int64_t> dy_pads(const std::vector<Phase>& phases, int64_t out) {
  int64_t lo = 0, hi = 0;
  for (const Phase& f : phases)
    if (f.taps > 0) lo = std::max(lo, -f.offset), hi = std::max(hi, f.last_read() - (out - 1));
  return {lo, hi};
}

// The stride phases of a data gradient and dY padded so every phase's reads stay inside.
struct PhasedDy {
  std::vector<Phase> ph, pw;  // per phase of rows and columns
  te::Tensor D;               // dY with the zeros dy_pads asks for
  bool one_phase = true;      // stride 1: one phase, no selects
  int64_t th = 0, tw = 0;     // the most taps of any phase, rows and columns
  int64_t top = 0, left = 0;  // D's zeros before dY's first row and column
};

PhasedDy phased_dy(const te::Tensor& dY, const Conv2dParams& p, int64_t H, int64_t Wd, int64_t KH, int64_t KW, int64_t OH, int64_t OW, const std::string& name) {
  PhasedDy r;
  r.ph = phases_of(H, KH, p.stride_h, p.dilation_h, p.pad_top);
  r.pw = phases_of(Wd, KW, p.stride_w, p.dilation_w, p.pad_left);
  auto [top, bottom] = dy_pads(r.ph, OH);
  auto [left, right] = dy_pads(r.pw, OW);
  r.top = top, r.left = left;
  r.D = pad_hw(dY, static_cast<int>(top), static_cast<int>(left), static_cast<int>(bottom), static_cast<int>(right), name + ".pad");
  r.one_phase = p.stride_h == 1 && p.stride_w == 1;
  for (const Phase& f : r.ph) r.th = std::max(r.th, f.taps);
  for (const Phase& f : r.pw) r.tw = std::max(r.tw, f.taps);
  return r;
}

// A phase's tap j, by its index (the per-phase constants as a chain of selects).
Expr phase_tap(const std::vector<Phase>& fs, const Expr& phase, const Expr& j) {
  Expr t = fs.back().tap(j);
  for (size_t k = fs.size() - 1; k-- > 0;) t = select(phase == E(static_cast<int64_t>(k)), fs[k].tap(j), t);
  return t;
}

// The data gradient [N, Cb, H, W, lanes] from its phases' stride-1 convolutions Z[a][b]
// (undefined where no tap reaches: zero there). One phase is the gradient itself; else
// the phases interleave, their reads clamped, as each is evaluated at every position,
// not only its own phase's.
te::Tensor interleave_phases(const std::vector<std::vector<te::Tensor>>& Z, const PhasedDy& phased, const te::Tensor& dY, int64_t Cb, int64_t H, int64_t Wd,
                             int64_t lanes, const std::string& name) {
  if (phased.one_phase && Z[0][0].defined()) return Z[0][0];
  const int64_t sh = static_cast<int64_t>(phased.ph.size()), sw = static_cast<int64_t>(phased.pw.size());
  return te::compute({dY.shape()[0], E(Cb), E(H), E(Wd), E(lanes)}, [&](const std::vector<Var>& i) {
    Expr v = make_zero(dY.dtype());
    for (int64_t a = 0; a < sh; ++a)
      for (int64_t b = 0; b < sw; ++b) {
        if (!Z[a][b].defined()) continue;
        Expr q = min(floordiv(i[2], E(sh)), E(phased.ph[a].count - 1)), r = min(floordiv(i[3], E(sw)), E(phased.pw[b].count - 1));
        Expr here = floormod(i[2], E(sh)) == E(a) && floormod(i[3], E(sw)) == E(b);
        v = if_then_else(here, Z[a][b](std::vector<Expr>{i[0], i[1], q, r, i[4]}), v);
      }
    return v;
  }, name, {"n", "co", "h", "w", "ci"});
}

int64_t static_extent(const te::Tensor& t, size_t d, const char* what) {
  const int64_t* c = d < t.shape().size() ? as_const_int(t.shape()[d]) : nullptr;
  KILN_USER_CHECK(c) << what << ": dimension " << d << " of '" << t.name() << "' " << extents_to_string(t.shape()) << " must be static";
  return *c;
}

std::vector<int64_t> static_shape(const te::Tensor& t, int rank, const char* what, const char* layout) {
  KILN_USER_CHECK(t.ndim() == rank) << what << ": '" << t.name() << "' " << extents_to_string(t.shape()) << " must be " << layout;
  std::vector<int64_t> s;
  for (int d = 0; d < rank; ++d) s.push_back(static_extent(t, static_cast<size_t>(d), what));
  return s;
}

int64_t conv_out(int64_t in, int64_t pads, int64_t kernel, int64_t dilation, int64_t stride) { return (in + pads - dilation * (kernel - 1) - 1) / stride + 1; }

void check_params(const Conv2dParams& p, const char* what) {
  KILN_USER_CHECK(p.stride_h > 0 && p.stride_w > 0 && p.dilation_h > 0 && p.dilation_w > 0 && p.pad_top >= 0 && p.pad_left >= 0 && p.pad_bottom >= 0 &&
                  p.pad_right >= 0)
      << what << ": strides and dilations must be positive and pads non-negative";
}

// How many groups the weight gradient splits a batch of n images into (a divisor of n): the
// most whose images hold at least kGroupSteps output pixels each (a register tile's
// reduction long enough to pay for storing its accumulators once per group), while the
// partial gradients (`elements` each) stay within kPartialBytes. ResNet-18's 64-channel
// 28x28 layer (1 thread, CPU time, loaded Xeon): 4 groups of 2 images 99-105 GFLOP/s,
// 8 of 1 (512 steps) 90-101, 8 at 14x14 (128 steps) 83 against 108 with 1 group.
constexpr int64_t kGroupSteps = 1024;
constexpr int64_t kPartialBytes = 4 << 20;
int64_t batch_groups(int64_t n, int64_t pixels, int64_t elements) {
  int64_t best = 1;
  for (int64_t g = 1; g <= n; ++g)
    if (n % g == 0 && (n / g) * pixels >= kGroupSteps && g * elements * 4 <= kPartialBytes) best = g;
  return best;
}

}  // namespace

te::Tensor conv2d_nchwc_grad_input(const te::Tensor& dY, const te::Tensor& W, const Conv2dParams& p, int64_t H, int64_t Wd, int64_t cb,
                                   const std::string& name, int64_t channels) {
  const char* what = "conv2d_nchwc_grad_input";
  check_params(p, what);
  std::vector<int64_t> ys = static_shape(dY, 5, what, "[N, K/kb, OH, OW, kb]");
  // Plain [K, C, KH, KW], or the forward's packed [K/kb, C/cb, KH, KW, cb, kb] (as the plain, K padded).
  const bool packed = W.ndim() == 6;
  std::vector<int64_t> ws = packed ? static_shape(W, 6, what, "[K/kb, C/cb, KH, KW, cb, kb]") : static_shape(W, 4, what, "[K, C, KH, KW] or [K/kb, C/cb, KH, KW, cb, kb]");
  if (packed) {
    KILN_USER_CHECK(ws[0] == ys[1] && ws[5] == ys[4] && ws[4] == cb && channels > 0 && ws[1] == (channels + cb - 1) / cb)
        << what << ": packed weights " << shape_to_string(ws) << " do not match dY " << shape_to_string(ys) << " and " << channels << " input channels in blocks of " << cb;
    ws = {ws[0] * ws[5], channels, ws[2], ws[3]};
  }
  const int64_t K = ws[0], C = ws[1], KH = ws[2], KW = ws[3], kb = ys[4], OH = ys[2], OW = ys[3];
  KILN_USER_CHECK(cb > 0 && H > 0 && Wd > 0) << what << ": the input's extents and channel block must be positive";
  KILN_USER_CHECK(ys[1] * kb >= K && (ys[1] - 1) * kb < K) << what << ": dY " << shape_to_string(ys) << " does not hold the " << K << " output channels of W "
                                                           << shape_to_string(ws) << " in blocks of " << kb;
  KILN_USER_CHECK(conv_out(H, p.pad_top + p.pad_bottom, KH, p.dilation_h, p.stride_h) == OH && conv_out(Wd, p.pad_left + p.pad_right, KW, p.dilation_w, p.stride_w) == OW)
      << what << ": dY " << shape_to_string(ys) << " is not the output of a " << KH << "x" << KW << " conv over a " << H << "x" << Wd << " input";
  const int64_t Cb = (C + cb - 1) / cb, sh = p.stride_h, sw = p.stride_w;
  const PhasedDy phased = phased_dy(dY, p, H, Wd, KH, KW, OH, OW, name);
  const std::vector<Phase>&ph = phased.ph, &pw = phased.pw;
  const te::Tensor& D = phased.D;
  const bool one_phase = phased.one_phase;
  const int64_t th = phased.th, tw = phased.tw, top = phased.top, left = phased.left;
  auto tap = phase_tap;
  // The phases' weights in one stage, flipped and transposed,
  // [phases, C/cb, K/kb, taps_h, taps_w, kb, cb] (the most taps of any phase; a phase reads
  // only its own): the cb input channels of a step contiguous, the register tile's vector.
  // One stage, not one per phase, and so one padded dY: the schedule rules enumerate a
  // sketch per choice of every stage (at most 64), and their default stores these stages
  // only in a sketch they reach. The guard zeroes the padded channels and makes the
  // rules store the stage rather than inline it (which would gather each vector from
  // cb rows of W).
  te::Tensor Wp;
  if (th > 0 && tw > 0)
    Wp = te::compute({E(sh * sw), E(Cb), E(ys[1]), E(th), E(tw), E(kb), E(cb)}, [&](const std::vector<Var>& i) {
      Expr k = i[2] * E(kb) + i[5], c = i[1] * E(cb) + i[6];
      Expr a = one_phase ? E(0) : floordiv(i[0], E(sw)), b = one_phase ? E(0) : floormod(i[0], E(sw));
      Expr ry = min(max(tap(ph, a, i[3]), E(0)), E(KH - 1)), rx = min(max(tap(pw, b, i[4]), E(0)), E(KW - 1));
      Expr guard = k < E(K) && c < E(C);
      if (!one_phase) {  // a phase with fewer taps than the most: the rest are never read
        Expr taps_h = fs_taps(ph, a), taps_w = fs_taps(pw, b);
        guard = guard && i[3] < taps_h && i[4] < taps_w;
      }
      if (packed) return if_then_else(guard, W(std::vector<Expr>{i[2], i[1], ry, rx, i[6], i[5]}), make_zero(W.dtype()));
      return if_then_else(guard, W(std::vector<Expr>{min(k, E(K - 1)), min(c, E(C - 1)), ry, rx}), make_zero(W.dtype()));
    }, name + ".weights", {"phase", "co", "ko", "jy", "jx", "ki", "ci"});
  // One stride-1 convolution per phase with taps in both dims.
  std::vector<std::vector<te::Tensor>> Z(sh, std::vector<te::Tensor>(sw));
  for (int64_t a = 0; a < sh; ++a)
    for (int64_t b = 0; b < sw; ++b) {
      const Phase &fh = ph[a], &fw = pw[b];
      if (fh.taps == 0 || fw.taps == 0) continue;
      const std::string tag = one_phase ? name : name + ".phase" + std::to_string(a) + std::to_string(b);
      IterVar rko = te::reduce_axis(Range(0, E(ys[1])), "rko"), ry = te::reduce_axis(Range(0, E(fh.taps)), "ry"),
              rx = te::reduce_axis(Range(0, E(fw.taps)), "rx"), rki = te::reduce_axis(Range(0, E(kb)), "rki");
      Z[a][b] = te::compute({dY.shape()[0], E(Cb), E(fh.count), E(fw.count), E(cb)}, [&](const std::vector<Var>& i) {
        Expr y = i[2] + E(fh.offset + top) + ry.var() * E(fh.dilation), x = i[3] + E(fw.offset + left) + rx.var() * E(fw.dilation);
        Expr d = D(std::vector<Expr>{i[0], rko.var(), y, x, rki.var()});
        return te::sum(d * Wp(std::vector<Expr>{E(a * sw + b), i[1], rko.var(), ry.var(), rx.var(), rki.var(), i[4]}), {rko, ry, rx, rki});
      }, tag, {"n", "co", "y", "x", "ci"});
    }
  return interleave_phases(Z, phased, dY, Cb, H, Wd, cb, name);
}

te::Tensor conv2d_nchwc_grad_weight(const te::Tensor& X, const te::Tensor& dY, const Conv2dParams& p, int64_t K, int64_t C, int64_t KH, int64_t KW,
                                    const std::string& name, bool packed) {
  const char* what = "conv2d_nchwc_grad_weight";
  check_params(p, what);
  std::vector<int64_t> xs = static_shape(X, 5, what, "[N, C/cb, H, W, cb]"), ys = static_shape(dY, 5, what, "[N, K/kb, OH, OW, kb]");
  const int64_t cb = xs[4], kb = ys[4], OH = ys[2], OW = ys[3];
  KILN_USER_CHECK(KH > 0 && KW > 0) << what << ": the kernel extents must be positive";
  KILN_USER_CHECK(xs[0] == ys[0]) << what << ": X " << shape_to_string(xs) << " and dY " << shape_to_string(ys) << " differ in batch";
  KILN_USER_CHECK(C > 0 && xs[1] * cb >= C && (xs[1] - 1) * cb < C) << what << ": X " << shape_to_string(xs) << " does not hold " << C << " channels in blocks of " << cb;
  KILN_USER_CHECK(K > 0 && ys[1] * kb >= K && (ys[1] - 1) * kb < K) << what << ": dY " << shape_to_string(ys) << " does not hold " << K << " channels in blocks of " << kb;
  KILN_USER_CHECK(conv_out(xs[2], p.pad_top + p.pad_bottom, KH, p.dilation_h, p.stride_h) == OH &&
                  conv_out(xs[3], p.pad_left + p.pad_right, KW, p.dilation_w, p.stride_w) == OW)
      << what << ": dY " << shape_to_string(ys) << " is not the output of a " << KH << "x" << KW << " conv over X " << shape_to_string(xs);
  // X padded once (only as far as the windows read), so the reduction reads it without conditions.
  const int64_t rows = (OH - 1) * p.stride_h + (KH - 1) * p.dilation_h + 1, cols = (OW - 1) * p.stride_w + (KW - 1) * p.dilation_w + 1;
  te::Tensor P = pad_hw(X, p.pad_top, p.pad_left, static_cast<int>(std::max<int64_t>(0, rows - p.pad_top - xs[2])),
                        static_cast<int>(std::max<int64_t>(0, cols - p.pad_left - xs[3])), name + ".pad");
  // The batch in G groups of nb images, a spatial axis of the reduction (an rfactor over
  // the batch): every register tile of a group sweeps the same nb images of X and dY, which
  // stay in L2 between tiles, where one reduction over the whole batch per tile streamed
  // all of X's and dY's blocks from L3 again for each tile (ResNet-18's 64-channel 28x28
  // layer: its time varied 2x with what else ran). A last stage sums the G partial gradients.
  const int64_t G = batch_groups(xs[0], OH * OW, KH * KW * ys[1] * kb * std::min(xs[1] * cb, std::max(C, cb)));
  const int64_t nb = xs[0] / G;
  IterVar rn = te::reduce_axis(Range(0, E(nb)), "rn"), ry = te::reduce_axis(Range(0, E(OH)), "roh"), rx = te::reduce_axis(Range(0, E(OW)), "row");
  // Output channels innermost (dY's vector); the register tile's rows along the kernel
  // columns, then the input channels (the schedule rules' seed takes rows from the
  // innermost axes out): a 3x3 kernel's tile is 3 columns x 4 channels x two vectors,
  // 24 accumulators for 2 vector loads and 12 broadcasts a step, where rows of 8 channels
  // alone gave 16 for 2 + 8. The columns' inputs are neighbouring pixels, reread from L1.
  // The output rows run innermost in the reduction, not the columns: unrolled along the
  // columns, step ow + 1 of column kx reads what step ow of column kx + 1 did, and LLVM
  // kept those broadcasts live across steps (AVX2, 16 registers: spills). Rows inner ran
  // 1.15-1.45x faster on ResNet-18's 3x3 stride-1 layers (AVX2 56-59 -> 75-84 GFLOP/s,
  // AVX-512 95-118 -> 112-137; 1 thread, CPU time, loaded Xeon). With a stride the
  // columns stay innermost: the 7x7 stride-2 stem ran at 82 GFLOP/s so, 58 rows inner
  // (AVX-512; AVX2 56 against 52), the 3x3 stride-2 layers the same either way.
  const bool rows_inner = p.stride_w == 1;
  // One block of fewer channels than it holds (a stem's 3 of 16): the padded ones are
  // left out of the products, not computed and dropped (5x the work).
  const int64_t ci_extent = xs[1] == 1 ? C : cb;
  te::Tensor R = te::compute({E(G), E(ys[1]), E(xs[1]), E(KH), E(ci_extent), E(KW), E(kb)}, [&](const std::vector<Var>& i) {
    Expr n = i[0] * E(nb) + rn.var();
    Expr h = ry.var() * E(p.stride_h) + i[3] * E(p.dilation_h), w = rx.var() * E(p.stride_w) + i[5] * E(p.dilation_w);
    Expr x = P(std::vector<Expr>{n, i[2], h, w, i[4]});
    return te::sum(x * dY(std::vector<Expr>{n, i[1], ry.var(), rx.var(), i[6]}), rows_inner ? std::vector<IterVar>{rn, rx, ry} : std::vector<IterVar>{rn, ry, rx});
  }, name + ".blocked", {"g", "ko", "co", "ky", "ci", "kx", "ki"});
  if (packed) {
    // The forward's packed layout [K/kb, C/cb, KH, KW, cb, kb]: R with (cb, KW) swapped, whole
    // vectors of kb moved; the padded channels zero, as packed weights need them.
    const Expr Cx = E(C), Kx = E(K);
    auto packed_at = [&](const std::vector<Var>& i, const Expr& g) {
      Expr ci = ci_extent < cb ? min(i[4], E(ci_extent - 1)) : Expr(i[4]);
      return R(std::vector<Expr>{g, i[0], i[1], i[2], ci, i[3], i[5]});
    };
    auto guarded = [&](const std::vector<Var>& i, const Expr& v) {
      return if_then_else(i[0] * E(kb) + i[5] < Kx && i[1] * E(cb) + i[4] < Cx, v, make_zero(v.dtype()));
    };
    const std::vector<Expr> shape{E(ys[1]), E(xs[1]), E(KH), E(KW), E(cb), E(kb)};
    const std::vector<std::string> names{"ko", "co", "ky", "kx", "ci", "ki"};
    if (G == 1) return te::compute(shape, [&](const std::vector<Var>& i) { return guarded(i, packed_at(i, E(0))); }, name, names);
    IterVar rg = te::reduce_axis(Range(0, E(G)), "rg");
    te::Tensor S = te::compute(shape, [&](const std::vector<Var>& i) { return te::sum(packed_at(i, rg.var()), {rg}); }, name + ".sum", names);
    return te::compute(shape, [&](const std::vector<Var>& i) { return guarded(i, S(std::vector<Expr>(i.begin(), i.end()))); }, name, names);
  }
  auto at = [&](const std::vector<Var>& i, const Expr& g) {
    return R(std::vector<Expr>{g, floordiv(i[0], E(kb)), floordiv(i[1], E(cb)), i[2], floormod(i[1], E(cb)), i[3], floormod(i[0], E(kb))});
  };
  if (G == 1) return te::compute({E(K), E(C), E(KH), E(KW)}, [&](const std::vector<Var>& i) { return at(i, E(0)); }, name, {"k", "c", "ky", "kx"});
  IterVar rg = te::reduce_axis(Range(0, E(G)), "rg");
  return te::compute({E(K), E(C), E(KH), E(KW)}, [&](const std::vector<Var>& i) { return te::sum(at(i, rg.var()), {rg}); }, name, {"k", "c", "ky", "kx"});
}

// The depthwise forms: each channel its own 1-channel convolution, so a
// product is one vector of the block's lanes (dY's and X's, the same
// channels) by one of the weights', no reduction over channels.

te::Tensor depthwise_nchwc_grad_input(const te::Tensor& dY, const te::Tensor& W, const Conv2dParams& p, int64_t H, int64_t Wd, const std::string& name) {
  const char* what = "depthwise_nchwc_grad_input";
  check_params(p, what);
  std::vector<int64_t> ys = static_shape(dY, 5, what, "[N, C/b, OH, OW, b]"), ws = static_shape(W, 4, what, "[C, 1, KH, KW]");
  const int64_t b = ys[4], Cb = ys[1], C = ws[0], KH = ws[2], KW = ws[3], OH = ys[2], OW = ys[3];
  KILN_USER_CHECK(ws[1] == 1 && Cb * b == C) << what << ": dY " << shape_to_string(ys) << " and W " << shape_to_string(ws)
                                             << " are not a depthwise conv's (W [C, 1, KH, KW], C in whole blocks of dY)";
  KILN_USER_CHECK(conv_out(H, p.pad_top + p.pad_bottom, KH, p.dilation_h, p.stride_h) == OH && conv_out(Wd, p.pad_left + p.pad_right, KW, p.dilation_w, p.stride_w) == OW)
      << what << ": dY " << shape_to_string(ys) << " is not the output of a " << KH << "x" << KW << " conv over a " << H << "x" << Wd << " input";
  const int64_t sh = p.stride_h, sw = p.stride_w;
  const PhasedDy phased = phased_dy(dY, p, H, Wd, KH, KW, OH, OW, name);
  const std::vector<Phase>&ph = phased.ph, &pw = phased.pw;
  const te::Tensor& D = phased.D;
  const bool one_phase = phased.one_phase;
  const int64_t th = phased.th, tw = phased.tw, top = phased.top, left = phased.left;
  auto tap = phase_tap;
  // The phases' flipped weights [phases, C/b, taps_h, taps_w, b]: a tap's b channels
  // contiguous (the plain W holds them KH * KW apart). The guard, as the group-1 form's,
  // keeps the rules from inlining the gather into every product.
  te::Tensor Wp;
  if (th > 0 && tw > 0)
    Wp = te::compute({E(sh * sw), E(Cb), E(th), E(tw), E(b)}, [&](const std::vector<Var>& i) {
      Expr a = one_phase ? E(0) : floordiv(i[0], E(sw)), bb = one_phase ? E(0) : floormod(i[0], E(sw));
      Expr ry = min(max(tap(ph, a, i[2]), E(0)), E(KH - 1)), rx = min(max(tap(pw, bb, i[3]), E(0)), E(KW - 1));
      Expr guard = i[2] < fs_taps(ph, a) && i[3] < fs_taps(pw, bb);
      return if_then_else(guard, W(std::vector<Expr>{i[1] * E(b) + i[4], E(0), ry, rx}), make_zero(W.dtype()));
    }, name + ".weights", {"phase", "co", "jy", "jx", "ci"});
  std::vector<std::vector<te::Tensor>> Z(sh, std::vector<te::Tensor>(sw));
  for (int64_t a = 0; a < sh; ++a)
    for (int64_t c = 0; c < sw; ++c) {
      const Phase &fh = ph[a], &fw = pw[c];
      if (fh.taps == 0 || fw.taps == 0) continue;
      const std::string tag = one_phase ? name : name + ".phase" + std::to_string(a) + std::to_string(c);
      IterVar ry = te::reduce_axis(Range(0, E(fh.taps)), "ry"), rx = te::reduce_axis(Range(0, E(fw.taps)), "rx");
      Z[a][c] = te::compute({dY.shape()[0], E(Cb), E(fh.count), E(fw.count), E(b)}, [&](const std::vector<Var>& i) {
        Expr y = i[2] + E(fh.offset + top) + ry.var() * E(fh.dilation), x = i[3] + E(fw.offset + left) + rx.var() * E(fw.dilation);
        Expr d = D(std::vector<Expr>{i[0], i[1], y, x, i[4]});
        return te::sum(d * Wp(std::vector<Expr>{E(a * sw + c), i[1], ry.var(), rx.var(), i[4]}), {ry, rx});
      }, tag, {"n", "co", "y", "x", "ci"});
    }
  return interleave_phases(Z, phased, dY, Cb, H, Wd, b, name);
}

te::Tensor depthwise_nchwc_grad_weight(const te::Tensor& X, const te::Tensor& dY, const Conv2dParams& p, int64_t KH, int64_t KW, const std::string& name) {
  const char* what = "depthwise_nchwc_grad_weight";
  check_params(p, what);
  std::vector<int64_t> xs = static_shape(X, 5, what, "[N, C/b, H, W, b]"), ys = static_shape(dY, 5, what, "[N, C/b, OH, OW, b]");
  const int64_t b = xs[4], Cb = xs[1], OH = ys[2], OW = ys[3];
  KILN_USER_CHECK(KH > 0 && KW > 0) << what << ": the kernel extents must be positive";
  KILN_USER_CHECK(xs[0] == ys[0] && xs[1] == ys[1] && xs[4] == ys[4]) << what << ": X " << shape_to_string(xs) << " and dY " << shape_to_string(ys)
                                                                      << " differ in batch or channel blocks";
  KILN_USER_CHECK(conv_out(xs[2], p.pad_top + p.pad_bottom, KH, p.dilation_h, p.stride_h) == OH &&
                  conv_out(xs[3], p.pad_left + p.pad_right, KW, p.dilation_w, p.stride_w) == OW)
      << what << ": dY " << shape_to_string(ys) << " is not the output of a " << KH << "x" << KW << " conv over X " << shape_to_string(xs);
  const int64_t rows = (OH - 1) * p.stride_h + (KH - 1) * p.dilation_h + 1, cols = (OW - 1) * p.stride_w + (KW - 1) * p.dilation_w + 1;
  te::Tensor P = pad_hw(X, p.pad_top, p.pad_left, static_cast<int>(std::max<int64_t>(0, rows - p.pad_top - xs[2])),
                        static_cast<int>(std::max<int64_t>(0, cols - p.pad_left - xs[3])), name + ".pad");
  // The batch in G groups (an rfactor over it, as the group-1 form's): more parallel
  // work than the few channel blocks, and each group's images stay in L2.
  const int64_t G = batch_groups(xs[0], OH * OW, KH * KW * Cb * b);
  const int64_t nb = xs[0] / G;
  IterVar rn = te::reduce_axis(Range(0, E(nb)), "rn"), ry = te::reduce_axis(Range(0, E(OH)), "roh"), rx = te::reduce_axis(Range(0, E(OW)), "row");
  // R [G, C/b, KH, KW, b]: a register tile of the taps times the block's vector; per
  // output pixel one load of dY and one of X per tap.
  te::Tensor R = te::compute({E(G), E(Cb), E(KH), E(KW), E(b)}, [&](const std::vector<Var>& i) {
    Expr n = i[0] * E(nb) + rn.var();
    Expr h = ry.var() * E(p.stride_h) + i[2] * E(p.dilation_h), w = rx.var() * E(p.stride_w) + i[3] * E(p.dilation_w);
    return te::sum(P(std::vector<Expr>{n, i[1], h, w, i[4]}) * dY(std::vector<Expr>{n, i[1], ry.var(), rx.var(), i[4]}), {rn, ry, rx});
  }, name + ".blocked", {"g", "co", "ky", "kx", "ci"});
  auto at = [&](const std::vector<Var>& i, const Expr& g) {
    return R(std::vector<Expr>{g, floordiv(i[0], E(b)), i[2], i[3], floormod(i[0], E(b))});
  };
  const std::vector<Expr> shape{E(Cb * b), E(1), E(KH), E(KW)};
  if (G == 1) return te::compute(shape, [&](const std::vector<Var>& i) { return at(i, E(0)); }, name, {"k", "c", "ky", "kx"});
  IterVar rg = te::reduce_axis(Range(0, E(G)), "rg");
  return te::compute(shape, [&](const std::vector<Var>& i) { return te::sum(at(i, rg.var()), {rg}); }, name, {"k", "c", "ky", "kx"});
}

}  // namespace kiln::ops
