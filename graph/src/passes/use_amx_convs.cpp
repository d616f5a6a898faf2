// use_amx_convs (passes.h): on targets with AMX-BF16, a training step's
// bfloat16 convolutions (a Conv of computed weights and both of its
// gradients, 2-D, group 1) become one bfloat16-pair matmul each, so that
// ops::amx_schedule (cpu_amx.h) runs their inner products on tiles where
// use_bf16_dot's kiln.ConvBF16Pairs / ConvGradInputBF16Pairs /
// ConvGradWeightBF16Pairs run on vdpbf16ps (a quarter of the tiles' rate).
// Each is an im2col: the operand read at the taps as channels-last rows
// (and a zero row), its windows gathered side by side by a constant table
// of row numbers, [pixels, taps * channels]:
//   Conv:           Y[P, K]    = windows(X)[P, T*C]   x W as [T*C, K]
//   ConvGradInput:  dX[P', C]  = windows(dY)[P', T*K] x W as [T*K, C]
//                   (the transposed convolution: pixel i at tap t reads dY
//                   at (i + pad - t * dilation) / stride where that divides,
//                   the zero row elsewhere)
//   ConvGradWeight: dW[K, T*C] = dY as [K, P]         x windows(X)[P, T*C]
// in bfloat16 pairs along the sum (channels: packed before the gather, so it
// moves words; pixels: after it), padded with zeros to whole tiles, as one
// kiln.MatMulBF16Pairs. The windows cost T copies of the read operand
// (memory-bound, once per call); what does not fit (symbolic shapes, groups,
// auto_pad, rows or columns without a tile's divisor, under 16 channels) is left to
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

// One spatial axis of the windows: output position o at tap t reads the
// source at q = o * step + offset + t * tap_step when q is a multiple of
// `spread` (the source's pixels that far apart) and q / spread lies in
// [0, src); else a zero.
struct Axis {
  int64_t src, kernel, step, offset, tap_step, spread, out;
  int64_t at(int64_t o, int64_t t) const {
    const int64_t q = o * step + offset + t * tap_step;
    return q < 0 || q % spread != 0 || q / spread >= src ? -1 : q / spread;
  }
};

// The rows of a source [N, C, H, W]: channels-last [N*H*W, C] and one zero row after them.
Value rows_of(const Value& v, const std::string& name) {
  std::vector<int64_t> s = static_shape(v);
  Value r = reshape(transpose(v, {0, 2, 3, 1}, name + ".nhwc"), {s[0] * s[2] * s[3], s[1]}, name + ".rows");
  return pad(r, {0, 0}, {1, 0}, name + ".zero_row");
}

// The row each output pixel reads at each tap (N*H*W for the zero row),
// [P, T] ordered (n, oh, ow) x (tap h, tap w), or [T, P] when `taps_first`.
NDArray window_table(int64_t N, const Axis& h, const Axis& w, bool taps_first, int64_t zero) {
  const int64_t T = h.kernel * w.kernel, P = N * h.out * w.out;
  NDArray table = NDArray::empty(taps_first ? std::vector<int64_t>{T, P} : std::vector<int64_t>{P, T}, DataType::Int(32));
  int32_t* at = table.data_as<int32_t>();
  int64_t p = 0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t oh = 0; oh < h.out; ++oh)
      for (int64_t ow = 0; ow < w.out; ++ow, ++p)
        for (int64_t th = 0; th < h.kernel; ++th)
          for (int64_t tw = 0; tw < w.kernel; ++tw) {
            const int64_t ih = h.at(oh, th), iw = w.at(ow, tw), t = th * w.kernel + tw;
            at[taps_first ? t * P + p : p * T + t] = static_cast<int32_t>(ih < 0 || iw < 0 ? zero : (n * h.src + ih) * w.src + iw);
          }
  return table;
}

// The windows of rows_of(source [N, ., H, W]) as [N*OH*OW, KH*KW*C'] (C' the rows' width),
// columns ordered (tap h, tap w, channel): one Gather by a constant table of row numbers.
Value windows(const Value& rows, int64_t N, const Axis& h, const Axis& w, const std::string& name) {
  NDArray table = window_table(N, h, w, false, N * h.src * w.src);
  Value g = op("Gather", {rows, make_constant(name + ".table", table)->output()}, Attrs({{"axis", int64_t(0)}}), name);
  return reshape(g, {table.shape()[0], table.shape()[1] * rows.type().shape[1].value()}, name + ".cols");
}

// The same transposed, from a source [N, C', H, W] of pair words: [C'*KH*KW, N*OH*OW], rows
// ordered (channel, tap h, tap w) as the weights [., C', KH, KW] hold them, so they need no transpose.
Value windows_by_channel(const Value& words, const Axis& h, const Axis& w, const std::string& name) {
  std::vector<int64_t> s = static_shape(words);
  Value cols = reshape(transpose(words, {1, 0, 2, 3}, name + ".cnhw"), {s[1], s[0] * s[2] * s[3]}, name + ".rows");
  cols = pad(cols, {0, 0}, {0, 1}, name + ".zero_col");
  NDArray table = window_table(s[0], h, w, true, s[0] * s[2] * s[3]);
  Value g = op("Gather", {cols, make_constant(name + ".table", table)->output()}, Attrs({{"axis", int64_t(1)}}), name);
  return reshape(g, {s[1] * table.shape()[0], table.shape()[1]}, name + ".cols");
}

Value pack(const Value& v, int64_t axis, const std::string& name) { return op("kiln.PackBF16Pairs", {v}, Attrs({{"axis", axis}}), name); }

