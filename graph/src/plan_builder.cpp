// plan_graph (plan_builder.h): steps, buffers and arena offsets of a fused graph.
#include "kiln/graph/plan_builder.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <thread>
#include <unordered_map>

#include "kiln/graph/kernel_variants.h"
#include "kiln/graph/op_registry.h"
#include "kiln/support/error.h"
#include "kiln/support/parallel_for.h"
#include "kiln/codegen/kernel_metadata.h"
#include "kiln/te/workload_key.h"

namespace kiln::graph {

namespace {

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

// Whether the group only maps elements to elements at the same index, so its
// output may overwrite an input of the same type that dies with it.
bool elementwise_group(const OpNode& node) {
  if (!node.body.defined()) return node.op->pattern <= Pattern::Broadcast;
  for (const OpNode* n : Graph(node.body).op_nodes())
    if (n->op->pattern > Pattern::Broadcast) return false;
  return true;
}

// Whether the group only reshapes its one input (Reshape, Flatten, Squeeze or
// Unsqueeze: the same bytes in the same row-major order).
bool reshape_group(const OpNode& node) {
  if (node.num_outputs() != 1 || node.inputs.size() != 1 || !node.body.defined()) return false;
  std::vector<const OpNode*> ops = Graph(node.body).op_nodes();
  static const char* const names[] = {"Reshape", "Flatten", "Squeeze", "Unsqueeze"};
  return ops.size() == 1 && std::any_of(std::begin(names), std::end(names), [&](const char* n) { return ops[0]->op->name == n; });
}

// Whether the one-output group reads its input `pos` only where it writes:
// every use of the input inside the body is an elementwise or broadcast
// operator whose result has the input's type, and so on to the output
// (never a reduction, a matmul or a reshape). Then each element is read
// while its own output element is computed, before it is written, and the
// output may be written into the input's array (a parameter's update).
bool reads_only_where_it_writes(const OpNode& node, size_t pos) {
  if (node.num_outputs() != 1 || !node.body.defined()) return false;
  Graph body(node.body);
  if (pos >= body.inputs().size() || body.inputs()[pos]->types[0] != node.types[0]) return false;
  std::set<std::pair<const NodeObj*, int>> tracked{{body.inputs()[pos].get(), 0}};
  for (const OpNode* n : body.op_nodes()) {
    bool reads = false;
    for (const Value& v : n->inputs) {
      if (!v.defined() || !tracked.count({v.node.get(), v.index})) continue;
      if (n->op->pattern > Pattern::Broadcast || n->num_outputs() != 1 || n->types[0] != v.type()) return false;
      reads = true;
    }
    if (reads) tracked.insert({n, 0});
  }
  return true;
}

// Whether input `pos` of the group is the only one holding its value (a
// value passed twice may be read at other elements through the other input).
bool read_once(const OpNode& node, size_t pos) {
  for (size_t i = 0; i < node.inputs.size(); ++i)
    if (i != pos && node.inputs[i].node == node.inputs[pos].node && node.inputs[i].index == node.inputs[pos].index) return false;
  return true;
}

// The inputs of a group that only joins them along dimension 1 (a Concat
// of channels, or of channel blocks in NCHWc), in the join's order, where
// with a batch of 1 each input's bytes are one run of the output's, the
// offsets whole cache lines: (node input, byte offset) per piece. Empty
// where the group is anything else.
std::vector<std::pair<int, int64_t>> join_pieces(const OpNode& node) {
  if (node.num_outputs() != 1 || !node.body.defined() || !node.types[0].shape.is_static()) return {};
  Graph body(node.body);
  std::vector<const OpNode*> ops = body.op_nodes();
  const Shape& s = node.types[0].shape;
  if (ops.size() != 1 || ops[0]->op->name != "Concat" || s.size() < 2 || s[0] != 1) return {};
  const int64_t axis = ops[0]->attrs.get_int("axis");
  if (axis != 1 && axis != 1 - static_cast<int64_t>(s.size())) return {};
  std::vector<std::pair<int, int64_t>> pieces;
  std::set<int> seen;
  int64_t offset = 0;
  for (const Value& v : ops[0]->inputs) {
    auto it = std::find(body.inputs().begin(), body.inputs().end(), v.node);
    const int k = static_cast<int>(it - body.inputs().begin());
    if (it == body.inputs().end() || v.index != 0 || !seen.insert(k).second || offset % 64 != 0) return {};
    pieces.push_back({k, offset});
    offset += v.type().bytes();
  }
  return pieces;
}

// Whether the group's schedule depends on its sizes enough to keep variants:
// a contraction (register tiles of rows, packing) or a reduction (rows per
// thread, tails along the reduced axis). Elementwise and injective groups
// stream their elements alike at any size: one kernel, compiled once.
bool size_dependent(const OpNode& node) {
  if (!node.body.defined()) return node.op->pattern == Pattern::Reduction || node.op->pattern == Pattern::OutputFusable;
  for (const OpNode* n : Graph(node.body).op_nodes())
    if (n->op->pattern == Pattern::Reduction || n->op->pattern == Pattern::OutputFusable) return true;
  return false;
}

// Builds the runtime's plan (kiln_runtime's ModelPlan: the one form the
// in-process run and an exported library share).
struct Planner {
  ModelPlan plan;
  std::unordered_map<const NodeObj*, int> constant_buffer;
  std::map<std::pair<const NodeObj*, int>, int> value_buffer;
  std::vector<const Variable*> vars;  ///< plan.shape_vars, as the graph's Vars

