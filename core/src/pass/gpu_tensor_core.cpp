// lower_tensor_core: 16x16x16 tile nests a schedule marked tensor_core
// become warp matrix multiply-accumulates (mma_sync), and the accumulator's
// 16x16 initialisation and write-back nests become fills and stores of its
// fragments (see kiln/pass/gpu.h). Also the reader of those calls (as_mma).
//
// The pass works in three steps: find every use of an accumulator (the
// marked nests, then the 16x16 nests that fill or copy it), number each
// use's tile among its warp's fragments, then replace the nests by the calls
// and check that nothing else touches the accumulator and that the calls sit
// where whole warps run them.
#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "kiln/arith/analyzer.h"
#include "kiln/ir/functor.h"
#include "kiln/ir/op.h"
#include "kiln/ir/printer.h"
#include "kiln/ir/structural.h"
#include "kiln/pass/gpu.h"
#include "kiln/support/error.h"

namespace kiln::pass {

namespace {

constexpr int64_t kTile = 16;
const char* const kPragma = "pragma_tensor_core";

bool is_mma_op(Intrinsic op) { return op == Intrinsic::MmaFill || op == Intrinsic::MmaSync || op == Intrinsic::MmaStore; }

}  // namespace

bool as_mma(const Expr& e, MmaCall* out) {
  const Call* c = e.as<Call>();
  if (!c || !is_mma_op(c->op)) return false;
  auto num = [&](size_t i) {
    const int64_t* v = as_const_int(c->args[i]);
    KILN_CHECK(v) << intrinsic_name(c->op) << ": argument " << i << " must be a constant";
    return *v;
  };
  auto load = [&](size_t i) {
    const BufferLoad* l = c->args[i].as<BufferLoad>();
    KILN_CHECK(l && l->indices.size() == 1) << intrinsic_name(c->op) << ": argument " << i << " must be a flat load of a tile's first element";
    return l;
  };
  MmaCall m;
  m.op = c->op;
  m.acc = load(0), m.ld = num(1), m.frag = c->args[2], m.frags = num(3);
  if (c->op == Intrinsic::MmaFill) m.value = c->args[4];
  if (c->op == Intrinsic::MmaSync) m.a = load(4), m.a_row = num(5), m.a_k = num(6), m.b = load(7), m.b_k = num(8), m.b_col = num(9);
  if (c->op == Intrinsic::MmaStore) m.d = load(4), m.d_row = num(5), m.d_col = num(6);
  *out = m;
  return true;
}

bool as_mma(const Stmt& s, MmaCall* out) {
  const Evaluate* e = s.as<Evaluate>();
  return e && as_mma(e->value, out);
}

bool has_mma(const Stmt& s) {
  bool found = false;
  post_order_visit(s, [&](const Expr& e) {
    const Call* c = e.as<Call>();
    found = found || (c && is_mma_op(c->op));
  }, [](const Stmt&) {});
  return found;
}

namespace {

using VarSet = std::unordered_set<const Variable*>;

std::string str(const Expr& e) {
  std::ostringstream os;
  os << e;
  return os.str();
}

// e is a multiple of m for every value of its variables (terms scaled by a multiple of m).
bool multiple_of(const Expr& e, int64_t m) {
  std::vector<std::pair<int, Expr>> terms;
  sum_terms(e, 1, &terms);
  for (const auto& [sign, t] : terms) {
    const int64_t* k = as_const_int(t);
    if (const Mul* p = t.as<Mul>()) k = as_const_int(p->b) ? as_const_int(p->b) : as_const_int(p->a);
    if (!k || *k % m != 0) return false;
  }
  return true;
}

// n loops nested perfectly (attributes between them skipped) around one store.
struct TileNest {
  std::vector<const For*> loops;
  const BufferStore* store = nullptr;
  std::vector<const Variable*> vars() const {
    std::vector<const Variable*> v;
    for (const For* f : loops) v.push_back(f->loop_var.get());
    return v;
  }
};

bool peel(Stmt s, size_t n, TileNest* out) {
  out->loops.clear();
  for (;;) {
    if (const AttrStmt* a = s.as<AttrStmt>()) {
      s = a->body;
    } else if (const For* f = s.as<For>(); f && out->loops.size() < n && f->kind != ForKind::ThreadBinding) {
      out->loops.push_back(f);
      s = f->body;
    } else {
      break;
    }
  }
  out->store = s.as<BufferStore>();
  return out->store && out->loops.size() == n && out->store->indices.size() == 1;
}

bool whole_tiles(const TileNest& t) {
  for (const For* f : t.loops) {
    const int64_t* e = as_const_int(f->extent);
    if (!is_zero(f->min) || !e || *e != kTile) return false;
  }
  return true;
}

// index = base + sum of coef[i] * vars[i] with base free of vars; false for anything else.
bool affine(const Expr& index, const std::vector<const Variable*>& vars, std::vector<int64_t>* coef) {
  std::vector<std::pair<int, Expr>> terms;
  sum_terms(arith::simplify(index), 1, &terms);
  coef->assign(vars.size(), 0);
  auto which = [&](const Expr& x) {
    for (size_t i = 0; i < vars.size(); ++i)
      if (x.get() == vars[i]) return static_cast<int>(i);
    return -1;
  };
  for (const auto& [sign, t] : terms) {
    int i = which(t);
    int64_t c = 1;
    if (const Mul* m = t.as<Mul>(); m && i < 0) {
      if (const int64_t* k = as_const_int(m->b)) i = which(m->a), c = *k;
      else if (const int64_t* k2 = as_const_int(m->a)) i = which(m->b), c = *k2;
    }
    if (i >= 0) {
      (*coef)[i] += sign * c;
    } else if (uses_var(t, [&](const Variable* v) { return std::find(vars.begin(), vars.end(), v) != vars.end(); })) {
      return false;
    }
  }
  return true;
}

Expr at_origin(const Expr& index, const std::vector<const Variable*>& vars) {
  return arith::simplify(substitute(index, [&](const Variable* v) { return std::find(vars.begin(), vars.end(), v) != vars.end() ? make_zero(v->dtype) : Expr(); }));
}

// One use of an accumulator: the nest it replaces and the call's parts.
struct Use {
  const BaseStmtNode* node = nullptr;
  Intrinsic op = Intrinsic::MmaFill;
  const BufferStore* store = nullptr;  // the accumulator's store, or the write-back's
  Expr origin;  // the accumulator's index at the tile's element (0, 0)
  Expr value;  // fill
  Expr a, b;  // sync: loads of the operand tiles' first elements
  int64_t a_row = 0, a_k = 0, b_k = 0, b_col = 0;
  Expr d;  // store: the destination tile's first element
  int64_t d_row = 0, d_col = 0;
  // The fragment number: frag_const + sum of variable * step, then the number as called.
  int64_t frag_const = 0;
  std::vector<std::pair<const Variable*, int64_t>> frag_steps;
  Expr frag;
};

struct Accumulator {
  Buffer buffer;
  int64_t ld = 0;
  std::vector<Use> uses;
  int64_t frags = 0;
  Expr warp_offset;  // canonical thread part, once seen
};

class TensorCoreLowering {
 public:
  explicit TensorCoreLowering(const PrimFunc& f) : f_(f) {
    post_order_visit(f.body(), [](const Expr&) {}, [&](const Stmt& s) {
      const For* op = s.as<For>();
      if (!op) return;
      if (const int64_t* e = as_const_int(op->extent); e && is_zero(op->min)) extent_[op->loop_var.get()] = *e;
      if (op->kind == ForKind::ThreadBinding && thread_dim_index(op->thread_tag) >= 0) {
        thread_vars_.insert(op->loop_var.get());
        canonical_[op->loop_var.get()] = by_tag_.try_emplace(op->thread_tag, Var(op->thread_tag, op->loop_var.dtype())).first->second;
      }
    });
  }

