/** \file
 * Buffer: a named, typed, n-dimensional region of memory. Loads and stores
 * index buffers; Allocate gives a buffer storage in a memory scope; the
 * parameters of a function are buffers. Storage flattening rewrites every
 * buffer to one dimension (its shape becomes the element count).
 */
#ifndef KILN_IR_BUFFER_H
#define KILN_IR_BUFFER_H

#include <string>
#include <vector>

#include "kiln/ir/expr.h"

namespace kiln {

struct BufferNode : public Object {
  BufferNode(std::string n, DataType t, std::vector<Expr> s, std::vector<Expr> st, Var d, std::string sc)
      : name(std::move(n)), dtype(t), shape(std::move(s)), strides(std::move(st)), data(std::move(d)), scope(std::move(sc)) {}
  const std::string name;
  /** Element type (scalar). */
  const DataType dtype;
  const std::vector<Expr> shape;
  /** Empty means compact row-major. */
  const std::vector<Expr> strides;
  /** The handle variable that holds the data pointer. */
  const Var data;
  /** "global" (function arguments, heap), "local" (stack / registers), "shared" (GPU). */
  const std::string scope;
};

class Buffer : public Ref<BufferNode> {
 public:
  Buffer() = default;
  Buffer(const BufferNode* n) : Ref<BufferNode>(n) {}
  Buffer(const Ref<BufferNode>& r) : Ref<BufferNode>(r) {}
  /** A compact row-major buffer with a fresh data variable. */
  static Buffer make(std::string name, DataType dtype, std::vector<Expr> shape, std::string scope = "global", std::vector<Expr> strides = {});
  const std::string& name() const { return get()->name; }
  DataType dtype() const { return get()->dtype; }
  const std::vector<Expr>& shape() const { return get()->shape; }
  const std::string& scope() const { return get()->scope; }
  int ndim() const { return static_cast<int>(get()->shape.size()); }
  /** Product of the shape. */
  Expr num_elements() const;
  /** Strides in elements: the explicit ones, or those of compact row-major layout. */
  std::vector<Expr> effective_strides() const;
};

}  // namespace kiln

#endif  // KILN_IR_BUFFER_H