  // A model with symbolic dims: its shape variables in the order the inputs
  // first use them, each a plain dimension of some input (where a run binds it).
  void collect_shape_vars(const Graph& g) {
    std::set<const Variable*> bound;
    for (const auto& in : g.inputs())
      for (const Dim& d : in->types[0].shape)
        if (Var v = d.as_var(); v.defined() && bound.insert(v.get()).second) {
          vars.push_back(v.get());
          plan.shape_vars.push_back(v.name());
        }
    for (const auto& in : g.inputs())
      for (const Var& v : in->types[0].shape.vars())
        KILN_USER_CHECK(bound.count(v.get())) << "input '" << in->name << "' has shape " << shape_to_string(in->types[0].shape)
                                              << ", but no input has the shape variable '" << v.name()
                                              << "' as a dimension of its own, so a run could not tell its value; give some input that dimension";
    plan.shape_ranges.assign(vars.size(), std::nullopt);
  }

  // `shape` with -1 at symbolic dims, and `dims` over the shape variables (a dynamic plan's tensors).
  void set_dims(const Shape& s, std::vector<int64_t>* shape, std::vector<ShapeExpr>* dims) const {
    shape->clear();
    dims->clear();
    for (const Dim& d : s) shape->push_back(d.is_static() ? d.value() : -1);
    if (s.is_static()) return;
    auto param_of = [&](const Variable* v) -> int64_t {
      auto it = std::find(vars.begin(), vars.end(), v);
      KILN_USER_CHECK(it != vars.end()) << "the shape variable '" << v->name << "' (in " << shape_to_string(s)
                                        << ") is no dimension of any model input, so a run could not tell its value";
      return it - vars.begin();
    };
    for (const Dim& d : s) dims->push_back(codegen::to_shape_expr(d.expr(), param_of, "dimension '" + d.str() + "'"));
  }