  PrimFunc run() {
    post_order_visit(f_.body(), [](const Expr&) {}, [&](const Stmt& s) {
      if (const AttrStmt* a = s.as<AttrStmt>(); a && a->key == kPragma) parse_update(a);
    });
    if (accs_.empty()) {
      // A mark on the initialisation alone (the update's loops were not the tile) cannot be silently dropped.
      post_order_visit(f_.body(), [](const Expr&) {}, [&](const Stmt& s) {
        const AttrStmt* a = s.as<AttrStmt>();
        const For* head = a && a->key == kPragma ? a->body.as<For>() : nullptr;
        KILN_USER_CHECK(!(a && a->key == kPragma)) << where() << "tensor_core marks loop '" << (head ? head->loop_var.name() : std::string("?"))
                                                    << "', but no marked nest is a 16x16x16 multiply-accumulate: mark the outermost of the update's three innermost loops";
      });
      return f_;
    }
    find_fills_and_stores(f_.body());
    for (auto& [data, acc] : accs_) number_fragments(&acc);
    Stmt body = Replacer(this).mutate(f_.body());
    PrimFunc out = f_.with_body(body);
    check_no_other_use(body);
    check_placement(out);
    return out;
  }

 private:
  friend class Replacer;
  class Replacer : public IRMutator {
   public:
    explicit Replacer(TensorCoreLowering* p) : p_(p) {}
    using IRMutator::mutate;
    Stmt mutate(const Stmt& s) override {
      auto it = p_->replacement_.find(s.get());
      if (it != p_->replacement_.end()) return it->second;
      // The mark has served (the initialisation shares it): drop it.
      if (const AttrStmt* a = s.as<AttrStmt>(); a && a->key == kPragma) return mutate(a->body);
      return IRMutator::mutate(s);
    }

