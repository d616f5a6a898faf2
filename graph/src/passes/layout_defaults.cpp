// The default channel blocks and caps of alter_conv_layout (layout_plan.h):
// which block a convolution's channels take when no tuned LayoutPlan names
// it, and the choices the graph-level tuner searches over.
#include <algorithm>

#include "kiln/graph/layout_plan.h"
#include "kiln/graph/op_registry.h"
#include "kiln/graph/passes.h"
#include "kiln/ops/nn.h"
#include "kiln/ops/register_tile.h"
#include "kiln/ops/streamed_weights.h"
#include "layout_helpers.h"

namespace kiln::graph {
namespace {

// Output pixels in the register tile a convolution's default schedule takes
// with `vectors` vectors of output channels (ops/src/search_space_seeds.cpp:
// rows of the output width first, then of its height, as fit the registers
// less one spare).
int64_t default_tile_rows(int64_t out_h, int64_t out_w, int registers, int vectors) {
  int64_t left = ops::max_tile_rows(registers - 1, vectors);
  // channel_block: the largest divisor not above the bound.
  int64_t x = ops::channel_block(static_cast<int>(out_w), static_cast<int>(left));
  return x * ops::channel_block(static_cast<int>(out_h), static_cast<int>(std::max<int64_t>(1, left / x)));
}

// Whether `conv` is a 1 x 1 conv whose default schedule streams its weights
// from L3 (ops/streamed_weights.h: AVX-512, 4 MiB of weights and more over
// a small image) under the two-vector blocks it would otherwise take. Such
// convs take one-vector blocks (default_conv_cap): the same register tile
// (7 pixels x two blocks of one vector) and the same streamed schedule, but
// each input pixel's block is one cache line and a step's weights half a
// block's. In ResNet-50 (Xeon, AVX-512, 1 thread, kernel minimums of 12
// profiles interleaved in one process, load 15) layer4's 2048 -> 512 and
// 512 -> 2048 ran in 0.75-0.85 ms against 0.92-1.08, the 1024 -> 2048
// stride-2 one 1.63-1.67 against 1.98-2.07; the relayouts to and from the
// 3x3 convs between them (still two vectors: in one-vector blocks they
// gained nothing, 0.98-1.08x the time) cost 0.07 ms at the stage's entry and 0.01 each
// after, the model 48.6-48.8 ms against 49.9-50.1 (ONNX Runtime's nodes:
// 0.82-0.86 and 1.85). ResNeXt-50's layer4 1x1 convs (8 MiB) likewise,
// 1.5-1.6 ms against 1.9-2.1.
bool streams_weights_from_l3(const OpNode& conv, const Target& target) {
  if (conv.inputs.size() < 2 || conv.inputs[0].type().ndim() != 4) return false;
  const auto& w = conv.inputs[1].type().shape;
  const auto& out = conv.types[0].shape;
  if (w.size() != 4 || !w[2].is_static() || !w[3].is_static() || w[2].value() != 1 || w[3].value() != 1) return false;
  for (size_t k = 0; k < 4; ++k)
    if (out[k].is_symbolic()) return false;
  const Dim& in = conv.inputs[0].type().shape[1];
  const int64_t lanes = target.natural_lanes(DataType::Float(32));
  if (in.is_symbolic() || in.value() % lanes != 0 || out[1].value() % lanes != 0) return false;
  ops::RegisterBudget budget = ops::register_budget(target);
  return ops::streams_1x1_weights_from_l3(in.value(), out[1].value(), out[0].value() * out[2].value() * out[3].value(), 2 * lanes, 4,
                                          budget.registers);
}

}  // namespace

int64_t whole_vectors_block(int64_t C, int64_t max_block, int64_t lanes) {
  int64_t best = 0;
  for (int64_t b = lanes; b <= max_block; b += lanes)
    if (C % b == 0) best = b;
  return best;
}

int64_t channel_block_for(int64_t C, int64_t max_block, int64_t lanes) {
  int64_t best = whole_vectors_block(C, max_block, lanes);
  if (best > 0) return best;
  // No whole vector divides C: a part-vector divisor (24 channels on AVX-512
  // took 12 over 24: 108 GFLOP/s against 51, 1 thread, Zen 5), or whole
  // vectors over C padded to a vector where that uses more of each vector (58
  // channels: blocks of 2 ran at 30 GFLOP/s; see padded_channels) or as much,
  // C taking several parts: whole vectors share each broadcast input. 24 as 32
  // ran the 144/96 -> 24 projections in 0.5x the time of 12s, 24 -> 144
  // expansions 1.4x, ShuffleNetV2's 3 -> 24 stem 0.6x; MobileNetV2 0.86-0.89x,
  // V3-small 0.84-0.91x, EfficientNet-B0 0.94-0.97x, ShuffleNetV2 0.85-0.89x
  // (Xeon, AVX-512, 1 thread, summed kernel minimums). One part (3) stays.
  const int64_t part = ops::channel_block(static_cast<int>(C), static_cast<int>(std::min(max_block, lanes)));
  const int64_t padded = padded_channels(C, lanes);
  if (max_block >= lanes && (C * lanes > part * padded || (part < C && C * lanes == part * padded)))
    return whole_vectors_block(padded, max_block, lanes);
  return part;
}

int64_t default_conv_cap(int64_t out_channels, int64_t out_h, int64_t out_w, const Target& target) {
  ops::RegisterBudget budget = ops::register_budget(target);
  const int64_t lanes = budget.lanes;
  if (out_channels % (2 * lanes) != 0) return 2 * lanes;  // channel_block_for decides between part-vectors
  // FMAs per load of the tile's operands, as the tuner's tile_intensity counts them.
  auto intensity = [&](int vectors) {
    double rows = static_cast<double>(default_tile_rows(out_h, out_w, budget.registers, vectors));
    return rows * vectors / (rows + vectors);
  };
  return intensity(1) > intensity(2) ? lanes : 2 * lanes;
}

int64_t default_conv_cap(const OpNode& conv, const Target& target) {
  const auto& out = conv.types[0].shape;
  const int64_t group = conv.attrs.get_int_or("group", 1), lanes = target.natural_lanes(DataType::Float(32));
  if (group != 1 && conv.inputs[0].type().ndim() == 4 && conv.inputs[0].type().shape[1] != group) {
    // A grouped conv (not depthwise) whose groups are narrower than two
    // vectors takes one: a block of b over groups of Cg < b multiplies
    // b / Cg times the MACs it needs, and the fewer zero products are worth
    // the relayout to its neighbours' two vectors after it (it reads its
    // input in their block: conv2d_nchwc_general). On AVX-512 (2 cores,
    // Xeon) ResNeXt-50's grouped 3x3 convs at 28 x 28 and 14 x 14 ran 1.8x
    // faster in blocks of 16 than of 32, relayouts included, at 56 x 56
    // 1.15x; AVX2: 1.1x-1.3x. At stride 2, once the input (4x the output's
    // pixels) was no longer relayouted, too: ResNeXt-50's 56 -> 28 (8
    // channels a group) 1.06 -> 0.93 ms and 28 -> 14 (16) 0.52 -> 0.38 ms,
    // the output's new relayout included (1 thread, Xeon, minimum of 40).
    const int64_t Cg = conv.inputs[0].type().shape[1] / group;
    return Cg < 2 * lanes ? lanes : 2 * lanes;
  }
  if (group != 1) return 2 * lanes;
  // A symbolic image size (a dynamic model) has no one tile to weigh: two vectors, the cap of most convolutions.
  if (out[2].is_symbolic() || out[3].is_symbolic()) return 2 * lanes;
  if (streams_weights_from_l3(conv, target)) return lanes;
  return default_conv_cap(out[1], out[2], out[3], target);
}

LayoutPlan default_layout_plan(const Graph& g, const Target& target) {
  const int64_t two_vectors = 2 * target.natural_lanes(DataType::Float(32));
  for (const OpNode* n : g.op_nodes())
    if (n->op->name == "Conv" && !n->types.empty() && n->types[0].ndim() == 4 && default_conv_cap(*n, target) != two_vectors) return LayoutPlan{};
  LayoutPlan plan;
  plan.max_block = two_vectors;
  return plan;
}

bool LayoutPlan::names(const std::string& conv) const { return max_block > 0 || conv_max_block.count(conv) > 0; }

int64_t LayoutPlan::cap_of(const std::string& conv, int64_t fallback) const {
  auto it = conv_max_block.find(conv);
  if (it != conv_max_block.end()) return it->second;
  return max_block > 0 ? max_block : fallback;
}

std::vector<int64_t> layout_block_choices(const Target& target) {
  int64_t lanes = target.natural_lanes(DataType::Float(32));
  return {lanes, 2 * lanes};
}

}  // namespace kiln::graph
