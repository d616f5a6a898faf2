/** \file
 * The graph IR: a dataflow graph of operator nodes, in the style of the loop
 * IR (immutable, reference-counted nodes; structural equality and hashing; a
 * printer a person reads).
 *
 *   Node     one of: a graph input, a constant (weights, held by reference:
 *            the NDArray is shared, never copied), or an operator applied to
 *            values with attributes. A node has one or more outputs.
 *   Value    (node, output index): what an edge carries. Every value is
 *            typed (TensorType: static shape and dtype).
 *   Graph    the inputs (in call order) and the output values; the nodes are
 *            those reachable from the outputs.
 *
 * An operator node names its OpDef (op_registry.h), which defines everything
 * the graph level knows about the operator. A fused group is an operator
 * node of the op "kiln.fused" whose `body` is the subgraph it runs (its
 * inputs are the group's inputs).
 *
 * A dimension is a Dim (dim.h): a known extent or an expression over named
 * shape variables ("batch", "seq"), for models compiled once for every shape.
 */
#ifndef KILN_GRAPH_GRAPH_H
#define KILN_GRAPH_GRAPH_H

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "kiln/graph/dim.h"
#include "kiln/ir/dtype.h"
#include "kiln/ir/object.h"
#include "kiln/runtime/ndarray.h"

namespace kiln::graph {

/** The type of a value: its shape (each dim static or symbolic, dim.h) and element type. */
struct TensorType {
  Shape shape;
  DataType dtype = DataType::Float(32);

  int ndim() const { return static_cast<int>(shape.size()); }
  /** The element count (throws naming a symbolic dim; numel_dim() is the symbolic form). */
  int64_t numel() const;
  Dim numel_dim() const { return shape.numel(); }
  /** Bytes of a compact array of this type (static shapes). */
  int64_t bytes() const;
  bool is_static() const { return shape.is_static(); }
  /** "float32[1, 64, 56, 56]", "float32[batch, seq, 768]". */
  std::string str() const;
  bool operator==(const TensorType& o) const { return shape == o.shape && dtype == o.dtype; }
};

/**
 * An attribute value: an integer, a float, a string, a list of integers or
 * floats, or a shape (dims that may be symbolic: a Reshape's target computed
 * from the input's shape variables).
 */
using AttrValue = std::variant<int64_t, double, std::string, std::vector<int64_t>, std::vector<double>, Shape>;

/** An operator's attributes by name (sorted, so printing and hashing are deterministic). */
class Attrs {
 public:
  Attrs() = default;
  Attrs(std::map<std::string, AttrValue> values) : values_(std::move(values)) {}

  bool has(const std::string& name) const { return values_.count(name) != 0; }
  /** The typed value; throws kiln::Error naming the attribute when it is missing or of another kind. */
  int64_t get_int(const std::string& name) const;
  double get_float(const std::string& name) const;
  const std::string& get_string(const std::string& name) const;
  const std::vector<int64_t>& get_ints(const std::string& name) const;
  const std::vector<double>& get_floats(const std::string& name) const;
  const Shape& get_shape(const std::string& name) const;
  /** get_int when present, else `fallback`. */
  int64_t get_int_or(const std::string& name, int64_t fallback) const;
  double get_float_or(const std::string& name, double fallback) const;

  void set(const std::string& name, AttrValue v) { values_[name] = std::move(v); }
  const std::map<std::string, AttrValue>& values() const { return values_; }
  /** "axis=1, pads=[1, 1, 1, 1]". */
  std::string str() const;
  bool operator==(const Attrs& o) const { return values_ == o.values_; }

 private:
  std::map<std::string, AttrValue> values_;
};

/** How one attribute value prints ("[1, 2]", "0.5", "\"nearest\""). */
std::string attr_to_string(const AttrValue& v);

struct OpDef;
struct NodeObj;
struct GraphObj;

/** An edge: output `index` of `node`. */
struct Value {
  Ref<NodeObj> node;
  int index = 0;