   private:
    TensorCoreLowering* p_;
  };

  std::string where() const { return "kernel '" + f_.name() + "': "; }

  // The marked nest: acc[x] = acc[x] + float32(A[a]) * float32(B[b]) over (r, c, k).
  void parse_update(const AttrStmt* attr) {
    TileNest t;
    // The stage's initialisation shares the marked loop: it is a fill, found with the others.
    if (peel(attr->body, 2, &t) && !uses_buffer(t.store->value, t.store->buffer)) return;
    const For* head = attr->body.as<For>();
    std::string loop = head ? "'" + head->loop_var.name() + "'" : "(none)";
    KILN_USER_CHECK(peel(attr->body, 3, &t)) << where() << "tensor_core at loop " << loop
                                             << " must head three perfectly nested loops (two spatial, one reduce, 16 iterations each) around the update; "
                                             << "reorder the stage so its three innermost loops are the 16x16x16 tile, and mark the outermost of them";
    KILN_USER_CHECK(whole_tiles(t)) << where() << "tensor_core at loop " << loop << ": the tile loops must each run 16 iterations from 0 (a warp multiplies 16x16x16 tiles); split the axes by 16"
                                    << " (a bounds guard or a shape that does not divide by 16 cannot be lowered)";
    const BufferStore* st = t.store;
    auto [a, b] = match_product(st, loop);
    std::vector<const Variable*> v = t.vars();
    std::vector<int64_t> cx, ca, cb;
    auto affine_or_fail = [&](const Expr& index, const std::string& what, std::vector<int64_t>* c) {
      KILN_USER_CHECK(affine(index, v, c)) << where() << "tensor_core at loop " << loop << ": the index of '" << what << "' (" << str(index)
                                           << ") is not a sum of the tile loops times constants";
    };
    affine_or_fail(st->indices[0], st->buffer.name(), &cx);
    affine_or_fail(a->indices[0], a->buffer->name, &ca);
    affine_or_fail(b->indices[0], b->buffer->name, &cb);
    // k: the loop the accumulator does not use; c: the one with unit stride; r: the other.
    int k = -1, c = -1, r = -1;
    for (int i = 0; i < 3; ++i) (cx[i] == 0 ? k : cx[i] == 1 ? c : r) = i;
    KILN_USER_CHECK(k >= 0 && c >= 0 && r >= 0 && cx[r] >= kTile && cx[r] % kTile == 0)
        << where() << "tensor_core at loop " << loop << ": '" << st->buffer.name()
        << "' must be indexed as [row * ld + column] by two tile loops (ld a multiple of 16) and not by the third, the reduce loop; its index is " << str(st->indices[0]);
    // The product commutes: a is the operand of rows (r, k), b of columns (k, c).
    if (ca[c] != 0 || cb[r] != 0) std::swap(a, b), std::swap(ca, cb);
    KILN_USER_CHECK(ca[c] == 0 && cb[r] == 0 && ca[r] != 0 && ca[k] != 0 && cb[k] != 0 && cb[c] != 0)
        << where() << "tensor_core at loop " << loop << ": the operands must be a[row, k] and b[k, column] (" << str(a->indices[0]) << " and " << str(b->indices[0]) << ")";
    Use u;
    u.node = attr, u.op = Intrinsic::MmaSync, u.store = st;
    u.origin = at_origin(st->indices[0], v);
    u.a = BufferLoad::make(Buffer(a->buffer), {operand_origin(a, ca[r], ca[k], v, loop)});
    u.b = BufferLoad::make(Buffer(b->buffer), {operand_origin(b, cb[k], cb[c], v, loop)});
    u.a_row = ca[r], u.a_k = ca[k], u.b_k = cb[k], u.b_col = cb[c];
    Accumulator& acc = accumulator(st->buffer, cx[r], loop);
    acc.uses.push_back(std::move(u));
    inside_updates_.insert(attr);
  }

