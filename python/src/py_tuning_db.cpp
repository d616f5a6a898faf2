// The tuning database (tuning_db/include/kiln/tuning_db/database.h) as
// _kiln.tuning_db.Database, wrapped by python/kiln/tuning_db.py.
//
// Values cross as plain dicts (records, targets, runs, stats): the Python
// package turns them into its own small classes, whose lists and attributes
// can be edited in place (pybind11's copies of std::vector members cannot).
// Every dict field is read here with a check that names the field, so a value
// of the wrong type is a kiln::Error (kiln.KilnError), never a TypeError from
// deep inside pybind11.
//
// The Database is held by a shared_ptr: close() drops the handle's reference
// at once, while a call running in another thread (with the GIL released)
// keeps the connection alive until it returns.
#include <pybind11/numpy.h>

#include <cstring>
#include <memory>
#include <sstream>

#include "kiln/support/error.h"
#include "kiln/tuning_db/database.h"
#include "kiln_py.h"

namespace kiln::python {

namespace {

namespace db = kiln::tuning_db;

std::string type_name(py::handle v) { return py::str(v.get_type().attr("__name__")); }

// What a field must hold, for the error messages.
template <typename T>
const char* expected() {
  if constexpr (std::is_same_v<T, std::string>) return "a string";
  else if constexpr (std::is_same_v<T, bool>) return "a bool";
  else if constexpr (std::is_integral_v<T>) return "an integer";
  else if constexpr (std::is_same_v<T, double>) return "a number";
  else if constexpr (std::is_same_v<T, std::optional<double>>) return "a number or None";
  else if constexpr (std::is_same_v<T, std::vector<double>>) return "a list of numbers";
  else if constexpr (std::is_same_v<T, std::vector<std::string>>) return "a list of strings";
  else if constexpr (std::is_same_v<T, std::vector<int64_t>>) return "a list of integers";
  else return "a value of another type";
}

template <typename T>
T cast_value(py::handle v, const std::string& what) {
  // A str is a sequence of str: without this, "avx2" would become {"a","v","x","2"}.
  if constexpr (std::is_same_v<T, std::vector<std::string>>) {
    if (py::isinstance<py::str>(v)) throw Error(what + " must be a list of strings, not a single str");
  }
  try {
    return v.cast<T>();
  } catch (const py::cast_error&) {
  }
  // A sequence with one bad element: name the element, not just the container.
  if constexpr (std::is_same_v<T, std::vector<double>> || std::is_same_v<T, std::vector<int64_t>> ||
                std::is_same_v<T, std::vector<std::string>>) {
    if (py::isinstance<py::sequence>(v) && !py::isinstance<py::str>(v) && !py::isinstance<py::bytes>(v)) {
      auto seq = py::reinterpret_borrow<py::sequence>(v);
      for (size_t i = 0; i < seq.size(); ++i) {
        try {
          (void)seq[i].template cast<typename T::value_type>();
        } catch (const py::cast_error&) {
          throw Error(what + " must be " + expected<T>() + ", but element " + std::to_string(i) + " is a " +
                      type_name(seq[i]));
        }
      }
    }
  }
  throw Error(what + " must be " + expected<T>() + ", not " + type_name(v));
}

py::dict as_dict(py::handle v, const std::string& what) {
  if (!py::isinstance<py::dict>(v)) throw Error(what + " must be a dict, not " + type_name(v));
  return py::reinterpret_borrow<py::dict>(v);
}

// Field `key` of a dict; `fallback` when it is absent or None.
template <typename T>
T get(const py::dict& d, const char* key, const std::string& what, T fallback = T{}) {
  py::str k(key);
  if (!d.contains(k)) return fallback;
  py::object v = d[k];
  if (v.is_none()) return fallback;
  return cast_value<T>(v, what + ": field '" + key + "'");
}

db::TargetMatch parse_match(const std::string& s) {
  if (s == "exact") return db::TargetMatch::exact;
  if (s == "hardware") return db::TargetMatch::hardware;
  if (s == "string_only") return db::TargetMatch::string_only;
  throw Error("unknown target match '" + s + "'; use one of exact, hardware, string_only");
}

db::Metric parse_metric(const std::string& s) {
  if (s == "median") return db::Metric::median;
  if (s == "min") return db::Metric::min;
  throw Error("unknown metric '" + s + "'; use median or min");
}

// ---- Python dicts -> C++ structs ----

db::TargetInfo to_target(py::handle v, const std::string& what) {
  py::dict d = as_dict(v, what);
  db::TargetInfo t;
  t.target = get<std::string>(d, "target", what);
  t.cpu_model = get<std::string>(d, "cpu_model", what);
  t.cpu_features = get<std::vector<std::string>>(d, "cpu_features", what);
  t.gpu_arch = get<std::string>(d, "gpu_arch", what);
  t.kiln_version = get<std::string>(d, "kiln_version", what);
  return t;
}

db::FeatureSet to_features(py::handle v, const std::string& what) {
  py::dict d = as_dict(v, what);
  db::FeatureSet f;
  f.extractor = get<std::string>(d, "extractor", what);
  py::object values = d.contains("values") ? py::object(d["values"]) : py::none();
  // forcecast: float64 (numpy's default) and nested lists convert; text does not.
  auto arr = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(values);
  if (!arr || arr.ndim() != 2)
    throw Error(what + ": field 'values' must be a 2-D array of numbers (rows x cols), not " +
                (arr ? std::to_string(arr.ndim()) + "-D" : type_name(values)));
  f.rows = arr.shape(0);
  f.cols = arr.shape(1);
  f.values.assign(arr.data(), arr.data() + arr.size());
  return f;
}

db::Workload to_workload(py::handle v) {
  const std::string what = "workload";
  py::dict d = as_dict(v, what);
  return {get<std::string>(d, "key", what), get<std::string>(d, "name", what),
          get<std::string>(d, "compute_dag", what)};
}

db::TuningRun to_run(py::handle v) {
  const std::string what = "tuning run";
  py::dict d = as_dict(v, what);
  db::TuningRun r;
  r.uid = get<std::string>(d, "uid", what);
  r.started_at = get<double>(d, "started_at", what);
  r.ended_at = get<std::optional<double>>(d, "ended_at", what);
  r.budget = get<int64_t>(d, "budget", what);
  r.seed = get<int64_t>(d, "seed", what);
  r.machine = get<std::string>(d, "machine", what);
  return r;
}

db::Record to_record(py::handle v, const std::string& what) {
  py::dict d = as_dict(v, what);
  db::Record r;
  // id, min_time and median_time are derived by the database; reading them
  // anyway keeps a record read from one database valid input to another.
  r.id = get<int64_t>(d, "id", what);
  r.uid = get<std::string>(d, "uid", what);
  r.workload_key = get<std::string>(d, "workload_key", what);
  if (d.contains("target") && !d["target"].is_none()) r.target = to_target(d["target"], what + ": target");
  r.trace = get<std::string>(d, "trace", what);
  r.run_times = get<std::vector<double>>(d, "run_times", what);
  r.min_time = get<std::optional<double>>(d, "min_time", what);
  r.median_time = get<std::optional<double>>(d, "median_time", what);
  r.error_kind = db::parse_error_kind(get<std::string>(d, "error_kind", what, "none"));
  r.error_msg = get<std::string>(d, "error_msg", what);
  r.build_time = get<std::optional<double>>(d, "build_time", what);
  r.run_uid = get<std::string>(d, "run_uid", what);
  r.timestamp = get<double>(d, "timestamp", what);
  if (d.contains("features") && !d["features"].is_none())
    r.features = to_features(d["features"], what + ": features");
  return r;
}

db::RecordFilter to_filter(py::handle v) {
  const std::string what = "record filter";
  py::dict d = as_dict(v, what);
  db::RecordFilter f;
  if (d.contains("workload_key") && !d["workload_key"].is_none())
    f.workload_key = get<std::string>(d, "workload_key", what);
  if (d.contains("target") && !d["target"].is_none()) f.target = to_target(d["target"], what + ": target");
  f.match = parse_match(get<std::string>(d, "match", what, "hardware"));
  f.include_errors = get<bool>(d, "include_errors", what, true);
  if (d.contains("feature_extractor") && !d["feature_extractor"].is_none())
    f.feature_extractor = get<std::string>(d, "feature_extractor", what);
  f.with_features = get<bool>(d, "with_features", what);
  f.limit = get<int64_t>(d, "limit", what);
  if (f.limit < 0) throw Error("record filter: limit is " + std::to_string(f.limit) + "; use 0 (no limit) or more");
  return f;
}

db::PruneOptions to_prune(py::handle v) {
  const std::string what = "prune options";
  py::dict d = as_dict(v, what);
  db::PruneOptions o;
  if (d.contains("keep_best") && !d["keep_best"].is_none()) o.keep_best = get<int64_t>(d, "keep_best", what);
  o.metric = parse_metric(get<std::string>(d, "metric", what, "median"));
  o.drop_errors = get<bool>(d, "drop_errors", what);
  o.older_than = get<std::optional<double>>(d, "older_than", what);
  o.vacuum = get<bool>(d, "vacuum", what);
  return o;
}

// ---- C++ structs -> Python dicts ----

py::dict from_target(const db::TargetInfo& t) {
  py::dict d;
  d["target"] = t.target;
  d["cpu_model"] = t.cpu_model;
  d["cpu_features"] = t.cpu_features;
  d["gpu_arch"] = t.gpu_arch;
  d["kiln_version"] = t.kiln_version;
  return d;
}

py::dict from_features(const db::FeatureSet& f) {
  py::array_t<float> values({f.rows, f.cols});
  if (!f.values.empty()) std::memcpy(values.mutable_data(), f.values.data(), f.values.size() * sizeof(float));
  py::dict d;
  d["extractor"] = f.extractor;
  d["values"] = values;
  return d;
}

py::dict from_workload(const db::Workload& w) {
  py::dict d;
  d["key"] = w.key;
  d["name"] = w.name;
  d["compute_dag"] = w.compute_dag;
  return d;
}

py::dict from_run(const db::TuningRun& r) {
  py::dict d;
  d["uid"] = r.uid;
  d["started_at"] = r.started_at;
  d["ended_at"] = r.ended_at;
  d["budget"] = r.budget;
  d["seed"] = r.seed;
  d["machine"] = r.machine;
  return d;
}

py::dict from_record(const db::Record& r) {
  py::dict d;
  d["id"] = r.id;
  d["uid"] = r.uid;
  d["workload_key"] = r.workload_key;
  d["target"] = from_target(r.target);
  d["trace"] = r.trace;
  d["run_times"] = r.run_times;
  d["min_time"] = r.min_time;
  d["median_time"] = r.median_time;
  d["error_kind"] = db::to_string(r.error_kind);
  d["error_msg"] = r.error_msg;
  d["build_time"] = r.build_time;
  d["run_uid"] = r.run_uid.empty() ? py::object(py::none()) : py::str(r.run_uid);
  d["timestamp"] = r.timestamp;
  d["features"] = r.features ? py::object(from_features(*r.features)) : py::object(py::none());
  return d;
}

py::list from_records(const std::vector<db::Record>& records) {
  py::list out;
  for (const db::Record& r : records) out.append(from_record(r));
  return out;
}

py::dict from_stats(const db::Stats& s) {
  py::dict d;
  d["workloads"] = s.workloads;
  d["targets"] = s.targets;
  d["tuning_runs"] = s.tuning_runs;
  d["records"] = s.records;
  d["errors"] = s.errors;
  d["errors_by_kind"] = s.errors_by_kind;
  py::list per;
  for (const db::WorkloadTargetStats& w : s.per_workload) {
    py::dict e;
    e["workload_key"] = w.workload_key;
    e["workload_name"] = w.workload_name;
    e["target"] = from_target(w.target);
    e["records"] = w.records;
    e["errors"] = w.errors;
    e["best_median"] = w.best_median;
    e["best_min"] = w.best_min;
    per.append(e);
  }
  d["per_workload"] = per;
  return d;
}

py::dict from_import(const db::ImportResult& r) {
  py::dict d;
  d["added"] = r.added;
  d["skipped"] = r.skipped;
  return d;
}

/** One open database as Python holds it; closed once `db` is null. */
class PyDatabase {
 public:
  PyDatabase(std::string path, std::shared_ptr<db::Database> db) : path_(std::move(path)), db_(std::move(db)) {}

