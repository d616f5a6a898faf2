#include "kiln/ops/broadcast.h"

#include <algorithm>
#include <cstdint>

#include "kiln/arith/analyzer.h"
#include "kiln/ir/op.h"
#include "kiln/ir/printer.h"
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

bool same_extent(const Expr& a, const Expr& b) {
  const int64_t *x = as_const_int(a), *y = as_const_int(b);
  if (x && y) return *x == *y;
  if (x || y) return false;  // a constant and a symbol: not provably equal (their difference does not fold)
  return is_const_int(arith::simplify(a - b), 0);
}

std::string extents_to_string(const std::vector<Expr>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + to_string(shape[i]);
  return s + "]";
}

Expr extent_product(const std::vector<Expr>& shape) {
  Expr n = Expr(1);
  for (const Expr& d : shape) n = is_one(n) ? d : n * d;
  return arith::simplify(n);
}

bool all_const(const std::vector<Expr>& shape, std::vector<int64_t>* out) {
  std::vector<int64_t> v;
  for (const Expr& d : shape) {
    const int64_t* c = as_const_int(d);
    if (!c) return false;
    v.push_back(*c);
  }
  if (out) *out = std::move(v);
  return true;
}

namespace {

// A product of extents: its constant part and its symbolic factors.
struct Factors {
  int64_t constant = 1;
  std::vector<Expr> symbols;
};

void add_factors(const Expr& e, Factors* f) {
  if (const int64_t* c = as_const_int(e)) {
    f->constant *= *c;
  } else if (const Mul* m = e.as<Mul>()) {
    add_factors(m->a, f);
    add_factors(m->b, f);
  } else {
    f->symbols.push_back(e);
  }
}

Factors factors_of(const std::vector<Expr>& extents) {
  Factors f;
  for (const Expr& e : extents) add_factors(arith::simplify(e), &f);
  return f;
}

// Removes from `from` one factor equal to each of `take`'s; false when one has no partner.
bool cancel(std::vector<Expr>* from, const std::vector<Expr>& take) {
  for (const Expr& t : take) {
    auto it = std::find_if(from->begin(), from->end(), [&](const Expr& e) { return same_extent(e, t); });
    if (it == from->end()) return false;
    from->erase(it);
  }
  return true;
}

}  // namespace

bool same_product(const std::vector<Expr>& a, const std::vector<Expr>& b) {
  Factors fa = factors_of(a), fb = factors_of(b);
  if (fa.constant != fb.constant) return false;
  if (fa.symbols.size() == fb.symbols.size() && cancel(&fa.symbols, fb.symbols)) return true;
  return same_extent(extent_product(a), extent_product(b));  // a sum or other form the factors do not see
}

Expr exact_quotient(const std::vector<Expr>& whole, const std::vector<Expr>& part) {
  Factors fw = factors_of(whole), fp = factors_of(part);
  if (fp.constant == 0 || fw.constant % fp.constant != 0 || !cancel(&fw.symbols, fp.symbols)) return Expr();
  std::vector<Expr> q = fw.symbols;
  q.insert(q.begin(), index_imm(fw.constant / fp.constant));
  return extent_product(q);
}

std::vector<Expr> broadcast_shape(const std::vector<Expr>& a, const std::vector<Expr>& b) {
  size_t n = std::max(a.size(), b.size());
  std::vector<Expr> out(n);
  for (size_t k = 0; k < n; ++k) {
    Expr x = k < n - a.size() ? Expr(1) : a[k - (n - a.size())];
    Expr y = k < n - b.size() ? Expr(1) : b[k - (n - b.size())];
    KILN_USER_CHECK(same_extent(x, y) || is_one(x) || is_one(y))
        << "shapes " << extents_to_string(a) << " and " << extents_to_string(b) << " do not broadcast (dimension " << k << ": " << to_string(x)
        << " vs " << to_string(y) << "; a symbolic dimension is never taken for 1, and two that must agree need the same shape variable)";
    out[k] = is_one(x) ? y : x;
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

// A symbolic extent is read at the output's index (never taken for 1; broadcast_shape).
std::vector<Expr> broadcast_index(const te::Tensor& t, const std::vector<Var>& out) {
  const std::vector<Expr>& shape = t.shape();
  size_t lead = out.size() - shape.size();
  std::vector<Expr> idx;
  for (size_t k = 0; k < shape.size(); ++k) idx.push_back(is_one(shape[k]) ? Expr(0) : Expr(out[lead + k]));
  return idx;
}

std::vector<Expr> broadcast_index(const te::Tensor& t, const std::vector<Var>& out, const std::vector<int64_t>& out_shape) {
  return broadcast_index(t, out, shape_exprs(out_shape));
}

std::vector<Expr> broadcast_index(const te::Tensor& t, const std::vector<Var>& out, const std::vector<Expr>& out_shape) {
  const std::vector<Expr>& shape = t.shape();
  size_t lead = out.size() - shape.size();
  std::vector<Expr> idx;
  for (size_t k = 0; k < shape.size(); ++k) idx.push_back(is_one(shape[k]) && !is_one(out_shape[lead + k]) ? Expr(0) : Expr(out[lead + k]));
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
  std::vector<Expr> shape = Xs[0].shape();
  for (size_t k = 1; k < Xs.size(); ++k) shape = broadcast_shape(shape, Xs[k].shape());
  return te::compute(shape, [&](const std::vector<Var>& i) {
    std::vector<Expr> xs;
    for (const te::Tensor& X : Xs) xs.push_back(X(broadcast_index(X, i, shape)));
    return f(xs);
  }, name);
}

}  // namespace kiln::ops
