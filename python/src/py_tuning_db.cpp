// The tuning database (tuning_db/include/kiln/tuning_db/database.h) as
// _kiln.tuning_db.Database, wrapped by python/kiln/tuning_db.py.
//
// Records, targets, runs and the other values cross as the bound C++ structs
// of py_tuning_db_types.cpp (where each field is named and checked once);
// arguments may also be dicts of their fields. Record filters and prune
// options are dicts (keyword arguments in Python), read here with checks
// that name the option, so a value of the wrong type is a kiln::Error
// (kiln.KilnError), never a TypeError from deep inside pybind11.
//
// The Database is held by a shared_ptr: close() drops the handle's reference
// at once, while a call running in another thread (with the GIL released)
// keeps the connection alive until it returns.
#include <memory>
#include <sstream>

#include "kiln/support/error.h"
#include "kiln/tuning_db/database.h"
#include "kiln_py.h"
#include "py_tuning_db_types.h"

namespace kiln::python {

namespace {

namespace db = kiln::tuning_db;

py::dict as_dict(py::handle v, const std::string& what) {
  if (!py::isinstance<py::dict>(v)) throw Error(what + " must be a dict, not " + type_name(v));
  return py::reinterpret_borrow<py::dict>(v);
}

// Option `key` of a dict; `fallback` when it is absent or None.
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
  if (d.contains("after_id") && !d["after_id"].is_none()) f.after_id = get<int64_t>(d, "after_id", what);
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

std::vector<db::Record> to_records(py::handle batch) {
  if (!py::isinstance<py::list>(batch) && !py::isinstance<py::tuple>(batch))
    throw Error("add_records: pass a list of records, not " + type_name(batch));
  std::vector<db::Record> records;
  size_t i = 0;
  for (py::handle r : batch) records.push_back(to_record(r, "record " + std::to_string(i++) + " of the batch"));
  return records;
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
  define_tuning_db_types(t);

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
        db::Workload wl = to_workload(w, "add_workload");
        p.with([&](db::Database& d) { d.add_workload(wl); });
      })
      .def("workload", [](const PyDatabase& p, const std::string& key) -> py::object {
        auto w = p.with([&](db::Database& d) { return d.workload(key); });
        return w ? py::cast(*w) : py::object(py::none());
      })
      .def("workloads", [](const PyDatabase& p) { return p.with([](db::Database& d) { return d.workloads(); }); })

      // ---- tuning runs ----
      .def("start_run", [](const PyDatabase& p, py::handle r) {
        db::TuningRun run = to_run(r, "start_run");
        return p.with([&](db::Database& d) { return d.start_run(run); });
      })
      .def("end_run", [](const PyDatabase& p, const std::string& uid, std::optional<double> ended_at) {
        p.with([&](db::Database& d) { d.end_run(uid, ended_at); });
      }, py::arg("uid"), py::arg("ended_at") = py::none())
      .def("run", [](const PyDatabase& p, const std::string& uid) -> py::object {
        auto r = p.with([&](db::Database& d) { return d.run(uid); });
        return r ? py::cast(*r) : py::object(py::none());
      })
      .def("runs", [](const PyDatabase& p) { return p.with([](db::Database& d) { return d.runs(); }); })

      // ---- records ----
      .def("add_records", [](const PyDatabase& p, py::handle batch) {
        std::vector<db::Record> records = to_records(batch);
        return p.with([&](db::Database& d) { return d.add_records(records); });
      })
      .def("best", [](const PyDatabase& p, const std::string& key, py::handle target, int64_t k, const std::string& match, const std::string& metric) {
        db::TargetInfo tgt = to_target(target, "best(): target");
        db::TargetMatch mt = parse_match(match);
        db::Metric me = parse_metric(metric);
        return p.with([&](db::Database& d) { return d.best(key, tgt, k, mt, me); });
      }, py::arg("key"), py::arg("target"), py::arg("k") = 1, py::arg("match") = "hardware", py::arg("metric") = "median")
      .def("records", [](const PyDatabase& p, const std::string& key, bool with_features) {
        return p.with([&](db::Database& d) { return d.records(key, with_features); });
      }, py::arg("key"), py::arg("with_features") = false)
      .def("record", [](const PyDatabase& p, int64_t id, bool with_features) -> py::object {
        auto r = p.with([&](db::Database& d) { return d.record(id, with_features); });
        return r ? py::cast(*r) : py::object(py::none());
      }, py::arg("id"), py::arg("with_features") = false)
      .def("find", [](const PyDatabase& p, py::handle filter) {
        db::RecordFilter f = to_filter(filter);
        return p.with([&](db::Database& d) { return d.find(f); });
      })
      .def("training_records", [](const PyDatabase& p, py::handle filter) {
        db::RecordFilter f = to_filter(filter);
        return p.with([&](db::Database& d) { return d.training_records(f); });
      })
      .def("set_features", [](const PyDatabase& p, int64_t id, py::handle features) {
        db::FeatureSet f = to_features(features, "set_features(): features");
        p.with([&](db::Database& d) { d.set_features(id, f); });
      })

      // ---- claims of concurrent tuning sessions ----
      .def("claim", [](const PyDatabase& p, const std::string& key, py::handle target, py::handle traces, const std::string& owner, double ttl_s) {
        db::TargetInfo tgt = to_target(target, "claim(): target");
        auto list = cast_value<std::vector<std::string>>(traces, "claim(): traces (JSON text each)");
        std::vector<db::ClaimStatus> got = p.with([&](db::Database& d) { return d.claim(key, tgt, list, owner, ttl_s); });
        std::vector<std::string> out;
        for (db::ClaimStatus s : got) out.push_back(db::to_string(s));
        return out;
      }, py::arg("key"), py::arg("target"), py::arg("traces"), py::arg("owner"), py::arg("ttl_s"))
      .def("renew_claims", [](const PyDatabase& p, const std::string& owner, double ttl_s) {
        return p.with([&](db::Database& d) { return d.renew_claims(owner, ttl_s); });
      }, py::arg("owner"), py::arg("ttl_s"))
      .def("release_claims", [](const PyDatabase& p, const std::string& owner) {
        return p.with([&](db::Database& d) { return d.release_claims(owner); });
      }, py::arg("owner"))
      .def("claims", [](const PyDatabase& p) { return p.with([](db::Database& d) { return d.claims(); }); })
      .def("delete_graph_plans", [](const PyDatabase& p, const std::string& model_key) {
        return p.with([&](db::Database& d) { return d.delete_graph_plans(model_key); });
      }, py::arg("model_key"))

      // ---- statistics and maintenance ----
      .def("stats", [](const PyDatabase& p) { return p.with([](db::Database& d) { return d.stats(); }); })
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
        return p.with([&](db::Database& d) { return d.import_jsonl(file); });
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
        return p.with([&](db::Database& d) { return d.read_jsonl(in); });
      });
}

}  // namespace kiln::python
