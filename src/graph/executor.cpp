// compile() and the Executor (executor.h): kernels per group, the plan, the run loop.
#include "kiln/graph/executor.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <unordered_map>

#include "kiln/graph/kernel_builder.h"
#include "kiln/graph/op_registry.h"
#include "kiln/graph/passes.h"
#include "kiln/codegen/llvm.h"
#include "kiln/runtime/c_runtime_api.h"
#include "kiln/runtime/model.h"
#include "kiln/support/error.h"
#include "kiln/te/workload_key.h"

namespace kiln::graph {

struct Executor::State {
  Graph graph;
  MemoryPlanStats memory;
  std::vector<Module> modules;       // per kernel
  std::vector<GroupInfo> groups;     // per step
  std::vector<LayoutDecision> layouts;  // per convolution, when chosen from records
  ModelRunner runner;                // runs the plan (kiln_runtime)
  int64_t weight_bytes = 0;
  double compile_seconds = 0;
  mutable std::mutex mu;  // profile's repeats run back to back
};

namespace {

using Clock = std::chrono::steady_clock;

// Whether the group only maps elements to elements at the same index, so its
// output may overwrite an input of the same type that dies with it.
// The workload key names the DAG, not the order of its arguments: Div(x, y)
// and Div(c, y) with c a constant have one key but take (x, y) and (y, c).
// Kernels are shared only when their placeholders are also arguments in
// the same order (positions of the args among the DAG's placeholders).
std::string argument_order(const GraphDag& dag) {
  std::vector<const void*> placeholders;
  for (const te::Operation& op : te::topo_sort(dag.outputs)) placeholders.push_back(op.get());
  std::string sig = "|args";
  for (const te::Tensor& t : dag.args()) {
    auto it = std::find(placeholders.begin(), placeholders.end(), static_cast<const void*>(t.op().get()));
    sig += " " + std::to_string(it - placeholders.begin());
  }
  return sig;
}

bool elementwise_group(const OpNode& node) {
  if (!node.body.defined()) return node.op->pattern <= Pattern::Broadcast;
  for (const OpNode* n : Graph(node.body).op_nodes())
    if (n->op->pattern > Pattern::Broadcast) return false;
  return true;
}

// Builds the runtime's plan (kiln_runtime's ModelPlan: the one form the
// in-process run and an exported library share).
struct Planner {
  ModelPlan plan;
  std::unordered_map<const NodeObj*, int> constant_buffer;
  std::map<std::pair<const NodeObj*, int>, int> value_buffer;