  // The operands of the update acc[x] = acc[x] + float32(a) * float32(b) (either order), a and b float16 or bfloat16 loads.
  std::pair<const BufferLoad*, const BufferLoad*> match_product(const BufferStore* st, const std::string& loop) const {
    const std::string& name = st->buffer.name();
    const Add* add = st->value.as<Add>();
    const BufferLoad* self = add ? add->a.as<BufferLoad>() : nullptr;
    const Mul* prod = add ? add->b.as<Mul>() : nullptr;
    if (add && !(self && prod)) self = add->b.as<BufferLoad>(), prod = add->a.as<Mul>();
    auto operand = [](const Expr& e) -> const BufferLoad* {
      const Cast* c = e.as<Cast>();
      const BufferLoad* l = c ? c->value.as<BufferLoad>() : nullptr;
      return l && c->dtype == DataType::Float(32) && (l->dtype == DataType::Float(16) || l->dtype == DataType::BFloat16()) && l->indices.size() == 1 ? l : nullptr;
    };
    const BufferLoad* a = prod ? operand(prod->a) : nullptr;
    const BufferLoad* b = prod ? operand(prod->b) : nullptr;
    KILN_USER_CHECK(self && self->buffer->data.get() == st->buffer->data.get() && structural_equal(self->indices[0], st->indices[0]) && st->buffer.dtype() == DataType::Float(32))
        << where() << "tensor_core at loop " << loop << ": the update of '" << name << "' must accumulate in float32 (" << name << "[i] = " << name << "[i] + a * b); found "
        << name << " = " << str(st->value);
    KILN_USER_CHECK(st->buffer.scope() == "local") << where() << "tensor_core at loop " << loop << ": '" << name << "' (scope " << st->buffer.scope()
                                                   << ") cannot hold fragments: accumulate into a cache_write(C, \"local\") stage computed inside the kernel, and write it back to C";
    KILN_USER_CHECK(a && b && a->dtype == b->dtype) << where() << "tensor_core at loop " << loop << ": tensor cores multiply float16 or bfloat16 operands (both of one type) cast to float32; "
                                                    << "the update of '" << name << "' adds " << str(prod ? Expr(prod) : st->value)
                                                    << " (cast the inputs to float16 or bfloat16 and accumulate float32(a) * float32(b))";
    return {a, b};
  }

  // An operand tile's first element: strides s0, s1 (one of them 1: row- or
  // column-major), in shared or global memory, 32-byte aligned with rows a
  // multiple of 8 elements apart, as the warp loads need.
  Expr operand_origin(const BufferLoad* l, int64_t s0, int64_t s1, const std::vector<const Variable*>& v, const std::string& loop) const {
    const std::string& name = l->buffer->name;
    KILN_USER_CHECK((s0 == 1 || s1 == 1) && l->buffer->scope != "local")
        << where() << "tensor_core at loop " << loop << ": operand '" << name << "' must be a row-major or column-major tile (one stride 1; strides are " << s0 << " and " << s1
        << ") in shared or global memory (scope '" << l->buffer->scope << "')";
    int64_t ldm = s0 == 1 ? s1 : s0;
    Expr origin = at_origin(l->indices[0], v);
    KILN_USER_CHECK(ldm % 8 == 0 && multiple_of(origin, kTile)) << where() << "tensor_core at loop " << loop << ": the warp loads '" << name
                                                                << "' in 32-byte aligned tiles with rows a multiple of 8 elements apart; its tile starts at " << str(origin)
                                                                << " with rows " << ldm << " apart (align the tiles, e.g. split by 16 and pad rows to a multiple of 8)";
    return origin;
  }

