// compile() and the Executor (executor.h): kernels per group, the plan, the run loop.
#include "kiln/graph/executor.h"
#include "kiln/graph/shape_constraints.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>

#include "kiln/graph/kernel_builder.h"
#include "kiln/graph/passes.h"
#include "kiln/graph/plan_builder.h"
#include "kiln/graph/tuned_plan.h"
#include "kiln/codegen/llvm.h"
#include "kiln/support/compile_times.h"
#include "kiln/ir/printer.h"
#include "kiln/ops/task.h"
#include "kiln/te/lower.h"
#include "kiln/te/workload_key.h"
#include "kiln/runtime/c_runtime_api.h"
#include "kiln/runtime/library_seal.h"
#include "kiln/runtime/model.h"
#include "kiln/runtime/model_shapes.h"
#include "kiln/support/error.h"

namespace kiln::graph {

struct Executor::State {
  Graph graph;
  MemoryPlanStats memory;
  std::vector<Module> modules;       // per kernel
  std::vector<GroupInfo> groups;     // per step
  std::vector<LayoutDecision> layouts;  // per convolution, when chosen from records
  ModelRunner runner;                // runs the plan (kiln_runtime); null for a cross target
  ModelPlan cross_plan;              // the plan, for a cross target (nothing here can run its kernels)
  std::string cross_triple;          // the cross target's triple, else empty
  int64_t weight_bytes = 0;
  double compile_seconds = 0;
  mutable std::mutex mu;  // profile's repeats run back to back
};

namespace {

using Clock = std::chrono::steady_clock;

// A ModelRunner over `plan` with one Module over all the kernels: each
// kernel resolves in its own module.
ModelRunner make_runner(ModelPlan plan, const std::vector<Module>& modules) { return ModelRunner(std::move(plan), Module::combine(modules)); }

// CompileOptions::dims into the plan, refusing names the model does not have.
void apply_dim_ranges(const std::map<std::string, ShapeRange>& dims, ModelPlan* plan) {
  for (const auto& [name, range] : dims) {
    auto it = std::find(plan->shape_vars.begin(), plan->shape_vars.end(), name);
    std::string known;
    for (const std::string& v : plan->shape_vars) known += (known.empty() ? "" : ", ") + v;
    KILN_USER_CHECK(it != plan->shape_vars.end()) << "dims names the shape variable '" << name << "', which the model does not have (its shape variables: "
                                                  << (known.empty() ? "none; it is static" : known) << ")";
    KILN_USER_CHECK(range.lo >= 0 && range.lo <= range.hi)
        << "dims['" << name << "'] = (" << range.lo << ", " << range.hi << ") is not a range of sizes: give (lo, hi) with 0 <= lo <= hi";
    plan->shape_ranges[it - plan->shape_vars.begin()] = range;
  }
}

// A size variant's sizes: its bucket's hint first (scheduled for it; a record tuned
// at exactly it), then the likely sizes within 4x of the hint, nearest first
// (their records suit this bucket's sizes; those further away are another bucket's).
std::vector<ShapeBinding> near_bindings(const ShapeBinding& hints, const std::vector<ShapeBinding>& likely) {
  auto distance = [&](const ShapeBinding& b) {
    double d = 0;
    for (const auto& [v, h] : hints) {
      auto it = b.find(v);
      if (it == b.end()) continue;
      double r = std::abs(std::log(std::max<double>(1, it->second) / std::max<double>(1, h)));
      if (r > std::log(4.0) + 1e-9) return -1.0;
      d += r;
    }
    return d;
  };
  std::vector<std::pair<double, ShapeBinding>> near;
  for (const ShapeBinding& b : likely)
    if (double d = distance(b); d >= 0) near.push_back({d, b});
  std::stable_sort(near.begin(), near.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<ShapeBinding> out{hints};
  for (auto& [d, b] : near) out.push_back(std::move(b));
  return out;
}

// The sizes the layout's choices (Winograd or direct, and its tile, per conv)
// count each shape variable at: the most likely size the user gave, else
// kLayoutSizeHint within its range. Not likely_bindings' default (128, a
// sequence's): over a batch of 1 to 16 ResNet-18's 7x7 convs then took
// F(4x4, 3x3), 4 tiles an image, where 8 gives F(2x2): 16 tiles, about as
// fast as the direct conv at one image and as Winograd at 16.
constexpr int64_t kLayoutSizeHint = 8;
std::map<std::string, int64_t> layout_sizes(const std::vector<std::string>& vars, const CompileOptions& options) {
  std::map<std::string, int64_t> out;
  for (const std::string& v : vars) {
    auto s = options.sizes.find(v);
    auto r = options.dims.find(v);
    if (s != options.sizes.end() && !s->second.empty()) out[v] = s->second.front();
    else out[v] = r != options.dims.end() ? std::clamp(kLayoutSizeHint, r->second.lo, r->second.hi) : kLayoutSizeHint;
  }
  return out;
}

MemoryReport report_of(const MemoryPlanStats& m, int64_t weight_bytes) {
  return MemoryReport{m.arena_bytes, m.naive_bytes, m.peak_bytes, weight_bytes, m.inplace};
}

const ModelPlan& plan_of(const Executor::State& st) { return st.cross_triple.empty() ? st.runner.plan() : st.cross_plan; }

// Kernels for another machine are exported and run there, never here.
void check_runs_here(const Executor::State& st, const char* what) {
  KILN_USER_CHECK(st.cross_triple.empty())
      << what << ": this model was compiled for " << st.cross_triple << " and this machine (" << Target::host().triple
      << ") cannot run its kernels; export it with export_library (CC set to a cross compiler such as "
      << st.cross_triple << "-gcc) and run the library on that machine through kiln's runtime (C API or kiln.runtime.load_model)";
}

}  // namespace

Executor compile(const Graph& g, const CompileOptions& options) {
  auto start = Clock::now();
  const bool timed = compile_times_enabled();
  if (timed) reset_compile_times();
  auto st = std::make_shared<Executor::State>();
  Target target = Target::parse(options.target);
  PipelineOptions popt{options.fuse, options.layout, options.dump, options.layout_plan, options.bf16_dot, options.int8};
  bool given = options.layout_plan.decides();
  if (options.layout && options.choose_layouts && !options.db.empty() && !given) {
    // A plan a graph search measured (tuned_plan.h) beats one estimated from the records.
    if (std::optional<LayoutPlan> tuned = tuned_graph_plan(g, target, options.db, &st->layouts)) {
      popt.layout_plan = *tuned;
      popt.layout_plan.winograd = std::min(tuned->winograd, options.layout_plan.winograd);
    } else {
      popt.layout_plan = choose_layout_plan(g, target, options.db, &st->layouts, options.layout_plan.winograd);
    }
  }
  // The sizes kernels are scheduled for and take records at: a size variant's own bucket, else the likely sizes.
  const std::vector<ShapeBinding> likely = likely_bindings(shape_var_names(g), options.sizes, options.dims);
  popt.layout_plan.likely_sizes = layout_sizes(shape_var_names(g), options);
  st->graph = optimize(g, target, popt);
  const double passes_s = std::chrono::duration<double>(Clock::now() - start).count();
  PlanOptions plan_options;
  plan_options.dims = options.dims;
  plan_options.parallel_groups = true;  // the factory below is thread-safe (build_group_kernel, modules under a lock)
  // Size buckets whose lowered code differs get kernels of their own
  // (kernel_variants.h): the decisions alone over-count (a symbolic loop's
  // hinted trip count shows in them, not in the code). A plain build has one schedule.
  // Specs whose schedules have one trace (many buckets pick the same
  // decisions) lower once: the trace on the group's DAG decides the text.
  std::mutex probe_mu;
  std::map<std::string, std::string> probed;  // DAG key + trace -> lowered text
  if (!options.plain && options.size_variants)
    plan_options.probe = [&](const GraphDag& dag, const SizeHints& hints) {
      auto t0 = Clock::now();
      std::vector<te::Tensor> args = dag.args();
      ops::Task task = ops::make_task(args, target, "", hints);
      ScheduleSource source;
      std::string detail;
      te::Schedule sch = group_schedule(task, options.db, &source, &detail);
      std::string key = te::workload_key(args) + "\n" + sch.trace().to_json();
      {
        std::lock_guard<std::mutex> lock(probe_mu);
        if (auto it = probed.find(key); it != probed.end()) return it->second;
      }
      std::string text = to_string(te::lower(sch, args, "probe"));
      add_compile_time(CompilePhase::Probe, std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      std::lock_guard<std::mutex> lock(probe_mu);
      probed.emplace(std::move(key), text);
      return text;
    };
  std::mutex modules_mu;  // a group's size variants build on threads
  PlannedGraph pg = plan_graph(st->graph, [&](const GraphDag& dag, const std::string& kname, const SizeHints& hints) {
    GroupKernel k = build_group_kernel(dag, target, kname, options.plain, options.db, hints.empty() ? likely : near_bindings(hints, likely));
    {
      std::lock_guard<std::mutex> lock(modules_mu);
      st->modules.push_back(k.module);
    }
    GroupInfo info;
    info.schedule = schedule_source_name(k.source);
    info.schedule_detail = k.schedule_detail;
    info.records_only_for = k.records_only_for;
    info.flop = k.flop;
    return info;
  }, plan_options);
  apply_dim_ranges(options.dims, &pg.plan);
  // Reshapes whose counts agree only for some sizes: each run checks them (from the graph as given: passes may merge them).
  if (pg.plan.is_dynamic())
    for (ShapeConstraint& c : reshape_constraints(g, pg.plan.shape_vars)) pg.plan.constraints.push_back(std::move(c));
  st->groups = std::move(pg.groups);
  st->memory = pg.memory;
  st->weight_bytes = pg.weight_bytes;
  if (target.is_cross()) {
    st->cross_triple = target.triple;
    st->cross_plan = std::move(pg.plan);
  } else {
    st->runner = make_runner(std::move(pg.plan), st->modules);
  }
  st->compile_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (timed)
    std::fprintf(stderr, "kiln.compile: %.3f s wall (graph passes %.3f s), %zu kernels; CPU: %s\n", st->compile_seconds, passes_s, st->modules.size(),
                 compile_times_summary().c_str());
  return Executor(st);
}

std::vector<NDArray> Executor::run(const std::vector<NDArray>& inputs) const {
  KILN_USER_CHECK(state_) << "this executor was not compiled";
  check_runs_here(*state_, "run");
  return state_->runner.run(inputs);
}

std::vector<NDArray> Executor::run(const std::vector<NDArray>& inputs, const std::vector<bool>& donated) const {
  KILN_USER_CHECK(state_) << "this executor was not compiled";
  check_runs_here(*state_, "run");
  return state_->runner.run(inputs, nullptr, &donated);
}

std::vector<ProfileRow> Executor::profile(const std::vector<NDArray>& inputs, int repeats) const {
  KILN_USER_CHECK(state_) << "this executor was not compiled";
  KILN_USER_CHECK(repeats > 0) << "profile needs at least one repeat";
  check_runs_here(*state_, "profile");
  std::lock_guard<std::mutex> lock(state_->mu);
  const ModelPlan& plan = state_->runner.plan();
  size_t n = plan.steps.size();
  state_->runner.run(inputs);  // warm-up
  std::vector<std::vector<double>> samples(n);
  for (int r = 0; r < repeats; ++r) {
    std::vector<double> t(n, 0.0);
    state_->runner.run(inputs, &t);
    for (size_t s = 0; s < n; ++s) samples[s].push_back(t[s]);
  }
  std::vector<ProfileRow> rows;
  double total = 0;
  for (size_t s = 0; s < n; ++s) {
    std::sort(samples[s].begin(), samples[s].end());
    ProfileRow row;
    row.name = plan.steps[s].name;
    row.seconds = samples[s][samples[s].size() / 2];
    row.gflops = row.seconds > 0 ? plan.steps[s].flop / row.seconds * 1e-9 : 0;
    total += row.seconds;
    rows.push_back(row);
  }
  for (ProfileRow& r : rows) r.share = total > 0 ? r.seconds / total : 0;
  return rows;
}

namespace {
// A scratch directory for the embedded weights blob, removed with this object.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "kiln_model_XXXXXX").string();
    KILN_USER_CHECK(mkdtemp(tmpl.data())) << "export_library: cannot create a temporary directory: " << std::strerror(errno);
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};
}  // namespace

void Executor::export_library(const std::string& path, const std::string& weights, bool static_runtime) const {
  KILN_USER_CHECK(state_) << "this executor was not compiled";
  KILN_USER_CHECK(weights == "embed" || weights == "beside")
      << "export_library('" << path << "'): weights must be \"embed\" (inside the library) or \"beside\" (in '" << path
      << ".weights'), not \"" << weights << "\"";
  KILN_USER_CHECK(!path.empty()) << "export_library: the path is empty; name the .so file to write";
  const ModelPlan& plan = plan_of(*state_);
  WeightsLayout layout = layout_weights(plan.constants);
  codegen::LibraryExtras extras;
  extras.static_runtime = static_runtime;
  // One id for the library's seal, its plan and its weights file: a weights file of another export is refused.
  extras.export_id = new_export_id();
  WeightsRecord record{weights, layout.bytes, extras.export_id, ""};
  TempDir tmp;
  if (weights == "embed") {
    std::string blob = (tmp.path / "weights.bin").string();
    write_weights(blob, plan.constants, layout, "");
    extras.strings.push_back({"kiln_model_plan", plan.to_json(layout.offsets, record)});
    extras.blobs.push_back({"kiln_model_weights", blob});
    codegen::export_modules_library(state_->modules, path, extras);
    return;
  }
  // Beside: the weights under a temporary name, renamed once the library is in
  // place (until then the old weights file, if any, is refused by its id).
  std::string final_weights = path + ".weights";
  static std::atomic<int> counter{0};  // two threads exporting to one path get distinct temporaries
  std::string tmp_weights = final_weights + ".tmp" + std::to_string(getpid()) + "_" + std::to_string(counter++);
  std::error_code ec;
  try {
    record.hash = write_weights(tmp_weights, plan.constants, layout, extras.export_id);
    extras.strings.push_back({"kiln_model_plan", plan.to_json(layout.offsets, record)});
    codegen::export_modules_library(state_->modules, path, extras);
  } catch (...) {
    std::filesystem::remove(tmp_weights, ec);
    throw;
  }
  std::filesystem::rename(tmp_weights, final_weights, ec);
  if (ec) {
    std::filesystem::remove(tmp_weights, ec);
    KILN_USER_ERROR() << "export_library: cannot write '" << final_weights << "': " << ec.message();
  }
}

MemoryReport Executor::memory() const {
  KILN_USER_CHECK(state_) << "this executor was not compiled";
  KILN_USER_CHECK(!plan_of(*state_).is_dynamic()) << "this model has shape variables (" << plan_of(*state_).shape_vars.size()
                                                       << "); its memory depends on their values: call memory(shape_values)";
  return report_of(state_->memory, state_->weight_bytes);
}

MemoryReport Executor::memory(const std::map<std::string, int64_t>& shape_values) const {
  KILN_USER_CHECK(state_) << "this executor was not compiled";
  std::vector<int64_t> values = shape_values_by_name(plan_of(*state_), shape_values, "memory");
  if (values.empty()) return memory();
  return report_of(plan_memory_at(plan_of(*state_), values), state_->weight_bytes);
}

std::optional<MemoryReport> Executor::memory_bound() const {
  KILN_USER_CHECK(state_) << "this executor was not compiled";
  if (!plan_of(*state_).is_dynamic()) return memory();
  std::optional<MemoryPlanStats> m = plan_memory_bound(plan_of(*state_));
  if (!m) return std::nullopt;
  return report_of(*m, state_->weight_bytes);
}

const std::vector<std::string>& Executor::shape_vars() const { return plan_of(*state_).shape_vars; }

const ModelPlan& Executor::plan() const { return plan_of(*state_); }
const ModelRunner& Executor::runner() const {
  KILN_USER_CHECK(state_) << "this executor was not compiled";
  check_runs_here(*state_, "runner");
  return state_->runner;
}
const Graph& Executor::graph() const { return state_->graph; }
const std::vector<GroupInfo>& Executor::groups() const { return state_->groups; }
double Executor::compile_seconds() const { return state_->compile_seconds; }
const std::vector<LayoutDecision>& Executor::layout_decisions() const { return state_->layouts; }

}  // namespace kiln::graph
