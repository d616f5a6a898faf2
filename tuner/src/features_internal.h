// Private to the feature extractor: the column layout and the buffer-access
// analysis (footprints, strides, reuse) that features_access.cpp implements.
#ifndef KILN_TUNER_SRC_FEATURES_INTERNAL_H
#define KILN_TUNER_SRC_FEATURES_INTERNAL_H

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/arith/analyzer.h"
#include "kiln/ir/stmt.h"

namespace kiln::tuner::detail {

// Columns of one row that do not depend on the buffers. Counts are weighted
// by the iterations of the enclosing loops and log-scaled (log2(1 + x)).
#define KILN_FEATURE_FIXED_COLUMNS(X)                                                        \
  /* float arithmetic, per lane, times the loop iterations */                                \
  X(float_addsub) X(float_mul) X(float_div) X(float_fma) X(float_math) X(float_cmp_select)  \
  /* integer and boolean arithmetic (values, indices and guards) */                          \
  X(int_addsub) X(int_mul) X(int_divmod) X(int_cmp_select)                                   \
  /* the loop nest around the store */                                                       \
  X(loop_depth) X(loop_prod) X(inner_ext0) X(inner_ext1) X(inner_ext2) X(inner_ext3)         \
  /* vectorization: the store's lanes or an enclosing vectorized loop */                     \
  X(vec_present) X(vec_len) X(vec_innermost)                                                 \
  /* unrolling: unrolled loops left, and stores side by side in the innermost body */       \
  X(unroll_present) X(unroll_len) X(unroll_innermost) X(body_stores) X(auto_unroll_max_step) \
  /* parallelism: where the parallel loop is and how much work each task gets */            \
  X(par_present) X(par_len) X(par_outermost) X(par_innermost) X(par_task_work)              \
  X(par_outer_serial) X(thread_bind_len)                                                     \
  /* the statement itself */                                                                 \
  X(guards) X(is_update) X(is_init) X(to_param) X(store_elems)                              \
  /* the innermost iteration over all buffers: what decides LLVM's own vectorizing */       \
  X(inner_max_stride) X(inner_unit_stride) X(inner_store_stride) X(total_unique_bytes)      \
  X(total_inner_bytes)                                                                       \
  /* the whole function: a candidate's score sums its rows, so a row must know its share */ \
  X(func_stores) X(work_share)                                                               \
  /* allocations in scope */                                                                 \
  X(alloc_local_bytes) X(alloc_heap_bytes) X(alloc_count)

enum FixedColumn : int {
#define KILN_X(name) name,
  KILN_FEATURE_FIXED_COLUMNS(KILN_X)
#undef KILN_X
  kNumFixedColumns
};

// Per buffer the store touches (the biggest kMaxBuffers by bytes accessed).
#define KILN_FEATURE_BUFFER_COLUMNS(X) \
  X(access) X(bytes) X(unique_bytes) X(stride) X(reuse_iters) X(reuse_bytes) X(reuse_count) X(accesses) X(inner_bytes)

enum BufferColumn : int {
#define KILN_X(name) buf_##name,
  KILN_FEATURE_BUFFER_COLUMNS(KILN_X)
#undef KILN_X
  kNumBufferColumns
};

constexpr int kMaxBuffers = 5;

// The arithmetic intensity of the store's nest (float ops per byte of
// footprint) at each loop level, from the whole nest down to one iteration,
// resampled to kCurvePoints points; and the bytes a cache of a given size
// would have to bring in (the footprint of the outermost level that fits,
// times the iterations around it) with the intensity that traffic gives.
// The columns of kiln-nest-v4; the earlier extractors end before them.
#define KILN_FEATURE_INTENSITY_COLUMNS(X)                                                        \
  X(intensity0) X(intensity1) X(intensity2) X(intensity3) X(intensity4) X(intensity5)              \
  X(intensity6) X(intensity7) X(intensity8) X(intensity9)                                          \
  X(traffic_32k) X(traffic_32k_intensity) X(traffic_512k) X(traffic_512k_intensity)

enum IntensityColumn : int {
#define KILN_X(name) name,
  KILN_FEATURE_INTENSITY_COLUMNS(KILN_X)
#undef KILN_X
  kNumIntensityColumns
};

constexpr int kCurvePoints = intensity9 - intensity0 + 1;
constexpr int kIntensityBase = kNumFixedColumns + kMaxBuffers * kNumBufferColumns;
constexpr int kNumColumns = kIntensityBase + kNumIntensityColumns;

/** log2(1 + x) for x >= 0 (the scale of every count). */
float slog(double x);

/** One loop around the store, outermost first. `extent` is a constant upper bound. */
struct LoopDesc {
  Var var;
  Expr min, extent;
  int64_t ext = 1;
  ForKind kind = ForKind::Serial;
};

/** One read or write of a buffer: a flat scalar index, or a Ramp/Broadcast one of a vector access. */
struct Access {
  const BufferNode* buffer = nullptr;
  Expr index;
  bool is_write = false;
};

/** What the extractor needs to know of one buffer touched by a store. */
struct BufferStats {
  std::string name;
  bool read = false, written = false;
  double accesses = 0;      ///< element accesses per iteration of the nest (lanes counted)
  double bytes = 0;         ///< bytes accessed over the whole nest
  double unique_bytes = 0;  ///< footprint over the whole nest
  double stride = 0;        ///< |elements| between accesses of consecutive innermost iterations
  double reuse_iters = 0, reuse_bytes = 0, reuse_count = 0;
  double inner_bytes = 0;   ///< footprint of the innermost loop (or the vector lanes)
  /** Footprint in bytes while levels k.. vary (k = 0: the whole nest; the last entry: one iteration). */
  std::vector<double> level_bytes;
};

/**
 * Footprints, strides and reuse of the accesses of one statement of `lanes`
 * lanes under `loops` (whose variables `ana` knows the ranges of). The
 * vector lanes act as one more, innermost, loop (a level of level_bytes).
 */
std::vector<BufferStats> analyze_accesses(const std::vector<Access>& accesses, const std::vector<LoopDesc>& loops, int lanes,
                                          arith::Analyzer* ana);

}  // namespace kiln::tuner::detail

#endif  // KILN_TUNER_SRC_FEATURES_INTERNAL_H