  Accumulator& accumulator(const Buffer& buf, int64_t ld, const std::string& loop) {
    auto [it, fresh] = accs_.try_emplace(buf->data.get());
    Accumulator& acc = it->second;
    if (fresh) acc.buffer = buf, acc.ld = ld;
    KILN_USER_CHECK(acc.ld == ld) << where() << "the tiles of '" << buf.name() << "' are read with rows " << acc.ld << " and " << ld << " elements apart (at loop " << loop
                                  << "); every use of the accumulator must index it the same way";
    return acc;
  }

  // 16x16 nests (outside the marked ones) storing a constant to an accumulator or copying one out.
  void find_fills_and_stores(const Stmt& s) {
    if (const AttrStmt* a = s.as<AttrStmt>(); a && inside_updates_.count(a)) return;
    TileNest t;
    if (s.as<For>() && peel(s, 2, &t) && whole_tiles(t)) {
      const BufferStore* st = t.store;
      auto acc_of = [&](const Buffer& b) { auto it = accs_.find(b->data.get()); return it == accs_.end() ? nullptr : &it->second; };
      const BufferLoad* src = st->value.as<BufferLoad>();
      Accumulator* into = acc_of(st->buffer);
      Accumulator* from = src ? acc_of(Buffer(src->buffer)) : nullptr;
      if (into && !uses_buffer(st->value, into->buffer)) return add_fill(s.get(), t, into);
      if (from && !into && src->indices.size() == 1) return add_store(s.get(), t, from, src);
    }
    if (const For* f = s.as<For>()) return find_fills_and_stores(f->body);
    if (const Seq* q = s.as<Seq>()) {
      for (const Stmt& c : q->seq) find_fills_and_stores(c);
    } else if (const Allocate* a = s.as<Allocate>()) {
      find_fills_and_stores(a->body);
    } else if (const AttrStmt* a = s.as<AttrStmt>()) {
      find_fills_and_stores(a->body);
    } else if (const LetStmt* l = s.as<LetStmt>()) {
      find_fills_and_stores(l->body);
    } else if (const IfThenElse* i = s.as<IfThenElse>()) {
      find_fills_and_stores(i->then_case);
      if (i->else_case.defined()) find_fills_and_stores(i->else_case);
    }
  }

  static bool uses_buffer(const Expr& e, const Buffer& b) {
    bool found = false;
    post_order_visit(e, [&](const Expr& x) {
      const BufferLoad* l = x.as<BufferLoad>();
      found = found || (l && l->buffer->data.get() == b->data.get());
    });
    return found;
  }

  // The two tile loops of an accumulator index: rows ld apart, columns 1; false otherwise.
  bool rows_and_columns(const Expr& index, const TileNest& t, int64_t ld, int* r, int* c) {
    std::vector<int64_t> co;
    if (!affine(index, t.vars(), &co)) return false;
    *r = co[0] == ld ? 0 : co[1] == ld ? 1 : -1;
    *c = 1 - *r;
    return *r >= 0 && co[*c] == 1;
  }

  void add_fill(const BaseStmtNode* node, const TileNest& t, Accumulator* acc) {
    const BufferStore* st = t.store;
    int r, c;
    KILN_USER_CHECK(rows_and_columns(st->indices[0], t, acc->ld, &r, &c) && !uses_var(st->value, [&](const Variable* v) { return v == t.loops[0]->loop_var.get() || v == t.loops[1]->loop_var.get(); }))
        << where() << "the 16x16 initialisation of '" << acc->buffer.name() << "' at loop '" << t.loops[0]->loop_var.name() << "' must fill tiles as the tensor-core update reads them (["
        << "row * " << acc->ld << " + column]) with one value; found " << acc->buffer.name() << "[" << str(st->indices[0]) << "] = " << str(st->value);
    Use u;
    u.node = node, u.op = Intrinsic::MmaFill, u.store = st;
    u.origin = at_origin(st->indices[0], t.vars());
    u.value = cast(DataType::Float(32), st->value);
    acc->uses.push_back(std::move(u));
  }

