// alter_conv_layout (passes.h): convolutions in the blocked NCHWc layout,
// and constant matmul weights packed into panels.
//
// Each 2-D Conv with constant weights (group 1, depthwise, or grouped with
// groups a block fits: grouped_fits) becomes
//   LayoutTransform(NCHW -> b) -> ConvNCHWc(packed weights) [-> Add(bias)] -> LayoutTransform(b -> NCHW)
// with the weights (and bias) repacked once, here, at compile time; a 3x3
// stride-1 conv with many output pixels takes Winograd F(4x4, 3x3) or F(2x2, 3x3) instead
// of ConvNCHWc (input transform, products, output transform; see
// winograd_tile), unless the plan says no (LayoutPlan::winograd). Then the
// transforms move out of the way: an elementwise or broadcast operator whose
// tensor inputs come out of such a transform runs on the blocked tensors
// instead (constants it reads are repacked), and two transforms in a row
// collapse (b -> NCHW -> b is nothing). Joins and pieces along the channels
// are index maps on the blocks where they cut at whole blocks: a Concat whose
// inputs' channels one input block divides is the Concat of the blocks, a
// Slice or Split of whole blocks the same of the blocks; where no block
// divides (padded channels, blocks of several sizes) a join is one
// kiln.ChannelConcatNCHWc and a piece one kiln.ChannelPermuteNCHWc, read
// straight from the blocked inputs. A channel shuffle (Reshape, Transpose,
// Reshape) is a ChannelPermuteNCHWc too, pieces of it compose into one map,
// and a conv that reads a whole shuffle takes it into its weights. An
// inference BatchNormalization runs as a blocked scale and shift, and a Pad
// of zeros disappears. What remains are transforms at the boundaries of
// the blocked region: the model's input, reshapes, symbolic channels.
// The block of C channels is the same for inputs and outputs
// (channel_block_for, layout_defaults.cpp: whole vectors up to the cap, which is the LayoutPlan's
// for the convolution, else default_conv_cap's: two vectors, or one where a
// two-vector tile fits too few output pixels), so between convolutions under
// one cap nothing is re-blocked; where the plan changes the cap, a
// transform from one block to the other (b1 -> b2) remains. Channels no
// whole vector divides (ShuffleNetV2's 58, 116, 232) are padded to whole
// vectors: the blocked tensor holds the last block full, the weights meet
// the padding with zeros, the transform back to NCHW drops it, and only
// elementwise operators that keep it finite (finite_on_finite) run over it.
// MatMul/Gemm weights (constant, 2-D) are packed the same way, into panels
// [N/nb, K, nb], the copy the tuner's pack rule would make at every call.
// A training step (convolutions of weights the graph computes) takes the
// rules of train_layout.cpp first: weights packed per step, batch norm and
// the gradients blocked.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <tuple>
#include <optional>

#include "kiln/graph/op_registry.h"
#include "kiln/graph/passes.h"
#include "kiln/graph/rewrite.h"
#include "kiln/ops/broadcast.h"
#include "kiln/ops/layout.h"
#include "kiln/ops/nn.h"
#include "kiln/ops/register_tile.h"
#include "kiln/ir/functor.h"
#include "kiln/ops/task.h"
#include "kiln/ops/transform.h"
#include "kiln/ops/winograd.h"
#include "kiln/support/error.h"
#include "layout_helpers.h"
#include "match_helpers.h"
#include "train_layout.h"

