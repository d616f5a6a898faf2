// Schedule -> loop nest: each stored stage becomes its leaf loops around a
// store (or an init and an update, for reductions); stages computed at a
// loop of a consumer are placed, with their allocation, inside that loop.
#include <algorithm>

#include "kiln/arith/analyzer.h"
#include "kiln/ir/functor.h"
#include "kiln/ir/op.h"
#include "kiln/support/error.h"
#include "kiln/te/lower.h"
#include "lower_internal.h"

namespace kiln::te::detail {
namespace {

const ComputeOpNode* as_compute(const Operation& op) { return op->kind == OpKind::Compute ? static_cast<const ComputeOpNode*>(op.get()) : nullptr; }

class NestBuilder {
 public:
  explicit NestBuilder(LowerState* st) : st_(st) {}

  /** The statement computing stage s (its loops, and the stages attached inside them). */
  Stmt build(const Stage& s) {
    const ComputeOpNode* c = as_compute(s.op());
    const auto& leaves = s.leaf_iter_vars();
    Expr body = rewrite_reads(st_->bodies.at(c), s);
    std::vector<Expr> index = store_index(s);
    std::vector<Expr> guards = split_guards(*st_, s);
    const Buffer& buf = st_->buffers.at(c);
    const Reduce* red = body.as<Reduce>();
    if (!red) {
      Stmt store = BufferStore::make(buf, body, index);
      return wrap_loops(s, 0, guarded(store, guards));
    }
    // A reduction: loops before the first reduce loop enclose both the init
    // (over the remaining data-parallel loops) and the update (over all).
    size_t first_reduce = leaves.size();
    for (size_t i = 0; i < leaves.size(); ++i)
      if (leaves[i].kind() == IterVarKind::Reduce) {
        first_reduce = i;
        break;
      }
    std::vector<Expr> reduce_guards, spatial_guards;
    for (const Expr& g : guards) (uses_reduce_var(g, s) ? reduce_guards : spatial_guards).push_back(g);
    Expr acc = BufferLoad::make(buf, index);
    Expr update_value = reduce_combine(red->reduce_kind, acc, red->source);
    std::vector<Expr> update_conds = guards;
    if (!is_one(red->condition)) update_conds.push_back(red->condition);
    Stmt update = guarded(BufferStore::make(buf, update_value, index), update_conds);
    Stmt init = guarded(BufferStore::make(buf, reduce_identity(red->reduce_kind, red->dtype), index), spatial_guards);
    Stmt init_nest = wrap_loops(s, first_reduce, init, /*data_par_only=*/true);
    Stmt update_nest = wrap_loops(s, first_reduce, update);
    return wrap_loops(s, 0, Seq::make({init_nest, update_nest}), false, first_reduce);
  }

 private:
  static Stmt guarded(Stmt s, const std::vector<Expr>& conds) {
    if (conds.empty()) return s;
    Expr c = conds[0];
    for (size_t i = 1; i < conds.size(); ++i) c = c && conds[i];
    return IfThenElse::make(likely(c), s);
  }

  bool uses_reduce_var(const Expr& e, const Stage& s) const {
    return uses_var(e, [&](const Variable* v) {
      for (const IterVar& l : s.leaf_iter_vars())
        if (l.var().get() == v) return l.kind() == IterVarKind::Reduce;
      return false;
    });
  }

  // Wraps `inner` in the loops leaves[from, to) of s (innermost last), placing
  // attached stages inside the loop they are attached to.
  Stmt wrap_loops(const Stage& s, size_t from, Stmt inner, bool data_par_only = false, size_t to = SIZE_MAX) {
    const auto& leaves = s.leaf_iter_vars();
    to = std::min(to, leaves.size());
    for (size_t i = to; i-- > from;) {
      const IterVar& iv = leaves[i];
      if (data_par_only && iv.kind() == IterVarKind::Reduce) continue;
      if (!data_par_only) inner = with_attached(s, iv, inner);
      const Range& r = st_->ranges.at(iv.get());
      const IterVarAttr* a = s.attr(iv);
      ForKind kind = a ? a->kind : ForKind::Serial;
      std::string tag = a ? a->thread_tag : "";
      Stmt loop = For::make(iv.var(), 0, r.extent, kind, inner, tag);
      if (a)
        for (auto p = a->pragmas.rbegin(); p != a->pragmas.rend(); ++p) loop = AttrStmt::make("pragma_" + p->first, p->second, loop);
      inner = loop;
    }
    return inner;
  }

  // Stages computed at loop iv of s go first in that loop's body, each inside its allocation.
  Stmt with_attached(const Stage& s, const IterVar& iv, Stmt body) {
    std::vector<const Stage*> attached;
    for (const auto& p : st_->sch.stages())
      if (p->attach_type() == AttachType::Scope && p->attach_stage() == &s && p->attach_ivar().same_as(iv)) attached.push_back(p.get());
    for (auto it = attached.rbegin(); it != attached.rend(); ++it) {
      const Stage& p = **it;
      Stmt produce = build(p);
      body = Allocate::make(st_->buffers.at(p.op().get()), Seq::make({produce, body}));
    }
    return body;
  }

  // Where stage s stores element (root values): relative to its realised region.
  std::vector<Expr> store_index(const Stage& s) {
    const ComputeOpNode* c = as_compute(s.op());
    const auto& region = st_->regions.at(c);
    std::vector<Expr> idx;
    for (size_t d = 0; d < c->axis.size(); ++d) idx.push_back(arith::simplify(st_->values.at(c->axis[d].get()) - region[d].min));
    return idx;
  }