// A [M, R] x B [R, N] of bfloat16 pair words along R, R padded with zero words to whole tiles (16 words).
Value pair_matmul(Value a, Value b, const std::string& name) {
  const int64_t R = a.type().shape[1].value(), Rp = R <= 16 ? R : (R + 15) / 16 * 16;
  a = pad(a, {0, 0}, {0, Rp - R}, name + ".a_tiles");
  b = pad(b, {0, 0}, {Rp - R, 0}, name + ".b_tiles");
  return op("kiln.MatMulBF16Pairs", {a, b}, Attrs({{"transA", int64_t(0)}, {"transB", int64_t(0)}}), name);
}

// Whether an [M, N] product takes ops::amx_schedule's tiles: rows and columns
// with a divisor from 4 to 32 (else the windows would only add copies).
// The gathered rows hold a tap's channels: under 16 (a stem's 3) they are
// too short to copy well, and the pair form is as fast (measured).
bool tiles_fit(int64_t M, int64_t N, int64_t row_channels) {
  if (row_channels < 16) return false;
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
  if (xs.empty() || ws.empty() || ys.empty() || !tiles_fit(ys[0] * ys[2] * ys[3], ys[1], ws[1])) return {};
  auto axis = [&](int j) { return Axis{xs[2 + j], ws[2 + j], win.strides[j], -win.pads[j], win.dilations[j], 1, ys[2 + j]}; };
  const int64_t C2 = (ws[1] + 1) / 2, T = ws[2] * ws[3], P = ys[0] * ys[2] * ys[3], K = ws[0];
  Value bias = n.inputs.size() > 2 ? n.inputs[2] : Value();
  if (K >= P) {  // more weights than windows: Y^T = W [K, C*T] x windows [C*T, P], the weights as they are
    Value cols = windows_by_channel(pack(x, 1, n.name + ".x_pairs"), axis(0), axis(1), n.name + ".x_windows");
    Value y = pair_matmul(reshape(pack(w, 1, n.name + ".w_pairs"), {K, C2 * T}, n.name + ".w_rows"), cols, n.name);
    if (bias.defined()) y = op("Add", {y, reshape(bias, {K, 1}, n.name + ".bias_rows")}, {}, n.name + ".bias");
    return {transpose(reshape(y, {K, ys[0], ys[2], ys[3]}, n.name + ".y_knhw"), {1, 0, 2, 3}, n.name + ".y")};
  }
  Value cols = windows(pack(rows_of(x, n.name + ".x"), 1, n.name + ".x_pairs"), xs[0], axis(0), axis(1), n.name + ".x_windows");
  Value wm = reshape(transpose(pack(w, 1, n.name + ".w_pairs"), {2, 3, 1, 0}, n.name + ".w_taps"), {C2 * T, K}, n.name + ".w_rows");
  Value y = pair_matmul(cols, wm, n.name);
  if (bias.defined()) y = op("Add", {y, bias}, {}, n.name + ".bias");
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
  if (!dy.defined() || !w.defined() || ys.empty() || ws.empty() || xs.size() != 4 || !tiles_fit(xs[0] * xs[2] * xs[3], xs[1], ws[0])) return {};
  // dX at pixel i, tap t reads dY at (i + pad - t * dilation) / stride where that divides.
  auto axis = [&](int j) { return Axis{ys[2 + j], ws[2 + j], 1, win.pads[j], -win.dilations[j], win.strides[j], xs[2 + j]}; };
  const int64_t K2 = (ws[0] + 1) / 2, T = ws[2] * ws[3], P = xs[0] * xs[2] * xs[3], C = ws[1];
  if (C >= P) {  // more weights than windows: dX^T = W as [C, K*T] x windows [K*T, P]
    Value cols = windows_by_channel(pack(dy, 1, n.name + ".dy_pairs"), axis(0), axis(1), n.name + ".dy_windows");
    Value wm = reshape(transpose(pack(w, 0, n.name + ".w_pairs"), {1, 0, 2, 3}, n.name + ".w_by_c"), {C, K2 * T}, n.name + ".w_rows");
    Value dx = pair_matmul(wm, cols, n.name);
    return {transpose(reshape(dx, {C, xs[0], xs[2], xs[3]}, n.name + ".dx_cnhw"), {1, 0, 2, 3}, n.name + ".dx")};
  }
  Value cols = windows(pack(rows_of(dy, n.name + ".dy"), 1, n.name + ".dy_pairs"), ys[0], axis(0), axis(1), n.name + ".dy_windows");
  Value wm = reshape(transpose(pack(w, 0, n.name + ".w_pairs"), {2, 3, 0, 1}, n.name + ".w_taps"), {K2 * T, C}, n.name + ".w_rows");
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
  if (!x.defined() || !dy.defined() || xs.empty() || ys.empty() || ks.size() != 2 || !tiles_fit(ys[1], xs[1] * ks[0] * ks[1], xs[1])) return {};
  auto axis = [&](int j) { return Axis{xs[2 + j], ks[j], win.strides[j], -win.pads[j], win.dilations[j], 1, ys[2 + j]}; };
  const int64_t K = ys[1], C = xs[1], P = ys[0] * ys[2] * ys[3], Pp = P <= 32 ? P : (P + 31) / 32 * 32;
  // Pairs along the pixels (the sum), so the windows are gathered before the packing.
  Value cols = pad(windows(rows_of(x, n.name + ".x"), xs[0], axis(0), axis(1), n.name + ".x_windows"), {0, 0}, {Pp - P, 0}, n.name + ".x_tiles");
  Value dym = pad(reshape(transpose(dy, {1, 0, 2, 3}, n.name + ".dy_kn"), {K, P}, n.name + ".dy_rows"), {0, 0}, {0, Pp - P}, n.name + ".dy_tiles");
  Value dw = pair_matmul(pack(dym, 1, n.name + ".dy_pairs"), pack(cols, 0, n.name + ".x_pairs"), n.name);
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