namespace kiln::graph {

using layout_detail::block_behind;
using layout_detail::ints_or;



namespace {

using match_detail::constant_of;

// A [*, C, *, *]-broadcastable constant (rank <= 4, every dim but C of size 1)
// in the blocked form [1, ceil(C/b), 1, 1, b] (or [1, 1, 1, 1, 1] for a scalar).
// A padded last block repeats the last channel: an operator on the padding
// then sees values it sees anyway (no division by a padded zero).
std::optional<Value> blocked_constant(const NDArray& c, int64_t C, int64_t b) {
  std::vector<int64_t> s = c.shape();
  while (s.size() < 4) s.insert(s.begin(), 1);
  if (s.size() != 4 || s[0] != 1 || s[2] != 1 || s[3] != 1 || (s[1] != 1 && s[1] != C)) return std::nullopt;
  if (s[1] == 1) {
    NDArray out = NDArray::empty({1, 1, 1, 1, 1}, c.dtype());
    out.copy_from(c.data(), c.nbytes());
    return make_constant("blocked", out)->output();
  }
  // Channel c sits at [c / b, c % b]: the plain order, as C/b x b.
  const int64_t held = padded_channels(C, b), bytes = c.nbytes() / C;
  NDArray out = NDArray::empty({1, held / b, 1, 1, b}, c.dtype());
  auto* dst = static_cast<char*>(out.data());
  const auto* src = static_cast<const char*>(c.data());
  std::memcpy(dst, src, c.nbytes());
  for (int64_t k = C; k < held; ++k) std::memcpy(dst + k * bytes, src + (C - 1) * bytes, bytes);
  return make_constant("blocked", out)->output();
}

// Whether an elementwise operator maps finite inputs to finite outputs, so
// it may run over the padded channels of a blocked tensor: what it leaves
// there meets zero weights in the next conv, or is dropped, and must not be
// an inf or NaN (0 * inf is NaN). Log, Div, Reciprocal, Pow... may not.
bool finite_on_finite(const std::string& op) {
  static const char* ops[] = {"Add", "Sub", "Mul", "Neg", "Abs", "Relu", "LeakyRelu", "PRelu", "Clip", "Sigmoid", "HardSigmoid",
                              "HardSwish", "Tanh", "Elu", "Selu", "Max", "Min", "Identity", "QuantizeLinear", "DequantizeLinear"};
  return std::find(std::begin(ops), std::end(ops), op) != std::end(ops);
}

// Whether a 4-D operand of an elementwise op with output type `out` holds one
// value per image and channel ([N, C, 1, 1] or [1, C, 1, 1]): broadcast over
// the pixels only, so it blocks along its channels like the output.
bool per_channel(const TensorType& v, const TensorType& out) {
  if (v.ndim() != 4 || out.ndim() != 4 || !v.shape[2].is_static() || !v.shape[3].is_static()) return false;
  if (v.shape[2].value() != 1 || v.shape[3].value() != 1 || !(v.shape[1] == out.shape[1])) return false;
  return v.shape[0] == out.shape[0] || (v.shape[0].is_static() && v.shape[0].value() == 1);
}

struct ConvShape {
  ops::Conv2dParams p;
  int64_t group = 1;
};

std::optional<ConvShape> conv_shape(const OpNode& conv) {
  const TensorType& x = conv.inputs[0].type();
  const TensorType& w = conv.inputs[1].type();
  const TensorType& y = conv.types[0];
  if (x.ndim() != 4 || w.ndim() != 4 || x.dtype != DataType::Float(32)) return std::nullopt;
  ConvShape s;
  s.group = conv.attrs.get_int_or("group", 1);
  auto st = ints_or(conv.attrs, "strides", {1, 1}), dl = ints_or(conv.attrs, "dilations", {1, 1}), pd = ints_or(conv.attrs, "pads", {0, 0, 0, 0});
  if (st.size() != 2 || dl.size() != 2 || pd.size() != 4) return std::nullopt;
  std::string autopad = conv.attrs.has("auto_pad") ? conv.attrs.get_string("auto_pad") : "NOTSET";
  if (autopad == "VALID") pd = {0, 0, 0, 0};
  if (autopad == "SAME_UPPER" || autopad == "SAME_LOWER") {
    for (int a = 0; a < 2; ++a) {
      int64_t total = std::max<int64_t>((y.shape[2 + a] - 1) * st[a] + (w.shape[2 + a] - 1) * dl[a] + 1 - x.shape[2 + a], 0);
      int64_t small = total / 2, big = total - small;
      pd[a] = autopad == "SAME_UPPER" ? small : big;
      pd[a + 2] = autopad == "SAME_UPPER" ? big : small;
    }
  }
  s.p = {int(st[0]), int(st[1]), int(pd[0]), int(pd[1]), int(pd[2]), int(pd[3]), int(dl[0]), int(dl[1])};
  return s;
}

Attrs conv_attrs(const ops::Conv2dParams& p) {
  Attrs a;
  a.set("strides", std::vector<int64_t>{p.stride_h, p.stride_w});
  a.set("pads", std::vector<int64_t>{p.pad_top, p.pad_left, p.pad_bottom, p.pad_right});
  a.set("dilations", std::vector<int64_t>{p.dilation_h, p.dilation_w});
  return a;
}

// The pass's rules over one graph, with the transforms it made so far, so a
// value read blocked twice (a residual input) is transformed once.
class LayoutRewriter {
 public:
  LayoutRewriter(const Graph& g, const Target& target, const LayoutPlan& plan)
      : target_(target), max_block_(2 * target.natural_lanes(DataType::Float(32))), plan_(plan),
        train_(g, max_block_, max_block_ / 2, [this](const Value& v, int64_t from, int64_t to, int64_t C) { return relayout(v, from, to, C); }) {}

  std::vector<Value> operator()(const Ref<OpNode>& n) {
    if (train_.active())
      if (auto out = train_(n); !out.empty()) return out;  // a training step's rules first (train_layout.cpp)
    if (n->op->name == "Conv" && n->inputs.size() >= 2) return rewrite_conv(*n);
    if ((n->op->name == "MatMul" || n->op->name == "Gemm") && n->inputs.size() >= 2) return rewrite_matmul(*n);
    if (n->op->name == "kiln.LayoutTransform") {
      // Transforms in a row collapse; relayout looks through the producer.
      const int64_t channels = n->types[0].ndim() == 4 ? int64_t(n->types[0].shape[1]) : n->attrs.get_int_or("channels", 0);
      Value out = relayout(n->inputs[0], n->attrs.get_int("src_block"), n->attrs.get_int("dst_block"), channels);
      return out == n->output() ? std::vector<Value>{} : std::vector<Value>{out};
    }
    if (auto pooled = rewrite_pool(*n); !pooled.empty()) return pooled;
    if (n->op->name == "Concat") return rewrite_concat(*n);
    if (n->op->name == "Reshape") return rewrite_shuffle(*n);
    if (n->op->name == "Slice") return rewrite_slice(*n);
    if (n->op->name == "Split") return rewrite_split(*n);
    if (n->op->name == "BatchNormalization") return rewrite_batch_norm(*n);
    if (n->op->name == "Pad" && block_behind(n->inputs[0]) > 0 && pads_nothing(*n)) return {n->inputs[0]};
    return rewrite_elementwise(*n);
  }

 private:
  // A value of C channels (0: all it holds) in another channel blocking,
  // looking through a transform that produced it. A block that does not
  // divide C pads the last block (the transform records C).
  Value relayout(const Value& v, int64_t from, int64_t to, int64_t C) {
    if (from == to) return v;
    if (v.node->kind == NodeKind::Op) {
      const auto& op = static_cast<const OpNode&>(*v.node);
      if (op.op->name == "kiln.LayoutTransform") {
        int64_t src = op.attrs.get_int("src_block");
        return src == to ? op.inputs[0] : relayout(op.inputs[0], src, to, C);
      }
    }
    auto key = std::make_tuple(v.node.get(), v.index, from, to);
    auto it = transforms_.find(key);
    if (it != transforms_.end()) return it->second;
    Attrs a;
    a.set("src_block", from);
    a.set("dst_block", to);
    if (C > 0 && ((from > 0 && C % from != 0) || (to > 0 && C % to != 0))) a.set("channels", C);
    Value out = make_op("kiln.LayoutTransform", {v}, a, v.node->name + ".layout")->output();
    transforms_.emplace(key, out);
    return out;
  }

