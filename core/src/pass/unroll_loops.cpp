// unroll_loops: replicates the bodies of unrolled loops.
#include "kiln/arith/simplify_stmt.h"
#include "kiln/ir/functor.h"
#include "kiln/ir/op.h"
#include "kiln/pass/passes.h"
#include "kiln/support/error.h"

#include <limits>

namespace kiln::pass {

namespace {

constexpr int64_t kUnbounded = std::numeric_limits<int64_t>::max();
constexpr const char* kAutoUnrollKey = "pragma_auto_unroll_max_step";
// More copies than this is a schedule mistake (an unroll of a whole axis),
// not something to spend minutes and gigabytes on.
constexpr int64_t kMaxUnrollCopies = 1 << 16;

// The number of iterations of the loop nest rooted at s: the product of the
// extents along the deepest path. A loop that cannot be unrolled (symbolic
// extent, parallel, vectorized, bound to a thread) makes it unbounded, so
// only nests made of unrollable loops qualify.
static int64_t nest_steps(const Stmt& s) {
  if (!s.defined()) return 1;
  if (const For* f = s.as<For>()) {
    const int64_t* e = as_const_int(f->extent);
    if (!e || (f->kind != ForKind::Serial && f->kind != ForKind::Unrolled)) return kUnbounded;
    int64_t inner = nest_steps(f->body);
    if (inner == kUnbounded) return kUnbounded;
    int64_t n = std::max<int64_t>(*e, 0);
    return inner != 0 && n > kUnbounded / inner ? kUnbounded : n * inner;
  }
  if (const Seq* q = s.as<Seq>()) {
    int64_t m = 1;
    for (const Stmt& c : q->seq) m = std::max(m, nest_steps(c));
    return m;
  }
  if (const IfThenElse* i = s.as<IfThenElse>()) return std::max(nest_steps(i->then_case), nest_steps(i->else_case));
  if (const LetStmt* l = s.as<LetStmt>()) return nest_steps(l->body);
  if (const AttrStmt* a = s.as<AttrStmt>()) return nest_steps(a->body);
  if (const Allocate* a = s.as<Allocate>()) return nest_steps(a->body);
  if (const AssertStmt* a = s.as<AssertStmt>()) return nest_steps(a->body);
  return 1;
}

class Unroller : public IRMutator {
 protected:
  using IRMutator::visit;

  Stmt visit(const AttrStmt* op) override {
    if (op->key != kAutoUnrollKey) return IRMutator::visit(op);
    const int64_t* n = as_const_int(op->value);
    int64_t saved = auto_max_step_;
    auto_max_step_ = n ? *n : 0;
    // The pragma is consumed here; codegen has no use for it.
    Stmt body = mutate(op->body);
    auto_max_step_ = saved;
    return body;
  }

  Stmt visit(const For* op) override {
    // Decide on the original nest: once inner loops are unrolled their
    // extents no longer show in the tree.
    const int64_t* extent = as_const_int(op->extent);
    bool auto_unroll = op->kind == ForKind::Serial && extent && auto_max_step_ > 0 && nest_steps(op) <= auto_max_step_;
    Stmt body = mutate(op->body);
    if (op->kind == ForKind::Unrolled && !extent) return For::make(op->loop_var, op->min, op->extent, ForKind::Serial, body, op->thread_tag);
    if (op->kind != ForKind::Unrolled && !auto_unroll) {
      return body.same_as(op->body) ? Stmt(op) : For::make(op->loop_var, op->min, op->extent, op->kind, body, op->thread_tag);
    }
    return replicate(op, body, *extent);
  }

 private:
  // One copy of body per iteration, the loop variable replaced by its value.
  static Stmt replicate(const For* op, const Stmt& body, int64_t extent) {
    if (extent <= 0) return make_nop();
    KILN_USER_CHECK(extent <= kMaxUnrollCopies) << "loop '" << op->loop_var.name() << "' is marked unrolled with extent " << extent << "; at most " << kMaxUnrollCopies
                                                << " iterations are unrolled: split the loop and unroll the inner part";
    const Variable* v = op->loop_var.get();
    const int64_t* min = as_const_int(op->min);
    DataType t = op->loop_var.dtype();
    std::vector<Stmt> copies;
    copies.reserve(extent);
    for (int64_t i = 0; i < extent; ++i) {
      Expr value = min ? IntImm::make(t, *min + i) : i == 0 ? cast(t, op->min) : Add::make(cast(t, op->min), IntImm::make(t, i));
      // Each copy is simplified at once: its indices fold to constants, and
      // the work stays proportional to the copies made.
      Stmt copy = arith::simplify(substitute(body, [&](const Variable* x) { return x == v ? value : Expr(); }));
      // Each copy allocates its own buffers: storage_reuse and codegen key
      // storage by data variable, and would otherwise see the copies'
      // Allocates of one buffer as one (and nest them).
      copies.push_back(i == 0 ? copy : fresh_allocations(copy));
    }
    return Seq::make(std::move(copies));
  }

  int64_t auto_max_step_ = 0;
};

}  // namespace

PrimFunc unroll_loops(const PrimFunc& f) { return f.with_body(Unroller().mutate(f.body())); }

}  // namespace kiln::pass
