// The operator registry (op_registry.h): the table, attribute schemas and OpCall.
#include "kiln/graph/op_registry.h"

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>

#include "kiln/support/error.h"

namespace kiln::graph {

const char* pattern_name(Pattern p) {
  switch (p) {
    case Pattern::Elementwise: return "elementwise";
    case Pattern::Broadcast: return "broadcast";
    case Pattern::Injective: return "injective";
    case Pattern::Reduction: return "reduction";
    case Pattern::OutputFusable: return "output-fusable";
    case Pattern::Opaque: return "opaque";
  }
  return "?";
}

namespace {

struct Registry {
  std::mutex mu;
  // unique_ptr: entries never move, so OpDef pointers held by nodes stay valid.
  std::map<std::string, std::unique_ptr<OpDef>> ops;
};

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: nodes may outlive static destruction order
  return *r;
}

const char* attr_kind_name(AttrKind k) {
  switch (k) {
    case AttrKind::Int: return "an integer";
    case AttrKind::Float: return "a float";
    case AttrKind::String: return "a string";
    case AttrKind::Ints: return "a list of integers";
    case AttrKind::Floats: return "a list of floats";
    case AttrKind::Shape: return "a shape";
  }
  return "?";
}

// Converts v to the kind the schema asks for where that loses nothing (an
// int for a float attribute, one int for a list); false when it cannot.
bool coerce(AttrKind want, AttrValue* v) {
  switch (want) {
    case AttrKind::Int: return std::holds_alternative<int64_t>(*v);
    case AttrKind::Float:
      if (auto* i = std::get_if<int64_t>(v)) *v = static_cast<double>(*i);
      return std::holds_alternative<double>(*v);
    case AttrKind::String: return std::holds_alternative<std::string>(*v);
    case AttrKind::Ints:
      if (auto* i = std::get_if<int64_t>(v)) *v = std::vector<int64_t>{*i};
      // A static shape given where a list of integers is expected (autodiff's input_shape from a TensorType).
      if (auto* s = std::get_if<Shape>(v); s && s->is_static()) *v = s->values();
      return std::holds_alternative<std::vector<int64_t>>(*v);
    case AttrKind::Floats:
      if (auto* is = std::get_if<std::vector<int64_t>>(v)) *v = std::vector<double>(is->begin(), is->end());
      if (auto* f = std::get_if<double>(v)) *v = std::vector<double>{*f};
      return std::holds_alternative<std::vector<double>>(*v);
    case AttrKind::Shape:
      if (auto* is = std::get_if<std::vector<int64_t>>(v)) *v = Shape(*is);
      return std::holds_alternative<Shape>(*v);
  }
  return false;
}

}  // namespace

const OpDef& register_op(OpDef def) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  KILN_CHECK(!r.ops.count(def.name)) << "operator '" << def.name << "' is registered twice";
  KILN_CHECK(def.infer) << "operator '" << def.name << "' has no type inference";
  std::string name = def.name;
  auto& slot = r.ops[name];
  slot = std::make_unique<OpDef>(std::move(def));
  return *slot;
}

const OpDef* find_op(const std::string& name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.ops.find(name);
  return it == r.ops.end() ? nullptr : it->second.get();
}

std::vector<std::string> registered_ops() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::string> names;
  for (const auto& [name, def] : r.ops) names.push_back(name);
  return names;
}

const OpDef& get_op(const std::string& name) {
  if (const OpDef* op = find_op(name)) return *op;
  std::string known;
  for (const std::string& n : registered_ops())
    if (n.rfind("kiln.", 0) != 0) known += (known.empty() ? "" : ", ") + n;
  throw Error("unknown operator '" + name + "'; kiln supports: " + known);
}

Attrs normalize_attrs(const OpDef& op, const std::string& node_name, Attrs attrs) {
  std::map<std::string, AttrValue> out;
  for (const auto& [k, v] : attrs.values()) {
    auto spec = std::find_if(op.attrs.begin(), op.attrs.end(), [&](const AttrSpec& s) { return s.name == k; });
    if (spec == op.attrs.end()) {
      std::string known;
      for (const AttrSpec& s : op.attrs) known += (known.empty() ? "" : ", ") + s.name;
      KILN_USER_ERROR() << op.name << " node '" << node_name << "' has attribute '" << k << "', which " << op.name
                        << " does not take (it takes: " << (known.empty() ? "none" : known) << ")";
    }
    AttrValue value = v;
    KILN_USER_CHECK(coerce(spec->kind, &value)) << op.name << " node '" << node_name << "': attribute '" << k << "' must be "
                                                << attr_kind_name(spec->kind) << ", got " << attr_to_string(v);
    out[k] = std::move(value);
  }
  for (const AttrSpec& s : op.attrs) {
    if (out.count(s.name)) continue;
    KILN_USER_CHECK(s.default_value.has_value()) << op.name << " node '" << node_name << "' lacks the required attribute '" << s.name << "'";
    out[s.name] = *s.default_value;
  }
  return Attrs(std::move(out));
}

Pattern pattern_of(const OpNode& node) { return node.op->node_pattern ? node.op->node_pattern(node) : node.op->pattern; }