  std::vector<Value> rewrite_conv(const OpNode& conv) {
    const NDArray* W = constant_of(conv.inputs[1]);
    const NDArray* B = conv.inputs.size() > 2 && conv.inputs[2].defined() ? constant_of(conv.inputs[2]) : nullptr;
    if (!W || W->dtype() != DataType::Float(32) || (conv.inputs.size() > 2 && conv.inputs[2].defined() && !B)) return {};
    auto shape = conv_shape(conv);
    if (!shape) return {};
    Value x = conv.inputs[0], y;
    NDArray unshuffled;
    if (shape->group == 1 && fold_shuffle(&x, *W, &unshuffled)) W = &unshuffled;
    const auto& ws = W->shape();
    int64_t C = conv.inputs[0].type().shape[1], K = ws[0], KH = ws[2], KW = ws[3];
    const float* w = W->data_as<float>();
    int64_t kb;
    const int64_t cap = plan_.cap_of(conv.name, default_conv_cap(conv, target_));
    if (shape->group == 1) {
      int64_t cb = channel_block_for(C, cap, lanes());
      // Where parts of a vector use its lanes as well as C padded would (26 as 13s or as 32), the
      // parts the input already comes in: a ShuffleNet join of two 13-channel halves, no relayout.
      const int64_t in_block = block_behind(x);
      if (!plan_.names(conv.name) && in_block > 0 && in_block < lanes() && C % in_block == 0 && C * lanes() == in_block * padded_channels(C, lanes()))
        cb = in_block;
      kb = channel_block_for(K, cap, lanes());
      // A 1x1 conv whose input comes in narrower whole vectors (a grouped
      // conv's one-vector blocks) reads them as they come: no relayout before
      // it. ResNeXt-50 (Xeon AVX-512, 1 thread, interleaved in one process):
      // the 13 relayouts after its grouped convs (0.02-0.18 ms each, 0.69 in
      // all) gone, and the 1x1 convs after them as fast or faster
      // (layer1's 1.32-1.39 ms against 1.41-1.58).
      if (!plan_.names(conv.name) && KH == 1 && KW == 1 && in_block > 0 && in_block < cb && in_block % lanes() == 0 && C % in_block == 0)
        cb = in_block;
      Value blocked = relayout(x, 0, cb, C);
      // Channels padded to their blocks meet zero weights.
      NDArray padded = zero_padded_weights(*W, padded_channels(K, kb), padded_channels(C, cb));
      const int64_t tile = winograd_tile(conv, shape->p, KH, KW, cb, kb);
      y = tile ? winograd_conv(conv, blocked, padded, cb, kb, shape->p, tile)
                                                                          : direct_conv(conv, blocked, padded, cb, kb, shape->p);
    } else if (shape->group == C && K == C && ws[1] == 1) {
      kb = channel_block_for(C, cap, lanes());
      // Unplanned, a depthwise conv keeps the block its input comes in: it
      // is bound by memory, not registers, so any whole-vector block serves,
      // while a block of its own cost two relayouts around it (MobileNetV2's
      // 960-channel layers at 7 x 7, blocked by 8 for their 1x1 convs: 7
      // transforms, 0.2 ms of 6.4 at 2 threads on Zen 3).
      const int64_t in_block = block_behind(x);
      if (!plan_.names(conv.name) && in_block > 0 && in_block % lanes() == 0 && padded_channels(C, in_block) - C < lanes() && in_block <= max_block_) kb = in_block;
      NDArray packed = NDArray::empty({padded_channels(C, kb) / kb, KH, KW, kb}, DataType::Float(32));
      float* p = packed.data_as<float>();
      std::fill(p, p + packed.numel(), 0.0f);
      for (int64_t c = 0; c < C; ++c)
        for (int64_t r = 0; r < KH * KW; ++r) p[((c / kb) * KH * KW + r) * kb + c % kb] = w[c * KH * KW + r];
      y = make_op("kiln.DepthwiseConvNCHWc", {relayout(x, 0, kb, C), make_constant(conv.inputs[1].node->name + ".nchwc", packed)->output()},
                  conv_attrs(shape->p), conv.name)->output();
    } else if (shape->group > 1 && C % shape->group == 0 && K % shape->group == 0 && ws[1] == C / shape->group) {
      kb = grouped_block(conv, C / shape->group, K / shape->group, C, K, cap, block_behind(x));
      if (kb == 0) return {};  // no block fits its groups: it stays in NCHW
      // Its input in the block its producer wrote where that is a multiple of
      // kb (conv2d_nchwc_general reads across blocks): no relayout before it.
      // ResNeXt-50's grouped convs in blocks of 16 between 1x1 convs in 32
      // ran 2-8% slower so (a pixel's group a half cache line of a wider
      // stride), but the relayouts they spared cost more: at 56 x 56 0.12-0.17
      // ms each against 0.02-0.03 (1 thread, Xeon AVX-512).
      const int64_t in_block = block_behind(x);
      const bool wide_input = in_block > kb && in_block % kb == 0 && C % in_block == 0 && C % kb == 0;
      y = grouped_conv(conv, relayout(x, 0, wide_input ? in_block : kb, C), *W, shape->group, kb, shape->p);
    } else {
      return {};
    }
    if (B) {
      // The bias is per output channel: [K] read as [1, K, 1, 1].
      NDArray per_channel = NDArray::wrap(B->data(), {1, K, 1, 1}, B->dtype());
      y = make_op("Add", {y, *blocked_constant(per_channel, K, kb)}, {}, conv.name + ".bias")->output();
    }
    return {relayout(y, kb, 0, K)};
  }

  // [K, C, KH, KW] weights with zeros for the channels their blocks pad (W itself where none is).
  static NDArray zero_padded_weights(const NDArray& W, int64_t K, int64_t C) {
    const auto& ws = W.shape();
    if (ws[0] == K && ws[1] == C) return W;
    NDArray out = NDArray::empty({K, C, ws[2], ws[3]}, DataType::Float(32));
    float* o = out.data_as<float>();
    std::fill(o, o + out.numel(), 0.0f);
    const int64_t taps = ws[2] * ws[3];
    for (int64_t k = 0; k < ws[0]; ++k)
      std::memcpy(o + k * C * taps, W.data_as<float>() + k * ws[1] * taps, sizeof(float) * ws[1] * taps);
    return out;
  }

