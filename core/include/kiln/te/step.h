/** \file
 * Schedule steps: one typed record per primitive.
 *
 * Each primitive of Stage / Schedule appends one of these records to the
 * schedule's trace. A record names its stage by index in the schedule's
 * stage list and its axes by index in that stage's leaf list at the time of
 * the step (names are kept beside them for people; replay uses indices), so
 * a trace replays on any DAG with the same workload key.
 *
 * A record is defined once: its fields and wire layout here (`fields`, used
 * for JSON read/write and the readable print), and in the primitive's own
 * source file (core/src/te/step_*.cpp) the primitive itself, `apply` (replay on a
 * Schedule) and `python` (the line of Python that redoes it). The list of
 * kinds is the `Step` variant below; the trace's JSON reader dispatches
 * through it by `kName`.
 *
 * Wire layout (kept from the first trace format, so stored traces replay):
 * every step is {"kind", "stage", "stage_name"} plus up to four lists,
 * "axes" (with "axis_names"), "ints", "strings" and "stages", which a step's
 * `fields` fills in the order it visits them.
 */
#ifndef KILN_TE_STEP_H
#define KILN_TE_STEP_H

#include <string>
#include <variant>
#include <vector>

namespace kiln::te {

class Schedule;
class PythonWriter;

/** A stage at the time of a step: its index in the stage list, and its name (for people). */
struct StageRef {
  int index = -1;
  std::string name;
  bool operator==(const StageRef&) const = default;
};

/** An axis at the time of a step: its position (leaf list, or root list where a step says so), and its name. */
struct AxisRef {
  int index = -1;
  std::string name;
  bool operator==(const AxisRef&) const = default;
};

/** What a step's `fields` visits, in wire order; the JSON reader, writer and printer implement it. */
class FieldVisitor {
 public:
  virtual ~FieldVisitor() = default;
  virtual void axis(AxisRef& a) = 0;
  /** All the step's axes (reorder). */
  virtual void axes(std::vector<AxisRef>& a) = 0;
  virtual void integer(int& v) = 0;
  virtual void string(std::string& v) = 0;
  /** Another stage (compute_at's parent), by index. */
  virtual void stage(int& v) = 0;
  /** All the step's other stages (cache_read / pack readers). */
  virtual void stages(std::vector<int>& v) = 0;
};

// Every record: kName (its JSON kind), a StageRef `stage`, its own fields,
// fields() (wire order), apply() (replay: calls the primitive) and python().
#define KILN_TE_STEP_METHODS(TYPE, NAME)               \
  static constexpr const char* kName = NAME;           \
  void fields(FieldVisitor& v);                        \
  void apply(Schedule& sch) const;                     \
  void python(PythonWriter& w) const;                  \
  bool operator==(const TYPE&) const = default

/** Stage::split(axis, factor). */
struct Split {
  StageRef stage;
  AxisRef axis;
  int factor = 0;
  KILN_TE_STEP_METHODS(Split, "split");
};

/** Stage::split_nparts(axis, nparts). */
struct SplitNparts {
  StageRef stage;
  AxisRef axis;
  int nparts = 0;
  KILN_TE_STEP_METHODS(SplitNparts, "split_nparts");
};

/** Stage::fuse(outer, inner). */
struct Fuse {
  StageRef stage;
  AxisRef outer, inner;
  KILN_TE_STEP_METHODS(Fuse, "fuse");
};

/** Stage::reorder(order). */
struct Reorder {
  StageRef stage;
  std::vector<AxisRef> order;
  KILN_TE_STEP_METHODS(Reorder, "reorder");
};

/** Stage::vectorize(axis). */
struct Vectorize {
  StageRef stage;
  AxisRef axis;
  KILN_TE_STEP_METHODS(Vectorize, "vectorize");
};

/** Stage::unroll(axis). */
struct Unroll {
  StageRef stage;
  AxisRef axis;
  KILN_TE_STEP_METHODS(Unroll, "unroll");
};

/** Stage::parallel(axis). */
struct Parallel {
  StageRef stage;
  AxisRef axis;
  KILN_TE_STEP_METHODS(Parallel, "parallel");
};

/** Stage::bind(axis, thread_tag). */
struct Bind {
  StageRef stage;
  AxisRef axis;
  std::string thread_tag;
  KILN_TE_STEP_METHODS(Bind, "bind");
};

/** Stage::pragma(axis, key, value). */
struct Pragma {
  StageRef stage;
  AxisRef axis;
  std::string key;
  int value = 0;
  KILN_TE_STEP_METHODS(Pragma, "pragma");
};

/** Stage::compute_at(parent, axis): `axis` is a leaf position of the parent stage. */
struct ComputeAt {
  StageRef stage;
  int parent = -1;
  AxisRef axis;
  KILN_TE_STEP_METHODS(ComputeAt, "compute_at");
};

/** Stage::compute_inline(). */
struct ComputeInline {
  StageRef stage;
  KILN_TE_STEP_METHODS(ComputeInline, "compute_inline");
};

/** Stage::compute_root(). */
struct ComputeRoot {
  StageRef stage;
  KILN_TE_STEP_METHODS(ComputeRoot, "compute_root");
};

/** Stage::storage_align(axis, factor, offset): `dim` is a root position (a buffer dimension). */
struct StorageAlign {
  StageRef stage;
  AxisRef dim;
  int factor = 0, offset = 0;
  KILN_TE_STEP_METHODS(StorageAlign, "storage_align");
};

/** Schedule::cache_read(stage's tensor, scope, readers). */
struct CacheRead {
  StageRef stage;
  std::string scope;
  std::vector<int> readers;
  KILN_TE_STEP_METHODS(CacheRead, "cache_read");
};

/** Schedule::pack(stage's tensor, readers, dim, factor). */
struct Pack {
  StageRef stage;
  int dim = 0, factor = 0;
  std::vector<int> readers;
  KILN_TE_STEP_METHODS(Pack, "pack");
};

/** Schedule::cache_write(stage's tensor, scope). */
struct CacheWrite {
  StageRef stage;
  std::string scope;
  KILN_TE_STEP_METHODS(CacheWrite, "cache_write");
};

/** Schedule::rfactor(stage's tensor, axis, factor_axis). */
struct RFactor {
  StageRef stage;
  AxisRef axis;
  int factor_axis = 0;
  KILN_TE_STEP_METHODS(RFactor, "rfactor");
};

#undef KILN_TE_STEP_METHODS

/** The table of step kinds: a new primitive adds its record here. */
using Step = std::variant<Split, SplitNparts, Fuse, Reorder, Vectorize, Unroll, Parallel, Bind, Pragma, ComputeAt, ComputeInline, ComputeRoot,
                          StorageAlign, CacheRead, Pack, CacheWrite, RFactor>;

/** The JSON kind of a step ("split", ...). */
const char* step_kind(const Step& step);
/** The stage a step applies to. */
const StageRef& step_stage(const Step& step);

}  // namespace kiln::te

#endif  // KILN_TE_STEP_H
