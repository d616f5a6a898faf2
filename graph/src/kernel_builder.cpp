// build_group_kernel and evaluate_node (kernel_builder.h).
#include <chrono>

#include "kiln/graph/kernel_builder.h"

#include "kiln/driver/build.h"
#include "kiln/support/compile_times.h"
#include "kiln/graph/op_registry.h"
#include "kiln/ops/best_record.h"
#include "kiln/ops/cpu_amx.h"
#include "kiln/ops/default_schedule.h"
#include "kiln/support/error.h"
#include "kiln/te/trace.h"

namespace kiln::graph {

const char* schedule_source_name(ScheduleSource s) {
  switch (s) {
    case ScheduleSource::Plain: return "plain";
    case ScheduleSource::Default: return "default";
    case ScheduleSource::Database: return "database";
  }
  return "?";
}

te::Schedule group_schedule(const ops::Task& task, const std::string& db_path, ScheduleSource* source, std::string* detail,
                            std::string* records_only_for) {
  if (records_only_for) records_only_for->clear();
  // On AMX targets an int8 / bfloat16 matmul runs on tiles (cpu_amx.h), ahead
  // of tuned records: the search space's candidates are vector kernels.
  if (auto amx = ops::amx_schedule(task)) {
    *source = ScheduleSource::Default;
    *detail = "amx tiles";
    return *amx;
  }
  if (!db_path.empty()) {
    std::string trace;
    if (auto best = ops::best_schedule(task, db_path, &trace)) {
      *source = ScheduleSource::Database;
      *detail = trace;
      return *best;
    }
    if (records_only_for) {
      std::vector<std::string> others = ops::other_core_count_targets(task, db_path);
      if (!others.empty()) *records_only_for = others.front();
    }
  }
  ops::DefaultSchedule def = ops::default_schedule(task);
  *source = ScheduleSource::Default;
  *detail = def.detail;
  return def.schedule;
}

GroupKernel build_group_kernel(const Graph& body, const Target& target, const std::string& name, bool plain, const std::string& db_path) {
  return build_group_kernel(to_te(body), target, name, plain, db_path);
}

namespace {

bool has_symbolic_extent(const std::vector<te::Tensor>& args) {
  for (const te::Tensor& t : args)
    for (const Expr& d : t.shape())
      if (ops::is_symbolic_extent(d)) return true;
  return false;
}

// The record of a symbolic group's static twin at the first likely binding
// that has one, replayed on the symbolic DAG (a split of a var extent leaves
// a tail the loop passes peel). nullopt: no binding has a record that replays.
std::optional<te::Schedule> twin_record(const GroupKernel& k, const ops::Task& task, const Target& target, const std::string& db_path,
                                        const std::vector<ShapeBinding>& likely, std::string* detail) {
  for (const ShapeBinding& b : likely) {
    try {
      GraphDag twin = to_te(bind_shapes(k.dag.source, b));
      ops::Task twin_task = ops::make_task(twin.args(), target, k.name);
      std::optional<ops::BestRecord> best = ops::best_record(twin_task, db_path);
      if (!best) continue;
      te::Schedule sch = te::Schedule::from_trace(task.outputs, te::Trace::from_json(best->trace_json));
      std::string at;
      for (const auto& [v, size] : b) at += (at.empty() ? "" : ", ") + v + "=" + std::to_string(size);
      *detail = "tuned at " + at + ": " + best->trace_json;
      return sch;
    } catch (const Error&) {
      continue;  // a size the group cannot take, or a trace that does not replay here: the next binding
    }
  }
  return std::nullopt;
}

}  // namespace

GroupKernel build_group_kernel(GraphDag dag, const Target& target, const std::string& name, bool plain, const std::string& db_path,
                               const std::vector<ShapeBinding>& likely) {
  auto t0 = std::chrono::steady_clock::now();
  GroupKernel k;
  k.name = name;
  k.dag = std::move(dag);
  std::vector<te::Tensor> args = k.dag.args();
  bool symbolic = has_symbolic_extent(args);
  ops::Task task = ops::make_task(args, target, name, symbolic && !likely.empty() ? likely.front() : ShapeBinding{});
  k.workload_key = task.workload_key;
  k.flop = task.flop;
  te::Schedule sch;
  std::optional<te::Schedule> tuned;
  if (!plain && symbolic && !db_path.empty() && k.dag.source.defined()) tuned = twin_record(k, task, target, db_path, likely, &k.schedule_detail);
  if (plain) {
    sch = task.fresh_schedule();
    k.source = ScheduleSource::Plain;
  } else if (tuned) {
    sch = *tuned;
    k.source = ScheduleSource::Database;
  } else {
    sch = group_schedule(task, db_path, &k.source, &k.schedule_detail, &k.records_only_for);
  }
  add_compile_time(CompilePhase::Schedule, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  k.module = build(sch, args, target, name);
  return k;
}

std::vector<NDArray> evaluate_node(const OpNode& node, const std::vector<NDArray>& inputs) {
  KILN_CHECK(inputs.size() == node.inputs.size()) << "evaluate_node: " << inputs.size() << " arrays for " << node.inputs.size() << " inputs";
  // The node over fresh inputs; compile-time inputs stay constants.
  std::vector<Ref<InputNode>> graph_inputs;
  std::vector<Value> values;
  std::vector<NDArray> fed;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!node.inputs[i].defined()) {
      values.push_back(Value());
      continue;
    }
    bool compile_time = node.op->reads_at_compile_time(static_cast<int>(i));
    if (compile_time || node.inputs[i].node->kind == NodeKind::Constant) {
      values.push_back(make_constant("c" + std::to_string(i), inputs[i])->output());
    } else {
      graph_inputs.push_back(make_input("x" + std::to_string(i), node.inputs[i].type()));
      values.push_back(graph_inputs.back()->output());
      fed.push_back(inputs[i]);
    }
  }
  // A fused group is its body already; a single operator becomes a one-node graph.
  Graph body(node.body);
  if (!node.body.defined()) {
    Ref<OpNode> one = make_op(node.op, values, node.attrs, node.name);
    if (node.op->evaluate) return node.op->evaluate(op_call(*one), inputs);
    std::vector<Value> outs;
    for (int i = 0; i < one->num_outputs(); ++i) outs.push_back(one->output(i));
    body = Graph::make(graph_inputs, outs);
  }
  GroupKernel k = build_group_kernel(body, Target::host(), "evaluate", true);
  std::vector<Arg> args;
  for (const NDArray& a : fed) args.push_back(a);
  for (const auto& c : k.dag.constants) args.push_back(c->data);
  std::vector<NDArray> results;
  for (const TensorType& t : node.types) {
    results.push_back(NDArray::empty(t.shape, t.dtype));
    args.push_back(results.back());
  }
  k.module.call("evaluate", args);
  return results;
}

}  // namespace kiln::graph