  // ConvNCHWc with the weights packed [K/kb, C/cb, KH, KW, cb, kb].
  Value direct_conv(const OpNode& conv, const Value& x, const NDArray& W, int64_t cb, int64_t kb, const ops::Conv2dParams& p) {
    const auto& ws = W.shape();
    const int64_t K = ws[0], C = ws[1], taps = ws[2] * ws[3];
    const float* w = W.data_as<float>();
    NDArray packed = NDArray::empty({K / kb, C / cb, ws[2], ws[3], cb, kb}, DataType::Float(32));
    float* out = packed.data_as<float>();
    for (int64_t k = 0; k < K; ++k)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t r = 0; r < taps; ++r) out[((((k / kb) * (C / cb) + c / cb) * taps + r) * cb + c % cb) * kb + k % kb] = w[(k * C + c) * taps + r];
    return make_op("kiln.ConvNCHWc", {x, make_constant(conv.inputs[1].node->name + ".nchwc", packed)->output()}, conv_attrs(p), conv.name)->output();
  }

  // Whether a grouped conv (Cg input, Kg output channels per group) runs in
  // blocks of b: b inside a group (divides Cg and Kg), or spanning whole
  // groups (Cg == Kg divides b; the weights are block-diagonal, the products
  // between groups zero), the last block padded where b does not divide C
  // (RegNetY-400MF's 104 and 440 channels in groups of 8, blocked by 16 as
  // their 1x1 neighbours are).
  static bool grouped_fits(int64_t b, int64_t Cg, int64_t Kg, int64_t C, int64_t K) {
    if (b <= 0) return false;
    if (Cg % b == 0 && Kg % b == 0) return true;
    return Cg == Kg && b % Cg == 0 && padded_channels(C, b) - C < b;
  }

  // The block of a grouped conv: its input's where that fits under the cap
  // (no relayout around it), unless a plan names the conv; else the largest
  // block up to the cap that fits, whole vectors first; 0 where none does.
  int64_t grouped_block(const OpNode& conv, int64_t Cg, int64_t Kg, int64_t C, int64_t K, int64_t cap, int64_t in_block) const {
    if (!plan_.names(conv.name) && in_block <= cap && grouped_fits(in_block, Cg, Kg, C, K)) return in_block;
    for (int64_t b = cap / lanes() * lanes(); b >= lanes(); b -= lanes())
      if (grouped_fits(b, Cg, Kg, C, K)) return b;
    for (int64_t b = std::min(cap, lanes()); b > 1; --b)
      if (grouped_fits(b, Cg, Kg, C, K)) return b;
    return 0;
  }

  // ConvNCHWc of a grouped conv in blocks of b: weights [K/b, R, KH, KW, b, b]
  // where output block k reads the R input blocks from (k / F) * R on
  // (F: output blocks per group, R: input blocks per group; both 1 where a
  // block spans groups, its weights zero between them).
  Value grouped_conv(const OpNode& conv, const Value& x, const NDArray& W, int64_t G, int64_t b, const ops::Conv2dParams& p) {
    const auto& ws = W.shape();
    const int64_t K = ws[0], Cg = ws[1], Kg = K / G, taps = ws[2] * ws[3], Kp = padded_channels(K, b);
    const int64_t F = Kg % b == 0 ? Kg / b : 1, R = Cg % b == 0 ? Cg / b : 1;
    NDArray packed = NDArray::empty({Kp / b, R, ws[2], ws[3], b, b}, DataType::Float(32));
    float* out = packed.data_as<float>();
    const float* w = W.data_as<float>();
    for (int64_t k = 0; k < Kp; ++k)
      for (int64_t rc = 0; rc < R * b; ++rc) {
        // The input channel, the output's group; padded outputs (k >= K) get zero weights.
        const int64_t c = (k / b / F) * R * b + rc, g = k / Kg;
        for (int64_t r = 0; r < taps; ++r)
          out[((((k / b) * R + rc / b) * taps + r) * b + rc % b) * b + k % b] = k < K && c / Cg == g ? w[(k * Cg + c - g * Cg) * taps + r] : 0.0f;
      }
    Attrs a = conv_attrs(p);
    a.set("group_blocks", F);
    return make_op("kiln.ConvNCHWc", {x, make_constant(conv.inputs[1].node->name + ".nchwc", packed)->output()}, a, conv.name)->output();
  }

  // A 3x3 stride-1 conv runs as Winograd F(m x m, 3x3) where its batched
  // products have tiles enough to keep the register tiles full: on Zen 5
  // (AVX-512, 2 cores) the 16 products of F(2x2, 3x3) for ResNet's 3x3 convs
  // at 56x56 to 14x14 (49 tiles and up) took 0.30-0.34 ms where the direct
  // conv takes 0.62-0.65; at 7x7 (16 tiles) 0.63 against 0.69, less than the
  // two transforms cost, and the transformed weights are 16/9 the bytes.
  // F(4x4, 3x3) (36 products over a quarter of the tiles: 1.8x fewer
  // multiplies again, and a transformed input 9/16 the size) takes over where
  // it has 49 tiles too: outputs of 28x28 and up.
  static constexpr int64_t kMinWinogradTiles = 49;
  // The output tile m of the Winograd form the conv takes; 0: it stays direct.
  int64_t winograd_tile(const OpNode& conv, const ops::Conv2dParams& p, int64_t KH, int64_t KW, int64_t cb, int64_t kb) const {
    const int max_tile = plan_.winograd_of(conv.name);
    if (max_tile == 0) return 0;
    if (KH != 3 || KW != 3 || p.stride_h != 1 || p.stride_w != 1 || p.dilation_h != 1 || p.dilation_w != 1) return 0;
    if (cb % lanes() != 0 || kb % lanes() != 0) return 0;
    const auto& y = conv.types[0].shape;
    // The Winograd ops take a symbolic batch (counted at its likely size) but a static image.
    if (y[2].is_symbolic() || y[3].is_symbolic()) return 0;
    const int64_t n = y[0].is_static() ? y[0].value() : likely_batch(y[0]);
    for (int64_t m : {4, 2})
      if (m <= max_tile && ops::winograd_tiles(n, y[2], y[3], m).count() >= kMinWinogradTiles) return m;
    return 0;
  }

