#include "kiln/te/trace.h"

#include <nlohmann/json.hpp>
#include <sstream>

#include "kiln/support/error.h"
#include "kiln/te/schedule.h"

namespace kiln::te {

using nlohmann::json;

std::string Trace::to_json() const {
  json arr = json::array();
  for (const TraceStep& s : steps) {
    json j = {{"kind", s.kind}, {"stage", s.stage}, {"stage_name", s.stage_name}};
    if (!s.axes.empty()) j["axes"] = s.axes, j["axis_names"] = s.axis_names;
    if (!s.ints.empty()) j["ints"] = s.ints;
    if (!s.strings.empty()) j["strings"] = s.strings;
    if (!s.stages.empty()) j["stages"] = s.stages;
    arr.push_back(std::move(j));
  }
  return arr.dump();
}

Trace Trace::from_json(const std::string& text) {
  json arr;
  try {
    arr = json::parse(text);
  } catch (const json::exception& e) {
    KILN_USER_ERROR() << "trace is not valid JSON: " << e.what();
  }
  KILN_USER_CHECK(arr.is_array()) << "trace JSON must be an array of steps, got " << arr.type_name();
  Trace t;
  for (size_t i = 0; i < arr.size(); ++i) {
    const json& j = arr[i];
    try {
      TraceStep s;
      s.kind = j.at("kind").get<std::string>();
      s.stage = j.at("stage").get<int>();
      s.stage_name = j.value("stage_name", "");
      s.axes = j.value("axes", std::vector<int>{});
      s.axis_names = j.value("axis_names", std::vector<std::string>{});
      s.ints = j.value("ints", std::vector<int>{});
      s.strings = j.value("strings", std::vector<std::string>{});
      s.stages = j.value("stages", std::vector<int>{});
      t.steps.push_back(std::move(s));
    } catch (const json::exception& e) {
      KILN_USER_ERROR() << "trace step " << i << " is malformed (" << e.what() << "): " << j.dump();
    }
  }
  return t;
}

std::string Trace::str() const {
  std::ostringstream os;
  for (size_t i = 0; i < steps.size(); ++i) {
    const TraceStep& s = steps[i];
    os << i << ": " << s.kind << " " << s.stage_name;
    for (const std::string& a : s.axis_names) os << " " << a;
    for (int v : s.ints) os << " " << v;
    for (const std::string& v : s.strings) os << " \"" << v << "\"";
    for (int v : s.stages) os << " @stage" << v;
    os << "\n";
  }
  return os.str();
}

// ---------------------------------------------------------------- replay

namespace {
struct Replayer {
  Schedule& sch;
  const TraceStep& step;
  size_t index;

  [[noreturn]] void fail(const std::string& why) const {
    KILN_USER_ERROR() << "trace step " << index << " (" << step.kind << " on stage '" << step.stage_name << "') no longer applies: " << why;
    throw;  // unreachable: the builder throws
  }
  void need(size_t axes, size_t ints, size_t strings = 0, size_t stages = 0) const {
    if (step.axes.size() < axes || step.ints.size() < ints || step.strings.size() < strings || step.stages.size() < stages) fail("it is missing arguments");
  }
  Stage& stage_at(int i) const {
    if (i < 0 || i >= sch.num_stages()) fail("stage index " + std::to_string(i) + " is out of range (" + std::to_string(sch.num_stages()) + " stages)");
    return sch.stage(i);
  }
  IterVar leaf(const Stage& s, int i) const {
    if (i < 0 || i >= static_cast<int>(s.leaf_iter_vars().size())) fail("axis index " + std::to_string(i) + " is out of range for stage '" + s.name() + "'");
    return s.leaf_iter_vars()[i];
  }
  IterVar root(const Stage& s, int i) const {
    if (i < 0 || i >= static_cast<int>(s.root_iter_vars().size())) fail("dimension " + std::to_string(i) + " is out of range for stage '" + s.name() + "'");
    return s.root_iter_vars()[i];
  }

  void apply() {
    Stage& s = stage_at(step.stage);
    const std::string& k = step.kind;
    if (k == "split") need(1, 1), s.split(leaf(s, step.axes[0]), step.ints[0]);
    else if (k == "split_nparts") need(1, 1), s.split_nparts(leaf(s, step.axes[0]), step.ints[0]);
    else if (k == "fuse") need(2, 0), s.fuse(leaf(s, step.axes[0]), leaf(s, step.axes[1]));
    else if (k == "reorder") {
      std::vector<IterVar> order;
      for (int a : step.axes) order.push_back(leaf(s, a));
      s.reorder(order);
    } else if (k == "vectorize") need(1, 0), s.vectorize(leaf(s, step.axes[0]));
    else if (k == "unroll") need(1, 0), s.unroll(leaf(s, step.axes[0]));
    else if (k == "parallel") need(1, 0), s.parallel(leaf(s, step.axes[0]));
    else if (k == "bind") need(1, 0, 1), s.bind(leaf(s, step.axes[0]), step.strings[0]);
    else if (k == "compute_at") {
      need(1, 0, 0, 1);
      Stage& parent = stage_at(step.stages[0]);
      s.compute_at(parent, leaf(parent, step.axes[0]));
    } else if (k == "compute_inline") s.compute_inline();
    else if (k == "compute_root") s.compute_root();
    else if (k == "storage_align") need(1, 2), s.storage_align(root(s, step.axes[0]), step.ints[0], step.ints[1]);
    else if (k == "pragma") need(1, 1, 1), s.pragma(leaf(s, step.axes[0]), step.strings[0], step.ints[0]);
    else if (k == "cache_read") {
      need(0, 0, 1);
      std::vector<Tensor> readers;
      for (int r : step.stages) readers.push_back(stage_at(r).op().output());
      sch.cache_read(s.op().output(), step.strings[0], readers);
    } else if (k == "pack") {
      need(0, 2);
      std::vector<Tensor> readers;
      for (int r : step.stages) readers.push_back(stage_at(r).op().output());
      sch.pack(s.op().output(), readers, step.ints[0], step.ints[1]);
    } else if (k == "cache_write") need(0, 0, 1), sch.cache_write(s.op().output(), step.strings[0]);
    else if (k == "rfactor") need(1, 1), sch.rfactor(s.op().output(), leaf(s, step.axes[0]), step.ints[0]);
    else fail("unknown step kind '" + k + "'");
  }
};
}  // namespace

Schedule Schedule::from_trace(const std::vector<Tensor>& outputs, const Trace& trace) {
  Schedule sch = create(outputs);
  for (size_t i = 0; i < trace.steps.size(); ++i) {
    Replayer r{sch, trace.steps[i], i};
    try {
      r.apply();
    } catch (const Error& e) {
      std::string msg = e.what();
      if (msg.rfind("trace step", 0) == 0 || is_internal(e)) throw;  // a kiln bug stays one
      KILN_USER_ERROR() << "trace step " << i << " (" << trace.steps[i].kind << " on stage '" << trace.steps[i].stage_name << "') no longer applies: " << msg;
    }
  }
  return sch;
}

}  // namespace kiln::te
