// Buffer-access features of one store: how many bytes it touches, how many
// distinct ones (the footprint), the stride of the innermost iteration and
// the reuse distance. Indices are flat (after storage_flatten); a vector
// access's lanes act as one more, innermost, loop.
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

#include "features_internal.h"
#include "kiln/ir/functor.h"
#include "kiln/ir/op.h"
#include "kiln/ir/structural.h"

namespace kiln::tuner::detail {

float slog(double x) { return static_cast<float>(std::log2(1.0 + std::max(0.0, x))); }

namespace {

// Past this many elements a stride or span is "far" whatever its exact value.
constexpr double kFar = 1 << 24;

/**
 * An index as constant + sum of coefficient * term, where a term is a
 * variable or an opaque "atom": a non-linear piece such as floordiv(f, 2) of
 * a fused loop. Most indices after simplification are such sums; their
 * footprints and strides then follow from the coefficients and the ranges
 * of the atoms, without the simplifier, which would cost far more.
 */
struct Term {
  int64_t coef = 0;
  const Variable* var = nullptr;        // a variable term, or
  Expr atom;                            // an atom, with
  std::vector<const Variable*> vars;    // the variables it reads
  mutable std::optional<int64_t> width; // max - min of the atom over the whole nest, once asked
};

struct Linear {
  std::map<uint64_t, Term> terms;  // by identity of the variable / structure and variables of the atom
  int64_t constant = 0;
  int64_t coef(const Variable* v) const {
    auto it = terms.find(reinterpret_cast<uintptr_t>(v));
    return it == terms.end() ? 0 : it->second.coef;
  }
  /** Same terms with the same coefficients (so the two differ by a constant). */
  bool same_terms(const Linear& o) const {
    return std::equal(terms.begin(), terms.end(), o.terms.begin(), o.terms.end(),
                      [](const auto& a, const auto& b) { return a.first == b.first && a.second.coef == b.second.coef; });
  }
};

void add_term(Linear* out, uint64_t key, int64_t scale, const Variable* var, const Expr& atom) {
  auto [it, fresh] = out->terms.try_emplace(key);
  Term& t = it->second;
  if (fresh) {
    t.var = var;
    t.atom = atom;
    if (atom.defined())
      post_order_visit(atom, [&](const Expr& x) {
        if (const Variable* v = x.as<Variable>()) t.vars.push_back(v);
      });
  }
  if ((t.coef += scale) == 0) out->terms.erase(it);
}

uint64_t atom_key(const Expr& atom) {
  // Structural hashing ignores which variables an atom reads: mix them in.
  uint64_t h = structural_hash(atom);
  post_order_visit(atom, [&](const Expr& x) {
    if (const Variable* v = x.as<Variable>()) h = h * 1000003u ^ reinterpret_cast<uintptr_t>(v);
  });
  return h | 1;  // odd: never a (pointer-aligned) variable key
}

void accumulate(const Expr& e, int64_t scale, Linear* out) {
  if (const int64_t* c = as_const_int(e)) {
    out->constant += scale * *c;
  } else if (const Variable* v = e.as<Variable>()) {
    add_term(out, reinterpret_cast<uintptr_t>(v), scale, v, Expr());
  } else if (const Add* a = e.as<Add>()) {
    accumulate(a->a, scale, out), accumulate(a->b, scale, out);
  } else if (const Sub* d = e.as<Sub>()) {
    accumulate(d->a, scale, out), accumulate(d->b, -scale, out);
  } else if (const Mul* m = e.as<Mul>(); m && as_const_int(m->b)) {
    accumulate(m->a, scale * *as_const_int(m->b), out);
  } else if (m && as_const_int(m->a)) {
    accumulate(m->b, scale * *as_const_int(m->a), out);
  } else if (const Cast* c = e.as<Cast>(); c && c->value.dtype().is_integer()) {
    accumulate(c->value, scale, out);
  } else {
    add_term(out, atom_key(e), scale, nullptr, e);
  }
}

/** One access made scalar: the index as a function of the loop and lane variables. */
struct ScalarAccess {
  Expr index;
  int lanes = 1;  ///< elements moved per execution of the statement
  bool is_write = false;
  bool linear = false;  // lin is valid (integer index)
  Linear lin;
};

ScalarAccess scalarize(const Access& a, const Var& lane) {
  ScalarAccess s;
  s.is_write = a.is_write;
  if (const Ramp* r = a.index.as<Ramp>()) {
    s.index = r->base + r->stride * lane;
    s.lanes = r->lanes;
  } else if (const Broadcast* b = a.index.as<Broadcast>()) {
    s.index = b->value;  // every lane reads one element: no lane dependence
    s.lanes = 1;
  } else {
    s.index = a.index;
    s.lanes = std::max(1, a.index.dtype().lanes());
  }
  // A vector index of another form (a vector Let) takes the analyzer's path.
  s.linear = s.index.dtype().is_integer() && s.index.dtype().is_scalar();
  if (s.linear) accumulate(s.index, 1, &s.lin);
  return s;
}

bool uses(const Expr& e, const Var& v) {
  const Variable* p = v.get();
  return uses_var(e, [p](const Variable* x) { return x == p; });
}

double bound_magnitude(const arith::ConstIntBound& b) {
  if (!b.bounded()) return kFar;
  return std::min(kFar, static_cast<double>(std::max(std::llabs(b.min), std::llabs(b.max))));
}

bool in_atom(const Linear& lin, const Variable* v) {
  for (const auto& [key, t] : lin.terms)
    if (t.atom.defined() && std::find(t.vars.begin(), t.vars.end(), v) != t.vars.end()) return true;
  return false;
}

/** Elements between the accesses of two consecutive iterations of `v` (0 = the same element). */
double stride_of(const ScalarAccess& a, const Var& v, arith::Analyzer* ana) {
  if (a.linear && !in_atom(a.lin, v.get())) return std::min(kFar, static_cast<double>(std::llabs(a.lin.coef(v.get()))));
  const Expr& index = a.index;
  if (!uses(index, v)) return 0;
  Expr next = substitute(index, [&](const Variable* x) -> Expr { return x == v.get() ? Expr(v + 1) : Expr(); });
  Expr diff = ana->simplify(next - index);
  if (const int64_t* c = as_const_int(diff)) return std::min(kFar, static_cast<double>(std::llabs(*c)));
  // Not affine (floordiv/floormod of a fused loop): take the step at the
  // start of every loop, the common case (floormod(f, 128) steps by 1 but
  // once per 128), and only if that fails the worst case.
  Expr at_start = substitute(diff, [&](const Variable* x) -> Expr {
    arith::ConstIntBound b = ana->const_int_bound(Var(x));
    return b.min != arith::ConstIntBound::kNegInf ? IntImm::make(x->dtype, b.min) : Expr();
  });
  if (const int64_t* c = as_const_int(ana->simplify(at_start))) return std::min(kFar, static_cast<double>(std::llabs(*c)));
  return bound_magnitude(ana->const_int_bound(diff));
}

/** The accesses of one buffer, deduplicated by index. */
struct Group {
  const BufferNode* buffer = nullptr;
  std::vector<ScalarAccess> accesses;
  double element_accesses = 0;  // per execution of the statement
  bool read = false, written = false;
};

std::vector<Group> group_by_buffer(const std::vector<Access>& accesses, const Var& lane) {
  std::map<const Variable*, size_t> slot;
  std::vector<Group> groups;
  for (const Access& a : accesses) {
    auto [it, fresh] = slot.emplace(a.buffer->data.get(), groups.size());
    if (fresh) groups.push_back(Group{a.buffer, {}, 0, false, false});
    Group& g = groups[it->second];
    ScalarAccess s = scalarize(a, lane);
    g.element_accesses += s.lanes;
    (a.is_write ? g.written : g.read) = true;
    bool dup = std::any_of(g.accesses.begin(), g.accesses.end(), [&](const ScalarAccess& o) { return structural_equal(o.index, s.index); });
    if (!dup) g.accesses.push_back(s);
  }
  return groups;
}

/**
 * footprint() when the accesses of the group differ only by constants (as
 * the rows of an unrolled tile do): the span adds up from the coefficients
 * and the loop extents, an atom that varies adding its whole range.
 */
std::optional<double> linear_footprint(const Group& g, const std::vector<LoopDesc>& levels, size_t level, arith::Analyzer* ana) {
  const Linear& first = g.accesses.front().lin;
  int64_t lo = first.constant, hi = first.constant;
  for (const ScalarAccess& a : g.accesses) {
    if (!a.linear || !a.lin.same_terms(first)) return std::nullopt;
    lo = std::min(lo, a.lin.constant);
    hi = std::max(hi, a.lin.constant);
  }
  auto varying = [&](const Variable* v) {
    for (size_t k = level; k < levels.size(); ++k)
      if (levels[k].var.get() == v) return levels[k].ext > 1;
    return false;
  };
  double span = static_cast<double>(hi - lo) + 1, iters = 1;
  for (const auto& [key, t] : first.terms) {
    double width = 0;
    if (t.var) {
      if (!varying(t.var)) continue;
      for (size_t k = level; k < levels.size(); ++k)
        if (levels[k].var.get() == t.var) width = static_cast<double>(levels[k].ext - 1);
    } else {
      if (std::none_of(t.vars.begin(), t.vars.end(), varying)) continue;
      if (!t.width) {
        arith::ConstIntBound b = ana->const_int_bound(t.atom);
        t.width = b.bounded() ? b.max - b.min : static_cast<int64_t>(kFar);
      }
      width = static_cast<double>(*t.width);
    }
    span += static_cast<double>(std::llabs(t.coef)) * width;
    iters *= width + 1;
  }
  return std::max(1.0, std::min({span, iters * static_cast<double>(g.accesses.size()), kFar}));
}

/**
 * Distinct elements a group touches while loops level..end vary and the
 * outer ones stay fixed: the span of the union of the index intervals
 * (arith::Analyzer::eval_interval), capped by the iterations that can
 * change the index at all (a strided access spans far more than it touches).
 */
double footprint(const Group& g, const std::vector<LoopDesc>& levels, size_t level, arith::Analyzer* ana) {
  if (std::optional<double> fast = linear_footprint(g, levels, level, ana)) return *fast;
  std::unordered_map<const Variable*, arith::IntervalSet> dom;
  for (size_t k = level; k < levels.size(); ++k)
    dom[levels[k].var.get()] = arith::IntervalSet::from_range(Range(levels[k].min, IntImm::make(levels[k].var.dtype(), levels[k].ext)));
  arith::IntervalSet hull;
  double iterations = 0;
  for (size_t i = 0; i < g.accesses.size(); ++i) {
    const Expr& idx = g.accesses[i].index;
    arith::IntervalSet s = ana->eval_interval(idx, dom);
    hull = i == 0 ? s : arith::interval_union(hull, s);
    double iters = 1;
    for (size_t k = level; k < levels.size(); ++k)
      if (levels[k].ext > 1 && uses(idx, levels[k].var)) iters *= static_cast<double>(levels[k].ext);
    iterations += iters;
  }
  double span = kFar;
  if (hull.bounded()) {
    arith::ConstIntBound b = ana->const_int_bound(ana->simplify(hull.max - hull.min));
    if (b.max != arith::ConstIntBound::kPosInf) span = std::min(kFar, static_cast<double>(b.max) + 1);
  }
  return std::max(1.0, std::min(span, iterations));
}

BufferStats stats_of(const Group& g, const std::vector<LoopDesc>& levels, double iterations, arith::Analyzer* ana) {
  BufferStats st;
  st.name = g.buffer->name;
  st.read = g.read;
  st.written = g.written;
  const double elem = static_cast<double>(g.buffer->dtype.bytes());
  st.accesses = g.element_accesses;
  st.bytes = g.element_accesses * iterations * elem;
  const size_t n = levels.size();
  // fp[k]: footprint while levels k..n-1 vary; fp[n] is one iteration.
  std::vector<double> fp(n + 1, 0);
  fp[n] = static_cast<double>(g.accesses.size());
  for (size_t k = 0; k < n; ++k) fp[k] = footprint(g, levels, k, ana);
  st.level_bytes.resize(n + 1);
  for (size_t k = 0; k <= n; ++k) st.level_bytes[k] = fp[k] * elem;
  st.unique_bytes = st.level_bytes[0];
  st.inner_bytes = st.level_bytes[n ? n - 1 : n];
  if (n) {
    for (const ScalarAccess& a : g.accesses) st.stride = std::max(st.stride, stride_of(a, levels[n - 1].var, ana));
  }
  // The reuse loop is the innermost one whose iterations add nothing to the
  // footprint: the data it touches was touched `reuse_iters` iterations ago.
  double inside = 1;
  for (size_t k = n; k-- > 0;) {
    if (levels[k].ext > 1 && fp[k] <= fp[k + 1]) {
      st.reuse_iters = inside;
      st.reuse_bytes = fp[k + 1] * elem;
      st.reuse_count = static_cast<double>(levels[k].ext);
      break;
    }
    inside *= static_cast<double>(levels[k].ext);
  }
  return st;
}

}  // namespace

std::vector<BufferStats> analyze_accesses(const std::vector<Access>& accesses, const std::vector<LoopDesc>& loops, int lanes,
                                          arith::Analyzer* ana) {
  std::vector<LoopDesc> levels = loops;
  Var lane("lane");
  if (lanes > 1) {
    ana->bind(lane, Range(0, lanes));
    levels.push_back(LoopDesc{lane, 0, lanes, lanes, ForKind::Vectorized});
  }
  double iterations = 1;
  for (const LoopDesc& l : loops) iterations *= static_cast<double>(l.ext);
  std::vector<BufferStats> out;
  for (const Group& g : group_by_buffer(accesses, lane)) out.push_back(stats_of(g, levels, iterations, ana));
  std::stable_sort(out.begin(), out.end(), [](const BufferStats& a, const BufferStats& b) {
    return a.bytes != b.bytes ? a.bytes > b.bytes : a.name < b.name;
  });
  return out;
}

}  // namespace kiln::tuner::detail