  void add_store(const BaseStmtNode* node, const TileNest& t, Accumulator* acc, const BufferLoad* src) {
    const BufferStore* st = t.store;
    const std::string& out = st->buffer.name();
    int r, c;
    KILN_USER_CHECK(rows_and_columns(src->indices[0], t, acc->ld, &r, &c))
        << where() << "the write-back of '" << acc->buffer.name() << "' at loop '" << t.loops[0]->loop_var.name() << "' must read whole tiles as the tensor-core update writes them (["
        << "row * " << acc->ld << " + column]); it reads " << acc->buffer.name() << "[" << str(src->indices[0]) << "]";
    std::vector<int64_t> co;
    KILN_USER_CHECK(affine(st->indices[0], t.vars(), &co) && (co[r] == 1 || co[c] == 1) && st->buffer.dtype() == DataType::Float(32) && st->buffer.scope() == "global")
        << where() << "the write-back of '" << acc->buffer.name() << "' must copy each tile whole into a float32 output buffer, row- or column-major; it stores '" << out << "' ("
        << st->buffer.dtype().str() << ", scope " << st->buffer.scope() << ") at " << str(st->indices[0]);
    Expr origin = at_origin(st->indices[0], t.vars());
    int64_t ldm = co[c] == 1 ? co[r] : co[c];
    KILN_USER_CHECK(ldm % 4 == 0 && multiple_of(origin, 8)) << where() << "the warp stores tiles of '" << acc->buffer.name() << "' to '" << out
                                                            << "' 32-byte aligned with rows a multiple of 4 elements apart; the tile starts at " << str(origin) << " with rows " << ldm
                                                            << " apart";
    Use u;
    u.node = node, u.op = Intrinsic::MmaStore, u.store = st;
    u.origin = at_origin(src->indices[0], t.vars());
    u.d = BufferLoad::make(st->buffer, {origin});
    u.d_row = co[r], u.d_col = co[c];
    acc->uses.push_back(std::move(u));
  }

