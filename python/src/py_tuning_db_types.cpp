// The tuning database's value types bound once: kiln.tuning_db.Record,
// TargetInfo, Workload, TuningRun, FeatureSet, ... are the C++ structs of
// tuning_db/include/kiln/tuning_db/types.h. Each class has one table of its
// fields (name, C++ -> Python, checked Python -> C++) from which its
// constructor (positional and keyword arguments), attributes, to_dict /
// from_dict, __eq__ and __repr__ are made: a field is named and checked in
// this one place. A value of the wrong type is a kiln::Error (kiln.KilnError)
// naming the class and the field, never a TypeError from inside pybind11.
#include "py_tuning_db_types.h"

#include <pybind11/numpy.h>

#include <cstring>
#include <functional>
#include <set>

#include "kiln/support/error.h"

namespace kiln::python {

namespace {

namespace db = kiln::tuning_db;

// ---------------------------------------------------------------- field tables

/** One field of a bound struct: its Python value (from the Python object) and its checked assignment. */
template <class T>
struct Field {
  std::string name;
  std::function<py::object(py::handle self)> get;
  std::function<void(T&, py::handle, const std::string& what)> set;
};

/** The fields of T, in constructor order, and how a fresh T looks. */
template <class T>
struct Spec {
  std::string name;
  std::vector<Field<T>> fields;
  bool keyword_only = false;
  std::function<T()> make = [] { return T{}; };
};

template <class T>
Spec<T>& spec() {
  static Spec<T> s;
  return s;
}

template <class T>
std::string field_names() {
  std::string out;
  for (const Field<T>& f : spec<T>().fields) out += (out.empty() ? "" : ", ") + f.name;
  return out;
}

/** A member read and assigned as is (checked by cast_value). */
template <class T, class M>
Field<T> member(const char* name, M T::*m) {
  return {name, [m](py::handle self) { return py::cast(self.cast<const T&>().*m); },
          [m](T& t, py::handle v, const std::string& what) { t.*m = cast_value<M>(v, what); }};
}

/** A string that is None in Python while empty (a uid the database assigns). */
template <class T>
Field<T> string_or_none(const char* name, std::string T::*m) {
  return {name,
          [m](py::handle self) -> py::object {
            const std::string& s = self.cast<const T&>().*m;
            return s.empty() ? py::object(py::none()) : py::object(py::str(s));
          },
          [m](T& t, py::handle v, const std::string& what) { t.*m = v.is_none() ? std::string() : cast_value<std::string>(v, what); }};
}

/** A number that is None in Python while zero (an id or time the database assigns). */
template <class T, class N>
Field<T> zero_or_none(const char* name, N T::*m) {
  return {name,
          [m](py::handle self) -> py::object {
            N n = self.cast<const T&>().*m;
            return n == N{} ? py::object(py::none()) : py::cast(n);
          },
          [m](T& t, py::handle v, const std::string& what) { t.*m = v.is_none() ? N{} : cast_value<N>(v, what); }};
}

/** JSON text: a str is kept as is, any other JSON value is serialised. */
template <class T>
Field<T> json_text(const char* name, std::string T::*m) {
  return {name, [m](py::handle self) { return py::cast(self.cast<const T&>().*m); },
          [m](T& t, py::handle v, const std::string& what) {
            if (py::isinstance<py::str>(v)) {
              t.*m = v.cast<std::string>();
              return;
            }
            try {
              t.*m = py::module_::import("json").attr("dumps")(v).cast<std::string>();
            } catch (py::error_already_set& e) {
              throw Error(what + " must be JSON text or a JSON-serialisable value (" + std::string(py::str(e.value())) + ")");
            }
          }};
}

/** A nested struct: the attribute is the nested object itself (edits go into the owner). */
template <class T, class S>
Field<T> nested(const char* name, S T::*m, S (*convert)(py::handle, const std::string&)) {
  return {name, [m](py::handle self) { return py::cast(&(self.cast<T&>().*m), py::return_value_policy::reference_internal, self); },
          [m, convert](T& t, py::handle v, const std::string& what) { t.*m = convert(v, what); }};
}

/** Plain Python values: bound structs become dicts, recursively. */
py::object plain(py::handle v) {
  if (py::hasattr(v, "to_dict")) return v.attr("to_dict")();
  if (py::isinstance<py::list>(v)) {
    py::list out;
    for (py::handle x : v) out.append(plain(x));
    return out;
  }
  return py::reinterpret_borrow<py::object>(v);
}

template <class T>
T from_kwargs(py::args args, py::kwargs kwargs) {
  const Spec<T>& s = spec<T>();
  T t = s.make();
  if (s.keyword_only && !args.empty()) throw Error(s.name + " takes keyword arguments only; the fields are " + field_names<T>());
  if (args.size() > s.fields.size())
    throw Error(s.name + " takes at most " + std::to_string(s.fields.size()) + " arguments (" + field_names<T>() + "), got " + std::to_string(args.size()));
  std::set<std::string> given;
  for (size_t i = 0; i < args.size(); ++i) {
    s.fields[i].set(t, args[i], s.name + ": field '" + s.fields[i].name + "'");
    given.insert(s.fields[i].name);
  }
  for (auto [k, v] : kwargs) {
    std::string key = py::str(k);
    auto f = std::find_if(s.fields.begin(), s.fields.end(), [&](const Field<T>& x) { return x.name == key; });
    if (f == s.fields.end()) throw Error(s.name + ": unknown field '" + key + "'; the fields are " + field_names<T>());
    if (!given.insert(key).second) throw Error(s.name + ": field '" + key + "' is given twice");
    f->set(t, v, s.name + ": field '" + key + "'");
  }
  return t;
}

template <class T>
T from_dict(py::handle v, const std::string& what) {
  const Spec<T>& s = spec<T>();
  if (!py::isinstance<py::dict>(v)) throw Error(what + ": expected a " + s.name + " or a dict of its fields, not " + type_name(v));
  auto d = py::reinterpret_borrow<py::dict>(v);
  std::string unknown;
  for (auto [k, _] : d) {
    std::string key = py::str(k);
    if (std::none_of(s.fields.begin(), s.fields.end(), [&](const Field<T>& f) { return f.name == key; })) unknown += (unknown.empty() ? "'" : ", '") + key + "'";
  }
  if (!unknown.empty()) throw Error(what + ": unknown field(s) " + unknown + "; the fields of " + s.name + " are " + field_names<T>());
  T t = s.make();
  for (const Field<T>& f : s.fields)
    if (d.contains(f.name.c_str())) f.set(t, d[f.name.c_str()], what + ": field '" + f.name + "'");
  return t;
}

/** An instance of T's class as is, else a dict of its fields. */
template <class T>
T to_struct(py::handle v, const std::string& what) {
  if (py::isinstance<T>(v)) return v.cast<T>();
  return from_dict<T>(v, what);
}

template <class T>
py::dict to_dict(py::handle self) {
  py::dict d;
  for (const Field<T>& f : spec<T>().fields) d[f.name.c_str()] = plain(f.get(self));
  return d;
}

/** The class of T with its constructor, attributes, to_dict / from_dict, == and repr from its Spec. */
template <class T>
py::class_<T> bind(py::module_& m, const char* doc) {
  py::class_<T> c(m, spec<T>().name.c_str(), doc);
  c.def(py::init(&from_kwargs<T>));
  for (const Field<T>& f : spec<T>().fields) {
    std::string what = spec<T>().name + ": field '" + f.name + "'";
    c.def_property(f.name.c_str(), [get = f.get](py::handle self) { return get(self); },
                   [set = f.set, what](T& t, py::handle v) { set(t, v, what); });
  }
  c.def("to_dict", &to_dict<T>, "The fields as plain Python values (nested records as dicts).");
  c.def_static("from_dict", [](py::handle d) { return from_dict<T>(d, spec<T>().name + ".from_dict"); }, py::arg("d"),
               "A new instance from a dict of fields (as to_dict gives); an unknown field is an error.");
  c.def("__eq__", [](py::handle self, py::handle other) -> py::object {
    if (!py::isinstance<T>(other)) return py::reinterpret_borrow<py::object>(Py_NotImplemented);
    return py::bool_(to_dict<T>(self).equal(to_dict<T>(other)));
  });
  c.def("__repr__", [](py::handle self) {
    std::string out = spec<T>().name + "(";
    bool first = true;
    for (const Field<T>& f : spec<T>().fields) {
      out += (first ? "" : ", ") + f.name + "=" + std::string(py::repr(f.get(self)));
      first = false;
    }
    return out + ")";
  });
  return c;
}

// ---------------------------------------------------------------- FeatureSet

/** values as a C-contiguous float32 rows x cols matrix; a flat list is reshaped when rows and cols are given. */
void set_feature_values(db::FeatureSet& f, py::handle values, py::handle rows, py::handle cols, const std::string& what) {
  // forcecast: float64 (numpy's default), ints and nested lists convert; text does not.
  auto arr = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(values);
  if (!arr) throw Error(what + ": values must be an array of numbers, not " + type_name(values));
  int64_t r = arr.ndim() == 2 ? arr.shape(0) : -1, c = arr.ndim() == 2 ? arr.shape(1) : -1;
  if (!rows.is_none() || !cols.is_none()) {
    if (rows.is_none() || cols.is_none()) throw Error(what + ": give both rows and cols, or neither");
    r = cast_value<int64_t>(rows, what + ": rows");
    c = cast_value<int64_t>(cols, what + ": cols");
    if (r < 0 || c < 0 || arr.size() != r * c)
      throw Error(what + ": " + std::to_string(arr.size()) + " values do not fill rows x cols = " + std::to_string(r) + " x " + std::to_string(c));
  } else if (arr.ndim() != 2) {
    throw Error(what + ": values must be a 2-D array (rows x cols), not " + std::to_string(arr.ndim()) + "-D; reshape one row with values.reshape(1, -1)");
  }
  f.rows = r;
  f.cols = c;
  f.values.assign(arr.data(), arr.data() + arr.size());
}

py::array_t<float> feature_values(const db::FeatureSet& f) {
  py::array_t<float> out({f.rows, f.cols});
  if (!f.values.empty()) std::memcpy(out.mutable_data(), f.values.data(), f.values.size() * sizeof(float));
  return out;
}

py::dict features_dict(const db::FeatureSet& f) {
  py::dict d;
  d["extractor"] = f.extractor;
  d["rows"] = f.rows;
  d["cols"] = f.cols;
  py::list values;
  for (float x : f.values) values.append(static_cast<double>(x));
  d["values"] = values;
  return d;
}

const char* const kFeatureFields[] = {"extractor", "rows", "cols", "values"};

db::FeatureSet features_from_dict(py::handle v, const std::string& what) {
  if (!py::isinstance<py::dict>(v)) throw Error(what + ": expected a FeatureSet or a dict of its fields, not " + type_name(v));
  auto d = py::reinterpret_borrow<py::dict>(v);
  for (auto [k, _] : d) {
    std::string key = py::str(k);
    if (std::none_of(std::begin(kFeatureFields), std::end(kFeatureFields), [&](const char* f) { return key == f; }))
      throw Error(what + ": unknown field '" + key + "'; the fields of FeatureSet are extractor, rows, cols, values");
  }
  db::FeatureSet f;
  if (d.contains("extractor")) f.extractor = cast_value<std::string>(d["extractor"], what + ": field 'extractor'");
  py::object values = d.contains("values") ? py::object(d["values"]) : py::object(py::list());
  py::object rows = d.contains("rows") ? py::object(d["rows"]) : py::object(py::none());
  py::object cols = d.contains("cols") ? py::object(d["cols"]) : py::object(py::none());
  set_feature_values(f, values, rows, cols, what);
  return f;
}

void bind_feature_set(py::module_& m) {
  py::class_<db::FeatureSet>(m, "FeatureSet",
                             "Cost-model features of one record: values is a float32 array of shape (rows, cols). extractor names the extractor "
                             "and its version (e.g. \"ansor-v1\") so that incompatible layouts are never mixed. A flat values is reshaped when "
                             "rows and cols are given.")
      .def(py::init([](py::handle extractor, py::handle values, py::handle rows, py::handle cols) {
             db::FeatureSet f;
             f.extractor = cast_value<std::string>(extractor, "FeatureSet: extractor");
             set_feature_values(f, values, rows, cols, "FeatureSet");
             return f;
           }),
           py::arg("extractor"), py::arg("values"), py::arg("rows") = py::none(), py::arg("cols") = py::none())
      .def_property("extractor", [](const db::FeatureSet& f) { return f.extractor; },
                    [](db::FeatureSet& f, py::handle v) { f.extractor = cast_value<std::string>(v, "FeatureSet: extractor"); })
      .def_property("values", &feature_values,
                    [](db::FeatureSet& f, py::handle v) { set_feature_values(f, v, py::none(), py::none(), "FeatureSet"); },
                    "A float32 copy of shape (rows, cols); assign a new 2-D array to change it.")
      .def_property_readonly("rows", [](const db::FeatureSet& f) { return f.rows; })
      .def_property_readonly("cols", [](const db::FeatureSet& f) { return f.cols; })
      .def("to_dict", &features_dict, "The JSON Lines form: extractor, rows, cols and the values flattened row-major.")
      .def_static("from_dict", [](py::handle d) { return features_from_dict(d, "FeatureSet.from_dict"); }, py::arg("d"))
      .def("__eq__", [](const db::FeatureSet& a, py::handle b) -> py::object {
        if (!py::isinstance<db::FeatureSet>(b)) return py::reinterpret_borrow<py::object>(Py_NotImplemented);
        const db::FeatureSet& o = b.cast<const db::FeatureSet&>();
        return py::bool_(a.extractor == o.extractor && a.rows == o.rows && a.cols == o.cols && a.values == o.values);
      })
      .def("__repr__", [](const db::FeatureSet& f) {
        return "FeatureSet(extractor=" + std::string(py::repr(py::str(f.extractor))) + ", rows=" + std::to_string(f.rows) + ", cols=" + std::to_string(f.cols) + ")";
      });
}

db::FeatureSet features_field(py::handle v, const std::string& what) {
  if (py::isinstance<db::FeatureSet>(v)) return v.cast<db::FeatureSet>();
  if (py::isinstance<py::dict>(v)) return features_from_dict(v, what);
  throw Error(what + " must be a FeatureSet, a dict or None, not " + type_name(v));
}

// ---------------------------------------------------------------- the tables

void describe_types() {
  auto& target = spec<db::TargetInfo>();
  target.name = "TargetInfo";
  target.fields = {member("target", &db::TargetInfo::target), member("cpu_model", &db::TargetInfo::cpu_model),
                   member("cpu_features", &db::TargetInfo::cpu_features), member("gpu_arch", &db::TargetInfo::gpu_arch),
                   member("kiln_version", &db::TargetInfo::kiln_version)};

  auto& workload = spec<db::Workload>();
  workload.name = "Workload";
  workload.fields = {member("key", &db::Workload::key), member("name", &db::Workload::name), json_text("compute_dag", &db::Workload::compute_dag)};

  auto& summary = spec<db::WorkloadSummary>();
  summary.name = "WorkloadSummary";
  summary.fields = {member("key", &db::WorkloadSummary::key), member("name", &db::WorkloadSummary::name),
                    member("records", &db::WorkloadSummary::records), member("errors", &db::WorkloadSummary::errors)};

  auto& run = spec<db::TuningRun>();
  run.name = "TuningRun";
  run.keyword_only = true;
  run.fields = {string_or_none("uid", &db::TuningRun::uid), zero_or_none("started_at", &db::TuningRun::started_at),
                member("ended_at", &db::TuningRun::ended_at), member("budget", &db::TuningRun::budget),
                member("seed", &db::TuningRun::seed), member("machine", &db::TuningRun::machine)};

  auto& rec = spec<db::Record>();
  rec.name = "Record";
  rec.keyword_only = true;
  rec.make = [] {
    db::Record r;
    r.trace = "[]";
    return r;
  };
  Field<db::Record> error_kind{"error_kind", [](py::handle self) { return py::cast(db::to_string(self.cast<const db::Record&>().error_kind)); },
                               [](db::Record& r, py::handle v, const std::string& what) { r.error_kind = db::parse_error_kind(cast_value<std::string>(v, what)); }};
  Field<db::Record> features{"features", [](py::handle self) { return py::cast(self.cast<const db::Record&>().features); },
                             [](db::Record& r, py::handle v, const std::string& what) {
                               r.features = v.is_none() ? std::nullopt : std::optional<db::FeatureSet>(features_field(v, what));
                             }};
  rec.fields = {zero_or_none("id", &db::Record::id),
                string_or_none("uid", &db::Record::uid),
                member("workload_key", &db::Record::workload_key),
                nested("target", &db::Record::target, &to_target),
                json_text("trace", &db::Record::trace),
                member("run_times", &db::Record::run_times),
                member("min_time", &db::Record::min_time),
                member("median_time", &db::Record::median_time),
                error_kind,
                member("error_msg", &db::Record::error_msg),
                member("build_time", &db::Record::build_time),
                string_or_none("run_uid", &db::Record::run_uid),
                zero_or_none("timestamp", &db::Record::timestamp),
                features};

  auto& wts = spec<db::WorkloadTargetStats>();
  wts.name = "WorkloadTargetStats";
  wts.fields = {member("workload_key", &db::WorkloadTargetStats::workload_key), member("workload_name", &db::WorkloadTargetStats::workload_name),
                nested("target", &db::WorkloadTargetStats::target, &to_target), member("records", &db::WorkloadTargetStats::records),
                member("errors", &db::WorkloadTargetStats::errors), member("best_median", &db::WorkloadTargetStats::best_median),
                member("best_min", &db::WorkloadTargetStats::best_min)};

  auto& stats = spec<db::Stats>();
  stats.name = "Stats";
  stats.fields = {member("workloads", &db::Stats::workloads), member("targets", &db::Stats::targets),
                  member("tuning_runs", &db::Stats::tuning_runs), member("records", &db::Stats::records),
                  member("errors", &db::Stats::errors), member("errors_by_kind", &db::Stats::errors_by_kind),
                  member("per_workload", &db::Stats::per_workload)};

  auto& imported = spec<db::ImportResult>();
  imported.name = "ImportResult";
  imported.fields = {member("added", &db::ImportResult::added), member("skipped", &db::ImportResult::skipped)};

  auto& claim = spec<db::Claim>();
  claim.name = "Claim";
  claim.fields = {member("workload_key", &db::Claim::workload_key), nested("target", &db::Claim::target, &to_target),
                  json_text("trace", &db::Claim::trace), member("owner", &db::Claim::owner), member("expires_at", &db::Claim::expires_at)};
}

}  // namespace

db::TargetInfo to_target(py::handle v, const std::string& what) {
  if (py::isinstance<py::str>(v)) {
    db::TargetInfo t;
    t.target = v.cast<std::string>();
    return t;
  }
  if (!py::isinstance<db::TargetInfo>(v) && !py::isinstance<py::dict>(v))
    throw Error(what + " must be a TargetInfo, a dict or a target string, not " + type_name(v));
  return to_struct<db::TargetInfo>(v, what);
}
db::Record to_record(py::handle v, const std::string& what) {
  if (!py::isinstance<db::Record>(v) && !py::isinstance<py::dict>(v)) throw Error(what + " must be a Record or a dict, not " + type_name(v));
  return to_struct<db::Record>(v, what);
}
db::Workload to_workload(py::handle v, const std::string& what) { return to_struct<db::Workload>(v, what); }
db::TuningRun to_run(py::handle v, const std::string& what) { return to_struct<db::TuningRun>(v, what); }
db::FeatureSet to_features(py::handle v, const std::string& what) { return features_field(v, what); }

void define_tuning_db_types(py::module_& t) {
  describe_types();
  bind<db::TargetInfo>(t, "A target string plus the facts that make timings comparable: CPU model, CPU features (stored sorted and unique), GPU arch, kiln version.");
  bind<db::Workload>(t, "A distinct computation: its structural key, a readable name and its compute DAG (JSON text; a dict is serialised).");
  bind<db::WorkloadSummary>(t, "A workload with its record and error counts, as listed by Database.workloads().");
  bind<db::TuningRun>(t, "One tuning session. uid and started_at are filled in by Database.start_run() when None.");
  bind_feature_set(t);
  bind<db::Record>(t,
                   "One measured schedule of a workload on a target (keyword arguments). id (local to one database), uid (global) and "
                   "timestamp are assigned on insert when None; min_time and median_time are derived from run_times. A failed candidate "
                   "has an error_kind of \"build_error\", \"run_error\", \"timeout\" or \"wrong_result\" (\"none\" when it ran). features "
                   "is only loaded where asked for (with_features=True).");
  bind<db::WorkloadTargetStats>(t, "Record counts and the best run times of one workload on one target.");
  bind<db::Stats>(t, "Totals of a database, errors by kind, and the best result per workload and target.");
  bind<db::ImportResult>(t, "Records inserted, and records skipped because their uid was already present.");
  bind<db::Claim>(t, "A tuning session's claim on a trace it is measuring (Database.claims()): owner is the session's run uid, expires_at Unix seconds; "
                     "target holds the hardware facts (kiln_version is empty: claims are per hardware).");
}

}  // namespace kiln::python