  // The body of s with root axes replaced by their values and tensor reads by buffer loads.
  // Roots first: a region's min may name a loop of s, and an unsplit root axis is that loop's variable.
  Expr rewrite_reads(const Expr& body, const Stage& s) {
    Expr valued = substitute(body, [&](const Variable* v) -> Expr {
      for (const IterVar& root : s.root_iter_vars())
        if (root.var().get() == v) return st_->values.at(root.get());
      return Expr();
    });
    return replace_tensor_reads(valued, [&](const TensorNode* t, const std::vector<Expr>& idx) -> Expr {
      const OperationNode* op = t->op.get();
      auto b = st_->buffers.find(op);
      KILN_CHECK(b != st_->buffers.end()) << "no buffer for tensor " << op->name;
      std::vector<Expr> rel = idx;
      if (auto r = st_->regions.find(op); r != st_->regions.end())
        for (size_t d = 0; d < rel.size(); ++d)
          if (!is_zero(r->second[d].min)) rel[d] = rel[d] - r->second[d].min;
      return BufferLoad::make(b->second, rel);
    });
  }

  LowerState* st_;
};

// Strides of a realised buffer with storage_align applied (row-major otherwise).
std::vector<Expr> aligned_strides(const Stage& s, const std::vector<Expr>& shape) {
  if (s.storage_aligns().empty()) return {};
  std::vector<Expr> strides(shape.size());
  int64_t acc = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    for (const auto& [dim, factor, offset] : s.storage_aligns())
      if (static_cast<size_t>(dim) == d) acc += ((offset - acc % factor) % factor + factor) % factor;
    strides[d] = Expr(static_cast<int>(acc));
    const int64_t* e = as_const_int(shape[d]);
    KILN_USER_CHECK(e) << "storage_align on stage '" << s.name() << "' needs constant buffer extents";
    acc *= *e;
  }
  return strides;
}

// Allocation extents: constant upper bounds of the region extents.
std::vector<Expr> alloc_shape(const LowerState& st, const Stage& s) {
  const auto& region = st.regions.at(s.op().get());
  arith::Analyzer ana;
  bool bound = false;
  std::vector<Expr> shape;
  for (size_t d = 0; d < region.size(); ++d) {
    Expr ext = region[d].extent;
    if (!as_const_int(ext)) {
      // Bound the extent over all loop values (bind the loops once, when first needed).
      if (!bound) bind_known_loops(st, &ana), bound = true;
      int64_t most = arith::max_through_clamps(ext, &ana);
      const int64_t* full = as_const_int(s.op()->shape[d]);
      if (most == arith::ConstIntBound::kPosInf) ext = s.op()->shape[d];
      else ext = Expr(static_cast<int>(full ? std::min<int64_t>(most, *full) : most));
    }
    shape.push_back(ext);
  }
  return shape;
}

}  // namespace

}  // namespace kiln::te::detail

namespace kiln::te {

using detail::LowerState;

PrimFunc schedule_to_function(const Schedule& sch, const std::vector<Tensor>& args_in, const std::string& name) {
  LowerState st(sch);
  // Arguments name original tensors; cache_write/rfactor may have moved them.
  std::vector<Tensor> args;
  for (const Tensor& t : args_in) args.push_back(sch.current_tensor(t));
  std::vector<Param> params;
  for (const Tensor& t : args) {
    KILN_USER_CHECK(sch.state()->find(t.op().get())) << "argument '" << t.name() << "' is not part of the schedule";
    Buffer b = Buffer::make(t.name(), t.dtype(), t.shape());
    st.buffers[t.op().get()] = b;
    params.push_back({b->data, b});
  }
  // Scalar variables in argument shapes (symbolic sizes) follow the tensors, in order of appearance.
  std::vector<const Variable*> scalars;
  for (const Tensor& t : args)
    for (const Expr& e : t.shape())
      post_order_visit(e, [&](const Expr& x) {
        const Variable* v = x.as<Variable>();
        if (v && std::find(scalars.begin(), scalars.end(), v) == scalars.end()) scalars.push_back(v);
      });
  for (const Variable* v : scalars) params.push_back({Var(v), Buffer()});
  for (const auto& s : sch.stages()) {
    bool is_arg = st.buffers.count(s->op().get()) > 0;
    KILN_USER_CHECK(!s->is_placeholder() || is_arg) << "placeholder '" << s->name() << "' is read by the computation but is not among the arguments; add it to the argument list";
    KILN_USER_CHECK(!s->is_output() || is_arg) << "output '" << s->name() << "' is not among the arguments; add it to the argument list";
  }
  detail::inline_stages(&st);
  detail::infer_bounds(&st);
  for (const auto& s : sch.stages()) {
    if (s->is_placeholder() || s->attach_type() == AttachType::Inline || st.buffers.count(s->op().get())) continue;
    std::vector<Expr> shape = detail::alloc_shape(st, *s);
    st.buffers[s->op().get()] = Buffer::make(s->name(), s->op()->dtype, shape, s->scope(), detail::aligned_strides(*s, shape));
  }
  detail::NestBuilder nb(&st);
  std::vector<Stmt> seq;
  std::vector<Buffer> root_allocs;
  for (const auto& s : sch.stages()) {
    if (s->is_placeholder() || s->attach_type() != AttachType::Root) continue;
    seq.push_back(nb.build(*s));
    // Stages passed as arguments (outputs, or an intermediate the caller asked for) write the caller's memory.
    const Buffer& buf = st.buffers.at(s->op().get());
    bool is_param = std::any_of(params.begin(), params.end(), [&](const Param& p) { return p.buffer.same_as(buf); });
    if (!is_param) root_allocs.push_back(buf);
  }
  Stmt body = Seq::make(seq);
  for (auto it = root_allocs.rbegin(); it != root_allocs.rend(); ++it) body = Allocate::make(*it, body);
  return PrimFunc::make(name, params, body);
}

}  // namespace kiln::te