  // A symbolic batch at the plan's likely sizes; 1 (one image's tiles) where one of its variables has none.
  int64_t likely_batch(const Dim& d) const {
    bool known = true;
    post_order_visit(d.expr(), [&](const Expr& e) {
      if (const Variable* v = e.as<Variable>()) known = known && plan_.likely_sizes.count(v->name) > 0;
    });
    if (!known) return 1;
    return std::max<int64_t>(ops::hinted_extent(d.expr(), plan_.likely_sizes), 1);
  }

  // input transform -> (m+2)^2 products with the weights transformed here -> output transform (named as the conv: its epilogue fuses there).
  Value winograd_conv(const OpNode& conv, const Value& x, const NDArray& W, int64_t cb, int64_t kb, const ops::Conv2dParams& p, int64_t tile) {
    const auto& y = conv.types[0].shape;
    Attrs in;
    in.set("pads", std::vector<int64_t>{p.pad_top, p.pad_left});
    in.set("out_hw", std::vector<int64_t>{y[2], y[3]});
    in.set("tile", tile);
    Value v = make_op("kiln.WinogradInputNCHWc", {x}, in, conv.name + ".winograd_input")->output();
    Value u = make_constant(conv.inputs[1].node->name + ".winograd", ops::winograd_weights(W, cb, kb, tile))->output();
    Value m = make_op("kiln.WinogradMatMul", {v, u}, {}, conv.name + ".winograd_matmul")->output();
    Attrs out;
    out.set("out_nhw", std::vector<int64_t>{y[0].is_static() ? y[0].value() : 0, y[2], y[3]});  // 0: a symbolic batch
    out.set("tile", tile);
    return make_op("kiln.WinogradOutputNCHWc", {m}, out, conv.name)->output();
  }

  // MatMul(A, B) and Gemm(A, B, C) (alpha = beta = 1, A not transposed) with
  // constant 2-D weights: B packed into panels of nb columns at compile time.
  std::vector<Value> rewrite_matmul(const OpNode& n) {
    bool gemm = n.op->name == "Gemm";
    if (gemm && (n.attrs.get_int("transA") != 0 || n.attrs.get_float("alpha") != 1.0 || n.attrs.get_float("beta") != 1.0)) return {};
    const NDArray* B = constant_of(n.inputs[1]);
    const TensorType& a = n.inputs[0].type();
    if (!B || B->dtype() != DataType::Float(32) || B->ndim() != 2 || a.ndim() < 2 || a.dtype != DataType::Float(32)) return {};
    bool trans_b = gemm && n.attrs.get_int("transB") != 0;
    int64_t K = trans_b ? B->shape()[1] : B->shape()[0], N = trans_b ? B->shape()[0] : B->shape()[1];
    // Panels may be wider than a vector where none divides N (1000 classes: 25): packed, the fc layer ran 2.8x faster than plain.
    int64_t nb = matmul_panel(N, a);
    if (nb == 0) nb = whole_vectors_block(N, max_block_, lanes());
    if (nb == 0) nb = ops::channel_block(static_cast<int>(N), static_cast<int>(max_block_));
    if (nb < max_block_ / 2) return {};  // no whole vector per panel row: the plain form is as good
    NDArray packed = NDArray::empty({N / nb, K, nb}, DataType::Float(32));
    const float* b = B->data_as<float>();
    float* p = packed.data_as<float>();
    for (int64_t k = 0; k < K; ++k)
      for (int64_t j = 0; j < N; ++j) p[((j / nb) * K + k) * nb + j % nb] = trans_b ? b[j * K + k] : b[k * N + j];
    Value y = make_op("kiln.MatMulPackedB", {n.inputs[0], make_constant(n.inputs[1].node->name + ".panels", packed)->output()}, {}, n.name)->output();
    if (gemm && n.inputs.size() > 2 && n.inputs[2].defined()) y = make_op("Add", {y, n.inputs[2]}, {}, n.name + ".bias")->output();
    return {y};
  }

  // A 2-D pool of a value that comes out of a blocked transform: the pool's blocked twin.
  std::vector<Value> rewrite_pool(const OpNode& n) {
    const char* pools[] = {"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"};
    if (std::find(std::begin(pools), std::end(pools), n.op->name) == std::end(pools)) return {};
    int64_t b = block_behind(n.inputs[0]);
    if (b == 0 || n.inputs[0].type().ndim() != 4 || n.num_outputs() != 1) return {};
    const int64_t C = n.inputs[0].type().shape[1];
    Value y = make_op("kiln." + n.op->name + "NCHWc", {relayout(n.inputs[0], 0, b, C)}, n.attrs, n.name)->output();
    return {relayout(y, b, 0, C)};
  }

  // A Concat along the channels of 4-D values, some from blocked transforms,
  // where one of their blocks b divides every input's channels: channel c of
  // the output sits at [c / b, c % b] and the inputs' blocks follow one
  // another, so the blocked output is the Concat of the blocked inputs along
  // the block axis, with no relayout to NCHW and back (Inception's and
  // Fire's joins of conv branches). Of the blocks that divide, the one most
  // inputs come in; the rest are relayouted to it.
  std::vector<Value> rewrite_concat(const OpNode& n) {
    if (n.num_outputs() != 1 || n.types[0].ndim() != 4) return {};
    int64_t axis = n.attrs.get_int("axis");
    if (axis != 1 && axis != -3) return {};
    int64_t b = 0, most = 0;
    for (const Value& v : n.inputs) {
      const int64_t cand = block_behind(v);
      if (cand == 0) continue;
      bool divides = true;
      int64_t in_it = 0;
      for (const Value& u : n.inputs) {
        divides = divides && u.type().shape[1].is_static() && u.type().shape[1].value() % cand == 0;  // symbolic channels stay NCHW
        in_it += block_behind(u) == cand;
      }
      if (divides && in_it > most) b = cand, most = in_it;
    }
    if (b == 0) return padded_concat(n);  // no blocked input, or channels no input block divides
    std::vector<Value> in;
    for (const Value& v : n.inputs) in.push_back(relayout(v, 0, b, v.type().shape[1]));
    Attrs a;
    a.set("axis", int64_t{1});
    Value y = make_op("Concat", std::move(in), a, n.name)->output();
    return {relayout(y, b, 0, n.types[0].shape[1])};
  }

