// Private to the search space (ops/src/search_space*.cpp, sketch_rules*.cpp):
// what the sketch rules know about a DAG, the sketches they produce, and the
// decision slots a candidate fills in.
//
// A sketch is one StagePlan per stage of task.fresh_schedule() (same order as
// te::topo_sort(task.outputs)) plus the list of decision slots its plans
// read. A candidate's decisions vector is the concatenation of the slots'
// values, so every in-range value of every slot gives a valid schedule: no
// slot constrains another, which keeps mutation and crossover trivially safe.
// A value that follows from a decision is not a slot of its own: the pack
// sketch's panel width is the innermost tile factor of the packed axis, and
// that axis's slot only admits the allowed widths there, so the two cannot
// disagree under mutation or crossover.
#ifndef KILN_OPS_SEARCH_SPACE_INTERNAL_H
#define KILN_OPS_SEARCH_SPACE_INTERNAL_H

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kiln/ops/register_tile.h"
#include "kiln/ops/task.h"
#include "kiln/te/schedule.h"

namespace kiln::ops::detail {

/** One stage of the task's DAG as the rules see it. */
struct StageInfo {
  te::Tensor tensor;                         ///< the tensor of the original DAG (Schedule::operator[] follows replacements)
  const te::ComputeOpNode* op = nullptr;     ///< nullptr for placeholders
  std::string name;
  bool output = false;
  bool reduction = false;
  bool inlined = false;                      ///< rule 1: a non-output elementwise stage
  /** Rule 1's exception: a padding stage (its body has a condition) read by a
   * tiled reduction may instead be computed once at root, so the register
   * tile's loads carry no bounds test. */
  bool may_materialize = false;
  std::vector<int> pad_readers;              ///< the reuse stages whose bodies read this inlined stage (rule 1's exception)
  bool has_reuse = false;                    ///< some input element is read by several output elements
  std::vector<int64_t> spatial, reduce;      ///< extents of the data-parallel and reduce axes (symbolic ones at the task's size hints)
  /** Per axis: the extent is an expression of shape variables (dynamic
   * shapes). Such an axis is tiled as for its hinted extent, its last tile a
   * remainder that lowering guards and peels off; it is never unrolled, and
   * never fused with other loops where a guard must stay partitionable. */
  std::vector<bool> spatial_var, reduce_var;
  bool any_var() const {
    for (bool v : spatial_var) if (v) return true;
    for (bool v : reduce_var) if (v) return true;
    return false;
  }
  Expr body;                                 ///< with inlined producers substituted
  std::vector<int> reads;                    ///< stored (non-inlined) stages the body reads
  std::vector<int> readers;                  ///< stored stages whose (inlined) bodies read this one
  /** Multi-level-tiled stages: the input read as B of a matmul (see find_pack_operand), else -1. */
  int pack_operand = -1;
  int pack_dim = -1;                         ///< the operand's dimension indexed by the innermost spatial axis
  std::vector<int> pack_widths;              ///< panel widths the pack sketch allows (innermost tile factors)
  /** Multi-level-tiled stages: the input read as a transposed A, A[k, i] (see find_transposed_a), else -1.
   * Where the pack rule packs B, it packs this operand too: into panels as wide as the row tile. */
  int pack_a_operand = -1;
  int pack_a_dim = -1;                       ///< the operand's dimension indexed by the row axis
  int pack_a_axis = -1;                      ///< that row axis (a spatial axis of the stage)
  /** Per output axis, the part of it a Simple stage runs inside its other
   * loops, unrolled (see inner_parts in sketch_rules.cpp): the whole axis
   * where it only picks, through selects, which inputs an element reads (a
   * Winograd input transform's tile element), the m of an m x m tile where
   * selects test the axis modulo m (an output transform's place in its
   * tile), else 1. Empty for stages without such an axis. */
  std::vector<int64_t> inner_parts;
  int64_t inner_part(size_t axis) const { return axis < inner_parts.size() ? inner_parts[axis] : 1; }
  int64_t spatial_size() const;
  int64_t reduce_size() const;
};

struct DagInfo {
  std::vector<StageInfo> stages;
  int cores = 1;
  int lanes = 8;       ///< float32 lanes of one native vector register
  int registers = 16;  ///< vector registers of the target (16 on AVX2, 32 on AVX-512)
  /** x86: an FMA takes its vector operand from memory, so a tile's weight vectors need no register. */
  bool fma_memory_operand = false;
};

/**
 * Rows of a register tile `vectors` wide when the vector operand is read by
 * the FMAs from memory (x86): every register but the broadcast one holds an
 * accumulator, 7 rows of 2 vectors on AVX2 instead of max_tile_rows' 6 (a
 * 7-wide output, a ResNet's last stage, then fits whole). Elsewhere
 * max_tile_rows.
 */
int64_t max_rows_loads_folded(const DagInfo& dag, int vectors);

/** Analyses the task's DAG; symbolic extents are taken at the task's size hints (StageInfo::spatial_var). */
DagInfo analyze_dag(const Task& task);

/** Innermost loops longer than this are not vectorized (the vectorizer's limit). */
inline constexpr int kMaxVectorExtent = 64;
/** The register-tile arithmetic of the hand schedules (kiln/ops/register_tile.h):
 * pack sketches sample the register tile's rows (the innermost factors of the
 * axes other than the packed one) within max_tile_rows for the sampled panel
 * width, so that the tile does not spill; mutation may go further. */
using ops::max_tile_rows;
using ops::tile_registers;

/** A decision slot: a tile (factors whose product is an extent) or a choice in [0, choices). */
struct Slot {
  enum class Kind : uint8_t { Tile, Choice } kind = Kind::Choice;
  int offset = 0;         ///< first position in Candidate::decisions
  int size = 1;           ///< tile: number of factors (outermost first); choice: 1
  int64_t extent = 1;     ///< tile: the product of the factors (the axis's extent, or more where tile_extent pads it)
  int choices = 1;        ///< choice: the domain size
  bool vector_pref = false;  ///< tile: sample innermost factors that are multiples of the vector lanes
  /** Tile: when not empty, the innermost factor must be one of these (ascending). */
  std::vector<int> inner_allowed;
  /** Tile: sampling draws innermost factors up to this; mutation may grow them further. */
  int sample_max = kMaxVectorExtent;
  std::string label;      ///< "C.i", "C.parallel", ... (for errors and logs)
};

/** Values of the unroll choice: pragma auto_unroll_max_step (0 = none). */
inline constexpr int kUnrollSteps[] = {0, 16, 64, 512};
inline constexpr int kNumUnrollSteps = 4;

enum class PlanKind : uint8_t {
  None,           ///< a placeholder
  Inline,         ///< rule 1
  Simple,         ///< rule 5: fuse outer spatial loops for parallel, split the innermost for vectors
  Tiled,          ///< rule 2 without cache_write: S0 S1 R0 S2 R1 S3 on the stage itself
  TiledCache,     ///< rule 2: cache_write("local"), the accumulator at S1 (or S0) of the copy out
  TiledFused,     ///< rule 3: the stage at S1 (or S0) of its elementwise output consumer
  FusedConsumer,  ///< rule 3, the consumer side: tiled by its producer's plan
  Rfactor,        ///< rule 4
  RowReduce,      ///< rule 7: a reduction along its reader's rows, at the output's row loop, rfactor'd over vector lanes
  // The GPU rules (sketch_rules_gpu.cpp):
  GpuThreads,      ///< one thread per output element: the spatial axes fused, split into blocks of threads
  GpuBlockReduce,  ///< an output reduction, one block per element, its reduce axes split over the block's threads
  GpuTiled,        ///< a reduction with reuse: cache_write("local"), block / thread / register tiles, inputs staged in shared memory
  GpuTiledFused,   ///< the same inside its elementwise output consumer (which is FusedConsumer)
  GpuRows,         ///< an output whose rows are reduced (softmax, layer norm): a block per row, threads along it
  GpuRowReduce,    ///< a row reduction at its GpuRows output's block loop, reduced across the threads
  GpuAtThread,     ///< any other stored stage: computed where the output's thread needs it
  GpuTensorCore,   ///< an output matmul of float16/bfloat16 inputs: warps of 16x16 fragments on tensor cores (sketch_rules_gpu_tensor_core.cpp)
};
const char* plan_kind_name(PlanKind k);

struct StagePlan {
  PlanKind kind = PlanKind::None;
  /** TiledFused: the consumer; Simple: the output it may be computed at (-1 when none);
   * RowReduce, and an Inline stage rule 7 may store per row: the output whose row loop holds it. */
  int consumer = -1;
  std::vector<int> spatial_tiles, reduce_tiles;  ///< slot ids, one per axis
  int vector_tile = -1;   ///< Simple: 2-level tile of the innermost spatial axis
  int rfactor_tile = -1;  ///< Rfactor: 3-level tile (outer reduce, parallel part, vector part) of the fused reduce axes
  int parallel = -1;      ///< how many outer loops to fuse into the parallel loop, minus one
  int location = -1;      ///< Simple: 0 root, 1 at the consumer; Tiled*: 0 at S1, 1 at S0; Inline (rule 7): 1 stored at the consumer's rows
  /** Tiled*: 1 puts the innermost axis's S0 and S1 loops outside the previous axis's (panel-outer). */
  int panel_order = -1;
  /** Tiled*: pack this input stage (its dimension StageInfo::pack_dim) into panels as wide as the innermost tile factor of the last axis. */
  int pack = -1;
  int unroll = -1;        ///< index into kUnrollSteps
  /** Simple output of RowReduce stages: one loop over its rows (parallel a choice), the reductions at it. */
  bool rows = false;
};

struct Sketch {
  std::vector<StagePlan> plans;  ///< one per stage
  std::vector<Slot> slots;
  int num_decisions = 0;
  std::string description;
};

/** Rule 7 (sketch_rules_rowwise.cpp): the elementwise output whose row loop
 * reduction stage i may be computed at, vectorized along the row; -1 if none.
 * The reduction's trailing axes of extent 1 (keepdims) read at 0 do not count as rows. */
int rowwise_target(const DagInfo& dag, int i);
/** Rule 7: inlined stage e (softmax's exp) may instead be stored per row at
 * output o's row loop: only o and o's row-wise reductions read it. */
bool row_storable(const DagInfo& dag, const std::vector<StagePlan>& plans, int e, int o);
/** Rule 7's stored stage: at `row` of `out`, its last axis split by the vector tile. */
void apply_row_stage(const StageInfo& info, const Sketch& sk, const StagePlan& p, const std::vector<int>& d, te::Schedule& s, te::Stage& out, const IterVar& row);
/** Rule 7's output: its rows fused into one loop (parallel or not), the last
 * axis split for vectors. Returns the row loop. */
IterVar apply_row_output(const StageInfo& info, const Sketch& sk, const StagePlan& p, const std::vector<int>& d, te::Schedule& s);
/** Rule 7's reduction: split by the lanes tile, rfactor'd, both parts at `row` of `out`. */
void apply_row_reduce(const StageInfo& info, const Sketch& sk, const StagePlan& p, const std::vector<int>& d, te::Schedule& s, te::Stage& out, const IterVar& row);

/** Rule 3's condition: the only reader of reduction stage c is an elementwise
 * output of the same shape that reads c exactly at its own axes, or at the
 * linear index of its leading axes where c runs over their product (its
 * first axis: ops::matmul_packed_b's rows over several shape variables); -1 if none. */
int fusible_consumer(const DagInfo& dag, int c);
/** How many leading axes of output d make c's first axis when d reads c as
 * fusible_consumer needs (1: the same axes); 0 when it does not. */
int consumer_row_axes(const DagInfo& dag, int c, int d);

/** Applies the rules to the DAG; at least one sketch, at most kMaxSketches. */
std::vector<Sketch> generate_sketches(const DagInfo& dag);
inline constexpr int kMaxSketches = 64;

/** Replays sketch + decisions onto s (a fresh schedule of the task); decisions must be valid. */
void apply_sketch(const DagInfo& dag, const Sketch& sketch, const std::vector<int>& decisions, te::Schedule& s);

/** A loop made by a sketch's primitives, with its extent (the stage API does not know extents before lowering). */
struct Loop {
  IterVar iv;
  int64_t extent = 1;  ///< at the size hints where `var`
  bool var = false;    ///< its extent is symbolic: never unrolled
};
/** Splits iv into loops of the given extents, outermost first; their product
 * is iv's extent when bounds are inferred, or a padded one (tile_extent),
 * whose last tile lowering guards and peels off. */
std::vector<Loop> split_into(te::Stage& st, IterVar iv, const int* factors, int n, bool var = false);
/** Panel-outer order of a tile level of n >= 2 loops: the position the
 * innermost axis's loop moves to (after the axes that index B). */
size_t panel_position(const StageInfo& info, size_t n);
/** Per spatial axis of a tiled stage: whether it indexes the operand read along the innermost axis (B of a matmul; search_space_seeds.cpp). */
std::vector<bool> indexes_vector_operand(const StageInfo& st);

// The tensor-core sketch of the GPU rules (sketch_rules_gpu_tensor_core.cpp).
/** An output matmul of float16/bfloat16 inputs summed in float32, its last two spatial axes and its reduce axis multiples of 16. */
bool tensor_core_matmul(const StageInfo& s);
/** Its slots: 16-wide tiles of i and j as (blocks, warps, fragments), of k as (outer steps, tiles per step); tile_slot(label, extent, levels, sample_max). */
void lay_out_tensor_core(const StageInfo& s, StagePlan* p, const std::function<int(const std::string&, int64_t, int, int)>& tile_slot);
/** Its default: up to 4x4 fragments per warp, 2x2 warps, k steps of 32. */
void tensor_core_defaults(const StageInfo& s, const Sketch& sk, const StagePlan& p, std::vector<int>* d);
/** Schedules the stage on tensor cores from its i, j and k decisions (3, 3 and 2 factors), staged rows padded by `pad` (0: none). */
void apply_tensor_core(te::Schedule& sch, const StageInfo& info, const int* ti, const int* tj, const int* tk, int pad);
/** Reorders the stage's leaves into `order` (a no-op for one loop). */
void reorder_loops(te::Stage& st, const std::vector<Loop>& order);
/** Fuses the first `count` loops of `order` (adjacent leaves) into one, which replaces them in `order`. */
Loop fuse_prefix(te::Stage& st, std::vector<Loop>* order, int count);

/** The GPU rules (sketch_rules_gpu.cpp, cuda targets): sketches whose every
 * candidate binds its loops to blocks and threads. At least one sketch; the
 * last one is always the simplest (one thread per output element). */
std::vector<Sketch> generate_gpu_sketches(const DagInfo& dag);
/** Replays a GPU sketch and its decisions onto s (a fresh schedule of the task). */
void apply_gpu_sketch(const DagInfo& dag, const Sketch& sketch, const std::vector<int>& decisions, te::Schedule& s);
/** The GPU decisions a schedule gets without measurement: tiles of about 256
 * threads and a 4x4 register tile where the extents allow, 256 threads for
 * elementwise and row-wise stages. */
std::vector<int> gpu_default_decisions(const DagInfo& dag, const Sketch& sketch);
/** Halves the largest inner reduce step of a GPU tiled stage, else its
 * largest thread factor (into the block level); false when nothing is left to shrink. */
bool shrink_gpu_tiles(const Sketch& sketch, std::vector<int>* decisions);
/** Thread counts a GPU choice slot picks among (choice i -> kGpuThreads[i]). */
inline constexpr int kGpuThreads[] = {32, 64, 128, 256, 512, 1024};
inline constexpr int kNumGpuThreads = 6;

/** Throws kiln::Error naming the first slot whose values are out of range. */
void check_decisions(const Sketch& sketch, const std::vector<int>& decisions);

/** Samples the slot's values into decisions (at slot.offset). */
void sample_slot(const Slot& slot, int lanes, std::mt19937_64& rng, std::vector<int>* decisions);
/** Multi-level-tiled stages (packed or not): resamples the register tile's
 * rows that would not fit the registers with the sampled innermost width. */
void fit_rows_to_registers(const DagInfo& dag, const Sketch& sketch, std::mt19937_64& rng, std::vector<int>* decisions);
/** Seeds (search_space_seeds.cpp): for a sketch with multi-level-tiled
 * stages, up to four complete decision vectors derived from the target as
 * the hand schedules derive theirs (a register tile of two or one vectors
 * times the rows that fit the registers, one or four vectors' lanes of
 * reduce steps unrolled; with folded_loads on x86, two more whose rows
 * assume the FMAs read the vector operand from memory); none for other
 * sketches. */
std::vector<std::vector<int>> seed_decisions(const DagInfo& dag, const Sketch& sketch, bool folded_loads = true);
/** The K-blocked form of matmul seed d where a K x panel slice of its
 * weights outgrows a small L2 (search_space_k_blocks.cpp): the reduction in
 * blocks outside the row tiles, a block's slice of a panel in L1, the
 * accumulator at S0. A seed only (measured slower as the default on a 2 MiB
 * L2); false (d unchanged) where it does not apply. */
bool block_k_of_wide_panels(const StageInfo& st, const Sketch& sk, const StagePlan& p, std::vector<int>* d);
/** The decisions a schedule gets without measurement: the first seed, or
 * where there is none the seeds' structure with the widest tile that divides. */
std::vector<int> default_decisions(const DagInfo& dag, const Sketch& sketch);
/** The extent the tile slot of spatial axis `axis` of tiled stage s is laid
 * out over (search_space_seeds.cpp): the axis's extent, or for a matmul's
 * row axis or unpacked vector axis, or a blocked conv's output columns, with
 * no good divisor the next multiple of the register tile
 * (kiln/ops/tile_padding.h); the factors then split the
 * axis with a remainder, a guarded last tile that lowering peels off. */
int64_t tile_extent(const DagInfo& dag, const StageInfo& s, size_t axis, bool packed);
/** Whether the default packs stage s's pack operand: the copy is one pass
 * over the operand, paid back when enough rows of the output reuse each
 * panel (see search_space_seeds.cpp). */
bool pack_pays(const DagInfo& dag, const StageInfo& s);
/** Changes the slot's values to a different valid value; false when the slot has only one. */
bool mutate_slot(const Slot& slot, std::mt19937_64& rng, std::vector<int>* decisions);

/** Panel widths worth packing an axis of this extent by: divisors up to
 * kMaxVectorExtent that are multiples of the widest vector (lanes, lanes/2,
 * ..., 2) that has any, and narrow enough that one row of accumulators fits
 * the registers (at most 56 on AVX2, 64 on AVX-512); empty when the extent
 * is odd. */
std::vector<int> panel_widths(int64_t extent, int lanes, int registers);

/** Prime factors of n with repetition, ascending. */
std::vector<int64_t> prime_factors(int64_t n);
/** Divisors of n, ascending. */
std::vector<int64_t> divisors(int64_t n);
/** The largest divisor of extent that is at most cap (at least 1). */
int64_t divisor_at_most(int64_t extent, int64_t cap);

}  // namespace kiln::ops::detail

#endif  // KILN_OPS_SEARCH_SPACE_INTERNAL_H