bool OpDef::reads_at_compile_time(int i) const { return std::find(const_inputs.begin(), const_inputs.end(), i) != const_inputs.end(); }

bool OpCall::has_input(int i) const { return i >= 0 && i < num_inputs() && input_types[i].dtype.bits() != 0; }

const NDArray& OpCall::constant(int i, const char* what) const {
  if (i >= num_inputs() || !has_input(i)) fail(std::string("input ") + std::to_string(i) + " (" + what + ") is missing");
  if (!constants[i]) fail(std::string("input ") + std::to_string(i) + " (" + what + ") must be a constant (kiln compiles static shapes; fold it first)");
  return *constants[i];
}

std::vector<int64_t> OpCall::constant_ints(int i, const char* what) const {
  const NDArray& a = constant(i, what);
  std::vector<int64_t> out(a.numel());
  if (a.dtype() == DataType::Int(64)) {
    for (int64_t k = 0; k < a.numel(); ++k) out[k] = a.data_as<int64_t>()[k];
  } else if (a.dtype() == DataType::Int(32)) {
    for (int64_t k = 0; k < a.numel(); ++k) out[k] = a.data_as<int32_t>()[k];
  } else {
    fail(std::string("input ") + std::to_string(i) + " (" + what + ") must be int32 or int64, not " + a.dtype().str());
  }
  return out;
}

void OpCall::fail(const std::string& message) const {
  throw Error((op ? op->name : std::string("op")) + " node '" + node_name + "': " + message);
}

void OpCall::expect_rank(int i, int rank) const {
  if (input_types[i].ndim() != rank)
    fail("input " + std::to_string(i) + " has type " + input_types[i].str() + "; expected " + std::to_string(rank) + " dimensions");
}

std::optional<DataType> dtype_of_onnx_code(int64_t code) {
  switch (code) {
    case 1: return DataType::Float(32);
    case 2: return DataType::UInt(8);
    case 3: return DataType::Int(8);
    case 4: return DataType::UInt(16);
    case 5: return DataType::Int(16);
    case 6: return DataType::Int(32);
    case 7: return DataType::Int(64);
    case 9: return DataType::Bool();
    case 10: return DataType::Float(16);
    case 11: return DataType::Float(64);
    case 12: return DataType::UInt(32);
    case 13: return DataType::UInt(64);
    case 16: return DataType::BFloat16();
    default: return std::nullopt;  // 8 string, 14/15 complex, 17+ float8
  }
}

std::optional<double> scalar_of(const NDArray& a) {
  if (!a.defined() || a.numel() != 1) return std::nullopt;
  DataType t = a.dtype();
  const void* p = a.data();
  if (t == DataType::Float(32)) return *static_cast<const float*>(p);
  if (t == DataType::Float(64)) return *static_cast<const double*>(p);
  if (t == DataType::Int(64)) return static_cast<double>(*static_cast<const int64_t*>(p));
  if (t == DataType::Int(32)) return *static_cast<const int32_t*>(p);
  if (t == DataType::Int(16)) return *static_cast<const int16_t*>(p);
  if (t == DataType::Int(8)) return *static_cast<const int8_t*>(p);
  if (t == DataType::UInt(64)) return static_cast<double>(*static_cast<const uint64_t*>(p));
  if (t == DataType::UInt(32)) return *static_cast<const uint32_t*>(p);
  if (t == DataType::UInt(16)) return *static_cast<const uint16_t*>(p);
  if (t == DataType::UInt(8) || t.is_bool()) return *static_cast<const uint8_t*>(p);
  return std::nullopt;
}

OpCall op_call(const OpDef* op, const std::string& name, const Attrs& attrs, const std::vector<Value>& inputs) {
  OpCall c;
  c.op = op;
  c.node_name = name;
  c.attrs = attrs;
  for (const Value& v : inputs) {
    if (!v.defined()) {
      c.input_types.push_back(TensorType{{}, DataType::Void()});  // absent optional input
      c.constants.push_back(nullptr);
      continue;
    }
    c.input_types.push_back(v.type());
    const auto* k = v.node->kind == NodeKind::Constant ? static_cast<const ConstantNode*>(v.node.get()) : nullptr;
    c.constants.push_back(k ? &k->data : nullptr);
  }
  return c;
}

OpCall op_call(const OpNode& node) { return op_call(node.op, node.name, node.attrs, node.inputs); }

double traffic_bytes(const OpCall& call, const std::vector<TensorType>& outputs) {
  // Compile-time inputs count too: they are a few bytes, and auto_shard's estimates have always included them.
  double b = 0;
  for (int i = 0; i < call.num_inputs(); ++i)
    if (call.has_input(i)) b += static_cast<double>(call.input_types[i].bytes());
  for (const TensorType& t : outputs) b += static_cast<double>(t.bytes());
  return b;
}

OpCost op_cost(const OpCall& call, const std::vector<TensorType>& outputs) {
  OpCost c = call.op && call.op->cost ? call.op->cost(call, outputs) : OpCost{};
  if (c.bytes == 0) c.bytes = traffic_bytes(call, outputs);
  return c;
}

OpCost op_cost(const OpNode& node) { return op_cost(op_call(node), node.types); }

}  // namespace kiln::graph
