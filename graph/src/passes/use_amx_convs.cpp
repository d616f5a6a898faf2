// use_amx_convs (passes.h): on targets with AMX-BF16, a training step's
// bfloat16 convolutions (a Conv of computed weights and both of its
// gradients, 2-D, group 1) become one bfloat16-pair matmul each, so that
// ops::amx_schedule (cpu_amx.h) runs their inner products on tiles where
// use_bf16_dot's kiln.ConvBF16Pairs / ConvGradInputBF16Pairs /
// ConvGradWeightBF16Pairs run on vdpbf16ps (a quarter of the tiles' rate).
// Each is an im2col: the operand read at the taps is turned channels-last
// and its windows laid side by side as rows, [pixels, taps * channels]:
//   Conv:           Y[P, K]     = cols(X)[P, T*C]        x W as [T*C, K]
//   ConvGradInput:  dX[P', C]   = cols(dY')[P', T*K]     x W as [T*K, C]
//                   (dY' is dY with stride-1 zeros between its pixels, its
//                   taps read in reverse: the transposed convolution)
//   ConvGradWeight: dW[K, T*C]  = dY as [K, P]           x cols(X)[P, T*C]
// the reduction padded with zeros to whole tiles (32 bfloat16 values), then
// kiln.PackBF16Pairs and kiln.MatMulBF16Pairs as use_bf16_dot makes them.
// The windows cost T copies of the read operand (memory-bound, once per
// call); what does not fit (symbolic shapes, groups, auto_pad) is left to
// use_bf16_dot, whose pair forms stay the fallback on targets without AMX.
#include <algorithm>
#include <string>
#include <vector>

#include "kiln/graph/op_registry.h"
#include "kiln/graph/passes.h"
#include "kiln/graph/rewrite.h"
#include "kiln/ops/cpu_amx.h"

