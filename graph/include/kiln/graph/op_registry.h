/** \file
 * The operator registry: everything the graph level knows about an operator
 * sits in its OpDef, registered once, in one file per operator family
 * (graph/src/ops/). No pass keeps its own list of operators: passes ask the
 * OpDef (its fusion pattern, whether it folds, its compute, its sharding
 * rule, its cost).
 *
 *   name          the ONNX op type ("Conv", "Relu"), or "kiln.*" for kiln's own;
 *                 the ONNX importer looks op types up here, so an ONNX op is
 *                 imported once it is registered
 *   doc           one line for error messages and listings
 *   min/max_inputs, const_inputs
 *                 the arity, and the inputs read at compile time
 *   attrs         the attribute schema: kind, default (absent: required), check
 *   infer         output types from input types, attributes and constant inputs
 *   pattern       how the op fuses (see Pattern)
 *   compute       the op in tensor expressions (from the operator library in
 *                 ops/), used for every kernel the op ends up in
 *   evaluate      optional: computes outputs from constant inputs directly
 *                 (Shape needs only the input type; used by constant folding)
 *   gradient      optional: the gradients of the inputs from those of the
 *                 outputs, built from other registered ops (autodiff.h);
 *                 absent: the op cannot be differentiated through
 *   sharding      the sharding rule (sharding_rule.h): the specs the op needs
 *                 of its inputs and gives its outputs on a device mesh, and
 *                 how a rank's node is made; absent: the distribution pass
 *                 refuses the op, naming it (no rule is guessed)
 *   cost          optional cost estimate (OpCost: multiply-adds, FLOPs,
 *                 memory traffic) from the input and output types; absent: no
 *                 arithmetic counted and the traffic of reading every input
 *                 and writing every output (op_cost). auto_shard's estimate
 *                 and the pipeline's stage cut weigh ops by it
 *   is_identity   the op passes its first input through (removed by passes)
 *
 * A new operator is one entry in its family's file (or a new file there) and
 * its tests.
 *
 * Default schedules come from the group, not the op: a fused group is one
 * compute DAG, and its default schedule is made from that DAG by the
 * schedule rules of the operator library (kiln/ops/search_space.h, seeded
 * from the target's registers and lanes; the tuner searches the same rules),
 * so every group, fused or not, gets one.
 */
#ifndef KILN_GRAPH_OP_REGISTRY_H
#define KILN_GRAPH_OP_REGISTRY_H

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kiln/graph/graph.h"
#include "kiln/graph/sharding_rule.h"
#include "kiln/te/operation.h"

namespace kiln::graph {

/** How an operator fuses, in the order of TVM's pattern kinds (a lower kind fuses more freely). */
enum class Pattern : uint8_t {
  Elementwise,    ///< out[i] = f(in[i]): same shape in and out
  Broadcast,      ///< elementwise with broadcasting of inputs
  Injective,      ///< each output element reads input elements at index maps (transpose, slice, concat)
  Reduction,      ///< reduces some axes (ReduceSum, Softmax, LayerNorm)
  OutputFusable,  ///< a heavy op whose elementwise consumers fuse into its output (Conv, MatMul)
  Opaque,         ///< never fused (Shape, ops without a compute)
};
const char* pattern_name(Pattern p);

enum class AttrKind : uint8_t { Int, Float, String, Ints, Floats, Shape };

struct AttrSpec {
  std::string name;
  AttrKind kind = AttrKind::Int;
  /** The value when the attribute is absent; nullopt means it is required. */
  std::optional<AttrValue> default_value;
};

/** What an operator's functions see of one node. */
struct OpCall {
  const struct OpDef* op = nullptr;
  std::string node_name;
  Attrs attrs;
  std::vector<TensorType> input_types;
  /** Per input: the array when the input is a constant, else nullptr. */
  std::vector<const NDArray*> constants;
  /** The compute is for a GPU kernel: forms that only suit CPU vectors (conv's channels-last copy) are left out. */
  bool gpu = false;

