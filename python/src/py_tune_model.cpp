// kiln.tuner's model tuning bindings: task extraction and the task scheduler
// (the tuner's, kiln/tuner/tune_model.h; built with it, which needs the graph).
#ifdef KILN_PY_WITH_TUNER
#include "kiln/graph/tuned_plan.h"
#include "kiln/tuner/graph_search.h"
#include "kiln/tuner/tune_model.h"
#include "kiln_py.h"

namespace kiln::python {

using namespace kiln::graph;
using namespace kiln::tuner;

namespace {

py::list task_list(const std::vector<ModelTask>& tasks) {
  py::list out;
  for (const ModelTask& t : tasks) {
    py::dict d;
    d["workload_key"] = t.task.workload_key;
    d["task"] = t.task;
    d["ops"] = t.ops;
    d["flop"] = t.task.flop;
    d["weight"] = t.weight;
    d["groups"] = t.groups;
    d["records"] = t.records;
    d["best_time"] = t.best_time;
    d["default_time"] = t.default_time;
    d["hand_default"] = t.hand_default;
    d["layout_cap"] = t.layout_cap;
    d["in_default_plan"] = t.in_default_plan;
    out.append(d);
  }
  return out;
}

CompileOptions compile_options(const std::string& target, const std::string& db, bool layout,
                               const std::map<std::string, std::vector<int64_t>>& sizes = {},
                               const std::map<std::string, std::pair<int64_t, int64_t>>& dims = {}) {
  CompileOptions o;
  o.target = target;
  o.db = db;
  o.layout = layout;
  o.sizes = sizes;
  for (const auto& [name, r] : dims) o.dims[name] = ShapeRange{r.first, r.second};
  return o;
}

py::list verdict_list(const std::vector<RecordVerdict>& vs) {
  py::list out;
  for (const RecordVerdict& v : vs) {
    py::dict d;
    d["workload_key"] = v.workload_key;
    d["ops"] = v.ops;
    d["groups"] = v.groups;
    d["record_time"] = v.record_time;
    d["default_time"] = v.default_time;
    d["ratio"] = v.ratio;
    d["kept"] = v.kept;
    out.append(d);
  }
  return out;
}

py::dict gate_dict(const RecordsGateResult& r) {
  py::dict d;
  d["skipped"] = r.skipped;
  d["ratio"] = r.ratio;
  d["tuned_time"] = r.tuned_time;
  d["default_time"] = r.default_time;
  d["records"] = verdict_list(r.records);
  d["kept_ratio"] = r.kept_ratio;
  d["kept_time"] = r.kept_time;
  d["kept"] = r.kept;
  d["reverted"] = r.reverted;
  d["mismatch"] = r.mismatch;
  d["plan_ratio"] = r.plan_ratio;
  d["plan_reverted"] = r.plan_reverted;
  return d;
}

py::dict graph_search_dict(const GraphSearchResult& r) {
  py::dict d;
  d["model_key"] = r.model_key;
  d["plan"] = r.plan_json;
  d["start"] = r.start_json;
  d["time"] = r.time;
  d["start_time"] = r.start_time;
  d["measured"] = r.measured;
  d["reused"] = r.reused;
  d["taken"] = r.taken;
  d["moves"] = r.moves;
  d["log"] = r.log;
  d["skipped"] = r.skipped;
  return d;
}

using Sizes = std::map<std::string, std::vector<int64_t>>;
using Ranges = std::map<std::string, std::pair<int64_t, int64_t>>;

}  // namespace

void define_tune_model(py::module_& root) {
  py::module_ m = root.attr("tuner").cast<py::module_>();
  m.def("extract_tasks", [](const Graph& g, const std::string& target, const std::string& db, bool layout, const Sizes& sizes, const Ranges& dims) {
    std::vector<ModelTask> tasks;
    {
      py::gil_scoped_release release;
      tasks = extract_tasks(g, compile_options(target, db, layout, sizes, dims));
    }
    return py::make_tuple(task_list(tasks), tasks_table(tasks));
  }, py::arg("graph"), py::arg("target") = "llvm", py::arg("db") = "", py::arg("layout") = true, py::arg("sizes") = Sizes{},
     py::arg("dims") = Ranges{});
  m.def("tune_model", [](const Graph& g, const std::string& target, const std::string& db, int trials, int batch, double time_budget_s,
                         int early_stop_rounds, bool progress, uint64_t seed, bool layout, bool cold_inputs, int confirm_top,
                         int confirm_rounds, bool gpu_simulate, const Sizes& sizes, const Ranges& dims, double graph_share,
                         int graph_candidate_trials, bool gate_records, bool fastest_call) {
    ModelTuneOptions t;
    t.fastest_call = fastest_call;
    t.gate_records = gate_records;
    t.graph_share = graph_share;
    t.graph_candidate_trials = graph_candidate_trials;
    t.gpu_simulate = gpu_simulate;
    t.cold_inputs = cold_inputs;
    t.confirm_top = confirm_top;
    t.confirm_rounds = confirm_rounds;
    t.trials = trials;
    t.batch = batch;
    t.time_budget_s = time_budget_s;
    t.early_stop_rounds = early_stop_rounds;
    t.progress = progress;
    t.seed = seed;
    ModelTuneResult r;
    {
      py::gil_scoped_release release;
      r = tune_model(g, compile_options(target, db, layout, sizes, dims), t);
    }
    py::dict d;
    d["tasks"] = task_list(r.tasks);
    d["table"] = tasks_table(r.tasks);
    d["trials"] = r.trials;
    d["rounds"] = r.rounds;
    d["elapsed_s"] = r.elapsed_s;
    d["estimated_latency"] = r.estimated_latency;
    d["failures"] = r.failures;
    d["graph_trials"] = r.graph_trials;
    d["graph"] = graph_search_dict(r.graph);
    d["gate"] = gate_dict(r.gate);
    return d;
  }, py::arg("graph"), py::arg("target"), py::arg("db"), py::arg("trials"), py::arg("batch"), py::arg("time_budget_s"),
     py::arg("early_stop_rounds"), py::arg("progress"), py::arg("seed"), py::arg("layout"), py::arg("cold_inputs") = true,
     py::arg("confirm_top") = 4, py::arg("confirm_rounds") = 3, py::arg("gpu_simulate") = false, py::arg("sizes") = Sizes{},
     py::arg("dims") = Ranges{}, py::arg("graph_share") = 0.25, py::arg("graph_candidate_trials") = 10,
     py::arg("gate_records") = true, py::arg("fastest_call") = false);
  // records_gate.h: the model with its records against the defaults; the records reverted where they lose.
  m.def("gate_records", [](const Graph& g, const std::string& target, const std::string& db, int rounds, double margin, bool cold_inputs,
                           bool per_record) {
    RecordsGateOptions o;
    o.per_record = per_record;
    o.rounds = rounds;
    o.margin = margin;
    o.cold_inputs = cold_inputs;
    RecordsGateResult r;
    {
      py::gil_scoped_release release;
      r = gate_records(g, compile_options(target, db, true, Sizes{}, Ranges{}), o);
    }
    return gate_dict(r);
  }, py::arg("graph"), py::arg("target"), py::arg("db"), py::arg("rounds") = 5, py::arg("margin") = 0.02, py::arg("cold_inputs") = true,
     py::arg("per_record") = true);
  m.def("tuned_side_holds", &tuned_side_holds, py::arg("round_ratios"), py::arg("fastest_tuned"), py::arg("fastest_default"));
  m.def("judge_records", [](const std::vector<std::string>& keys, const std::vector<std::vector<double>>& with,
                            const std::vector<std::vector<double>>& without, double margin) { return verdict_list(judge_records(keys, with, without, margin)); },
        py::arg("step_keys"), py::arg("with_records"), py::arg("with_defaults"), py::arg("margin") = 0.02);
  m.def("search_graph_plan", [](const Graph& g, const std::string& target, const std::string& db, int max_candidates, double time_budget_s,
                                int rounds, double min_gain, bool progress, uint64_t seed) {
    GraphSearchOptions o;
    o.max_candidates = max_candidates;
    o.time_budget_s = time_budget_s;
    o.rounds = rounds;
    o.min_gain = min_gain;
    o.progress = progress;
    o.seed = seed;
    GraphSearchResult r;
    {
      py::gil_scoped_release release;
      r = search_graph_plan(g, compile_options(target, db, true), o);
    }
    return graph_search_dict(r);
  }, py::arg("graph"), py::arg("target"), py::arg("db"), py::arg("max_candidates") = 16, py::arg("time_budget_s") = 0.0,
     py::arg("rounds") = 5, py::arg("min_gain") = 0.02, py::arg("progress") = true, py::arg("seed") = 0);
  m.def("model_key", [](const Graph& g) { return model_key(g); }, py::arg("graph"));
}

}  // namespace kiln::python
#endif  // KILN_PY_WITH_TUNER