  int add(ModelBuffer::Kind kind, int index, const TensorType& t) {
    ModelBuffer b;
    b.kind = kind;
    b.index = index;
    b.dtype = t.dtype;
    set_dims(t.shape, &b.shape, &b.dims);
    plan.buffers.push_back(std::move(b));
    return static_cast<int>(plan.buffers.size()) - 1;
  }
  ModelTensor tensor(const std::string& name, const TensorType& t) const {
    ModelTensor m;
    m.name = name;
    m.dtype = t.dtype;
    set_dims(t.shape, &m.shape, &m.dims);
    return m;
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

// Up to one thread per core for compile-time work (kernel builds, probes).
int build_threads() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

// A group's kernels: the fallback and its size-dispatched variants.
struct GroupKernels {
  int kernel = 0;
  std::vector<StepVariant> variants;
  std::vector<GroupVariant> described;  ///< schedule_detail filled once the kernels are built
};

// A kernel to build: its group's DAG, its index in plan.kernel_names, its sizes.
struct PendingBuild {
  GraphDag dag;
  size_t kernel;
  SizeHints hints;
  std::string group;  ///< for errors
};

// Builds `pending` (on threads where there are several) into kernel_info; empties it.
void run_builds(std::vector<PendingBuild>* pending, const KernelFactory& build, const ModelPlan& plan, std::vector<GroupInfo>* kernel_info) {
  auto build_one = [&](size_t i) {
    const PendingBuild& b = (*pending)[i];
    try {
      (*kernel_info)[b.kernel] = build(b.dag, plan.kernel_names[b.kernel], b.hints);
    } catch (const std::exception& e) {
      rethrow_as(e, "compiling group " + b.group + ": " + e.what());
    }
  };
  if (pending->size() > 1)
    parallel_for(pending->size(), build_threads(), build_one);
  else if (pending->size() == 1)
    build_one(0);
  pending->clear();
}

// Names the kernels of `dag` (plan.kernel_names' next entries) and queues
// their builds: one per distinct schedule over the variant specs, the first spec's the fallback.
GroupKernels plan_variants(const GraphDag& dag, bool sized, const std::string& group, const PlanOptions& options, ModelPlan* plan,
                           std::vector<GroupInfo>* kernel_info, std::vector<PendingBuild>* pending) {
  std::vector<VariantSpec> specs = {VariantSpec{}};
  if (sized && plan->is_dynamic() && options.probe) {
    std::vector<std::optional<ShapeRange>> ranges(plan->shape_vars.size());
    for (size_t v = 0; v < ranges.size(); ++v)
      if (auto it = options.dims.find(plan->shape_vars[v]); it != options.dims.end()) ranges[v] = it->second;
    specs = variant_specs(dag, plan->shape_vars, ranges);
  }
  // The specs' schedules (probed on threads: each lowers its own schedule), then one kernel per distinct one.
  std::vector<std::string> schedules(specs.size());
  if (specs.size() > 1) parallel_for(specs.size(), build_threads(), [&](size_t i) { schedules[i] = options.probe(dag, specs[i].hints); });
  std::map<std::string, int> kernel_of_schedule;
  std::vector<int> kernels(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    auto it = kernel_of_schedule.find(schedules[i]);
    if (it == kernel_of_schedule.end()) {
      size_t k = kernel_info->size();
      kernel_info->emplace_back();
      plan->kernel_names.push_back("k" + std::to_string(k));
      pending->push_back({dag, k, specs[i].hints, group});
      it = kernel_of_schedule.emplace(schedules[i], static_cast<int>(k)).first;
    }
    kernels[i] = it->second;
  }
  GroupKernels out;
  for (size_t i = 0; i < specs.size(); ++i) {
    int kernel = kernels[i];
    if (i == 0) {
      out.kernel = kernel;
    } else if (kernel != out.kernel) {
      out.variants.push_back({kernel, specs[i].when});
      out.described.push_back({specs[i].text, plan->kernel_names[kernel], ""});
    }
  }
  return out;
}

}  // namespace

PlannedGraph plan_graph(const Graph& g, const KernelFactory& build, const PlanOptions& options) {
  const bool gpu = options.gpu;
  PlannedGraph out;
  Planner p;
  p.collect_shape_vars(g);
  const bool dynamic = p.plan.is_dynamic();
  for (size_t i = 0; i < g.inputs().size(); ++i)
    p.value_buffer[{g.inputs()[i].get(), 0}] = p.add(ModelBuffer::Kind::Input, static_cast<int>(i), g.inputs()[i]->types[0]);
  for (const auto& in : g.inputs()) p.plan.inputs.push_back(p.tensor(in->name, in->types[0]));
  for (size_t i = 0; i < g.outputs().size(); ++i) {
    const std::string& name = g.output_names()[i];
    p.plan.outputs.push_back(p.tensor(name.empty() ? "output" + std::to_string(i) : name, g.outputs()[i].type()));
  }
  // Graph outputs computed by a step get Output buffers (fresh arrays per run, handed to the caller).
  std::map<std::pair<const NodeObj*, int>, int> output_of;
  for (size_t i = 0; i < g.outputs().size(); ++i) {
    const Value& v = g.outputs()[i];
    if (v.node->kind == NodeKind::Op && !output_of.count({v.node.get(), v.index})) output_of[{v.node.get(), v.index}] = static_cast<int>(i);
  }
  // A reshape of an intermediate value into another intermediate needs no
  // kernel: it is a view of its input's bytes, the two sharing one lifetime.
  auto is_view = [&](const OpNode* node) {
    const Value& in = node->inputs.empty() ? Value() : node->inputs[0];
    return reshape_group(*node) && !output_of.count({node, 0}) && in.defined() && in.node->kind == NodeKind::Op &&
           !output_of.count({in.node.get(), in.index});
  };
  // A join whose pieces are made by kernels of their own, into the arena,
  // read by no other join: its producers write straight into their slices
  // of its bytes and the join needs no step (a static plan on the CPU; a
  // symbolic shape, a batch above 1, keeps the copy).
  std::map<const OpNode*, std::vector<std::pair<int, int64_t>>> joins;
  if (!p.plan.is_dynamic() && !gpu) {
    std::set<std::pair<const NodeObj*, int>> taken;
    for (const OpNode* node : g.op_nodes()) {
      auto pieces = join_pieces(*node);
      bool ok = !pieces.empty() && !output_of.count({node, 0});
      for (auto [k, offset] : pieces) {
        const Value& v = node->inputs[k];
        ok = ok && v.node->kind == NodeKind::Op && !is_view(static_cast<const OpNode*>(v.node.get())) && !output_of.count({v.node.get(), v.index}) &&
             !joins.count(static_cast<const OpNode*>(v.node.get())) && !taken.count({v.node.get(), v.index});
      }
      if (!ok) continue;
      for (auto [k, offset] : pieces) taken.insert({node->inputs[k].node.get(), node->inputs[k].index});
      joins[node] = std::move(pieces);
    }
  }
  // The last step that reads each graph input (steps follow g.op_nodes(),
  // views and joins excepted), and the inputs returned as outputs themselves (never written over).
  std::unordered_map<const NodeObj*, int> last_read;
  std::set<const NodeObj*> returned;
  {
    int step = 0;
    for (const OpNode* node : g.op_nodes()) {
      if (is_view(node) || joins.count(node)) continue;
      for (const Value& v : node->inputs)
        if (v.defined() && v.node->kind == NodeKind::Input) last_read[v.node.get()] = step;
      ++step;
    }
    for (const Value& v : g.outputs()) returned.insert(v.node.get());
  }
  p.plan.output_reuses_input.assign(g.outputs().size(), -1);
  std::set<const NodeObj*> reused;
  std::map<std::string, GroupKernels> kernels_of_key;
  std::vector<GroupInfo> kernel_info;  // per kernel: schedule, detail and flop
  std::vector<PendingBuild> pending;   // kernels named, not yet built
  std::vector<PlannedValue> lifetimes;
  std::vector<int> arena_ids;  // buffer id per lifetime entry
  std::unordered_map<int, int> lifetime_of_buffer;
  std::vector<std::pair<int, int>> views;  // (buffer, the lifetime entry it shares with its source)
  for (const OpNode* node : g.op_nodes()) {
    int step = static_cast<int>(p.plan.steps.size());
    KILN_CHECK(node->body.defined()) << "node '" << node->name << "' (" << node->op->name << ") is in no group after fuse_ops";
    if (is_view(node)) {
      int lifetime = lifetime_of_buffer.at(p.value(node->inputs[0]));
      int b = p.add(ModelBuffer::Kind::Arena, 0, node->types[0]);
      lifetime_of_buffer[b] = lifetime;  // its readers extend the source's lifetime
      views.push_back({b, lifetime});
      p.value_buffer[{node, 0}] = b;
      continue;
    }
    if (auto j = joins.find(node); j != joins.end()) {
      // The join's bytes host its pieces: from the first piece's write to the join's last read.
      PlannedValue host;
      host.bytes = node->types[0].bytes();
      host.first_step = step;
      host.last_step = std::max(step - 1, 0);
      const int id = static_cast<int>(lifetimes.size());
      for (auto [k, offset] : j->second) {
        PlannedValue& piece = lifetimes[lifetime_of_buffer.at(p.value(node->inputs[k]))];
        piece.view_of = id;
        piece.view_offset = offset;
        piece.inplace_of = -1;
        host.first_step = std::min(host.first_step, piece.first_step);
        host.last_step = std::max(host.last_step, piece.last_step);
      }
      int b = p.add(ModelBuffer::Kind::Arena, 0, node->types[0]);
      lifetime_of_buffer[b] = id;
      lifetimes.push_back(host);
      arena_ids.push_back(b);
      p.value_buffer[{node, 0}] = b;
      ++out.joins_in_place;
      continue;
    }
    GraphDag dag = to_te(Graph(node->body), gpu);
    std::string key = te::workload_key(dag.outputs);
    ModelStep s;
    s.name = node->attrs.get_string("ops") + " @ " + node->name;
    auto it = kernels_of_key.find(key + argument_order(dag));
    GroupInfo info;
    info.name = s.name;
    info.ops = node->attrs.get_string("ops");
    info.workload_key = key;
    if (it == kernels_of_key.end()) {
      GroupKernels ks;
      try {
        ks = plan_variants(dag, size_dependent(*node), s.name, options, &p.plan, &kernel_info, &pending);
      } catch (const std::exception& e) {
        rethrow_as(e, "compiling group " + s.name + ": " + e.what());
      }
      // Without parallel_groups each group builds before the next is planned (a GPU build is not thread-safe).
      if (!options.parallel_groups) run_builds(&pending, build, p.plan, &kernel_info);
      it = kernels_of_key.emplace(key + argument_order(dag), std::move(ks)).first;
    }
    s.kernel = it->second.kernel;
    s.variants = it->second.variants;
    info.kernel = p.plan.kernel_names[s.kernel];
    info.variants = it->second.described;
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
        // An output may go into the array of a graph input this step reads
        // last, where the caller donates it (Executor::run's donate).
        for (size_t i = 0; i < node->inputs.size(); ++i) {
          const NodeObj* in = node->inputs[i].defined() ? node->inputs[i].node.get() : nullptr;
          if (!in || in->kind != NodeKind::Input || last_read[in] != step || returned.count(in) || reused.count(in) ||
              !reads_only_where_it_writes(*node, i))
            continue;
          p.plan.output_reuses_input[out->second] = p.plan.buffers[p.value(node->inputs[i])].index;  // an Input buffer's index is its position
          reused.insert(in);
          break;
        }
      } else {
        b = p.add(ModelBuffer::Kind::Arena, 0, node->types[k]);
        PlannedValue pv;
        pv.bytes = dynamic ? 0 : node->types[k].bytes();  // a dynamic plan is placed per shape at run time
        pv.first_step = pv.last_step = step;
        if (elementwise_group(*node)) {
          for (const Value& v : node->inputs) {
            auto lt = lifetime_of_buffer.find(p.value(v));
            if (lt != lifetime_of_buffer.end() && v.type() == node->types[k]) {
              pv.inplace_of = lt->second;
              break;
            }
          }
        } else {
          // Any other group (a conv or matmul with its residual Add fused)
          // may write over an input it reads only at the elements it writes:
          // the output's lines are then the ones just read, in cache, where a
          // fresh array costs a read for ownership of every line from L3.
          // Measured on the residual 1x1 convs of ResNet-50 and ResNeXt-50
          // (64 or 128 -> 256 at 56 x 56, 512 -> 2048 at 7 x 7; one core of
          // an AVX-512 Xeon, the residual just written): 0.67-0.82 of the time.
          for (size_t i = 0; i < node->inputs.size(); ++i) {
            auto lt = lifetime_of_buffer.find(p.value(node->inputs[i]));
            if (lt != lifetime_of_buffer.end() && reads_only_where_it_writes(*node, i) && read_once(*node, i)) {
              pv.inplace_of = lt->second;
              break;
            }
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
    out.groups.push_back(std::move(info));
  }
  // Every group's kernels at once: two threads keep busy across small groups and large ones.
  run_builds(&pending, build, p.plan, &kernel_info);
  auto kernel_index = [&](const std::string& name) { return std::stoul(name.substr(1)); };
  for (size_t i = 0; i < out.groups.size(); ++i) {
    GroupInfo& info = out.groups[i];
    const GroupInfo& built = kernel_info[p.plan.steps[i].kernel];
    info.schedule = built.schedule;
    info.schedule_detail = built.schedule_detail;
    info.records_only_for = built.records_only_for;
    info.flop = built.flop;
    p.plan.steps[i].flop = info.flop;
    for (GroupVariant& v : info.variants) v.schedule_detail = kernel_info[kernel_index(v.kernel)].schedule_detail;
  }
  for (const Value& v : g.outputs()) p.plan.output_buffers.push_back(p.value(v));
  if (dynamic) {
    // The runtime places the arena per shape from these lifetimes (ModelBuffer's contract).
    for (size_t i = 0; i < lifetimes.size(); ++i) {
      ModelBuffer& b = p.plan.buffers[arena_ids[i]];
      b.first_step = lifetimes[i].first_step;
      b.last_step = lifetimes[i].last_step;
      b.inplace_of = lifetimes[i].inplace_of < 0 ? -1 : arena_ids[lifetimes[i].inplace_of];
    }
    for (auto [b, lifetime] : views) p.plan.buffers[b].view_of = arena_ids[lifetime];
    for (const NDArray& c : p.plan.constants) out.weight_bytes += c.nbytes();
    out.plan = std::move(p.plan);
    return out;
  }
  out.memory = plan_memory(&lifetimes);
  for (size_t i = 0; i < lifetimes.size(); ++i) p.plan.buffers[arena_ids[i]].offset = lifetimes[i].offset;
  for (auto [b, lifetime] : views) p.plan.buffers[b].offset = lifetimes[lifetime].offset;
  p.plan.arena_bytes = out.memory.arena_bytes;
  for (const NDArray& c : p.plan.constants) out.weight_bytes += c.nbytes();
  out.plan = std::move(p.plan);
  return out;
}

}  // namespace kiln::graph