  // A Slice of whole blocks of the channels of a blocked value (start and
  // count multiples of its block, step 1, no other axis): the same Slice of
  // the blocks, no relayout to NCHW and back.
  std::vector<Value> rewrite_slice(const OpNode& n) {
    const int64_t b = block_behind(n.inputs[0]);
    if (b == 0 || n.types[0].ndim() != 4 || n.inputs.size() < 3) return {};
    const NDArray *starts = constant_of(n.inputs[1]), *ends = constant_of(n.inputs[2]);
    const NDArray* axes = n.inputs.size() > 3 && n.inputs[3].defined() ? constant_of(n.inputs[3]) : nullptr;
    const NDArray* steps = n.inputs.size() > 4 && n.inputs[4].defined() ? constant_of(n.inputs[4]) : nullptr;
    if (!starts || !ends || starts->numel() != 1 || ends->numel() != 1 || (axes && axes->numel() != 1)) return {};
    if (starts->dtype() != DataType::Int(64) || ends->dtype() != DataType::Int(64)) return {};
    if ((n.inputs.size() > 3 && n.inputs[3].defined() && (!axes || axes->dtype() != DataType::Int(64))) ||
        (n.inputs.size() > 4 && n.inputs[4].defined() && (!steps || steps->dtype() != DataType::Int(64))))
      return {};
    const int64_t axis = axes ? axes->data_as<int64_t>()[0] : 0;
    if ((axis != 1 && axis != -3) || (steps && steps->data_as<int64_t>()[0] != 1)) return {};
    const int64_t C = n.inputs[0].type().shape[1];
    ops::SliceRange r = ops::slice_range(C, starts->data_as<int64_t>()[0], ends->data_as<int64_t>()[0], 1);
    if (r.count <= 0) return {};
    if (r.start % b != 0 || r.count % b != 0 || is_permute(blocked_source(n.inputs[0]))) {
      // Part blocks, or a piece of a shuffle: one index map from the blocked source.
      const int64_t to = channel_block_for(r.count, max_block_, lanes());
      return {relayout(permute(blocked_source(n.inputs[0]), C, 1, r.start, r.count, to, n.name), to, 0, r.count)};
    }
    Value y = make_op("Slice", {relayout(n.inputs[0], 0, b, C), ints({r.start / b}, n.name + ".starts"), ints({(r.start + r.count) / b}, n.name + ".ends"),
                                ints({1}, n.name + ".axes")}, {}, n.name)->output();
    return {relayout(y, b, 0, r.count)};
  }

  // A Split of a blocked value's channels into pieces of whole blocks: the same Split of the blocks.
  std::vector<Value> rewrite_split(const OpNode& n) {
    const int64_t b = block_behind(n.inputs[0]);
    const int64_t axis = n.attrs.get_int_or("axis", 0);
    if (b == 0 || n.inputs[0].type().ndim() != 4 || (axis != 1 && axis != -3)) return {};
    std::vector<int64_t> blocks;
    bool whole = !is_permute(blocked_source(n.inputs[0]));
    for (const TensorType& t : n.types) {
      if (!t.shape[1].is_static() || t.shape[1] == 0) return {};
      whole = whole && t.shape[1] % b == 0;
      blocks.push_back(t.shape[1] / b);
    }
    if (!whole) return split_pieces(n);
    Attrs a;
    a.set("axis", int64_t{1});
    a.set("num_outputs", static_cast<int64_t>(blocks.size()));
    Ref<OpNode> split = make_op("Split", {relayout(n.inputs[0], 0, b, n.inputs[0].type().shape[1]), ints(blocks, n.name + ".split")}, a, n.name);
    std::vector<Value> out;
    for (int k = 0; k < split->num_outputs(); ++k) out.push_back(relayout(split->output(k), b, 0, n.types[k].shape[1]));
    return out;
  }

  // The blocked value behind a LayoutTransform(b -> NCHW) (where block_behind is b > 0).
  static Value blocked_source(const Value& v) { return static_cast<const OpNode&>(*v.node).inputs[0]; }

  static bool is_permute(const Value& v) {
    return v.node->kind == NodeKind::Op && static_cast<const OpNode&>(*v.node).op->name == "kiln.ChannelPermuteNCHWc";
  }

  // Channels [start, start + count) of a blocked value x of C channels, in
  // the order of a shuffle of `groups` (1: plain), blocked by `to`: one
  // ChannelPermuteNCHWc. A piece of a whole shuffle, or of a plain piece,
  // reads x's own source instead: the map composes, the shuffle itself need
  // not be written.
  Value permute(Value x, int64_t C, int64_t groups, int64_t start, int64_t count, int64_t to, const std::string& name) {
    if (groups == 1 && is_permute(x)) {
      const auto& op = static_cast<const OpNode&>(*x.node);
      const int64_t g = op.attrs.get_int_or("groups", 1), s = op.attrs.get_int_or("start", 0), Ci = op.attrs.get_int("channels");
      if (g == 1 || (s == 0 && op.attrs.get_int("count") == Ci)) x = op.inputs[0], groups = g, start += s, C = Ci;
    }
    if (groups == 1 && start == 0 && count == C && x.type().shape[4] == to) return x;
    Attrs a;
    a.set("channels", C);
    a.set("groups", groups);
    a.set("start", start);
    a.set("count", count);
    a.set("dst_block", to);
    return make_op("kiln.ChannelPermuteNCHWc", {x}, a, name)->output();
  }

