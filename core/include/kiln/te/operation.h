/** \file
 * Tensor expressions: the compute declarations users write.
 *
 *   Tensor A = placeholder({M, K}, DataType::Float(32), "A");
 *   IterVar k = reduce_axis({0, K}, "k");
 *   Tensor C = compute({M, N}, [&](const std::vector<Var>& i) {
 *     return sum(A(i[0], k.var()) * B(k.var(), i[1]), {k});
 *   }, "C");
 *
 * An Operation produces one Tensor. A ComputeOp's body is an expression of
 * its axis variables; when the body is a Reduce it is a reduction op (its
 * reduce axes are those of the Reduce). Tensors are read with TensorLoad
 * nodes whose producer is the TensorNode, which points to its op.
 */
#ifndef KILN_TE_OPERATION_H
#define KILN_TE_OPERATION_H

#include <functional>
#include <string>
#include <vector>

#include "kiln/ir/expr.h"

namespace kiln::te {

class Tensor;
struct OperationNode;

class Operation : public Ref<OperationNode> {
 public:
  Operation() = default;
  Operation(const OperationNode* n) : Ref<OperationNode>(n) {}
  /** The tensor this op produces. */
  Tensor output() const;
  const std::string& name() const;
};

enum class OpKind : uint8_t { Placeholder, Compute };

struct OperationNode : public Object {
  OperationNode(OpKind k, std::string n, DataType t, std::vector<Expr> s) : kind(k), name(std::move(n)), dtype(t), shape(std::move(s)) {}
  const OpKind kind;
  const std::string name;
  const DataType dtype;
  const std::vector<Expr> shape;
  /** The tensors this op reads (unique, in order of first read). */
  virtual std::vector<Tensor> input_tensors() const = 0;
};

struct PlaceholderOpNode : public OperationNode {
  PlaceholderOpNode(std::string n, DataType t, std::vector<Expr> s) : OperationNode(OpKind::Placeholder, std::move(n), t, std::move(s)) {}
  std::vector<Tensor> input_tensors() const override { return {}; }
};

struct ComputeOpNode : public OperationNode {
  ComputeOpNode(std::string n, DataType t, std::vector<Expr> s, std::vector<IterVar> a, std::vector<IterVar> r, Expr b)
      : OperationNode(OpKind::Compute, std::move(n), t, std::move(s)), axis(std::move(a)), reduce_axis(std::move(r)), body(std::move(b)) {}
  /** One data-parallel axis per output dimension, domain [0, shape[i]). */
  const std::vector<IterVar> axis;
  /** The reduce axes of the body's Reduce (empty when not a reduction). */
  const std::vector<IterVar> reduce_axis;
  const Expr body;
  std::vector<Tensor> input_tensors() const override;
  bool is_reduction() const { return body.as<Reduce>() != nullptr; }
};

struct TensorNode : public ProducerNode {
  TensorNode(Operation o) : op(std::move(o)) {}
  const Operation op;
  const std::string& producer_name() const override { return op->name; }
  DataType producer_dtype() const override { return op->dtype; }
  const std::vector<Expr>& producer_shape() const override { return op->shape; }
};

class Tensor : public Ref<TensorNode> {
 public:
  Tensor() = default;
  Tensor(const TensorNode* n) : Ref<TensorNode>(n) {}
  const Operation& op() const { return get()->op; }
  const std::string& name() const { return get()->op->name; }
  DataType dtype() const { return get()->op->dtype; }
  const std::vector<Expr>& shape() const { return get()->op->shape; }
  int ndim() const { return static_cast<int>(shape().size()); }
  /** Reads the tensor: A(i, j). */
  Expr operator()(std::vector<Expr> indices) const;
  template <typename... Args>
  Expr operator()(Expr first, Args... rest) const {
    return (*this)(std::vector<Expr>{first, Expr(rest)...});
  }
  /** Same op: two Tensor handles of one op are the same tensor. */
  bool same_tensor(const Tensor& o) const { return op().same_as(o.op()); }
};

/** An input tensor. */
Tensor placeholder(std::vector<Expr> shape, DataType dtype = DataType::Float(32), std::string name = "placeholder");

using FCompute = std::function<Expr(const std::vector<Var>&)>;
/** A tensor whose element at (i...) is fcompute(i...); axis_names name the axis variables (default i, j or i0, i1, ...). */
Tensor compute(std::vector<Expr> shape, const FCompute& fcompute, std::string name = "compute", std::vector<std::string> axis_names = {});
/** A reduction axis over dom. */
IterVar reduce_axis(Range dom, std::string name = "k");

/** Reductions; the axes must be reduce axes; condition restricts the domain. */
Expr sum(Expr source, std::vector<IterVar> axis, Expr condition = Expr());
Expr max(Expr source, std::vector<IterVar> axis, Expr condition = Expr());
Expr min(Expr source, std::vector<IterVar> axis, Expr condition = Expr());
Expr prod(Expr source, std::vector<IterVar> axis, Expr condition = Expr());

/** The ops reachable from outputs, producers before consumers, deterministic. */
std::vector<Operation> topo_sort(const std::vector<Tensor>& outputs);

/** Replaces reads of tensors by other expressions: f(tensor, indices) returns the replacement or undefined. */
Expr replace_tensor_reads(const Expr& e, const std::function<Expr(const TensorNode*, const std::vector<Expr>&)>& f);

}  // namespace kiln::te

#endif  // KILN_TE_OPERATION_H