  bool defined() const { return node.defined(); }
  const TensorType& type() const;
  bool operator==(const Value& o) const { return node == o.node && index == o.index; }
};

struct ValueHash {
  size_t operator()(const Value& v) const { return std::hash<const void*>()(v.node.get()) * 31 + static_cast<size_t>(v.index); }
};

enum class NodeKind : uint8_t { Input, Constant, Op };

struct NodeObj : public Object {
  NodeObj(NodeKind k, std::string n, std::vector<TensorType> t) : kind(k), name(std::move(n)), types(std::move(t)) {}
  const NodeKind kind;
  /** The name a person sees in dumps and errors (the ONNX node or tensor name). */
  const std::string name;
  /** One type per output. */
  const std::vector<TensorType> types;

  int num_outputs() const { return static_cast<int>(types.size()); }
  Value output(int i = 0) const;
};

/** A graph input, fed at every run. */
struct InputNode : public NodeObj {
  InputNode(std::string n, TensorType t) : NodeObj(NodeKind::Input, std::move(n), {std::move(t)}) {}
};

/** A constant (weights): the array is held by reference, not copied. */
struct ConstantNode : public NodeObj {
  ConstantNode(std::string n, NDArray d, TensorType t) : NodeObj(NodeKind::Constant, std::move(n), {std::move(t)}), data(std::move(d)) {}
  const NDArray data;
};

/** An operator applied to values. */
struct OpNode : public NodeObj {
  OpNode(std::string n, const OpDef* o, Attrs a, std::vector<Value> in, std::vector<TensorType> t, Ref<GraphObj> b = nullptr)
      : NodeObj(NodeKind::Op, std::move(n), std::move(t)), op(o), attrs(std::move(a)), inputs(std::move(in)), body(std::move(b)) {}
  const OpDef* const op;
  const Attrs attrs;
  const std::vector<Value> inputs;
  /** The subgraph of a fused group (op "kiln.fused"); null otherwise. */
  const Ref<GraphObj> body;
};

struct GraphObj : public Object {
  GraphObj(std::vector<Ref<InputNode>> i, std::vector<Value> o, std::vector<std::string> on)
      : inputs(std::move(i)), outputs(std::move(o)), output_names(std::move(on)) {}
  const std::vector<Ref<InputNode>> inputs;
  const std::vector<Value> outputs;
  /** One name per output (the ONNX graph's output names, or "output0", ...). */
  const std::vector<std::string> output_names;
};

/** A handle to an immutable graph. */
class Graph : public Ref<GraphObj> {
 public:
  Graph() = default;
  Graph(const GraphObj* g) : Ref<GraphObj>(g) {}
  Graph(Ref<GraphObj> g) : Ref<GraphObj>(std::move(g)) {}
  /** Checks that every output is reachable from the inputs and constants only (throws kiln::Error naming a stray input). */
  static Graph make(std::vector<Ref<InputNode>> inputs, std::vector<Value> outputs, std::vector<std::string> output_names = {});

  const std::vector<Ref<InputNode>>& inputs() const { return get()->inputs; }
  const std::vector<Value>& outputs() const { return get()->outputs; }
  const std::vector<std::string>& output_names() const { return get()->output_names; }
  /** Every node reachable from the outputs, producers first (deterministic: depth-first in input order). */
  std::vector<Ref<NodeObj>> topo_order() const;
  /** The operator nodes in topo order. */
  std::vector<const OpNode*> op_nodes() const;
  /** The printed graph (see printer in graph_printer.cpp). */
  std::string str() const;
};

/** Makes an operator node: fills attribute defaults, checks them against the schema and infers the output types (throws kiln::Error naming the node). */
Ref<OpNode> make_op(const std::string& op_name, std::vector<Value> inputs, Attrs attrs = {}, std::string name = "");
Ref<OpNode> make_op(const OpDef* op, std::vector<Value> inputs, Attrs attrs = {}, std::string name = "");
Ref<InputNode> make_input(std::string name, TensorType type);
/** A constant holding `data` (by reference); its type is the array's. */
Ref<ConstantNode> make_constant(std::string name, NDArray data);

/** Structural equality: same operators, attributes, types, wiring and constant bytes; names are ignored. */
bool structural_equal(const Graph& a, const Graph& b);
/** A hash consistent with structural_equal. */
uint64_t structural_hash(const Graph& a);

}  // namespace kiln::graph

#endif  // KILN_GRAPH_GRAPH_H
