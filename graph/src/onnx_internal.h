// Shared pieces of the ONNX importer (onnx_import.cpp, onnx_tensor.cpp,
// onnx_nodes.cpp). Private to kiln_graph: only it sees the ONNX protobuf
// classes (onnx_proto is a private dependency).
#ifndef KILN_GRAPH_ONNX_INTERNAL_H
#define KILN_GRAPH_ONNX_INTERNAL_H

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <unordered_map>
#include <string>
#include <vector>

#include "kiln/graph/graph.h"
#include "kiln/runtime/ndarray.h"

namespace kiln::graph::onnx_detail {

/** The kiln dtype of an ONNX TensorProto::DataType; throws naming `what` when kiln has none. */
DataType dtype_from_onnx(int32_t elem_type, const std::string& what);
/** A new array holding the tensor's data (raw_data or the typed fields); throws naming `what` for external data or a size mismatch. */
NDArray tensor_from_onnx(const onnx::TensorProto& t, const std::string& what);

/** One ONNX node as the importer hands it over: inputs resolved, attributes converted. */
struct OnnxNode {
  std::string name;  ///< the kiln node name: the ONNX name, or op_type + "_" + index
  std::string op_type;
  int64_t opset = 13;
  std::vector<Value> inputs;  ///< undefined where the ONNX input is "" (absent optional)
  Attrs attrs;
  int num_outputs = 1;  ///< how many outputs the ONNX node lists
};

/** The node's attributes as kiln attributes (TENSOR only for ConstantOfShape's `value`). */
Attrs attrs_from_onnx(const onnx::NodeProto& node, const std::string& name, int64_t opset);
/**
 * Emits the kiln nodes of one ONNX node, translating forms older than
 * opset 13 to the registry's; returns the values standing for its outputs
 * (as many as the kiln node has: possibly fewer than the ONNX node lists).
 */
std::vector<Value> emit_node(OnnxNode node);

/**
 * The integer tensors an exporter computes shapes with (Shape -> Gather ->
 * Concat -> Reshape) when they hold symbolic dimensions: their elements as
 * dims, node by node (onnx_shape_values.cpp).
 */
class ShapeValues {
 public:
  /**
   * Handles a node that makes or reads a symbolic shape value: a Shape of a
   * value with a symbolic dim, arithmetic on one (the node is emitted by
   * `emit_plain`, and a result that turns out static becomes a constant), or
   * Reshape/Expand reading one (its target is rewritten in place to a
   * constant with 0 / -1 / 1 where the dims are symbolic; returns nullopt so
   * the caller emits it). nullopt: not such a node, emit it as usual.
   */
  std::optional<std::vector<Value>> emit(OnnxNode& n, const std::function<std::vector<Value>(OnnxNode)>& emit_plain);

 private:
  std::optional<std::vector<Dim>> elements(const Value& v) const;
  bool reads_symbolic(const OnnxNode& n) const;
  std::optional<std::vector<Dim>> compute(const OnnxNode& n) const;
  Value target_constant(OnnxNode& n) const;
  std::optional<std::vector<Value>> emit_range(OnnxNode& n, const std::function<std::vector<Value>(OnnxNode)>& emit_plain) const;

  std::unordered_map<Value, std::vector<Dim>, ValueHash> known_;
};

/** "Add, Conv, Relu": the registered ops without kiln's own ("kiln.*"). */
std::string supported_ops();

}  // namespace kiln::graph::onnx_detail

#endif  // KILN_GRAPH_ONNX_INTERNAL_H