  // Each use's tile among its warp's fragments: origin = warp offset + row
  // tiles (multiples of 16 * ld) + a column tile (a multiple of 16 below ld).
  void number_fragments(Accumulator* acc) {
    const std::string& name = acc->buffer.name();
    int64_t ld = acc->ld;
    for (Use& u : acc->uses) {
      Expr warp, rest;
      KILN_USER_CHECK(split_thread_part(u.origin, thread_vars_, &warp, &rest)) << where() << "the tile of '" << name << "' at " << str(u.origin)
                                                                               << " mixes thread and loop variables in one term; a warp's fragments must be its offset plus its tiles";
      Expr canon = arith::simplify(substitute(warp, [&](const Variable* v) {
        auto it = canonical_.find(v);
        return it == canonical_.end() ? Expr() : Expr(it->second);
      }));
      auto lanes = by_tag_.find("threadIdx.x");
      KILN_USER_CHECK(lanes == by_tag_.end() || !uses_var(canon, [&](const Variable* x) { return x == lanes->second.get(); }))
          << where() << "the tensor-core tiles of '" << name << "' move with threadIdx.x (at " << str(u.origin) << "), so the nest that holds them binds threadIdx.x; "
          << "each operation runs on a whole warp: bind the warps to threadIdx.y and leave threadIdx.x to the 32 lanes";
      if (!acc->warp_offset.defined()) acc->warp_offset = canon;
      KILN_USER_CHECK(structural_equal(acc->warp_offset, canon)) << where() << "the warps' shares of '" << name << "' differ between its uses (offset " << str(acc->warp_offset) << " and "
                                                                 << str(canon) << "); bind the same split of the accumulator to threadIdx.y in its initialisation, update and write-back";
      std::vector<const Variable*> vars;
      post_order_visit(rest, [&](const Expr& e) {
        if (const Variable* v = e.as<Variable>(); v && std::find(vars.begin(), vars.end(), v) == vars.end()) vars.push_back(v);
      });
      std::vector<int64_t> co;
      KILN_USER_CHECK(affine(rest, vars, &co)) << where() << "the tile of '" << name << "' starts at " << str(rest) << ", not a sum of loops times constants";
      int64_t constant = *as_const_int(at_origin(rest, vars));
      int64_t row_tile = kTile * ld, per_row = ld / kTile;
      int64_t fconst = constant / row_tile * per_row + constant % row_tile / kTile, span = constant % row_tile, fmax = fconst;
      bool aligned = constant >= 0 && constant % row_tile % kTile == 0;
      u.frag_const = fconst;
      for (size_t i = 0; i < vars.size(); ++i) {
        auto e = extent_.find(vars[i]);
        KILN_USER_CHECK(e != extent_.end()) << where() << "the tile of '" << name << "' moves with '" << vars[i]->name << "', which is no loop of constant extent from 0";
        if (e->second == 1) continue;  // always 0 (a block loop of one iteration, say)
        int64_t step = co[i] % row_tile == 0 ? co[i] / row_tile * per_row : co[i] / kTile;
        aligned = aligned && co[i] > 0 && (co[i] % row_tile == 0 || co[i] % kTile == 0);
        if (co[i] % row_tile != 0) span += co[i] * (e->second - 1);
        fmax += step * (e->second - 1);
        u.frag_steps.emplace_back(vars[i], step);
      }
      KILN_USER_CHECK(aligned && span + kTile <= ld) << where() << "the tiles of '" << name << "' must start at multiples of 16 within rows of " << ld
                                                     << " elements and not cross a row's end; one starts at " << str(rest);
      acc->frags = std::max(acc->frags, fmax + 1);
    }
    std::map<int64_t, int64_t> dense = dense_steps(acc);
    for (Use& u : acc->uses) {
      Expr frag = IntImm::make(DataType::Int(32), u.frag_const);
      for (const auto& [v, step] : u.frag_steps) frag = frag + cast(DataType::Int(32), Var(v)) * IntImm::make(DataType::Int(32), dense.empty() ? step : dense.at(step));
      u.frag = arith::simplify(frag);
      replacement_[u.node] = call_of(*acc, u);
    }
  }

  // A warp uses only some of the fragments of its rows of tiles (those of its
  // columns): where the steps of the fragment numbers, smallest first, each
  // pass all numbers below them (a mixed radix), renumber them densely
  // (steps 1, e1, e1*e2, ...) and shrink frags. Empty when they do not.
  std::map<int64_t, int64_t> dense_steps(Accumulator* acc) const {
    std::map<int64_t, int64_t> radix;  // step -> the most values it takes
    for (const Use& u : acc->uses) {
      if (u.frag_const != 0) return {};
      std::set<int64_t> seen;
      for (const auto& [v, step] : u.frag_steps) {
        if (!seen.insert(step).second) return {};
        int64_t& n = radix[step];
        n = std::max(n, extent_.at(v));
      }
    }
    std::map<int64_t, int64_t> dense;
    int64_t reach = 0, d = 1;
    for (const auto& [step, n] : radix) {
      if (step <= reach) return {};
      reach += step * (n - 1);
      dense[step] = d;
      d *= n;
    }
    acc->frags = std::min(acc->frags, d);
    return dense;
  }

  Stmt call_of(const Accumulator& acc, const Use& u) const {
    auto i64 = [](int64_t v) { return IntImm::make(DataType::Int(32), v); };
    std::vector<Expr> args = {BufferLoad::make(acc.buffer, {u.origin}), i64(acc.ld), u.frag, i64(acc.frags)};
    if (u.op == Intrinsic::MmaFill) args.push_back(u.value);
    if (u.op == Intrinsic::MmaSync) args.insert(args.end(), {u.a, i64(u.a_row), i64(u.a_k), u.b, i64(u.b_k), i64(u.b_col)});
    if (u.op == Intrinsic::MmaStore) args.insert(args.end(), {u.d, i64(u.d_row), i64(u.d_col)});
    return Evaluate::make(Call::make(DataType::Int(32), u.op, std::move(args)));
  }

