#include "kiln/ops/broadcast.h"

#include <algorithm>
#include <cstdint>

#include "kiln/runtime/ndarray.h"
#include "kiln/support/error.h"

namespace kiln::ops {

Expr index_imm(int64_t v) {
  KILN_USER_CHECK(v >= INT32_MIN && v <= INT32_MAX) << "index " << v << " does not fit the 32-bit indices kernels use";
  return Expr(static_cast<int>(v));
}

std::vector<Expr> shape_exprs(const std::vector<int64_t>& shape) {
  std::vector<Expr> dims;
  for (int64_t d : shape) dims.push_back(index_imm(d));
  return dims;
}

std::vector<int64_t> broadcast_shape(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  size_t n = std::max(a.size(), b.size());
  std::vector<int64_t> out(n);
  for (size_t k = 0; k < n; ++k) {
    int64_t x = k < n - a.size() ? 1 : a[k - (n - a.size())];
    int64_t y = k < n - b.size() ? 1 : b[k - (n - b.size())];
    KILN_USER_CHECK(x == y || x == 1 || y == 1)
        << "shapes " << shape_to_string(a) << " and " << shape_to_string(b) << " do not broadcast (dimension " << k << ": " << x << " vs " << y << ")";
    out[k] = x == 1 ? y : x;
  }
  return out;
}

std::vector<int64_t> const_shape(const te::Tensor& t) {
  std::vector<int64_t> s;
  for (const Expr& d : t.shape()) {
    const int64_t* v = as_const_int(d);
    KILN_USER_CHECK(v) << "tensor '" << t.name() << "' needs constant dimensions here";
    s.push_back(*v);
  }
  return s;
}

std::vector<Expr> broadcast_index(const te::Tensor& t, const std::vector<Var>& out) {
  std::vector<int64_t> shape = const_shape(t);
  size_t lead = out.size() - shape.size();
  std::vector<Expr> idx;
  for (size_t k = 0; k < shape.size(); ++k) idx.push_back(shape[k] == 1 ? Expr(0) : Expr(out[lead + k]));
  return idx;
}

std::vector<Expr> broadcast_index(const te::Tensor& t, const std::vector<Var>& out, const std::vector<int64_t>& out_shape) {
  std::vector<int64_t> shape = const_shape(t);
  size_t lead = out.size() - shape.size();
  std::vector<Expr> idx;
  for (size_t k = 0; k < shape.size(); ++k) idx.push_back(shape[k] == 1 && out_shape[lead + k] != 1 ? Expr(0) : Expr(out[lead + k]));
  return idx;
}

te::Tensor unary(const te::Tensor& X, const UnaryFn& f, const std::string& name) {
  return te::compute(X.shape(), [&](const std::vector<Var>& i) { return f(X(std::vector<Expr>(i.begin(), i.end()))); }, name);
}

te::Tensor binary(const te::Tensor& A, const te::Tensor& B, const BinaryFn& f, const std::string& name) {
  return nary({A, B}, [&](const std::vector<Expr>& x) { return f(x[0], x[1]); }, name);
}

te::Tensor nary(const std::vector<te::Tensor>& Xs, const NaryFn& f, const std::string& name) {
  KILN_CHECK(!Xs.empty()) << "nary of no tensors";
  std::vector<int64_t> shape = const_shape(Xs[0]);
  for (size_t k = 1; k < Xs.size(); ++k) shape = broadcast_shape(shape, const_shape(Xs[k]));
  return te::compute(shape_exprs(shape), [&](const std::vector<Var>& i) {
    std::vector<Expr> xs;
    for (const te::Tensor& X : Xs) xs.push_back(X(broadcast_index(X, i, shape)));
    return f(xs);
  }, name);
}

}  // namespace kiln::ops
