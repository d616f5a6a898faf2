// The graph IR's values, attributes and node constructors (graph.h).
#include "kiln/graph/graph.h"

#include <sstream>
#include <unordered_set>

#include "kiln/graph/op_registry.h"
#include "kiln/support/error.h"

namespace kiln::graph {

int64_t TensorType::numel() const { return shape.numel().value(); }

int64_t TensorType::bytes() const { return numel() * dtype_storage_bytes(dtype); }

std::string TensorType::str() const { return dtype.str() + shape_to_string(shape); }

namespace {

const char* kind_name(const AttrValue& v) {
  switch (v.index()) {
    case 0: return "an integer";
    case 1: return "a float";
    case 2: return "a string";
    case 3: return "a list of integers";
    case 4: return "a list of floats";
    default: return "a shape";
  }
}

template <typename T>
const T& get_as(const std::map<std::string, AttrValue>& m, const std::string& name, const char* want) {
  auto it = m.find(name);
  KILN_USER_CHECK(it != m.end()) << "attribute '" << name << "' is missing";
  const T* v = std::get_if<T>(&it->second);
  KILN_USER_CHECK(v) << "attribute '" << name << "' is " << kind_name(it->second) << ", expected " << want;
  return *v;
}

}  // namespace

int64_t Attrs::get_int(const std::string& name) const { return get_as<int64_t>(values_, name, "an integer"); }
const std::string& Attrs::get_string(const std::string& name) const { return get_as<std::string>(values_, name, "a string"); }
const std::vector<int64_t>& Attrs::get_ints(const std::string& name) const {
  return get_as<std::vector<int64_t>>(values_, name, "a list of integers");
}
const std::vector<double>& Attrs::get_floats(const std::string& name) const {
  return get_as<std::vector<double>>(values_, name, "a list of floats");
}
const Shape& Attrs::get_shape(const std::string& name) const { return get_as<Shape>(values_, name, "a shape"); }
double Attrs::get_float(const std::string& name) const {
  auto it = values_.find(name);
  if (it != values_.end())
    if (const int64_t* i = std::get_if<int64_t>(&it->second)) return static_cast<double>(*i);
  return get_as<double>(values_, name, "a float");
}
int64_t Attrs::get_int_or(const std::string& name, int64_t fallback) const { return has(name) ? get_int(name) : fallback; }
double Attrs::get_float_or(const std::string& name, double fallback) const { return has(name) ? get_float(name) : fallback; }

std::string attr_to_string(const AttrValue& v) {
  std::ostringstream os;
  auto list = [&](const auto& xs) {
    os << "[";
    for (size_t i = 0; i < xs.size(); ++i) os << (i ? ", " : "") << xs[i];
    os << "]";
  };
  switch (v.index()) {
    case 0: os << std::get<int64_t>(v); break;
    case 1: os << std::get<double>(v); break;
    case 2: os << '"' << std::get<std::string>(v) << '"'; break;
    case 3: list(std::get<std::vector<int64_t>>(v)); break;
    case 4: list(std::get<std::vector<double>>(v)); break;
    default: os << shape_to_string(std::get<Shape>(v)); break;
  }
  return os.str();
}

std::string Attrs::str() const {
  std::string s;
  for (const auto& [k, v] : values_) {
    // An empty shape is an optional shape attribute left unset (Reshape's `target`): not worth a word.
    if (const Shape* shape = std::get_if<Shape>(&v); shape && shape->empty()) continue;
    s += (s.empty() ? "" : ", ") + k + "=" + attr_to_string(v);
  }
  return s;
}

const TensorType& Value::type() const {
  KILN_CHECK(node.defined()) << "type of an undefined value";
  KILN_CHECK(index >= 0 && index < node->num_outputs()) << "output " << index << " of '" << node->name << "'";
  return node->types[index];
}

Value NodeObj::output(int i) const {
  KILN_CHECK(i >= 0 && i < num_outputs()) << "output " << i << " of '" << name << "' (" << num_outputs() << " outputs)";
  return Value{Ref<NodeObj>(this), i};
}

Graph Graph::make(std::vector<Ref<InputNode>> inputs, std::vector<Value> outputs, std::vector<std::string> output_names) {
  KILN_USER_CHECK(!outputs.empty()) << "a graph needs at least one output";
  if (output_names.empty())
    for (size_t i = 0; i < outputs.size(); ++i) output_names.push_back("output" + std::to_string(i));
  KILN_USER_CHECK(output_names.size() == outputs.size()) << "a graph has " << outputs.size() << " outputs but " << output_names.size() << " names";
  std::unordered_set<const NodeObj*> declared;
  std::unordered_set<std::string> names;
  for (const auto& in : inputs) {
    KILN_USER_CHECK(in.defined()) << "a graph input is null";
    KILN_USER_CHECK(names.insert(in->name).second) << "two graph inputs are named '" << in->name << "'";
    declared.insert(in.get());
  }
  for (const Value& v : outputs) KILN_USER_CHECK(v.defined()) << "a graph output is undefined";
  Graph g(new GraphObj(std::move(inputs), std::move(outputs), std::move(output_names)));
  for (const auto& n : g.topo_order())
    KILN_USER_CHECK(n->kind != NodeKind::Input || declared.count(n.get()))
        << "the graph reads input '" << n->name << "', which is not among its declared inputs; pass it in `inputs`";
  return g;
}

std::vector<Ref<NodeObj>> Graph::topo_order() const {
  std::vector<Ref<NodeObj>> order;
  std::unordered_set<const NodeObj*> seen;
  // Iterative depth-first post-order (models have chains of thousands of nodes).
  std::vector<std::pair<const NodeObj*, size_t>> stack;
  auto push = [&](const NodeObj* n) {
    if (seen.insert(n).second) stack.push_back({n, 0});
  };
  auto visit = [&](const NodeObj* root) {
    push(root);
    while (!stack.empty()) {
      auto& [n, next] = stack.back();
      const auto* op = n->kind == NodeKind::Op ? static_cast<const OpNode*>(n) : nullptr;
      if (op && next < op->inputs.size()) {
        const Value& in = op->inputs[next++];
        if (in.defined()) push(in.node.get());
        continue;
      }
      order.push_back(Ref<NodeObj>(n));
      stack.pop_back();
    }
  };
  // Inputs first, in declaration order (also those no output reads).
  for (const auto& in : inputs()) visit(in.get());
  for (const Value& out : outputs()) visit(out.node.get());
  return order;
}

std::vector<const OpNode*> Graph::op_nodes() const {
  std::vector<const OpNode*> ops;
  for (const auto& n : topo_order())
    if (n->kind == NodeKind::Op) ops.push_back(static_cast<const OpNode*>(n.get()));
  return ops;
}

Ref<OpNode> make_op(const OpDef* op, std::vector<Value> inputs, Attrs attrs, std::string name) {
  KILN_CHECK(op) << "make_op with a null OpDef";
  if (name.empty()) name = op->name;
  int n = static_cast<int>(inputs.size());
  KILN_USER_CHECK(n >= op->min_inputs && n <= op->max_inputs)
      << op->name << " node '" << name << "' has " << n << " inputs; " << op->name << " takes "
      << (op->min_inputs == op->max_inputs ? std::to_string(op->min_inputs) : std::to_string(op->min_inputs) + " to " + std::to_string(op->max_inputs));
  for (int i = 0; i < op->min_inputs; ++i)
    KILN_USER_CHECK(inputs[i].defined()) << op->name << " node '" << name << "': input " << i << " is required but missing";
  attrs = normalize_attrs(*op, name, std::move(attrs));
  OpCall call = op_call(op, name, attrs, inputs);
  KILN_CHECK(op->infer) << "op " << op->name << " has no type inference";
  std::vector<TensorType> types;
  try {
    types = op->infer(call);
  } catch (const Error& e) {
    // Errors raised below the op's own checks (a symbolic dim where the op
    // needs a number) get the node's name, as call.fail's do.
    std::string prefix = op->name + " node '" + name + "'";
    if (std::string(e.what()).rfind(prefix, 0) == 0) throw;
    throw Error(prefix + ": " + e.what());
  }
  return Ref<OpNode>(new OpNode(std::move(name), op, std::move(attrs), std::move(inputs), std::move(types)));
}

Ref<OpNode> make_op(const std::string& op_name, std::vector<Value> inputs, Attrs attrs, std::string name) {
  return make_op(&get_op(op_name), std::move(inputs), std::move(attrs), std::move(name));
}

Ref<InputNode> make_input(std::string name, TensorType type) {
  for (const Dim& d : type.shape)
    KILN_USER_CHECK(d.is_symbolic() || d.value() >= 0) << "input '" << name << "' has shape " << shape_to_string(type.shape)
                                                       << ": a dimension is a size (>= 0) or a shape variable";
  return Ref<InputNode>(new InputNode(std::move(name), std::move(type)));
}

Ref<ConstantNode> make_constant(std::string name, NDArray data) {
  KILN_USER_CHECK(data.defined()) << "constant '" << name << "' has no data";
  KILN_USER_CHECK(data.device().device_type == kDLCPU) << "constant '" << name << "' must be on the CPU";
  TensorType t{data.shape(), data.dtype()};
  if (!data.strides().empty()) {
    // Keep constants compact: the kernels read them as row-major buffers.
    NDArray compact = NDArray::empty(data.shape(), data.dtype());
    compact.copy_from(data);
    data = compact;
  }
  return Ref<ConstantNode>(new ConstantNode(std::move(name), std::move(data), std::move(t)));
}

}  // namespace kiln::graph