  // Any access to an accumulator left is a use a warp's fragments cannot serve.
  void check_no_other_use(const Stmt& body) {
    std::unordered_set<const BufferLoad*> in_calls;
    post_order_visit(body, [&](const Expr& e) {
      if (MmaCall m; as_mma(e, &m)) in_calls.insert(m.acc);
    }, [](const Stmt&) {});
    auto fail = [&](const Buffer& b, const std::string& what) {
      KILN_USER_ERROR() << where() << "'" << b.name() << "' holds tensor-core fragments, but " << what
                        << "; a warp's fragments are only filled, multiplied into and stored whole: give the initialisation and the write-back their own 16x16 loop nests"
                        << " (split by 16, innermost), and compute an epilogue in a stage after the write-back";
    };
    post_order_visit(body, [&](const Expr& e) {
      const BufferLoad* l = e.as<BufferLoad>();
      if (l && accs_.count(l->buffer->data.get()) && !in_calls.count(l)) fail(accs_.at(l->buffer->data.get()).buffer, "it is read at " + str(l->indices[0]));
    }, [&](const Stmt& s) {
      const BufferStore* w = s.as<BufferStore>();
      if (w && accs_.count(w->buffer->data.get())) fail(w->buffer, "it is written at " + str(w->indices[0]) + " with " + str(w->value));
    });
  }

  // Whole warps run the calls: a nest that binds threadIdx.y (and z) but not
  // x, in a block of 32 threads in x (or block level in a one-warp block).
  void check_placement(const PrimFunc& f) {
    LaunchConfig launch = launch_config(f);
    Walk(this, launch).visit_stmt(f.body());
    KILN_USER_CHECK(launch.block[0] == 32) << where() << "a tensor-core kernel runs one warp per threadIdx.y, so threadIdx.x must be its 32 lanes; the block has " << launch.block[0]
                                           << " threads in x: bind 32 (the lanes of the copies into shared memory) to threadIdx.x";
  }

  class Walk : public IRVisitor {
   public:
    Walk(const TensorCoreLowering* p, const LaunchConfig& l) : p_(p), launch_(l) {}
    using IRVisitor::visit;
    void visit(const For* op) override {
      int d = op->kind == ForKind::ThreadBinding ? thread_dim_index(op->thread_tag) : -1;
      if (d < 0) return IRVisitor::visit(op);
      int saved = bound_;
      std::string saved_loop = loop_;
      bound_ |= 1 << d;
      if (d == 0) loop_ = op->loop_var.name();
      IRVisitor::visit(op);
      bound_ = saved, loop_ = saved_loop;
    }
    void visit(const Evaluate* op) override {
      MmaCall m;
      if (!as_mma(op->value, &m)) return;
      const std::string& name = m.acc->buffer->name;
      KILN_USER_CHECK(!(bound_ & 1)) << p_->where() << "the tensor-core operations on '" << name << "' lie in a nest that binds threadIdx.x (loop '" << loop_
                                     << "'), but each runs on a whole warp: bind the warps to threadIdx.y and leave threadIdx.x to the 32 lanes";
      for (int d = 1; d < 3; ++d)
        KILN_USER_CHECK(launch_.block[d] == 1 || (bound_ & (1 << d))) << p_->where() << "the tensor-core operations on '" << name << "' would run alike on all " << launch_.block[d]
                                                                      << " warps of threadIdx." << "xyz"[d] << ": bind the accumulator's split to threadIdx." << "xyz"[d]
                                                                      << " so each warp has its own tiles";
    }

   private:
    const TensorCoreLowering* p_;
    LaunchConfig launch_;
    int bound_ = 0;
    std::string loop_;
  };

  PrimFunc f_;
  std::unordered_map<const Variable*, int64_t> extent_;
  VarSet thread_vars_;
  std::unordered_map<const Variable*, Var> canonical_;
  std::unordered_map<std::string, Var> by_tag_;
  std::map<const Variable*, Accumulator> accs_;
  std::unordered_set<const AttrStmt*> inside_updates_;
  std::unordered_map<const BaseStmtNode*, Stmt> replacement_;
};

}  // namespace

PrimFunc lower_tensor_core(const PrimFunc& f) { return TensorCoreLowering(f).run(); }

}  // namespace kiln::pass
