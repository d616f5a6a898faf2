// The trace: JSON read/write, the readable print and the Python print of
// steps, all through each step's `fields` / `python`, and replay through
// each step's `apply`. The kinds are the alternatives of te::Step.
#include "kiln/te/trace.h"

#include <array>
#include <cctype>
#include <nlohmann/json.hpp>
#include <sstream>

#include "kiln/support/error.h"
#include "kiln/te/schedule.h"
#include "step_internal.h"

namespace kiln::te {

using nlohmann::json;

const char* step_kind(const Step& step) {
  return std::visit([](const auto& s) { return std::decay_t<decltype(s)>::kName; }, step);
}

const StageRef& step_stage(const Step& step) {
  return std::visit([](const auto& s) -> const StageRef& { return s.stage; }, step);
}

namespace {

// ---------------------------------------------------------------- the table of kinds

struct Kind {
  const char* name;
  Step (*make)();
};

template <size_t... I>
constexpr std::array<Kind, sizeof...(I)> make_kinds(std::index_sequence<I...>) {
  return {Kind{std::variant_alternative_t<I, Step>::kName, [] { return Step(std::in_place_index<I>); }}...};
}

constexpr auto kKinds = make_kinds(std::make_index_sequence<std::variant_size_v<Step>>());

Step make_step(const std::string& kind) {
  for (const Kind& k : kKinds)
    if (kind == k.name) return k.make();
  std::string known;
  for (const Kind& k : kKinds) known += (known.empty() ? "" : ", ") + std::string(k.name);
  KILN_USER_ERROR() << "unknown step kind '" << kind << "' (known: " << known << ")";
  return Step();
}

// ---------------------------------------------------------------- the wire layout

// A step's fields gathered into the four wire lists.
class Gather : public FieldVisitor {
 public:
  std::vector<int> axis_list, int_list, stage_list;
  std::vector<std::string> axis_names, string_list;
  void axis(AxisRef& a) override { axis_list.push_back(a.index), axis_names.push_back(a.name); }
  void axes(std::vector<AxisRef>& as) override {
    for (AxisRef& a : as) axis(a);
  }
  void integer(int& v) override { int_list.push_back(v); }
  void string(std::string& v) override { string_list.push_back(v); }
  void stage(int& v) override { stage_list.push_back(v); }
  void stages(std::vector<int>& v) override { stage_list.insert(stage_list.end(), v.begin(), v.end()); }
};

Gather gather(const Step& step) {
  Step copy = step;  // fields() visits mutable references (the reader fills them)
  Gather g;
  std::visit([&](auto& s) { s.fields(g); }, copy);
  return g;
}

// Fills a step's fields from the wire lists of one JSON object, in order.
class Scatter : public FieldVisitor {
 public:
  explicit Scatter(const json& j)
      : axes_(j.value("axes", std::vector<int>{})),
        axis_names_(j.value("axis_names", std::vector<std::string>{})),
        ints_(j.value("ints", std::vector<int>{})),
        strings_(j.value("strings", std::vector<std::string>{})),
        stages_(j.value("stages", std::vector<int>{})) {}
  void axis(AxisRef& a) override {
    a.index = next(axes_, ia_, "axes");
    a.name = ia_ <= axis_names_.size() ? axis_names_[ia_ - 1] : "";
  }
  void axes(std::vector<AxisRef>& as) override {
    while (ia_ < axes_.size()) axis(as.emplace_back());
  }
  void integer(int& v) override { v = next(ints_, ii_, "ints"); }
  void string(std::string& v) override { v = next(strings_, is_, "strings"); }
  void stage(int& v) override { v = next(stages_, ist_, "stages"); }
  void stages(std::vector<int>& v) override {
    while (ist_ < stages_.size()) v.push_back(stages_[ist_++]);
  }