  // ShuffleNet's channel shuffle of a blocked value, the last Reshape of
  // Reshape [N, C, H, W] -> [N, g, C/g, H, W], Transpose (0, 2, 1, 3, 4),
  // Reshape back to [N, C, H, W]: output channel j is input channel
  // (j % g) * (C / g) + j / g, an index map on the blocks (no relayout to
  // NCHW and back); a conv that reads it takes the permutation into its
  // weights instead (fold_shuffle).
  std::vector<Value> rewrite_shuffle(const OpNode& n) {
    if (n.types[0].ndim() != 4 || n.inputs[0].node->kind != NodeKind::Op) return {};
    const auto& tr = static_cast<const OpNode&>(*n.inputs[0].node);
    if (tr.op->name != "Transpose" || tr.attrs.get_ints("perm") != std::vector<int64_t>{0, 2, 1, 3, 4} || tr.inputs[0].node->kind != NodeKind::Op) return {};
    const auto& split = static_cast<const OpNode&>(*tr.inputs[0].node);
    if (split.op->name != "Reshape" || split.types[0].ndim() != 5) return {};
    const Value& v = split.inputs[0];
    const auto& in = v.type().shape;
    const auto& mid = split.types[0].shape;
    if (block_behind(v) == 0 || !(in == n.types[0].shape) || !in[1].is_static() || !mid[1].is_static() || !(mid[0] == in[0]) || !(mid[3] == in[2]) ||
        !(mid[4] == in[3]) || !(mid[1] * mid[2] == in[1]))
      return {};
    const int64_t C = in[1], g = mid[1], to = channel_block_for(C, max_block_, lanes());
    return {relayout(permute(blocked_source(v), C, g, 0, C, to, n.name), to, 0, C)};
  }

  // A conv (group 1) reading a whole channel shuffle of a blocked value:
  // sum_j W[k, j] x[perm(j)] = sum_c W[k, perm^-1(c)] x[c], so it reads the
  // shuffle's source with its input channels permuted, *out (the shuffle is
  // left to its other readers, if any).
  bool fold_shuffle(Value* x, const NDArray& W, NDArray* out) {
    if (block_behind(*x) == 0 || !is_permute(blocked_source(*x)) || W.ndim() != 4) return false;
    const auto& op = static_cast<const OpNode&>(*blocked_source(*x).node);
    const int64_t C = op.attrs.get_int("channels"), g = op.attrs.get_int_or("groups", 1);
    if (g == 1 || op.attrs.get_int_or("start", 0) != 0 || op.attrs.get_int("count") != C || W.shape()[1] != C) return false;
    const auto& ws = W.shape();
    const int64_t taps = ws[2] * ws[3];
    *out = NDArray::empty(ws, DataType::Float(32));
    for (int64_t k = 0; k < ws[0]; ++k)
      for (int64_t j = 0; j < C; ++j)
        std::memcpy(out->data_as<float>() + (k * C + (j % g) * (C / g) + j / g) * taps, W.data_as<float>() + (k * C + j) * taps, sizeof(float) * taps);
    const Value& src = op.inputs[0];
    *x = relayout(src, src.type().shape[4], 0, C);
    return true;
  }

  // A Concat of 4-D channels, some blocked, that no one block divides
  // (channels padded to whole vectors, ShuffleNetV2's 58 + 58; blocks of
  // several sizes): one index map from the blocked inputs to the blocks of
  // the joined channels, where a conv reading it would block them.
  std::vector<Value> padded_concat(const OpNode& n) {
    bool blocked = false;
    std::vector<int64_t> channels;
    int64_t total = 0;
    for (const Value& v : n.inputs) {
      if (!v.type().shape[1].is_static() || v.type().dtype != DataType::Float(32)) return {};  // symbolic channels stay NCHW
      blocked = blocked || block_behind(v) > 0;
      channels.push_back(v.type().shape[1]);
      total += channels.back();
    }
    if (!blocked) return {};
    const int64_t to = channel_block_for(total, max_block_, lanes());
    std::vector<Value> in;
    for (size_t k = 0; k < n.inputs.size(); ++k)
      in.push_back(block_behind(n.inputs[k]) > 0 ? blocked_source(n.inputs[k]) : relayout(n.inputs[k], 0, to, channels[k]));
    Attrs a;
    a.set("channels", channels);
    a.set("dst_block", to);
    Value y = make_op("kiln.ChannelConcatNCHWc", std::move(in), a, n.name)->output();
    return {relayout(y, to, 0, total)};
  }

  // A Split of a blocked value into pieces that are not whole blocks, or of
  // a shuffle: each piece its own index map (permute).
  std::vector<Value> split_pieces(const OpNode& n) {
    const Value src = blocked_source(n.inputs[0]);
    const int64_t C = n.inputs[0].type().shape[1];
    std::vector<Value> out;
    int64_t start = 0;
    for (int k = 0; k < n.num_outputs(); ++k) {
      const int64_t count = n.types[k].shape[1], to = channel_block_for(count, max_block_, lanes());
      out.push_back(relayout(permute(src, C, 1, start, count, to, n.name + "." + std::to_string(k)), to, 0, count));
      start += count;
    }
    return out;
  }

  // An inference BatchNormalization of a blocked value (constant statistics,
  // none folded into a conv before it: DenseNet's after each join) as the
  // per-channel x * scale + shift, blocked, so it fuses with the blocked
  // join instead of bracketing it with relayouts.
  std::vector<Value> rewrite_batch_norm(const OpNode& n) {
    const int64_t b = block_behind(n.inputs[0]);
    if (b == 0 || n.inputs.size() < 5 || n.num_outputs() != 1 || n.types[0].ndim() != 4 || n.attrs.get_int_or("training_mode", 0) != 0) return {};
    const int64_t C = n.types[0].shape[1];
    const NDArray* p[4];
    for (int i = 0; i < 4; ++i) {
      p[i] = constant_of(n.inputs[1 + i]);
      if (!p[i] || p[i]->dtype() != DataType::Float(32) || p[i]->numel() != C) return {};
    }
    NDArray scale = NDArray::empty({1, C, 1, 1}, DataType::Float(32)), shift = NDArray::empty({1, C, 1, 1}, DataType::Float(32));
    const double eps = n.attrs.get_float("epsilon");
    for (int64_t c = 0; c < C; ++c) {
      const double s = p[0]->data_as<float>()[c] / std::sqrt(double(p[3]->data_as<float>()[c]) + eps);
      scale.data_as<float>()[c] = static_cast<float>(s);
      shift.data_as<float>()[c] = static_cast<float>(p[1]->data_as<float>()[c] - p[2]->data_as<float>()[c] * s);
    }
    Value x = relayout(n.inputs[0], 0, b, C);
    Value y = make_op("Mul", {x, *blocked_constant(scale, C, b)}, {}, n.name + ".scale")->output();
    y = make_op("Add", {y, *blocked_constant(shift, C, b)}, {}, n.name)->output();
    return {relayout(y, b, 0, C)};
  }