namespace kiln::graph {

namespace {

Value ints(const std::vector<int64_t>& v, const std::string& name) {
  NDArray a = NDArray::empty({static_cast<int64_t>(v.size())}, DataType::Int(64));
  std::copy(v.begin(), v.end(), a.data_as<int64_t>());
  return make_constant(name, a)->output();
}

Value op(const char* name, std::vector<Value> in, Attrs a, const std::string& node) { return make_op(name, std::move(in), std::move(a), node)->output(); }
Value reshape(const Value& v, const std::vector<int64_t>& s, const std::string& name) { return op("Reshape", {v, ints(s, name + ".shape")}, {}, name); }
Value transpose(const Value& v, const std::vector<int64_t>& perm, const std::string& name) { return op("Transpose", {v}, Attrs({{"perm", perm}}), name); }

// Pads (negative crops) of a rank-r value: before and after per axis.
Value pad(const Value& v, const std::vector<int64_t>& before, const std::vector<int64_t>& after, const std::string& name) {
  bool any = false;
  for (size_t k = 0; k < before.size(); ++k) any = any || before[k] != 0 || after[k] != 0;
  if (!any) return v;
  std::vector<int64_t> p = before;
  p.insert(p.end(), after.begin(), after.end());
  return op("Pad", {v, ints(p, name + ".pads")}, {}, name);
}

// Static 4-D shape of a value, or empty.
std::vector<int64_t> static_shape(const Value& v) {
  std::vector<int64_t> s;
  if (!v.defined() || v.type().ndim() != 4) return {};
  for (const Dim& d : v.type().shape) {
    if (!d.is_static()) return {};
    s.push_back(d.value());
  }
  return s;
}

// One spatial axis of the windows im2col reads: `out` positions `stride`
// apart, taps `dilation` apart, the first tap at `pad_begin` before the
// input's start; `reversed` reads tap k at the place of tap kernel-1-k.
struct Axis {
  int64_t in, kernel, stride, dilation, pad_begin, out;
  bool reversed = false;
};

// x channels-last [N, H, W, C] -> [N*OH*OW, KH*KW*C], columns ordered (tap h, tap w, channel).
Value im2col(const Value& x, const Axis& h, const Axis& w, const std::string& name) {
  std::vector<int64_t> s = static_shape(x);
  const int64_t N = s[0], C = s[3], P = N * h.out * w.out;
  auto span = [](const Axis& a) { return (a.out - 1) * a.stride + (a.kernel - 1) * a.dilation + 1; };
  Value xp = pad(x, {0, h.pad_begin, w.pad_begin, 0}, {0, span(h) - h.in - h.pad_begin, span(w) - w.in - w.pad_begin, 0}, name + ".pad");
  std::vector<Value> taps;
  for (int64_t kh = 0; kh < h.kernel; ++kh)
    for (int64_t kw = 0; kw < w.kernel; ++kw) {
      const int64_t oh = (h.reversed ? h.kernel - 1 - kh : kh) * h.dilation, ow = (w.reversed ? w.kernel - 1 - kw : kw) * w.dilation;
      const std::string t = name + ".tap" + std::to_string(kh) + "_" + std::to_string(kw);
      Value v = xp;
      if (h.kernel * w.kernel > 1 || h.stride > 1 || w.stride > 1)
        v = op("Slice", {xp, ints({oh, ow}, t + ".starts"), ints({oh + (h.out - 1) * h.stride + 1, ow + (w.out - 1) * w.stride + 1}, t + ".ends"),
                         ints({1, 2}, t + ".axes"), ints({h.stride, w.stride}, t + ".steps")}, {}, t);
      taps.push_back(reshape(v, {P, C}, t + ".rows"));
    }
  return taps.size() == 1 ? taps[0] : op("Concat", taps, Attrs({{"axis", int64_t(1)}}), name);
}

// A [M, R] x B [R, N] in float32 from bfloat16 pairs along R, padded to whole tiles.
Value pair_matmul(Value a, Value b, const std::string& name) {
  const int64_t R = a.type().shape[1].value(), Rp = R <= 32 ? R : (R + 31) / 32 * 32;
  a = pad(a, {0, 0}, {0, Rp - R}, name + ".a_tiles");
  b = pad(b, {0, 0}, {Rp - R, 0}, name + ".b_tiles");
  Value pa = op("kiln.PackBF16Pairs", {a}, Attrs({{"axis", int64_t(1)}}), name + ".a_pairs");
  Value pb = op("kiln.PackBF16Pairs", {b}, Attrs({{"axis", int64_t(0)}}), name + ".b_pairs");
  return op("kiln.MatMulBF16Pairs", {pa, pb}, Attrs({{"transA", int64_t(0)}, {"transB", int64_t(0)}}), name);
}

// Whether an [M, N] product takes ops::amx_schedule's tiles: rows and columns
// with a divisor from 4 to 32 (else the im2col would only add copies).
bool tiles_fit(int64_t M, int64_t N) {
  auto fits = [](int64_t n) {
    for (int64_t d = std::min<int64_t>(n, 32); d >= 4; --d)
      if (n % d == 0) return true;
    return false;
  };
  return fits(M) && fits(N);
}

std::vector<int64_t> ints_or(const OpNode& n, const char* name, std::vector<int64_t> fallback) {
  return n.attrs.has(name) && !n.attrs.get_ints(name).empty() ? n.attrs.get_ints(name) : fallback;
}

// The 2-D windows of a node's attributes (kernel from `kernel`), or false when they are not plain 2-D ones.
struct Windows {
  std::vector<int64_t> strides, dilations, pads;
};
bool windows_of(const OpNode& n, Windows* w) {
  if (n.attrs.has("auto_pad") && n.attrs.get_string("auto_pad") != "NOTSET") return false;
  if (n.attrs.get_int_or("group", 1) != 1) return false;
  w->strides = ints_or(n, "strides", {1, 1});
  w->dilations = ints_or(n, "dilations", {1, 1});
  w->pads = ints_or(n, "pads", {0, 0, 0, 0});
  return w->strides.size() == 2 && w->dilations.size() == 2 && w->pads.size() == 4;
}

Value nchw_to_nhwc(const Value& v, const std::string& name) { return transpose(v, {0, 2, 3, 1}, name); }

// Conv(X [N, C, H, W], W [K, C, KH, KW][, B]) of bfloat16 values and computed weights.
std::vector<Value> rewrite_conv(const OpNode& n) {
  Windows win;
  if (n.num_outputs() != 1 || !windows_of(n, &win)) return {};
  Value x = bfloat16_source(n.inputs[0]), w = bfloat16_source(n.inputs[1]);
  if (!x.defined() || !w.defined() || w.node->kind == NodeKind::Constant) return {};  // constant weights: inference's NCHWc form
  std::vector<int64_t> xs = static_shape(x), ws = static_shape(w), ys = static_shape(n.output());
  if (xs.empty() || ws.empty() || ys.empty() || !tiles_fit(ys[0] * ys[2] * ys[3], ys[1])) return {};
  Axis h{xs[2], ws[2], win.strides[0], win.dilations[0], win.pads[0], ys[2]}, wa{xs[3], ws[3], win.strides[1], win.dilations[1], win.pads[1], ys[3]};
  Value cols = im2col(nchw_to_nhwc(x, n.name + ".x_nhwc"), h, wa, n.name + ".x_cols");
  Value wm = reshape(transpose(w, {2, 3, 1, 0}, n.name + ".w_taps"), {ws[1] * ws[2] * ws[3], ws[0]}, n.name + ".w_rows");
  Value y = pair_matmul(cols, wm, n.name);
  if (n.inputs.size() > 2 && n.inputs[2].defined()) y = op("Add", {y, n.inputs[2]}, {}, n.name + ".bias");
  return {transpose(reshape(y, {ys[0], ys[2], ys[3], ys[1]}, n.name + ".y_nhwc"), {0, 3, 1, 2}, n.name + ".y")};
}

// kiln.ConvGradInput(dY [N, K, OH, OW], W [K, C, KH, KW]) -> dX: a stride-1
// convolution of dY with zeros between its pixels, by W's taps reversed.
std::vector<Value> rewrite_conv_grad_input(const OpNode& n) {
  Windows win;
  if (!windows_of(n, &win)) return {};
  Value dy = bfloat16_source(n.inputs[0]), w = bfloat16_source(n.inputs[1]);
  const std::vector<int64_t>& xs = n.attrs.get_ints("input_shape");
  std::vector<int64_t> ys = static_shape(dy), ws = static_shape(w);
  if (!dy.defined() || !w.defined() || ys.empty() || ws.empty() || xs.size() != 4 || !tiles_fit(xs[0] * xs[2] * xs[3], xs[1])) return {};
  const int64_t sh = win.strides[0], sw = win.strides[1];
  Value u = nchw_to_nhwc(dy, n.name + ".dy_nhwc");
  if (sh > 1 || sw > 1) {  // [N, OH, 1, OW, 1, K] padded to [N, OH, sh, OW, sw, K]: dY's pixels sh and sw apart
    u = reshape(u, {ys[0], ys[2], 1, ys[3], 1, ys[1]}, n.name + ".dy_cells");
    u = pad(u, {0, 0, 0, 0, 0, 0}, {0, 0, sh - 1, 0, sw - 1, 0}, n.name + ".dy_zeros");
    u = reshape(u, {ys[0], ys[2] * sh, ys[3] * sw, ys[1]}, n.name + ".dy_spread");
  }
  auto axis = [&](int j) {
    const int64_t d = win.dilations[j], k = ws[2 + j];
    return Axis{ys[2 + j] * win.strides[j], k, 1, d, (k - 1) * d - win.pads[j], xs[2 + j], true};
  };
  Value cols = im2col(u, axis(0), axis(1), n.name + ".dy_cols");
  Value wm = reshape(transpose(w, {2, 3, 0, 1}, n.name + ".w_taps"), {ws[0] * ws[2] * ws[3], ws[1]}, n.name + ".w_rows");
  Value dx = pair_matmul(cols, wm, n.name);
  return {transpose(reshape(dx, {xs[0], xs[2], xs[3], xs[1]}, n.name + ".dx_nhwc"), {0, 3, 1, 2}, n.name + ".dx")};
}

// kiln.ConvGradWeight(X [N, C, H, W], dY [N, K, OH, OW]) -> dW [K, C, KH, KW]:
// dY's rows by X's windows, the pixels (padded to whole tiles) summed.
std::vector<Value> rewrite_conv_grad_weight(const OpNode& n) {
  Windows win;
  if (!windows_of(n, &win)) return {};
  Value x = bfloat16_source(n.inputs[0]), dy = bfloat16_source(n.inputs[1]);
  std::vector<int64_t> xs = static_shape(x), ys = static_shape(dy), ks = ints_or(n, "kernel_shape", {});
  if (!x.defined() || !dy.defined() || xs.empty() || ys.empty() || ks.size() != 2 || !tiles_fit(ys[1], xs[1] * ks[0] * ks[1])) return {};
  Axis h{xs[2], ks[0], win.strides[0], win.dilations[0], win.pads[0], ys[2]}, wa{xs[3], ks[1], win.strides[1], win.dilations[1], win.pads[1], ys[3]};
  const int64_t K = ys[1], C = xs[1], P = ys[0] * ys[2] * ys[3], Pp = P <= 32 ? P : (P + 31) / 32 * 32;
  Value cols = pad(im2col(nchw_to_nhwc(x, n.name + ".x_nhwc"), h, wa, n.name + ".x_cols"), {0, 0}, {Pp - P, 0}, n.name + ".x_tiles");
  Value dym = pad(reshape(transpose(dy, {1, 0, 2, 3}, n.name + ".dy_kn"), {K, P}, n.name + ".dy_rows"), {0, 0}, {0, Pp - P}, n.name + ".dy_tiles");
  Value dw = pair_matmul(dym, cols, n.name);
  return {transpose(reshape(dw, {K, ks[0], ks[1], C}, n.name + ".dw_taps"), {0, 3, 1, 2}, n.name + ".dw")};
}

}  // namespace

Graph use_amx_convs(const Graph& g, const Target& target) {
  if (!ops::target_has_amx(target, "bf16")) return g;
  return rewrite_graph(g, [](const Ref<OpNode>& n) -> std::vector<Value> {
    if (n->op->name == "Conv") return rewrite_conv(*n);
    if (n->op->name == "kiln.ConvGradInput") return rewrite_conv_grad_input(*n);
    if (n->op->name == "kiln.ConvGradWeight") return rewrite_conv_grad_weight(*n);
    return {};
  });
}

}  // namespace kiln::graph