 private:
  template <class T>
  static T next(const std::vector<T>& list, size_t& i, const char* what) {
    KILN_USER_CHECK(i < list.size()) << "it is missing arguments (\"" << what << "\" has " << list.size() << ")";
    return list[i++];
  }
  std::vector<int> axes_;
  std::vector<std::string> axis_names_;
  std::vector<int> ints_;
  std::vector<std::string> strings_;
  std::vector<int> stages_;
  size_t ia_ = 0, ii_ = 0, is_ = 0, ist_ = 0;
};

}  // namespace

std::string Trace::to_json() const {
  json arr = json::array();
  for (const Step& s : steps) {
    const StageRef& st = step_stage(s);
    json j = {{"kind", step_kind(s)}, {"stage", st.index}, {"stage_name", st.name}};
    Gather g = gather(s);
    if (!g.axis_list.empty()) j["axes"] = g.axis_list, j["axis_names"] = g.axis_names;
    if (!g.int_list.empty()) j["ints"] = g.int_list;
    if (!g.string_list.empty()) j["strings"] = g.string_list;
    if (!g.stage_list.empty()) j["stages"] = g.stage_list;
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
    std::string what;
    try {
      Step step = make_step(j.at("kind").get<std::string>());
      StageRef ref{j.at("stage").get<int>(), j.value("stage_name", "")};
      Scatter sc(j);
      std::visit([&](auto& s) { s.stage = ref, s.fields(sc); }, step);
      t.steps.push_back(std::move(step));
    } catch (const json::exception& e) {
      what = e.what();
    } catch (const Error& e) {
      what = e.what();
    }
    KILN_USER_CHECK(what.empty()) << "trace step " << i << " is malformed (" << what << "): " << j.dump();
  }
  return t;
}

std::string Trace::str() const {
  std::ostringstream os;
  for (size_t i = 0; i < steps.size(); ++i) {
    Gather g = gather(steps[i]);
    os << i << ": " << step_kind(steps[i]) << " " << step_stage(steps[i]).name;
    for (const std::string& a : g.axis_names) os << " " << a;
    for (int v : g.int_list) os << " " << v;
    for (const std::string& v : g.string_list) os << " \"" << v << "\"";
    for (int v : g.stage_list) os << " @stage" << v;
    os << "\n";
  }
  return os.str();
}

std::string Trace::to_python() const {
  PythonWriter w;
  for (const Step& s : steps) std::visit([&](const auto& step) { step.python(w); }, s);
  return w.str();
}

// ---------------------------------------------------------------- replay

Schedule Schedule::from_trace(const std::vector<Tensor>& outputs, const Trace& trace) {
  Schedule sch = create(outputs);
  for (size_t i = 0; i < trace.steps.size(); ++i) {
    const Step& step = trace.steps[i];
    try {
      std::visit([&](const auto& s) { s.apply(sch); }, step);
    } catch (const Error& e) {
      KILN_USER_ERROR() << "trace step " << i << " (" << step_kind(step) << " on stage '" << step_stage(step).name << "') no longer applies: " << e.what();
    }
  }
  return sch;
}

namespace detail {

Stage& replay_stage(const Schedule& sch, int index) {
  KILN_USER_CHECK(index >= 0 && index < sch.num_stages()) << "stage index " << index << " is out of range (" << sch.num_stages() << " stages)";
  return sch.stage(index);
}

IterVar replay_leaf(const Stage& s, const AxisRef& a) {
  KILN_USER_CHECK(a.index >= 0 && a.index < static_cast<int>(s.leaf_iter_vars().size())) << "axis index " << a.index << " is out of range for stage '" << s.name() << "'";
  return s.leaf_iter_vars()[a.index];
}

IterVar replay_root(const Stage& s, const AxisRef& a) {
  KILN_USER_CHECK(a.index >= 0 && a.index < static_cast<int>(s.root_iter_vars().size())) << "dimension " << a.index << " is out of range for stage '" << s.name() << "'";
  return s.root_iter_vars()[a.index];
}

std::vector<Tensor> replay_tensors(const Schedule& sch, const std::vector<int>& stages) {
  std::vector<Tensor> out;
  for (int i : stages) out.push_back(replay_stage(sch, i).op().output());
  return out;
}

}  // namespace detail

// ---------------------------------------------------------------- Python

std::string PythonWriter::identifier(const std::string& name) {
  static const char* const kKeywords[] = {"and", "as", "assert", "break", "class", "continue", "def", "del", "elif", "else", "except", "False", "finally", "for", "from", "global",
                                          "if", "import", "in", "is", "lambda", "None", "nonlocal", "not", "or", "pass", "raise", "return", "True", "try", "while", "with", "yield", "s"};
  std::string id;
  for (char c : name) id += std::isalnum(static_cast<unsigned char>(c)) || c == '_' ? c : '_';
  if (id.empty() || std::isdigit(static_cast<unsigned char>(id[0]))) id = "_" + id;
  for (const char* k : kKeywords)
    if (id == k) return id + "_";
  return id;
}

std::string PythonWriter::quote(const std::string& text) {
  std::string q = "\"";
  for (char c : text) q += c == '"' || c == '\\' ? std::string("\\") + c : std::string(1, c);
  return q + "\"";
}

void PythonWriter::learn(const StageRef& s) {
  if (s.index < 0 || s.name.empty()) return;
  if (stage_names_.size() <= static_cast<size_t>(s.index)) stage_names_.resize(s.index + 1);
  stage_names_[s.index] = s.name;
  used_.insert(identifier(s.name));
}

std::string PythonWriter::stage(const StageRef& s) {
  learn(s);
  return stage(s.index);
}

std::string PythonWriter::stage(int index) const {
  if (index >= 0 && static_cast<size_t>(index) < stage_names_.size() && !stage_names_[index].empty()) return "s[" + identifier(stage_names_[index]) + "]";
  return "s.stages[" + std::to_string(index) + "]";
}

std::string PythonWriter::tensor(const StageRef& s) {
  learn(s);
  return tensor(s.index);
}

std::string PythonWriter::tensor(int index) const {
  if (index >= 0 && static_cast<size_t>(index) < stage_names_.size() && !stage_names_[index].empty()) return identifier(stage_names_[index]);
  return "s.stages[" + std::to_string(index) + "].op.output(0)";
}

// Axis variables are keyed by the stage's name (or position when unknown) and the axis name.
static std::string stage_key(const std::vector<std::string>& names, int index) {
  return index >= 0 && static_cast<size_t>(index) < names.size() && !names[index].empty() ? names[index] : "#" + std::to_string(index);
}

std::string PythonWriter::axis(const StageRef& s, const AxisRef& a) {
  learn(s);
  auto it = axis_vars_.find({stage_key(stage_names_, s.index), a.name});
  if (it != axis_vars_.end()) return it->second;
  return stage(s.index) + ".axis(" + quote(a.name) + ")";
}

std::string PythonWriter::bind_axis(const StageRef& s, const std::string& axis_name) {
  learn(s);
  std::string key = stage_key(stage_names_, s.index);
  std::string var = identifier(axis_name);
  if (used_.count(var)) var = identifier(key + "_" + axis_name);
  for (int k = 2; used_.count(var); ++k) var = identifier(key + "_" + axis_name + "_" + std::to_string(k));
  used_.insert(var);
  axis_vars_[{key, axis_name}] = var;
  return var;
}

std::string PythonWriter::insert_stage(int index, const std::string& name) {
  if (stage_names_.size() < static_cast<size_t>(index)) stage_names_.resize(index);
  stage_names_.insert(stage_names_.begin() + index, name);
  used_.insert(identifier(name));
  return identifier(name);
}

void PythonWriter::forget_axes(const StageRef& s) {
  learn(s);
  std::string key = stage_key(stage_names_, s.index);
  for (auto it = axis_vars_.begin(); it != axis_vars_.end();) it = it->first.first == key ? axis_vars_.erase(it) : std::next(it);
}

}  // namespace kiln::te