  // A Pad by zeros on every side (PyTorch exports AvgPool2d as one before
  // the pool: DenseNet's transitions): nothing, so the pool behind it sees
  // the blocked value and runs blocked.
  static bool pads_nothing(const OpNode& n) {
    const NDArray* pads = constant_of(n.inputs[1]);
    if (!pads || pads->dtype() != DataType::Int(64) || n.types[0].shape != n.inputs[0].type().shape) return false;
    const int64_t* p = pads->data_as<int64_t>();
    return std::all_of(p, p + pads->numel(), [](int64_t x) { return x == 0; });
  }

  static Value ints(const std::vector<int64_t>& v, const std::string& name) {
    NDArray a = NDArray::empty({static_cast<int64_t>(v.size())}, DataType::Int(64));
    std::copy(v.begin(), v.end(), a.data_as<int64_t>());
    return make_constant(name, a)->output();
  }

  // A QuantizeLinear/DequantizeLinear with one scale and zero point (elementwise:
  // pattern_of), so an int8 model's Q/DQ between blocked convs run blocked
  // too, their parameters as they are.
  static bool per_tensor_qdq(const OpNode& n) {
    return (n.op->name == "QuantizeLinear" || n.op->name == "DequantizeLinear") && pattern_of(n) <= Pattern::Broadcast;
  }

  // An elementwise/broadcast op over values that come out of blocked transforms, run blocked instead.
  std::vector<Value> rewrite_elementwise(const OpNode& n) {
    const bool qdq = per_tensor_qdq(n);
    if ((n.op->pattern > Pattern::Broadcast && !qdq) || n.num_outputs() != 1 || n.types[0].ndim() != 4 || n.op->name.rfind("kiln.", 0) == 0) return {};
    int64_t b = 0;
    for (const Value& v : n.inputs)
      if (v.defined() && block_behind(v) > 0) b = block_behind(v);
    // No blocked input (or symbolic channels, [batch, seq, heads, d]): nothing to do, and dim 1 need not be a size.
    if (b == 0 || !n.types[0].shape[1].is_static()) return {};
    int64_t C = n.types[0].shape[1];
    if (C % b != 0 && !finite_on_finite(n.op->name)) return {};
    bool full_blocked = false;  // an operand of the output's shape comes blocked
    for (const Value& v : n.inputs) full_blocked = full_blocked || (v.defined() && block_behind(v) > 0 && v.type().shape == n.types[0].shape);
    std::vector<Value> in;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      const Value& v = n.inputs[i];
      if (!v.defined() || n.op->reads_at_compile_time(static_cast<int>(i)) || (qdq && i > 0)) {
        in.push_back(v);
      } else if (v.type().shape == n.types[0].shape) {
        in.push_back(relayout(v, 0, b, C));  // looks through a transform from b
      } else if (const NDArray* c = constant_of(v)) {
        auto bc = blocked_constant(*c, C, b);
        if (!bc) return {};
        in.push_back(*bc);
      } else if (per_channel(v.type(), n.types[0]) && full_blocked) {
        // A squeeze-excitation scale [N, C, 1, 1]: blocked too, [N, C/b, 1, 1, b]
        // broadcasts over the pixels. Left in NCHW, the product ran as two
        // relayouts of the large operand around it (EfficientNet-B0: 0.41 ms
        // of 10, 1 thread). Not where the large operand is in NCHW (a conv
        // that stays there): the small one goes to it instead.
        in.push_back(relayout(v, 0, b, C));
      } else {
        return {};  // a tensor broadcast along other axes: leave it in NCHW
      }
    }
    Ref<OpNode> blocked = make_op(n.op, std::move(in), n.attrs, n.name);
    return {relayout(blocked->output(), b, 0, C)};
  }

  int64_t lanes() const { return max_block_ / 2; }

  // Four vectors where the target has 32 vector registers (AVX-512), they
  // divide N and A has rows enough (a symbolic count is taken as enough):
  // the seeds' 6 x 4-vector register tile (search_space_seeds.cpp, same
  // row rule) then reads one panel; 0 otherwise (whole_vectors_block's two at most).
  int64_t matmul_panel(int64_t N, const TensorType& a) const {
    const int64_t four = 2 * max_block_;
    if (target_.num_vector_registers() < 32 || N % four != 0) return 0;
    int64_t rows = 1;
    for (size_t k = 0; k + 1 < a.shape.size(); ++k) {
      if (!a.shape[k].is_static()) return four;
      rows *= a.shape[k].value();
    }
    return rows >= 128 ? four : 0;
  }

  const Target& target_;
  const int64_t max_block_;  // two vectors of the target's float32 lanes
  const LayoutPlan& plan_;    // per-convolution caps
  std::map<std::tuple<const NodeObj*, int, int64_t, int64_t>, Value> transforms_;  // (node, output, from, to)
  layout_detail::TrainLayoutRules train_;
};

}  // namespace

Graph alter_conv_layout(const Graph& g, const Target& target, const LayoutPlan& plan) {
  if (target.kind != Target::Kind::LLVM) return g;
  for (const auto& [conv, cap] : plan.conv_max_block)
    KILN_USER_CHECK(cap > 0) << "layout plan: convolution '" << conv << "' has cap " << cap << "; give a positive channel block";
  LayoutRewriter rewriter(g, target, plan);
  return rewrite_graph(g, [&](const Ref<OpNode>& n) { return rewriter(n); });
}

}  // namespace kiln::graph
