// The arithmetic of loop relations (split, fuse), in one place: the ranges
// of the loops a stage's relations derive from its root ranges, the values
// of its root variables from its leaf loop variables, the guards of splits
// that do not divide, and where an axis went after later splits and fuses.
// Bound inference, lowering (through bound inference) and rfactor call it.
#ifndef KILN_TE_ITER_RELATIONS_H
#define KILN_TE_ITER_RELATIONS_H

#include <functional>
#include <unordered_map>
#include <vector>

#include "kiln/arith/analyzer.h"
#include "kiln/te/schedule.h"

namespace kiln::te::detail {

using IterRanges = std::unordered_map<const IterVarNode*, Range>;
using IterValues = std::unordered_map<const IterVarNode*, Expr>;

/**
 * Fills the ranges of the variables that `rels` derive, from their parents'
 * (the roots' ranges must be in `ranges`). Derived loops run over
 * [0, extent): a split gives ceil(extent / factor) x factor (the inner loop
 * shrinks to the extent when the factor is larger), nparts x
 * ceil(extent / nparts) for split_nparts; a fuse gives outer x inner.
 */
void pass_down(const std::vector<IterVarRelation>& rels, IterRanges* ranges);

/**
 * Fills the values of the root and intermediate variables in terms of the
 * leaf loop variables. Every loop runs from 0, so a variable whose range
 * starts at min gets min added back (the rebase): leaf = var + min, split
 * parent = outer * factor + inner + min, fused parts = fused / inner_extent
 * (+ min) and fused % inner_extent (+ min).
 */
void pass_up(const std::vector<IterVarRelation>& rels, const std::vector<IterVar>& leaves, const IterRanges& ranges, IterValues* values);

/**
 * The conditions that keep each split's parent inside its range when the
 * split does not divide it (outer * inner may overshoot), for the relations
 * `keep` accepts (all when null); those the analyzer proves are left out.
 */
std::vector<Expr> split_guards(const std::vector<IterVarRelation>& rels, const std::vector<IterVar>& leaves, const IterRanges& ranges, const IterValues& values,
                               const std::function<bool(const IterVarRelation&)>& keep = nullptr);

/**
 * The leaf loop that `axis` became through the splits and fuses of `rels`:
 * among the leaves derived from it, the innermost in `leaves` order (inside
 * it, the value of `axis` is fixed, as it was inside `axis` itself).
 * `axis` itself when it is a leaf; undefined when no leaf derives from it.
 */
IterVar derived_leaf(const std::vector<IterVarRelation>& rels, const std::vector<IterVar>& leaves, const IterVar& axis);

}  // namespace kiln::te::detail

#endif  // KILN_TE_ITER_RELATIONS_H
