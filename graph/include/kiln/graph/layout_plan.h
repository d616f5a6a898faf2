/** \file
 * The channel blocking of each convolution in the NCHWc layout, and its
 * choice from tuning records.
 *
 * A convolution's channels are blocked by the largest divisor that is whole
 * vectors, up to a cap; the caps tried are one and two vectors of the
 * target's float32 lanes (AVX2: 8 and 16; AVX-512: 16 and 32). Tuning a
 * model tunes every convolution under each cap (a task per variant), and
 * compiling with the database picks per convolution the cap whose best
 * record, plus the layout transform its input then needs, costs least.
 */
#ifndef KILN_GRAPH_LAYOUT_PLAN_H
#define KILN_GRAPH_LAYOUT_PLAN_H

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace kiln {
struct Target;
}

namespace kiln::graph {

class Graph;
struct OpNode;

struct LayoutPlan {
  /** The cap of every convolution not listed below (0: default_conv_cap's, per convolution). */
  int64_t max_block = 0;
  /** Per convolution (node name): its cap. */
  std::map<std::string, int64_t> conv_max_block;
  /** The largest output tile m of the Winograd F(m x m, 3x3) that 3x3 stride-1
   * convolutions with many output pixels run as (alter_conv_layout): 4 (F(4x4, 3x3)
   * where the output has tiles enough, else F(2x2, 3x3)), 2 (F(2x2, 3x3) only), 0 (none). */
  int winograd = 4;
  /** Per convolution (node name): the largest Winograd output tile it may take (as `winograd`; the smaller of the two applies). */
  std::map<std::string, int> conv_winograd;
  /** Per depthwise convolution (node name) whose output a 1x1 conv alone reads: whether the two run as one
   * group (true) or two (false) (fuse_depthwise_pointwise). A pair not listed follows the pass's size rule. */
  std::map<std::string, bool> dwpw_fuse;
  /** The likely size of each shape variable (by name; CompileOptions sizes/dims
   * through likely_bindings): a symbolic batch counts as that many images when
   * choosing Winograd and its tile, so that the likely batch runs the form its
   * static compile would. A variable not listed counts as 1. */
  std::map<std::string, int64_t> likely_sizes;

  int64_t cap_of(const std::string& conv, int64_t fallback) const;
  /** Whether the plan decides anything (a cap, a Winograd tile, a depthwise+pointwise fusion) beyond the defaults' two-vector, F(4x4) plan. */
  bool decides() const { return max_block > 0 || !conv_max_block.empty() || !conv_winograd.empty() || !dwpw_fuse.empty(); }
  /** Whether the plan sets this convolution's cap (uniformly or by name). */
  bool names(const std::string& conv) const;
  /** The largest Winograd output tile this convolution may take: `winograd`, or less where conv_winograd says so. */
  int winograd_of(const std::string& conv) const {
    auto it = conv_winograd.find(conv);
    return it == conv_winograd.end() || it->second > winograd ? winograd : it->second;
  }
};

/** The largest block up to max_block that is whole vectors (of `lanes`) and divides C; 0 when there is none. */
int64_t whole_vectors_block(int64_t C, int64_t max_block, int64_t lanes);

/**
 * The block of `channels` under a cap: the largest divisor up to the cap
 * that is whole vectors of `lanes` (24 channels, cap 16, 8 lanes: 8, not 12,
 * which would leave a part-vector in every register tile). Where no whole
 * vector divides, whole vectors over the channels padded to a vector
 * (padded_channels) if they waste fewer lanes than the largest divisor up
 * to one vector, else that divisor: 58 channels on 16 lanes run as 64 in
 * blocks of 16 or 32 (not blocks of 2, an eighth of each vector); 3
 * channels keep blocks of 3, and 24 on 16 lanes blocks of 12, not 24.
 */
int64_t channel_block_for(int64_t channels, int64_t cap, int64_t lanes);
/** The channels a blocked tensor of `channels` in blocks of `block` holds: rounded up to the block. */
inline int64_t padded_channels(int64_t channels, int64_t block) { return (channels + block - 1) / block * block; }

/**
 * The cap of a (dense) convolution that no plan names: two vectors, unless
 * the default register tile of two-vector blocks holds so few output pixels
 * that one-vector blocks feed their FMAs better (tile_intensity's measure).
 * That is a 7 x 7 output on AVX2: two vectors fit 6 pixels, and 7 has no
 * divisor up to 6, so the tile took one vector of a 16-channel block and
 * each weight cache line was read half by one tile and half by another; in
 * blocks of 8 ResNet's 7 x 7 convolutions ran 1.02x to 1.34x faster (Zen 3).
 */
int64_t default_conv_cap(int64_t out_channels, int64_t out_h, int64_t out_w, const Target& target);

/**
 * The cap a Conv node takes without a plan: default_conv_cap's for a dense
 * one (one vector for a 1 x 1 conv whose default streams its weights from
 * L3: ops/streamed_weights.h), two vectors for a depthwise one (which alter_conv_layout overrides
 * with its input's block where that is whole vectors), and for a grouped one
 * two vectors, or one where its groups are narrower than two (fewer zero
 * products between groups; alter_conv_layout takes its input's block where
 * that fits its groups and the cap, and otherwise reads the input in its
 * producer's block where that is a multiple of its own).
 */
int64_t default_conv_cap(const OpNode& conv, const Target& target);

/**
 * The plan compiling without records follows, made explicit: the uniform
 * two-vector plan where every convolution of `g` defaults to two vectors
 * (the same groups: no need to optimize the graph under both), else
 * LayoutPlan{} (each convolution at its default).
 */
LayoutPlan default_layout_plan(const Graph& g, const Target& target);

/** The caps a convolution may take on this target: one and two vectors of float32. */
std::vector<int64_t> layout_block_choices(const Target& target);

/** One line per convolution of the choice: the cap it took, and why. */
struct LayoutDecision {
  std::string conv;
  int64_t cap = 0;
  double conv_time = 0;       ///< seconds, its group's best record under that cap
  double transform_time = 0;  ///< seconds, the estimated relayout of its input
  std::string why;            ///< "records", "default (no record)"
};

/**
 * The cap per convolution of `g` (an imported model, before optimize) from
 * the best records in `db`: greedily in graph order, each convolution
 * takes the cap minimising its group's best time plus the estimated time of
 * relayouting its input from the block its producer chose (bytes moved at
 * the bandwidth of the database's best LayoutTransform record; only caps
 * with a record compete; without one, its default cap). That per-conv
 * plan, each cap for every conv and the default plan (what tuning
 * measured) are then costed whole: the sum of the best
 * records of every group the plan compiles to (mixing blocks changes the
 * groups: a residual Add no longer fuses, relayouts appear). The cheapest
 * plan whose groups all have a record wins, but the default plan stays
 * unless the winner costs 3% less than it; with none, the default.
 * Every plan it costs and returns has `winograd` as given (LayoutPlan::winograd).
 */
LayoutPlan choose_layout_plan(const Graph& g, const Target& target, const std::string& db,
                              std::vector<LayoutDecision>* decisions = nullptr, int winograd = 4);

}  // namespace kiln::graph

#endif  // KILN_GRAPH_LAYOUT_PLAN_H
