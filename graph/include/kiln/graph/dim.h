/** \file
 * A dimension of the graph IR: a known extent (224) or an expression over
 * named shape variables (`batch`, `seq`, `seq + past`), for models compiled
 * once for every batch size and sequence length.
 *
 *   Dim d = 224;                       static: value() is 224
 *   Dim s = Dim::var("seq");           symbolic: expr() is the shape variable
 *   Dim t = dim_add(s, 1);             "seq + 1"
 *
 * Shape variables are interned by name (shape_var): every value whose
 * dimension is "batch" refers to one Var, so two inputs declared with the
 * same name must agree, and a kernel built from either binds it once. The
 * expressions are the loop IR's integer expressions (int32, as te extents
 * are), simplified when built; one that folds to a constant is static.
 *
 * A Dim converts to int64_t implicitly, and that conversion throws (naming
 * the expression) when the dimension is symbolic: code written for static
 * shapes keeps working on static shapes, and refuses a symbolic one with a
 * clear error instead of computing with a wrong number. Code that supports
 * symbols asks is_static() and builds new dims with dim_add, dim_mul, ...
 */
#ifndef KILN_GRAPH_DIM_H
#define KILN_GRAPH_DIM_H

#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/ir/expr.h"

namespace kiln::graph {

/** The process-wide shape variable named `name` (int32, like te extents); the same Var for the same name. */
Var shape_var(const std::string& name);

class Dim {
 public:
  Dim() = default;
  template <typename T, std::enable_if_t<std::is_integral_v<T>, int> = 0>
  Dim(T v) : value_(static_cast<int64_t>(v)) {}
  /** A dimension computed by `e` (simplified; a constant makes a static dim). */
  explicit Dim(const Expr& e);
  /** The shape variable `name` as a dimension. */
  static Dim var(const std::string& name) { return Dim(Expr(shape_var(name))); }

  bool is_static() const { return !expr_.defined(); }
  bool is_symbolic() const { return expr_.defined(); }
  /** The extent of a static dim; throws kiln::Error naming the expression when symbolic. */
  int64_t value() const;
  operator int64_t() const { return value(); }
  /** The extent as an IR expression (an int32 immediate when static). */
  Expr expr() const;
  /** The shape variable this dimension is exactly (an undefined Var when it is a constant or a compound expression). */
  Var as_var() const;
  /** "224", "seq", "seq + 1". */
  std::string str() const;

  /** In place dim_add / dim_sub / dim_mul (a Concat's axis, a Pad's extent). */
  Dim& operator+=(const Dim& o);
  Dim& operator-=(const Dim& o);
  Dim& operator*=(const Dim& o);

  friend bool operator==(const Dim& a, const Dim& b);
  template <typename T, std::enable_if_t<std::is_integral_v<T>, int> = 0>
  friend bool operator==(const Dim& a, T b) {
    return a.is_static() && a.value_ == static_cast<int64_t>(b);
  }

 private:
  int64_t value_ = 0;
  Expr expr_;  ///< undefined when static
};

std::ostream& operator<<(std::ostream& os, const Dim& d);

/** Dimension arithmetic: in int64 when both are static, else simplified expressions. */
Dim dim_add(const Dim& a, const Dim& b);
Dim dim_sub(const Dim& a, const Dim& b);
Dim dim_mul(const Dim& a, const Dim& b);
/** Rounds toward negative infinity (a conv's output size). */
Dim dim_floordiv(const Dim& a, const Dim& b);
Dim dim_max(const Dim& a, const Dim& b);
Dim dim_min(const Dim& a, const Dim& b);

/**
 * A shape: one Dim per axis. It converts from and to std::vector<int64_t>
 * (the conversion to it throws naming the first symbolic dimension), so
 * static code reads and builds shapes as before.
 */
class Shape : public std::vector<Dim> {
 public:
  Shape() = default;
  Shape(std::initializer_list<Dim> dims) : std::vector<Dim>(dims) {}
  Shape(const std::vector<int64_t>& dims) : std::vector<Dim>(dims.begin(), dims.end()) {}
  Shape(std::vector<Dim> dims) : std::vector<Dim>(std::move(dims)) {}
  template <typename It>
  Shape(It first, It last) : std::vector<Dim>(first, last) {}
  explicit Shape(size_t n, const Dim& d = Dim()) : std::vector<Dim>(n, d) {}

  bool is_static() const;
  /** The extents; throws kiln::Error naming the first symbolic dimension. */
  std::vector<int64_t> values() const;
  operator std::vector<int64_t>() const { return values(); }
  /** The product of the dims. */
  Dim numel() const;
  /** Every shape variable the dims read, in first-use order. */
  std::vector<Var> vars() const;
};

/** "[1, seq, 768]". */
std::string shape_to_string(const Shape& shape);

/** Dim by Dim (symbolic dims compare as simplified expressions); exact overloads keep overload resolution unambiguous. */
inline bool operator==(const Shape& a, const Shape& b) {
  return static_cast<const std::vector<Dim>&>(a) == static_cast<const std::vector<Dim>&>(b);
}
inline bool operator==(const Shape& a, const std::vector<int64_t>& b) { return a == Shape(b); }

}  // namespace kiln::graph

#endif  // KILN_GRAPH_DIM_H
