#include "iter_relations.h"

#include <functional>
#include <unordered_set>

#include "kiln/ir/op.h"

namespace kiln::te::detail {

void pass_down(const std::vector<IterVarRelation>& rels, IterRanges* ranges) {
  for (const IterVarRelation& r : rels) {
    if (r.kind == IterVarRelation::Kind::Split) {
      Expr extent = ranges->at(r.parent.get()).extent;
      Expr inner_ext, outer_ext;
      if (r.factor.defined()) {
        inner_ext = r.factor;
        const int64_t* e = as_const_int(extent);
        if (e && *e < *as_const_int(r.factor)) inner_ext = extent;  // a factor larger than the axis
        outer_ext = arith::simplify(floordiv(extent + r.factor - 1, r.factor));
      } else {
        outer_ext = r.nparts;
        inner_ext = arith::simplify(floordiv(extent + r.nparts - 1, r.nparts));
      }
      (*ranges)[r.outer.get()] = Range(0, outer_ext);
      (*ranges)[r.inner.get()] = Range(0, inner_ext);
    } else {
      const Range& o = ranges->at(r.outer.get());
      const Range& i = ranges->at(r.inner.get());
      // A loop past a split's tail may have a negative extent (it runs nothing); the product of two
      // negative ones would run, so each factor counts as at least 0.
      // A shape variable (or a product of them: rows fused over [seq, batch]) is a dimension, never negative:
      // unclamped, the tile loops over it stay comparable with the stage's extent (loop partitioning proves
      // the full tiles' bounds against it).
      std::function<bool(const Expr&)> dims = [&](const Expr& e) {
        const Mul* m = e.as<Mul>();
        return as_const_int(e) || e.as<Variable>() || (m && dims(m->a) && dims(m->b));
      };
      auto runs = [&](const Expr& e) { return dims(e) ? e : max(e, make_zero(e.dtype())); };
      (*ranges)[r.parent.get()] = Range(0, arith::simplify(runs(o.extent) * runs(i.extent)));
    }
  }
}

void pass_up(const std::vector<IterVarRelation>& rels, const std::vector<IterVar>& leaves, const IterRanges& ranges, IterValues* values) {
  for (const IterVar& leaf : leaves) {
    const Range& r = ranges.at(leaf.get());
    (*values)[leaf.get()] = is_zero(r.min) ? Expr(leaf.var()) : arith::simplify(leaf.var() + r.min);
  }
  for (auto it = rels.rbegin(); it != rels.rend(); ++it) {
    const IterVarRelation& r = *it;
    if (r.kind == IterVarRelation::Kind::Split) {
      Expr factor = r.factor.defined() ? r.factor : ranges.at(r.inner.get()).extent;
      const Range& pr = ranges.at(r.parent.get());
      (*values)[r.parent.get()] = arith::simplify(values->at(r.outer.get()) * factor + values->at(r.inner.get()) + pr.min);
    } else {
      Expr fused = values->at(r.parent.get());
      const Range& o = ranges.at(r.outer.get());
      const Range& i = ranges.at(r.inner.get());
      (*values)[r.outer.get()] = arith::simplify(floordiv(fused, i.extent) + o.min);
      (*values)[r.inner.get()] = arith::simplify(floormod(fused, i.extent) + i.min);
    }
  }
}

std::vector<Expr> split_guards(const std::vector<IterVarRelation>& rels, const std::vector<IterVar>& leaves, const IterRanges& ranges, const IterValues& values,
                               const std::function<bool(const IterVarRelation&)>& keep) {
  std::vector<Expr> guards;
  arith::Analyzer ana;
  for (const IterVar& leaf : leaves) ana.bind(leaf.var(), Range(0, ranges.at(leaf.get()).extent));
  for (const IterVarRelation& r : rels) {
    if (r.kind != IterVarRelation::Kind::Split || (keep && !keep(r))) continue;
    const Range& pr = ranges.at(r.parent.get());
    Expr cond = ana.simplify(values.at(r.parent.get()) < pr.min + pr.extent);
    if (!ana.can_prove(cond)) guards.push_back(cond);
  }
  return guards;
}

IterVar derived_leaf(const std::vector<IterVarRelation>& rels, const std::vector<IterVar>& leaves, const IterVar& axis) {
  std::unordered_set<const IterVarNode*> derived = {axis.get()};
  for (const IterVarRelation& r : rels) {
    if (r.kind == IterVarRelation::Kind::Split && derived.count(r.parent.get())) derived.insert({r.outer.get(), r.inner.get()});
    if (r.kind == IterVarRelation::Kind::Fuse && (derived.count(r.outer.get()) || derived.count(r.inner.get()))) derived.insert(r.parent.get());
  }
  for (auto it = leaves.rbegin(); it != leaves.rend(); ++it)
    if (derived.count(it->get())) return *it;
  return IterVar();
}

}  // namespace kiln::te::detail