  int add(ModelBuffer::Kind kind, int index, const TensorType& t) {
    plan.buffers.push_back({kind, index, 0, t.shape, t.dtype});
    return static_cast<int>(plan.buffers.size()) - 1;
  }
  int constant(const Ref<ConstantNode>& c) {
    auto it = constant_buffer.find(c.get());
    if (it != constant_buffer.end()) return it->second;
    plan.constants.push_back(c->data);
    int id = add(ModelBuffer::Kind::Constant, static_cast<int>(plan.constants.size()) - 1, c->types[0]);
    constant_buffer[c.get()] = id;
    return id;
  }
  int value(const Value& v) {
    if (v.node->kind == NodeKind::Constant) return constant(Ref<ConstantNode>(static_cast<const ConstantNode*>(v.node.get())));
    return value_buffer.at({v.node.get(), v.index});
  }
};

// A ModelRunner over `plan` with one Module over all the kernels: each
// kernel resolves in its own module.
ModelRunner make_runner(ModelPlan plan, const std::vector<Module>& modules) {
  struct Kernels : ModuleNode {
    std::vector<Module> modules;
    KilnKernel lookup(const std::string& symbol) override {
      for (const Module& mod : modules)
        if (mod.has(symbol)) return mod.get_kernel(symbol);
      return nullptr;
    }
  };
  auto node = std::make_shared<Kernels>();
  node->modules = modules;
  std::vector<KernelInfo> infos;
  for (const Module& mod : modules) infos.insert(infos.end(), mod.kernels().begin(), mod.kernels().end());
  return ModelRunner(std::move(plan), Module(node, std::move(infos)));
}

}  // namespace

Executor compile(const Graph& g, const CompileOptions& options) {
  auto start = Clock::now();
  auto st = std::make_shared<Executor::State>();
  Target target = Target::parse(options.target);
  PipelineOptions popt{options.fuse, options.layout, options.dump, options.layout_plan};
  bool given = options.layout_plan.max_block > 0 || !options.layout_plan.conv_max_block.empty();
  if (options.layout && options.choose_layouts && !options.db.empty() && !given)
    popt.layout_plan = choose_layout_plan(g, target, options.db, &st->layouts);
  st->graph = optimize(g, target, popt);
  Planner p;
  for (size_t i = 0; i < st->graph.inputs().size(); ++i)
    p.value_buffer[{st->graph.inputs()[i].get(), 0}] = p.add(ModelBuffer::Kind::Input, static_cast<int>(i), st->graph.inputs()[i]->types[0]);
  for (const auto& in : st->graph.inputs()) p.plan.inputs.push_back({in->name, in->types[0].shape, in->types[0].dtype});
  for (size_t i = 0; i < st->graph.outputs().size(); ++i) {
    const std::string& name = st->graph.output_names()[i];
    p.plan.outputs.push_back({name.empty() ? "output" + std::to_string(i) : name, st->graph.outputs()[i].type().shape, st->graph.outputs()[i].type().dtype});
  }
  // Graph outputs computed by a step get Output buffers (fresh arrays per run, handed to the caller).
  std::map<std::pair<const NodeObj*, int>, int> output_of;
  for (size_t i = 0; i < st->graph.outputs().size(); ++i) {
    const Value& v = st->graph.outputs()[i];
    if (v.node->kind == NodeKind::Op && !output_of.count({v.node.get(), v.index})) output_of[{v.node.get(), v.index}] = static_cast<int>(i);
  }
  std::map<std::string, int> kernel_of_key;
  std::vector<GroupInfo> kernel_info;  // per kernel: schedule, detail and flop
  std::vector<PlannedValue> lifetimes;
  std::vector<int> arena_ids;  // buffer id per lifetime entry
  std::unordered_map<int, int> lifetime_of_buffer;
  for (const OpNode* node : st->graph.op_nodes()) {
    int step = static_cast<int>(p.plan.steps.size());
    KILN_CHECK(node->body.defined()) << "node '" << node->name << "' (" << node->op->name << ") is in no group after fuse_ops";
    GraphDag dag = to_te(Graph(node->body));
    std::string key = te::workload_key(dag.outputs);
    ModelStep s;
    s.name = node->attrs.get_string("ops") + " @ " + node->name;
    auto it = kernel_of_key.find(key + argument_order(dag));
    GroupInfo info;
    info.name = s.name;
    info.ops = node->attrs.get_string("ops");
    info.workload_key = key;
    if (it == kernel_of_key.end()) {
      std::string kname = "k" + std::to_string(st->modules.size());
      GroupKernel k;
      try {
        k = build_group_kernel(dag, target, kname, options.plain, options.db);
      } catch (const std::exception& e) {
        rethrow_as(e, "compiling group " + s.name + ": " + e.what());
      }
      it = kernel_of_key.emplace(key + argument_order(dag), static_cast<int>(st->modules.size())).first;
      st->modules.push_back(k.module);
      p.plan.kernel_names.push_back(kname);
      GroupInfo ki;
      ki.schedule = schedule_source_name(k.source);
      ki.schedule_detail = k.schedule_detail;
      ki.flop = k.flop;
      kernel_info.push_back(ki);
    }
    s.kernel = it->second;
    info.schedule = kernel_info[s.kernel].schedule;
    info.schedule_detail = kernel_info[s.kernel].schedule_detail;
    info.flop = kernel_info[s.kernel].flop;
    s.flop = info.flop;
    // Arguments: the node's inputs (in body-input order), the body's constants, then its outputs.
    for (const Value& v : node->inputs) {
      int b = p.value(v);
      s.args.push_back(b);
      auto lt = lifetime_of_buffer.find(b);
      if (lt != lifetime_of_buffer.end()) lifetimes[lt->second].last_step = step;
    }
    for (const auto& c : dag.constants) s.args.push_back(p.constant(c));
    for (int k = 0; k < node->num_outputs(); ++k) {
      auto out = output_of.find({node, k});
      int b;
      if (out != output_of.end()) {
        b = p.add(ModelBuffer::Kind::Output, out->second, node->types[k]);
      } else {
        b = p.add(ModelBuffer::Kind::Arena, 0, node->types[k]);
        PlannedValue pv;
        pv.bytes = node->types[k].bytes();
        pv.first_step = pv.last_step = step;
        if (elementwise_group(*node))
          for (const Value& v : node->inputs) {
            auto lt = lifetime_of_buffer.find(p.value(v));
            if (lt != lifetime_of_buffer.end() && v.type() == node->types[k]) {
              pv.inplace_of = lt->second;
              break;
            }
          }
        lifetime_of_buffer[b] = static_cast<int>(lifetimes.size());
        lifetimes.push_back(pv);
        arena_ids.push_back(b);
      }
      p.value_buffer[{node, k}] = b;
      s.args.push_back(b);
    }
    p.plan.steps.push_back(std::move(s));
    st->groups.push_back(std::move(info));
  }
  for (const Value& v : st->graph.outputs()) p.plan.output_buffers.push_back(p.value(v));
  st->memory = plan_memory(&lifetimes);
  for (size_t i = 0; i < lifetimes.size(); ++i) p.plan.buffers[arena_ids[i]].offset = lifetimes[i].offset;
  p.plan.arena_bytes = st->memory.arena_bytes;
  for (const NDArray& c : p.plan.constants) st->weight_bytes += c.nbytes();
  st->runner = make_runner(std::move(p.plan), st->modules);
  st->compile_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return Executor(st);
}

std::vector<NDArray> Executor::run(const std::vector<NDArray>& inputs) const {
  KILN_USER_CHECK(state_) << "this executor was not compiled";
  return state_->runner.run(inputs);
}

std::vector<ProfileRow> Executor::profile(const std::vector<NDArray>& inputs, int repeats) const {
  KILN_USER_CHECK(state_) << "this executor was not compiled";
  KILN_USER_CHECK(repeats > 0) << "profile needs at least one repeat";
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
  const ModelPlan& plan = state_->runner.plan();
  WeightsLayout layout = layout_weights(plan.constants);
  codegen::LibraryExtras extras;
  extras.static_runtime = static_runtime;
  extras.strings.push_back({"kiln_model_plan", plan.to_json(layout.offsets, weights, layout.bytes)});
  TempDir tmp;
  if (weights == "embed") {
    std::string blob = (tmp.path / "weights.bin").string();
    write_weights(blob, plan.constants, layout, false);
    extras.blobs.push_back({"kiln_model_weights", blob});
    codegen::export_modules_library(state_->modules, path, extras);
    return;
  }
  // Beside: the weights under a temporary name, renamed once the library is in place.
  std::string final_weights = path + ".weights";
  std::string tmp_weights = final_weights + ".tmp" + std::to_string(getpid());
  std::error_code ec;
  try {
    write_weights(tmp_weights, plan.constants, layout, true);
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
  const MemoryPlanStats& m = state_->memory;
  return MemoryReport{m.arena_bytes, m.naive_bytes, m.peak_bytes, state_->weight_bytes, m.inplace};
}

const ModelPlan& Executor::plan() const { return state_->runner.plan(); }
const Graph& Executor::graph() const { return state_->graph; }
const std::vector<GroupInfo>& Executor::groups() const { return state_->groups; }
double Executor::compile_seconds() const { return state_->compile_seconds; }
const std::vector<LayoutDecision>& Executor::layout_decisions() const { return state_->layouts; }

}  // namespace kiln::graph
