// The auto-scheduler (tuner/include/kiln/tuner/{task,tune}.h) as _kiln.tuner,
// wrapped by python/kiln/tuner/. A tuning session releases the GIL: it
// touches no Python object, and its worker processes are forked from C++.
#include <map>

#include "kiln/codegen/target.h"
#include "kiln/ops/default_schedule.h"
#include "kiln/support/error.h"
#include "kiln/te/trace.h"
#include "kiln/tuner/confirm.h"
#include "kiln/tuner/feature_records.h"
#include "kiln/tuner/measure.h"
#include "kiln/tuner/ranking_report.h"
#include "kiln/tuner/schedule_rules.h"
#include "kiln/tuning_db/database.h"
#include "kiln/tuner/tune.h"
#include "kiln_py.h"

namespace kiln::python {

namespace {

Target target_of(py::handle target) {
  if (py::isinstance<Target>(target)) return target.cast<Target>();
  if (py::isinstance<py::str>(target)) return Target::parse(target.cast<std::string>());
  throw_user_error("a target must be a string such as \"llvm\" or a kiln Target");
}

// Options arrive as one dict of the Python keywords, so kiln/tuner/session.py owns the defaults' spelling.
tuner::TuneOptions options_of(const py::dict& d) {
  tuner::TuneOptions o;
  auto get = [&](const char* key, auto* out) {
    if (!d.contains(key) || d[key].is_none()) return;
    try {
      *out = d[key].cast<std::remove_pointer_t<decltype(out)>>();
    } catch (const py::cast_error&) {
      throw_user_error(std::string("tune: option '") + key + "' has the wrong type (" + std::string(py::str(d[key].get_type().attr("__name__"))) + ")");
    }
  };
  get("trials", &o.trials);
  get("batch_size", &o.batch_size);
  get("early_stop_rounds", &o.early_stop_rounds);
  get("seed", &o.seed);
  get("db_path", &o.db_path);
  get("timeout_s", &o.timeout_s);
  get("progress", &o.progress);
  get("curve_png", &o.curve_png);
  get("model_path", &o.model_path);
  get("population", &o.population);
  get("generations", &o.generations);
  get("random_search", &o.random_search);
  get("claim_ttl_s", &o.claim_ttl_s);
  get("number", &o.measure.number);
  get("repeat", &o.measure.repeat);
  get("min_repeat_ms", &o.measure.min_repeat_ms);
  get("build_threads", &o.measure.build_threads);
  get("inject_faults", &o.measure.inject_faults);
  get("cold_inputs", &o.measure.cold_inputs);
  get("fastest_call", &o.measure.fastest_call);
  get("gpu_simulate", &o.measure.gpu_simulate);
  return o;
}

py::dict result_dict(const tuner::TuneResult& r) {
  py::dict d;
  d["best_trace"] = r.best_trace;
  d["best_time"] = r.best_time;
  d["best_gflops"] = r.best_gflops;
  d["first_valid_time"] = r.first_valid_time;
  d["trials_measured"] = r.trials_measured;
  d["trials_skipped"] = r.trials_skipped;
  d["trials_claimed_elsewhere"] = r.trials_claimed_elsewhere;
  d["records_from_others"] = r.records_from_others;
  d["errors"] = r.errors;
  d["featurized"] = r.featurized;
  d["feature_ms_per_candidate"] = r.feature_ms_per_candidate;
  d["elapsed_s"] = r.elapsed_s;
  d["db_path"] = r.db_path;
  py::list curve;
  for (const auto& [trials, gflops] : r.curve) curve.append(py::make_tuple(trials, gflops));
  d["curve"] = curve;
  d["trial_gflops"] = r.trial_gflops;
  return d;
}

}  // namespace

void define_tuner(py::module_& m) {
  py::module_ t = m.def_submodule("tuner", "The auto-scheduler (native part; use kiln.tuner).");
  py::class_<tuner::Task>(t, "Task", "A tuning task: one compute DAG on one target, keyed by its workload key.")
      .def_readonly("args", &tuner::Task::args)
      .def_readonly("outputs", &tuner::Task::outputs)
      .def_readonly("target", &tuner::Task::target)
      .def_readonly("workload_key", &tuner::Task::workload_key)
      .def_readonly("name", &tuner::Task::name)
      .def_readonly("flop", &tuner::Task::flop)
      .def_readonly("size_hints", &tuner::Task::size_hints)
      .def("__repr__", [](const tuner::Task& k) { return "Task(" + k.name + ", key=" + k.workload_key + ", target=\"" + k.target.str() + "\")"; });

  t.def("make_task", [](py::handle args, py::handle target, const std::string& name, const std::map<std::string, int64_t>& size_hints) {
    return tuner::make_task(to_tensor_list(args, "make_task args"), target_of(target), name, size_hints);
  }, py::arg("args"), py::arg("target") = "llvm", py::arg("name") = "", py::arg("size_hints") = std::map<std::string, int64_t>{});

  t.def("tensor_core_schedule", [](py::handle args, std::pair<int64_t, int64_t> block, std::pair<int64_t, int64_t> warp, int64_t k_step, int pad) {
    tuner::TensorCoreTiles tiles;
    tiles.block = block, tiles.warp = warp, tiles.k_step = k_step, tiles.pad = pad;
    return tuner::tensor_core_schedule(to_tensor_list(args, "tensor_core_schedule args"), tiles);
  }, py::arg("args"), py::arg("block"), py::arg("warp"), py::arg("k_step"), py::arg("pad"));

  t.def("tune", [](const tuner::Task& task, const py::dict& options) {
    tuner::TuneOptions o = options_of(options);
    // Ctrl-C: between candidates the session looks for Python's pending
    // signals and unwinds (the batch in flight is not stored, nothing is half-written).
    o.measure.on_result = [](size_t, const tuner::MeasureResult&) {
      py::gil_scoped_acquire gil;
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    };
    tuner::TuneResult r;
    {
      py::gil_scoped_release release;
      r = tuner::tune(task, o);
    }
    return result_dict(r);
  }, py::arg("task"), py::arg("options"), "Runs a tuning session; returns the result as a dict.");

  // Measures schedule traces (JSON) of a task as a tuning session would; one dict per trace.
  t.def("measure", [](const tuner::Task& task, const std::vector<std::string>& traces, const py::dict& options) {
    tuner::TuneOptions all = options_of(options);
    tuner::MeasureOptions o = all.measure;
    o.timeout_s = all.timeout_s;
    std::vector<tuner::Candidate> cs;
    for (const std::string& json : traces) {
      tuner::Candidate c;
      c.trace = te::Trace::from_json(json);
      cs.push_back(std::move(c));
    }
    std::vector<tuner::MeasureResult> rs;
    {
      py::gil_scoped_release release;
      rs = tuner::Measurer(task, o).measure(cs);
    }
    py::list out;
    for (const tuner::MeasureResult& r : rs) {
      py::dict d;
      d["run_times"] = r.run_times;
      d["error"] = tuner::measure_error_name(r.error);
      d["error_msg"] = r.error_msg;
      out.append(d);
    }
    return out;
  }, py::arg("task"), py::arg("traces"), py::arg("options"));

  // confirm.h: contenders measured again side by side; a dict of the outcome.
  t.def("confirm_best", [](const tuner::Task& task, const std::string& db, int top, int rounds, bool cold, double margin) {
    tuner::ConfirmResult r;
    {
      py::gil_scoped_release release;
      r = tuner::confirm_best(task, db, tuner::ConfirmOptions{top, rounds, cold, margin});
    }
    py::dict d;
    d["contenders"] = r.contenders;
    d["before"] = r.before;
    d["after"] = r.after;
    d["changed"] = r.changed;
    d["default_won"] = r.default_won;
    return d;
  }, py::arg("task"), py::arg("db"), py::arg("top") = 4, py::arg("rounds") = 3, py::arg("cold_inputs") = true, py::arg("margin") = 0.03);

  // confirm.h: which contender a confirmation keeps, from each one's fastest time per round (None: none).
  t.def("confirmed_winner", [](const std::vector<std::vector<double>>& round_times, size_t default_index, double margin) -> py::object {
    size_t w = tuner::confirmed_winner(round_times, default_index, margin);
    return w == round_times.size() ? py::object(py::none()) : py::int_(w);
  }, py::arg("round_times"), py::arg("default_index"), py::arg("margin") = 0.03);

  // The trace of the schedule a task gets without tuning (the graph compiler's default for a group: default_schedule.h).
  t.def("default_trace", [](const tuner::Task& task) { return kiln::ops::default_schedule(task).schedule.trace().to_json(); }, py::arg("task"));

  // The default candidate's decisions as describe_candidate writes them
  // ("sketch 0: C.i=... C.unroll=1"), the text candidate_trace reads.
  t.def("default_description", [](const tuner::Task& task) {
    tuner::SearchSpace space(task);
    return space.describe_candidate(space.default_candidate());
  }, py::arg("task"));

  // The trace of a candidate given as describe_candidate writes it (a group's
  // schedule_detail after the "; "): replays a logged schedule, edited by hand.
  t.def("candidate_trace", [](const tuner::Task& task, const std::string& description) {
    tuner::SearchSpace space(task);
    return space.parse_candidate(description).trace.to_json();
  }, py::arg("task"), py::arg("description"));

  // Traces of random candidates of the task's search space (every other one
  // a mutation of the draw before it): what the search measures, for tests
  // and for exploring a space by hand.
  t.def("sample_traces", [](const tuner::Task& task, int count, uint64_t seed) {
    tuner::SearchSpace space(task);
    std::mt19937_64 rng(seed);
    std::vector<std::string> out;
    for (int i = 0; i < count; ++i) {
      tuner::Candidate c = space.sample(rng);
      if (i % 2) c = space.mutate(c, rng);
      out.push_back(c.trace.to_json());
    }
    return out;
  }, py::arg("task"), py::arg("count"), py::arg("seed") = 0);

  // (schedule, trace JSON, record id, median seconds) of the best record, or None.
  t.def("best_record", [](const tuner::Task& task, const std::string& db_path) -> py::object {
    std::optional<tuner::BestRecord> b;
    {
      py::gil_scoped_release release;
      b = tuner::best_record(task, db_path);
    }
    if (!b) return py::none();
    return py::make_tuple(b->schedule, b->trace_json, b->record_id, b->median_time);
  }, py::arg("task"), py::arg("db_path"));

  t.def("migrate_features", [](const std::string& db_path, const tuner::Task& task) {
    py::gil_scoped_release release;
    tuning_db::Database db = tuning_db::Database::open(db_path);
    return tuner::migrate_features(db, task);
  }, py::arg("db_path"), py::arg("task"));

  // (accuracy, pairs) of tuner::pairwise_accuracy: the ranking report's measure, for scripts that rank by hand.
  t.def("pairwise_accuracy", [](const std::vector<double>& measured, const std::vector<double>& predicted, double tie) {
    int64_t pairs = 0;
    double acc = tuner::pairwise_accuracy(measured, predicted, tie, &pairs);
    return py::make_tuple(acc, pairs);
  }, py::arg("measured"), py::arg("predicted"), py::arg("tie") = 0.0);

  // The cost model's pairwise ranking accuracy on the DB's records (ranking_report.h): one dict per task, and the means.
  t.def("ranking_report", [](const std::string& db_path, const std::vector<std::string>& workloads, double holdout, double tie,
                             uint64_t seed, bool cross, int min_records, int folds) {
    tuner::RankingOptions o{holdout, tie, seed, cross, min_records, folds};
    tuner::RankingReport r;
    {
      py::gil_scoped_release release;
      r = tuner::ranking_report(tuner::load_training_samples(tuning_db::Database::open(db_path)), o, workloads);
    }
    py::list tasks;
    for (const tuner::TaskRanking& x : r.tasks) {
      py::dict d;
      d["workload_key"] = x.group.substr(0, x.group.find('|'));
      d["group"] = x.group;
      d["records"] = x.records;
      d["held_out"] = x.held_out;
      d["within"] = x.within;
      d["within_pairs"] = x.within_pairs;
      d["cross"] = x.cross;
      d["cross_pairs"] = x.cross_pairs;
      tasks.append(d);
    }
    py::dict out;
    out["tasks"] = tasks;
    out["within_mean"] = r.within_mean;
    out["cross_mean"] = r.cross_mean;
    out["within_pooled"] = r.within_pooled;
    out["cross_pooled"] = r.cross_pooled;
    return out;
  });
}

}  // namespace kiln::python