  int num_inputs() const { return static_cast<int>(input_types.size()); }
  /** Whether input i is given (optional ONNX inputs may be absent: an undefined Value). */
  bool has_input(int i) const;
  /** The constant array of input i; throws kiln::Error ("must be a constant") when it is not one. */
  const NDArray& constant(int i, const char* what) const;
  /** A constant integer input as a vector (int32 or int64 arrays). */
  std::vector<int64_t> constant_ints(int i, const char* what) const;
  /** Throws kiln::Error: "<Op> node '<name>': <message>". */
  [[noreturn]] void fail(const std::string& message) const;
  /** Throws unless the input has `rank` dimensions. */
  void expect_rank(int i, int rank) const;
};

using InferFn = std::function<std::vector<TensorType>(const OpCall&)>;
/** Input tensors (undefined for absent inputs and for those listed in OpDef::const_inputs) to output tensors. */
using ComputeFn = std::function<std::vector<te::Tensor>(const OpCall&, const std::vector<te::Tensor>&)>;
using EvaluateFn = std::function<std::vector<NDArray>(const OpCall&, const std::vector<NDArray>&)>;
/** The work of one call of an operator, for estimates (not for the tuner: it counts from the compute DAG). */
struct OpCost {
  /** Multiply-adds of a contraction that runs at a GEMM's rate (MatMul, Gemm, Conv); 0 for memory-bound ops. */
  double macs = 0;
  /** Arithmetic operations: 2 per multiply-add, plus epilogues (bias) and per-element work. */
  double flops = 0;
  /** Memory traffic in bytes; 0 in a CostFn's answer means the default: every given input read once, every output written once. */
  double bytes = 0;
  /** The contraction's output rows (a GEMM's M, a conv's N x spatial): few rows run below the GEMM rate. 0 without macs. */
  double rows = 0;
};
/**
 * The cost of a call with these input (call.input_types) and output types.
 * It is also asked with a rank's local types (a shard of a MatMul), which
 * need not satisfy the op's global checks: count from the types, do not
 * re-run inference.
 */
using CostFn = std::function<OpCost(const OpCall&, const std::vector<TensorType>& outputs)>;
class GradBuilder;
/**
 * Reverse mode of one node: `b` holds the node and makes the gradient's ops;
 * `out_grads` has one gradient per output (undefined where an output does
 * not reach the loss). Returns one Value per input, undefined for inputs
 * without a gradient (integer inputs, shapes) or not wanted (b.wants(i)).
 */
using GradientFn = std::function<std::vector<Value>(GradBuilder& b, const std::vector<Value>& out_grads)>;

struct OpDef {
  std::string name;
  std::string doc;
  int min_inputs = 1;
  int max_inputs = 1;
  std::vector<AttrSpec> attrs;
  Pattern pattern = Pattern::Opaque;
  /** A node's own pattern where its inputs make it lighter than `pattern` (a per-tensor QuantizeLinear is elementwise, the per-channel one injective); empty: `pattern`. */
  std::function<Pattern(const OpNode&)> node_pattern;
  InferFn infer;
  ComputeFn compute;
  /** Inputs read at compile time (Reshape's shape, Slice's starts): must be constants, and are not kernel arguments. */
  std::vector<int> const_inputs;
  /** Whether input i is one of const_inputs. */
  bool reads_at_compile_time(int i) const;
  EvaluateFn evaluate;
  GradientFn gradient;
  /** The sharding rule (sharding_rule.h); required by the distribution pass. */
  ShardingRule sharding;
  CostFn cost;
  /** Operators whose outputs are their first input (Identity, inference Dropout): removed by the graph passes. */
  bool is_identity = false;
};

/** The fusion pattern of a node: its op's node_pattern, else its op's pattern. */
Pattern pattern_of(const OpNode& node);

/** Registers an operator; throws kiln::InternalError if the name is taken. Returns the stored entry. */
const OpDef& register_op(OpDef def);
/** The entry, or nullptr. */
const OpDef* find_op(const std::string& name);
/** The entry; throws kiln::Error naming the op and listing the registered ones when there is none. */
const OpDef& get_op(const std::string& name);
/** Every registered op name, sorted. */
std::vector<std::string> registered_ops();

/** The dtype of an ONNX TensorProto.DataType code (1 float32, 7 int64, 9 bool, 16 bfloat16, ...); nullopt for strings, complex and float8. */
std::optional<DataType> dtype_of_onnx_code(int64_t code);
/** The value of a one-element array of any numeric dtype (bool: 0 or 1); nullopt for others. */
std::optional<double> scalar_of(const NDArray& a);

/** The OpCall of an operator node (its types and constant inputs). */
OpCall op_call(const OpNode& node);
OpCall op_call(const OpDef* op, const std::string& name, const Attrs& attrs, const std::vector<Value>& inputs);

/** The cost of a call (OpDef::cost, with the default traffic filled in). */
OpCost op_cost(const OpCall& call, const std::vector<TensorType>& outputs);
/** The cost of an operator node with its own (global) types. */
OpCost op_cost(const OpNode& node);
/** Bytes of the given inputs and of the outputs: the default traffic. */
double traffic_bytes(const OpCall& call, const std::vector<TensorType>& outputs);

/** Checks attrs against op's schema and fills defaults; throws kiln::Error naming the node, the attribute and the problem. */
Attrs normalize_attrs(const OpDef& op, const std::string& node_name, Attrs attrs);

}  // namespace kiln::graph

#endif  // KILN_GRAPH_OP_REGISTRY_H
