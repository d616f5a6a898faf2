/** \file
 * Reverse-mode differentiation of the graph IR.
 *
 *   std::vector<Value> g = gradients(loss, {w1, b1});      // dloss/dw1, dloss/db1
 *   Graph train = gradient_graph(model_with_loss, {w1, b1}); // outputs: loss, grads
 *
 * Each operator's reverse mode sits in its OpDef (OpDef::gradient, defined
 * beside the op in its family file) and builds the gradient from other
 * registered operators through a GradBuilder, so the result is an ordinary
 * graph: it is optimized, fused, compiled and memory-planned like any other.
 * Where a value has several consumers its gradients are summed (Add).
 */
#ifndef KILN_GRAPH_AUTODIFF_H
#define KILN_GRAPH_AUTODIFF_H

#include <string>
#include <vector>

#include "kiln/graph/graph.h"
#include "kiln/graph/op_registry.h"

namespace kiln::graph {

/** Makes the ops of one node's gradient; the helpers keep gradients reading like the math. */
class GradBuilder {
 public:
  GradBuilder(const OpNode& node, std::vector<bool> wants, std::string prefix = "")
      : node_(node), wants_(std::move(wants)), prefix_(prefix.empty() ? node.name + "/grad/" : std::move(prefix)) {}

  const OpNode& node() const { return node_; }
  const Attrs& attrs() const { return node_.attrs; }
  Value in(int i) const { return node_.inputs[i]; }
  Value out(int i = 0) const { return node_.output(i); }
  const TensorType& in_type(int i) const { return node_.inputs[i].type(); }
  int num_inputs() const { return static_cast<int>(node_.inputs.size()); }
  /** Whether input i is given and its gradient is needed (it depends on a value differentiated for). */
  bool wants(int i) const { return i < static_cast<int>(wants_.size()) && wants_[i]; }
  /** The node's OpCall (attributes, types, constant inputs), for ops whose gradient needs their resolved geometry. */
  OpCall call() const { return op_call(node_); }

  /** Applies a registered op; its one output (op_n: all of them). */
  Value op(const std::string& name, std::vector<Value> inputs, Attrs attrs = {});
  std::vector<Value> op_n(const std::string& name, std::vector<Value> inputs, Attrs attrs = {});
  /** A 0-d constant of dtype t. */
  Value scalar(double v, DataType t);
  /** A 1-D int64 constant (shapes, axes). */
  Value ints(const std::vector<int64_t>& v);

  Value add(Value a, Value b) { return op("Add", {a, b}); }
  Value sub(Value a, Value b) { return op("Sub", {a, b}); }
  Value mul(Value a, Value b) { return op("Mul", {a, b}); }
  Value div(Value a, Value b) { return op("Div", {a, b}); }
  Value neg(Value a) { return op("Neg", {a}); }
  /** a * v for a scalar v (a's dtype). */
  Value scale(Value a, double v) { return mul(a, scalar(v, a.type().dtype)); }
  Value reshape(Value a, const std::vector<int64_t>& shape);
  Value transpose(Value a, const std::vector<int64_t>& perm);
  Value reduce_sum(Value a, const std::vector<int64_t>& axes, bool keepdims);
  Value reduce_mean(Value a, const std::vector<int64_t>& axes, bool keepdims);
  /** a broadcast to `shape` (numpy rules). */
  Value expand(Value a, const std::vector<int64_t>& shape);
  /** The gradient of a value broadcast to g's shape, summed back to `shape` (the reverse of numpy broadcasting). */
  Value sum_to(Value g, const std::vector<int64_t>& shape);

 private:
  const OpNode& node_;
  std::vector<bool> wants_;
  std::string prefix_;  // of the names of the nodes made
  int count_ = 0;
};

/**
 * The gradients of `loss` (summed over its elements when it is not a
 * scalar) with respect to each of `wrt`: one Value per entry, undefined
 * where the loss does not depend on it. Throws kiln::Error naming the op
 * and node when an op on the way has no gradient.
 */
std::vector<Value> gradients(const Value& loss, const std::vector<Value>& wrt);
/**
 * The vector-Jacobian product: the gradients with respect to each of `wrt` of
 * sum_k <outputs[k], output_grads[k]>, each output_grads[k] taken as given (a
 * pipeline stage's backward, seeded with the gradients of what it sent). The
 * seeds reach the ops as they are, so an operand holding bfloat16 values
 * stays recognisable to use_bf16_dot. Undefined where no output depends on it.
 */
std::vector<Value> vjp(const std::vector<Value>& outputs, const std::vector<Value>& output_grads, const std::vector<Value>& wrt);
/** As above, checking that `graph` computes the loss (it is an output or an ancestor of one). */
std::vector<Value> gradients(const Graph& graph, const Value& loss, const std::vector<Value>& wrt);

/**
 * A graph whose outputs are the loss (`graph`'s output `loss_output`) and
 * the gradients of `wrt` (inputs of the graph), named "loss" and
 * "grad_<name>"; a gradient the loss does not depend on is zeros.
 */
Graph gradient_graph(const Graph& graph, const std::vector<Value>& wrt, int loss_output = 0);

/** A model whose trainable constants became inputs (and, in training mode, whose batch norms use batch statistics). */
struct LiftedParameters {
  /** Inputs: the model's, then one per parameter, then one per buffer. Outputs: the model's, then one per buffer (its updated value). */
  Graph graph;
  std::vector<std::string> names;    ///< the parameters' names (their constants' names)
  std::vector<NDArray> values;       ///< their initial values (the constants' arrays, shared)
  std::vector<std::string> buffer_names;  ///< state that is updated but not trained (batch norm running statistics)
  std::vector<NDArray> buffer_values;
  /** In training mode with a Dropout: the last input, an int64 scalar seed of the masks (a new one per step); else empty. */
  std::string seed_input;
};

/**
 * Makes every float constant of rank >= 1 that is not read at compile time
 * (the initializers of an ONNX model, the weights of a Builder graph) a
 * graph input, appended after the model's inputs in topo order.
 *
 * With `training`, each BatchNormalization normalises with its batch's
 * statistics (as torch.nn.BatchNorm in train mode), written with
 * ReduceMean and elementwise ops so that its gradient is theirs; its
 * running mean and variance become buffers, updated as ONNX and PyTorch do
 * (running = running * momentum + batch * (1 - momentum), the variance
 * unbiased). Each Dropout becomes kiln.Dropout, its masks drawn from a
 * seed input (LiftedParameters::seed_input) and the node's position.
 */
LiftedParameters lift_parameters(const Graph& graph, bool training = false);

}  // namespace kiln::graph

#endif  // KILN_GRAPH_AUTODIFF_H