  const std::string& path() const { return path_; }
  bool closed() const { return !db_; }
  void close() { db_.reset(); }

  /**
   * Runs `f(database)` with the GIL released: a write may wait up to the busy
   * timeout for another process's lock, and other Python threads should run
   * meanwhile. Inputs are converted before and results after, under the GIL.
   */
  template <typename F>
  auto with(F&& f) const {
    if (!db_)
      throw Error("tuning database '" + path_ + "' is closed; open it again with kiln.tuning_db.open()");
    std::shared_ptr<db::Database> keep = db_;
    py::gil_scoped_release nogil;
    return f(*keep);
  }

 private:
  std::string path_;
  std::shared_ptr<db::Database> db_;
};

}  // namespace

void define_tuning_db(py::module_& m) {
  py::module_ t = m.def_submodule("tuning_db", "The SQLite database of tuning records (native part; use kiln.tuning_db).");

  py::class_<PyDatabase>(t, "Database")
      .def_static("open", [](const std::string& path, bool read_only, bool create_if_missing, int busy_timeout_ms, int cache_size_mib) {
        db::OpenOptions o;
        o.read_only = read_only;
        o.create_if_missing = create_if_missing;
        o.busy_timeout_ms = busy_timeout_ms;
        o.cache_size_mib = cache_size_mib;
        std::shared_ptr<db::Database> d;
        {
          // Opening may migrate the schema under another writer's lock.
          py::gil_scoped_release nogil;
          d = std::make_shared<db::Database>(db::Database::open(path, o));
        }
        return PyDatabase(path, std::move(d));
      }, py::arg("path"), py::arg("read_only") = false, py::arg("create_if_missing") = true,
         py::arg("busy_timeout_ms") = 60000, py::arg("cache_size_mib") = 16)
      .def_static("latest_schema_version", &db::Database::latest_schema_version)
      .def_property_readonly("path", &PyDatabase::path)
      .def_property_readonly("closed", &PyDatabase::closed)
      .def_property_readonly("schema_version", [](const PyDatabase& p) {
        return p.with([](db::Database& d) { return d.schema_version(); });
      })
      .def("close", &PyDatabase::close)

      // ---- workloads ----
      .def("add_workload", [](const PyDatabase& p, py::handle w) {
        db::Workload wl = to_workload(w);
        p.with([&](db::Database& d) { d.add_workload(wl); });
      })
      .def("workload", [](const PyDatabase& p, const std::string& key) -> py::object {
        auto w = p.with([&](db::Database& d) { return d.workload(key); });
        return w ? py::object(from_workload(*w)) : py::object(py::none());
      })
      .def("workloads", [](const PyDatabase& p) {
        auto list = p.with([](db::Database& d) { return d.workloads(); });
        py::list out;
        for (const db::WorkloadSummary& w : list) {
          py::dict e;
          e["key"] = w.key;
          e["name"] = w.name;
          e["records"] = w.records;
          e["errors"] = w.errors;
          out.append(e);
        }
        return out;
      })

      // ---- tuning runs ----
      .def("start_run", [](const PyDatabase& p, py::handle r) {
        db::TuningRun run = to_run(r);
        return p.with([&](db::Database& d) { return d.start_run(run); });
      })
      .def("end_run", [](const PyDatabase& p, const std::string& uid, std::optional<double> ended_at) {
        p.with([&](db::Database& d) { d.end_run(uid, ended_at); });
      }, py::arg("uid"), py::arg("ended_at") = py::none())
      .def("run", [](const PyDatabase& p, const std::string& uid) -> py::object {
        auto r = p.with([&](db::Database& d) { return d.run(uid); });
        return r ? py::object(from_run(*r)) : py::object(py::none());
      })
      .def("runs", [](const PyDatabase& p) {
        auto runs = p.with([](db::Database& d) { return d.runs(); });
        py::list out;
        for (const db::TuningRun& r : runs) out.append(from_run(r));
        return out;
      })

      // ---- records ----
      .def("add_records", [](const PyDatabase& p, const py::list& batch) {
        std::vector<db::Record> records;
        records.reserve(batch.size());
        for (size_t i = 0; i < batch.size(); ++i)
          records.push_back(to_record(batch[i], "record " + std::to_string(i) + " of the batch"));
        return p.with([&](db::Database& d) { return d.add_records(records); });
      })
      .def("best", [](const PyDatabase& p, const std::string& key, py::handle target, int64_t k, const std::string& match, const std::string& metric) {
        db::TargetInfo tgt = to_target(target, "best(): target");
        db::TargetMatch mt = parse_match(match);
        db::Metric me = parse_metric(metric);
        return from_records(p.with([&](db::Database& d) { return d.best(key, tgt, k, mt, me); }));
      }, py::arg("key"), py::arg("target"), py::arg("k") = 1, py::arg("match") = "hardware", py::arg("metric") = "median")
      .def("records", [](const PyDatabase& p, const std::string& key, bool with_features) {
        return from_records(p.with([&](db::Database& d) { return d.records(key, with_features); }));
      }, py::arg("key"), py::arg("with_features") = false)
      .def("record", [](const PyDatabase& p, int64_t id, bool with_features) -> py::object {
        auto r = p.with([&](db::Database& d) { return d.record(id, with_features); });
        return r ? py::object(from_record(*r)) : py::object(py::none());
      }, py::arg("id"), py::arg("with_features") = false)
      .def("find", [](const PyDatabase& p, py::handle filter) {
        db::RecordFilter f = to_filter(filter);
        return from_records(p.with([&](db::Database& d) { return d.find(f); }));
      })
      .def("training_records", [](const PyDatabase& p, py::handle filter) {
        db::RecordFilter f = to_filter(filter);
        return from_records(p.with([&](db::Database& d) { return d.training_records(f); }));
      })
      .def("set_features", [](const PyDatabase& p, int64_t id, py::handle features) {
        db::FeatureSet f = to_features(features, "set_features(): features");
        p.with([&](db::Database& d) { d.set_features(id, f); });
      })

      // ---- statistics and maintenance ----
      .def("stats", [](const PyDatabase& p) { return from_stats(p.with([](db::Database& d) { return d.stats(); })); })
      .def("delete_records", [](const PyDatabase& p, py::handle ids) {
        auto list = cast_value<std::vector<int64_t>>(ids, "delete_records(): ids");
        return p.with([&](db::Database& d) { return d.delete_records(list); });
      })
      .def("delete_workload", [](const PyDatabase& p, const std::string& key) {
        return p.with([&](db::Database& d) { return d.delete_workload(key); });
      })
      .def("prune", [](const PyDatabase& p, py::handle options) {
        db::PruneOptions o = to_prune(options);
        return p.with([&](db::Database& d) { return d.prune(o); });
      })
      .def("check_integrity", [](const PyDatabase& p) {
        return p.with([](db::Database& d) { return d.check_integrity(); });
      })

      // ---- JSON Lines ----
      .def("export_jsonl", [](const PyDatabase& p, const std::string& file, py::handle filter) {
        db::RecordFilter f = to_filter(filter);
        return p.with([&](db::Database& d) { return d.export_jsonl(file, f); });
      })
      .def("import_jsonl", [](const PyDatabase& p, const std::string& file) {
        return from_import(p.with([&](db::Database& d) { return d.import_jsonl(file); }));
      })
      // The stream forms, through a string: Python's file objects are not ostreams.
      .def("write_jsonl", [](const PyDatabase& p, py::handle filter) {
        db::RecordFilter f = to_filter(filter);
        std::ostringstream out;
        int64_t n = p.with([&](db::Database& d) { return d.write_jsonl(out, f); });
        return py::make_tuple(n, py::bytes(out.str()));
      })
      .def("read_jsonl", [](const PyDatabase& p, const std::string& text) {
        std::istringstream in(text);
        return from_import(p.with([&](db::Database& d) { return d.read_jsonl(in); }));
      });
}

}  // namespace kiln::python
