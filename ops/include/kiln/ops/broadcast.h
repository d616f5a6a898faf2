/** \file
 * Elementwise computes with numpy broadcasting (the operator library's
 * building blocks for the graph's elementwise and broadcast operators).
 * Shapes are aligned at their last dimension; a dimension of 1 (or a missing
 * leading one) is read at index 0.
 */
#ifndef KILN_OPS_BROADCAST_H
#define KILN_OPS_BROADCAST_H

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kiln/te/operation.h"

namespace kiln::ops {

/** An index constant (kernels index with int32; a value that does not fit throws kiln::Error). */
Expr index_imm(int64_t v);
/** Static int32 dimension expressions of a shape. */
std::vector<Expr> shape_exprs(const std::vector<int64_t>& shape);

/** The broadcast shape of a and b; throws kiln::Error naming both shapes when they do not broadcast. */
std::vector<int64_t> broadcast_shape(const std::vector<int64_t>& a, const std::vector<int64_t>& b);

// ---- extents that may be symbolic (te.var shape variables: dynamic shapes).
// A symbolic extent is never taken for 1 (is_one(e) is false for it).

/** Whether two extents are provably equal (equal constants, or a difference that simplifies to 0). */
bool same_extent(const Expr& a, const Expr& b);
/** "[batch, seq, 768]". */
std::string extents_to_string(const std::vector<Expr>& shape);
/** The product of extents (a constant when all are; simplified otherwise). */
Expr extent_product(const std::vector<Expr>& shape);
/** The constant extents of `shape` into *out when every one is constant. */
bool all_const(const std::vector<Expr>& shape, std::vector<int64_t>* out = nullptr);
/**
 * Whether the products of two extent lists are provably equal: their
 * constant parts are equal and their symbolic factors (products split at
 * each multiplication) match one to one ([batch, seq, 768] and
 * [batch * seq, 12, 64]).
 */
bool same_product(const std::vector<Expr>& a, const std::vector<Expr>& b);
/**
 * prod(whole) / prod(part) when the division is exact by cancelling factors
 * (each symbolic factor of part is one of whole's; the constants divide): a
 * reshape's -1. An undefined Expr when it cannot be shown.
 */
Expr exact_quotient(const std::vector<Expr>& whole, const std::vector<Expr>& part);
/**
 * broadcast_shape over extents that may be symbolic. A symbolic extent is
 * treated as not 1: it must equal the other side's (provably, same_extent)
 * or meet a 1; a run that binds it to 1 then reads index 0 of a non-1 tensor
 * is refused by the argument binding, never read out of bounds.
 */
std::vector<Expr> broadcast_shape(const std::vector<Expr>& a, const std::vector<Expr>& b);
/** The constant shape of a tensor (throws when a dimension is not a constant). */
std::vector<int64_t> const_shape(const te::Tensor& t);
/** The indices that read `t` at output position `out` of a tensor of rank out.size() (broadcast rules). */
std::vector<Expr> broadcast_index(const te::Tensor& t, const std::vector<Var>& out);
/**
 * The same, knowing the output's shape: a dimension of 1 that is 1 in the
 * output too is read at the output's variable, not at 0, so an input of the
 * output's shape is read exactly at the output's axes (what the tuner's
 * fusion rule looks for: a conv's epilogue reads the conv at its own axes).
 */
std::vector<Expr> broadcast_index(const te::Tensor& t, const std::vector<Var>& out, const std::vector<int64_t>& out_shape);
std::vector<Expr> broadcast_index(const te::Tensor& t, const std::vector<Var>& out, const std::vector<Expr>& out_shape);

using UnaryFn = std::function<Expr(Expr)>;
using BinaryFn = std::function<Expr(Expr, Expr)>;
using NaryFn = std::function<Expr(const std::vector<Expr>&)>;

/** out[i] = f(X[i]); the result's dtype is f's. */
te::Tensor unary(const te::Tensor& X, const UnaryFn& f, const std::string& name);
/** out[i] = f(A[bcast i], B[bcast i]) over the broadcast shape. */
te::Tensor binary(const te::Tensor& A, const te::Tensor& B, const BinaryFn& f, const std::string& name);
/** out[i] = f(X0[bcast i], X1[bcast i], ...) over the broadcast shape of all inputs. */
te::Tensor nary(const std::vector<te::Tensor>& Xs, const NaryFn& f, const std::string& name);

}  // namespace kiln::ops

#endif  // KILN_OPS_BROADCAST_H
