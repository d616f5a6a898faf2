// Per-store features of a lowered loop nest (in the manner of Ansor's, but
// our own): the walker below keeps the context of each BufferStore (its
// loops, guards, allocations, pragmas) and turns it into one fixed-width row.
//
// The tuner gives the extractor the nest before unrolling and vectorizing
// are expanded (candidate_features): the vector length and unroll factor are
// read from the loops marked Vectorized and Unrolled around a store, as
// Ansor reads its annotations. A fully lowered nest works too: there
// vectorized loops have become Ramp accesses (the length is the store's
// lanes) and unrolled loops copies of their body (the unroll factor is read
// from the stores side by side in the innermost body).
//
// Rows are collapsed as they are made: an unrolled copy of a store gives a
// row equal to one already seen, which only adds to that row's count.
#include "kiln/tuner/features.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string_view>
#include <unordered_set>

#include "features_internal.h"
#include "kiln/ir/functor.h"
#include "kiln/ir/op.h"
#include "kiln/support/error.h"
#include "kiln/te/lower.h"

namespace kiln::tuner {

using namespace detail;

namespace {

/** Arithmetic of one statement, per execution, each vector op counted once per lane. */
struct OpCounts {
  double float_addsub = 0, float_mul = 0, float_div = 0, float_fma = 0, float_math = 0, float_cmp_select = 0;
  double int_addsub = 0, int_mul = 0, int_divmod = 0, int_cmp_select = 0;
};

bool is_float_mul(const Expr& e) { return e.as<Mul>() && e.dtype().is_float(); }

/** Counts the operations of expressions and collects the buffer loads they make. */
class OpCounter : public IRVisitor {
 public:
  OpCounts counts;
  std::vector<Access> loads;
  void count(const Expr& e) { visit_expr(e); }

 protected:
  using IRVisitor::visit;
  static double lanes(const BaseExprNode* op) { return std::max(1, op->dtype.lanes()); }
  void arith(const BaseExprNode* op, double* flt, double* in) { *(op->dtype.is_float() ? flt : in) += lanes(op); }

  void visit(const Add* op) override {
    arith(op, &counts.float_addsub, &counts.int_addsub);
    if (op->dtype.is_float() && (is_float_mul(op->a) || is_float_mul(op->b))) counts.float_fma += lanes(op);
    IRVisitor::visit(op);
  }
  void visit(const Sub* op) override {
    arith(op, &counts.float_addsub, &counts.int_addsub);
    if (op->dtype.is_float() && (is_float_mul(op->a) || is_float_mul(op->b))) counts.float_fma += lanes(op);
    IRVisitor::visit(op);
  }
  void visit(const Mul* op) override { arith(op, &counts.float_mul, &counts.int_mul), IRVisitor::visit(op); }
  void visit(const Div* op) override { arith(op, &counts.float_div, &counts.int_divmod), IRVisitor::visit(op); }
  void visit(const Mod* op) override { arith(op, &counts.float_div, &counts.int_divmod), IRVisitor::visit(op); }
  void visit(const FloorDiv* op) override { arith(op, &counts.float_div, &counts.int_divmod), IRVisitor::visit(op); }
  void visit(const FloorMod* op) override { arith(op, &counts.float_div, &counts.int_divmod), IRVisitor::visit(op); }
  void visit(const Min* op) override { arith(op, &counts.float_cmp_select, &counts.int_cmp_select), IRVisitor::visit(op); }
  void visit(const Max* op) override { arith(op, &counts.float_cmp_select, &counts.int_cmp_select), IRVisitor::visit(op); }
  void visit(const Select* op) override {
    arith(op, &counts.float_cmp_select, &counts.int_cmp_select);
    IRVisitor::visit(op);
  }
  // Comparisons have a bool type: the operands say whether they are float.
  template <typename T>
  void compare(const T* op) {
    *(op->a.dtype().is_float() ? &counts.float_cmp_select : &counts.int_cmp_select) += lanes(op);
    IRVisitor::visit(op);
  }
  void visit(const EQ* op) override { compare(op); }
  void visit(const NE* op) override { compare(op); }
  void visit(const LT* op) override { compare(op); }
  void visit(const LE* op) override { compare(op); }
  void visit(const GT* op) override { compare(op); }
  void visit(const GE* op) override { compare(op); }
  void visit(const And* op) override { counts.int_cmp_select += lanes(op), IRVisitor::visit(op); }
  void visit(const Or* op) override { counts.int_cmp_select += lanes(op), IRVisitor::visit(op); }
  void visit(const Not* op) override { counts.int_cmp_select += lanes(op), IRVisitor::visit(op); }
  void visit(const Call* op) override {
    if (op->op == Intrinsic::IfThenElse) counts.int_cmp_select += lanes(op);
    else if (op->op != Intrinsic::Likely) arith(op, &counts.float_math, &counts.int_cmp_select);
    IRVisitor::visit(op);
  }
  void visit(const BufferLoad* op) override {
    loads.push_back(Access{op->buffer.get(), flat_index(op->buffer.get(), op->indices), false});
    IRVisitor::visit(op);
  }

 public:
  /** The one flat index of an access (buffers not yet flattened use their strides). */
  static Expr flat_index(const BufferNode* buf, const std::vector<Expr>& indices) {
    if (indices.size() == 1) return indices[0];
    std::vector<Expr> strides = Buffer(buf).effective_strides();
    Expr flat = make_zero(indices.empty() ? DataType::Int(32) : indices[0].dtype());
    for (size_t d = 0; d < indices.size(); ++d) flat = flat + indices[d] * strides[d];
    return flat;
  }
};

struct AllocDesc {
  const BufferNode* buffer;
  double bytes;
};

/** Walks the statements and appends one row per BufferStore. */
class StoreWalker : public IRVisitor {
 public:
  explicit StoreWalker(const PrimFunc& f) {
    for (const Param& p : f->params)
      if (p.is_buffer()) params_.push_back(p.buffer->data.get());
    body_stores_.push_back(direct_stores(f->body));
  }
  std::vector<float> rows;  // the distinct rows, first-seen order
  std::vector<float> counts;
  int num_rows = 0;         // distinct rows
  int64_t num_stores = 0;   // all rows
  double total_elems = 0;   // elements stored by all rows, summed in store order

 protected:
  using IRVisitor::visit;
  void visit(const For* op) override;
  void visit(const BufferStore* op) override;
  void visit(const Allocate* op) override;
  void visit(const LetStmt* op) override;
  void visit(const IfThenElse* op) override;
  void visit(const AttrStmt* op) override;

 private:
  static int direct_stores(const Stmt& s);
  Expr resolve(const Expr& e) const;
  void fill_loops(float* row, int lanes) const;
  void fill_buffers(const std::vector<BufferStats>& bufs, float* row) const;
  void fill_allocs(float* row) const;
  void fill_intensity(const std::vector<BufferStats>& bufs, double flops, int lanes, float* row) const;
  void add_row(const std::vector<float>& row);

  /** Distinct rows by content: indices into `rows`. */
  struct RowHash {
    const std::vector<float>* rows;
    size_t operator()(int r) const {
      return std::hash<std::string_view>()(std::string_view(reinterpret_cast<const char*>(rows->data() + static_cast<size_t>(r) * kNumColumns), kNumColumns * sizeof(float)));
    }
  };
  struct RowEq {
    const std::vector<float>* rows;
    bool operator()(int a, int b) const {
      return std::memcmp(rows->data() + static_cast<size_t>(a) * kNumColumns, rows->data() + static_cast<size_t>(b) * kNumColumns, kNumColumns * sizeof(float)) == 0;
    }
  };
  std::unordered_set<int, RowHash, RowEq> seen_{64, RowHash{&rows}, RowEq{&rows}};

  arith::Analyzer ana_;
  std::vector<LoopDesc> loops_;
  std::vector<int> body_stores_;  // per loop level (level 0 = the function body)
  std::vector<AllocDesc> allocs_;
  std::vector<Expr> guards_;
  std::vector<std::pair<const Variable*, Expr>> lets_;
  std::vector<const Variable*> params_;
  double auto_unroll_ = 0;
};

int StoreWalker::direct_stores(const Stmt& s) {
  if (!s.defined()) return 0;
  if (s.as<BufferStore>()) return 1;
  if (const Seq* q = s.as<Seq>()) {
    int n = 0;
    for (const Stmt& c : q->seq) n += direct_stores(c);
    return n;
  }
  if (const IfThenElse* c = s.as<IfThenElse>()) return direct_stores(c->then_case) + direct_stores(c->else_case);
  if (const LetStmt* l = s.as<LetStmt>()) return direct_stores(l->body);
  if (const Allocate* a = s.as<Allocate>()) return direct_stores(a->body);
  if (const AttrStmt* a = s.as<AttrStmt>()) return direct_stores(a->body);
  if (const AssertStmt* a = s.as<AssertStmt>()) return direct_stores(a->body);
  return 0;  // a For starts a body of its own
}

void StoreWalker::visit(const For* op) {
  arith::ConstIntBound b = ana_.const_int_bound(op->extent);
  // A loop whose extent has no constant bound counts as one iteration: we
  // cannot tell its weight, and a guess would dominate the row.
  int64_t ext = b.max == arith::ConstIntBound::kPosInf ? 1 : std::max<int64_t>(b.max, 0);
  ana_.bind(op->loop_var, Range(op->min, op->extent));
  loops_.push_back(LoopDesc{op->loop_var, op->min, op->extent, ext, op->kind});
  body_stores_.push_back(direct_stores(op->body));
  visit_stmt(op->body);
  body_stores_.pop_back();
  loops_.pop_back();
}

void StoreWalker::visit(const Allocate* op) {
  double elems = 1;
  for (const Expr& d : op->buffer->shape) {
    arith::ConstIntBound b = ana_.const_int_bound(d);
    elems *= b.max == arith::ConstIntBound::kPosInf ? 1.0 : static_cast<double>(std::max<int64_t>(b.max, 0));
  }
  allocs_.push_back(AllocDesc{op->buffer.get(), elems * op->buffer->dtype.bytes()});
  visit_stmt(op->body);
  allocs_.pop_back();
}

void StoreWalker::visit(const LetStmt* op) {
  lets_.emplace_back(op->var.get(), resolve(op->value));
  if (op->var.dtype().is_integer() && op->var.dtype().is_scalar()) ana_.bind(op->var, lets_.back().second);
  visit_stmt(op->body);
  lets_.pop_back();
}

void StoreWalker::visit(const IfThenElse* op) {
  guards_.push_back(op->condition);
  visit_stmt(op->then_case);
  guards_.pop_back();
  if (op->else_case.defined()) {
    guards_.push_back(op->condition);
    visit_stmt(op->else_case);
    guards_.pop_back();
  }
}

void StoreWalker::visit(const AttrStmt* op) {
  double saved = auto_unroll_;
  if (op->key == "pragma_auto_unroll_max_step")
    if (const int64_t* v = as_const_int(op->value)) auto_unroll_ = static_cast<double>(*v);
  visit_stmt(op->body);
  auto_unroll_ = saved;
}

/** e with the values of enclosing LetStmt variables put in (indices often go through them). */
Expr StoreWalker::resolve(const Expr& e) const {
  if (lets_.empty()) return e;
  return substitute(e, [this](const Variable* v) -> Expr {
    for (auto it = lets_.rbegin(); it != lets_.rend(); ++it)
      if (it->first == v) return it->second;
    return Expr();
  });
}

void StoreWalker::visit(const BufferStore* op) {
  OpCounter counter;
  counter.count(op->value);
  for (const Expr& i : op->indices) counter.count(i);
  for (const Expr& g : guards_) counter.count(g);
  int lanes = std::max({1, op->value.dtype().lanes(), op->indices.empty() ? 1 : op->indices[0].dtype().lanes()});

  double iters = 1;
  for (const LoopDesc& l : loops_) iters *= static_cast<double>(l.ext);
  std::vector<float> row(kNumColumns, 0.f);
  const OpCounts& c = counter.counts;
  const double w = iters;
  row[float_addsub] = slog(c.float_addsub * w);
  row[float_mul] = slog(c.float_mul * w);
  row[float_div] = slog(c.float_div * w);
  row[float_fma] = slog(c.float_fma * w);
  row[float_math] = slog(c.float_math * w);
  row[float_cmp_select] = slog(c.float_cmp_select * w);
  row[int_addsub] = slog(c.int_addsub * w);
  row[int_mul] = slog(c.int_mul * w);
  row[int_divmod] = slog(c.int_divmod * w);
  row[int_cmp_select] = slog(c.int_cmp_select * w);
  row[store_elems] = slog(iters * lanes);
  row[guards] = static_cast<float>(guards_.size());
  row[is_init] = counter.loads.empty() ? 1.f : 0.f;
  row[to_param] = std::find(params_.begin(), params_.end(), op->buffer->data.get()) != params_.end() ? 1.f : 0.f;
  for (const Access& a : counter.loads)
    if (a.buffer->data.get() == op->buffer->data.get()) row[is_update] = 1.f;
  fill_loops(row.data(), lanes);

  std::vector<Access> accesses;
  accesses.push_back(Access{op->buffer.get(), OpCounter::flat_index(op->buffer.get(), op->indices), true});
  for (Access& a : counter.loads) accesses.push_back(Access{a.buffer, a.index, false});
  for (Access& a : accesses) a.index = resolve(a.index);
  std::vector<BufferStats> bufs = analyze_accesses(accesses, loops_, lanes, &ana_);
  fill_buffers(bufs, row.data());
  fill_allocs(row.data());
  fill_intensity(bufs, c.float_addsub + c.float_mul + c.float_div + c.float_math + c.float_cmp_select, lanes, row.data());
  add_row(row);
}

void StoreWalker::add_row(const std::vector<float>& row) {
  ++num_stores;
  total_elems += std::exp2(static_cast<double>(row[store_elems])) - 1;
  // Append, then keep it only if no equal row is there (the set hashes rows in place).
  rows.insert(rows.end(), row.begin(), row.end());
  auto [it, fresh] = seen_.insert(num_rows);
  if (fresh) {
    counts.push_back(1.f);
    ++num_rows;
  } else {
    rows.resize(rows.size() - kNumColumns);
    counts[static_cast<size_t>(*it)] += 1.f;
  }
}

void StoreWalker::fill_loops(float* row, int lanes) const {
  const size_t n = loops_.size();
  double prod = 1;
  for (const LoopDesc& l : loops_) prod *= static_cast<double>(l.ext);
  row[loop_depth] = static_cast<float>(n);
  row[loop_prod] = slog(prod);
  const FixedColumn inner[] = {inner_ext0, inner_ext1, inner_ext2, inner_ext3};
  for (size_t i = 0; i < 4 && i < n; ++i) row[inner[i]] = slog(static_cast<double>(loops_[n - 1 - i].ext));
  row[body_stores] = slog(body_stores_.back());
  row[auto_unroll_max_step] = slog(auto_unroll_);

  // Vector lanes made by the vectorizer are innermost by construction.
  double vec = lanes, unroll = 1, par = 1, threads = 1;
  bool vec_inner = lanes > 1, unroll_inner = false, has_unroll = false, has_par = false;
  int first_par = -1;
  for (size_t i = 0; i < n; ++i) {
    const LoopDesc& l = loops_[i];
    const bool innermost = i + 1 == n;
    if (l.kind == ForKind::Vectorized) vec *= static_cast<double>(l.ext), vec_inner = vec_inner || innermost;
    if (l.kind == ForKind::Unrolled) unroll *= static_cast<double>(l.ext), has_unroll = true, unroll_inner = unroll_inner || innermost;
    if (l.kind == ForKind::ThreadBinding) threads *= static_cast<double>(l.ext);
    if (l.kind == ForKind::Parallel) {
      par *= static_cast<double>(l.ext);
      has_par = true;
      if (first_par < 0) first_par = static_cast<int>(i);
    }
  }
  row[vec_present] = vec > 1 ? 1.f : 0.f;
  row[vec_len] = slog(vec > 1 ? vec : 0);
  row[vec_innermost] = vec_inner ? 1.f : 0.f;
  row[unroll_present] = has_unroll ? 1.f : 0.f;
  row[unroll_len] = slog(has_unroll ? unroll : 0);
  row[unroll_innermost] = unroll_inner ? 1.f : 0.f;
  row[par_present] = has_par ? 1.f : 0.f;
  row[par_len] = slog(has_par ? par : 0);
  row[thread_bind_len] = slog(threads > 1 ? threads : 0);
  if (has_par) {
    double outside = 1, inside = 1;
    for (int i = 0; i < first_par; ++i) outside *= static_cast<double>(loops_[i].ext);
    for (size_t i = first_par + 1; i < n; ++i)
      if (loops_[i].kind != ForKind::Parallel) inside *= static_cast<double>(loops_[i].ext);
    row[par_outermost] = first_par == 0 ? 1.f : 0.f;
    row[par_innermost] = loops_[n - 1].kind == ForKind::Parallel ? 1.f : 0.f;
    row[par_task_work] = slog(inside * lanes);
    row[par_outer_serial] = slog(outside);
  }
}

void StoreWalker::fill_buffers(const std::vector<BufferStats>& bufs, float* row) const {
  double max_stride = 0, unique = 0, inner = 0, store_stride = 0;
  for (const BufferStats& s : bufs) {
    max_stride = std::max(max_stride, s.stride);
    unique += s.unique_bytes;
    inner += s.inner_bytes;
    if (s.written) store_stride = std::max(store_stride, s.stride);
  }
  row[inner_max_stride] = slog(max_stride);
  row[inner_unit_stride] = max_stride <= 1 ? 1.f : 0.f;
  row[inner_store_stride] = slog(store_stride);
  row[total_unique_bytes] = slog(unique);
  row[total_inner_bytes] = slog(inner);
  for (size_t b = 0; b < bufs.size() && b < static_cast<size_t>(kMaxBuffers); ++b) {
    const BufferStats& s = bufs[b];
    float* r = row + kNumFixedColumns + b * kNumBufferColumns;
    r[buf_access] = static_cast<float>((s.read ? 1 : 0) + (s.written ? 2 : 0));
    r[buf_bytes] = slog(s.bytes);
    r[buf_unique_bytes] = slog(s.unique_bytes);
    r[buf_stride] = slog(s.stride);
    r[buf_reuse_iters] = slog(s.reuse_iters);
    r[buf_reuse_bytes] = slog(s.reuse_bytes);
    r[buf_reuse_count] = slog(s.reuse_count);
    r[buf_accesses] = static_cast<float>(s.accesses);
    r[buf_inner_bytes] = slog(s.inner_bytes);
  }
}

void StoreWalker::fill_allocs(float* row) const {
  double local = 0, heap = 0;
  for (const AllocDesc& a : allocs_) (a.buffer->scope == "global" ? heap : local) += a.bytes;
  row[alloc_local_bytes] = slog(local);
  row[alloc_heap_bytes] = slog(heap);
  row[alloc_count] = static_cast<float>(allocs_.size());
}

/**
 * `flops`: the float ops of one execution of the store (its lanes counted).
 * Level k of the nest is the loops from the k-th down (the vector lanes one
 * more, innermost, level); its intensity is the ops they run over the bytes
 * they touch, all buffers together.
 */
void StoreWalker::fill_intensity(const std::vector<BufferStats>& bufs, double flops, int lanes, float* row) const {
  std::vector<double> ext;
  for (const LoopDesc& l : loops_) ext.push_back(static_cast<double>(l.ext));
  if (lanes > 1) ext.push_back(lanes);
  const size_t n = ext.size();
  std::vector<double> bytes(n + 1, 0), ops(n + 1, flops / lanes), intensity(n + 1, 0);
  for (const BufferStats& b : bufs)
    for (size_t k = 0; k <= n && k < b.level_bytes.size(); ++k) bytes[k] += b.level_bytes[k];
  for (size_t k = n; k-- > 0;) ops[k] = ops[k + 1] * ext[k];
  for (size_t k = 0; k <= n; ++k) intensity[k] = bytes[k] > 0 ? ops[k] / bytes[k] : 0;
  float* r = row + kIntensityBase;
  // Resampled at evenly spaced positions from the whole nest (0) to one iteration (n).
  for (int i = 0; i < kCurvePoints; ++i) {
    double at = static_cast<double>(n) * i / (kCurvePoints - 1);
    size_t lo = static_cast<size_t>(at), hi = std::min(lo + 1, n);
    double t = at - static_cast<double>(lo);
    r[intensity0 + i] = slog(intensity[lo] * (1 - t) + intensity[hi] * t);
  }
  // A cache of `capacity` bytes holds the outermost level that fits; the
  // loops around that level bring its footprint in again each iteration.
  auto traffic = [&](double capacity, IntensityColumn bytes_col, IntensityColumn intensity_col) {
    size_t k = 0;
    while (k < n && bytes[k] > capacity) ++k;
    double outer = 1;
    for (size_t j = 0; j < k; ++j) outer *= ext[j];
    double moved = bytes[k] * outer;
    r[bytes_col] = slog(moved);
    r[intensity_col] = slog(moved > 0 ? ops[0] / moved : 0);
  };
  traffic(32 << 10, traffic_32k, traffic_32k_intensity);
  traffic(512 << 10, traffic_512k, traffic_512k_intensity);
}

std::vector<std::string> make_names() {
  std::vector<std::string> names = {
#define KILN_X(name) #name,
      KILN_FEATURE_FIXED_COLUMNS(KILN_X)
#undef KILN_X
  };
  const char* per_buffer[] = {
#define KILN_X(name) #name,
      KILN_FEATURE_BUFFER_COLUMNS(KILN_X)
#undef KILN_X
  };
  for (int b = 0; b < kMaxBuffers; ++b)
    for (const char* col : per_buffer) names.push_back("buf" + std::to_string(b) + "." + col);
  names.insert(names.end(), {
#define KILN_X(name) #name,
                                KILN_FEATURE_INTENSITY_COLUMNS(KILN_X)
#undef KILN_X
                            });
  return names;
}

}  // namespace

const std::string& feature_extractor_name() {
  static const std::string name = "kiln-nest-v4";
  return name;
}

const std::string& previous_feature_extractor_name() {
  static const std::string name = "kiln-nest-v3";
  return name;
}

const std::string& expanded_feature_extractor_name() {
  static const std::string name = "kiln-store-v2";
  return name;
}

const std::string& legacy_feature_extractor_name() {
  static const std::string name = "kiln-store-v1";
  return name;
}

int num_feature_columns() { return kNumColumns; }

int num_earlier_feature_columns() { return kIntensityBase; }

const std::vector<std::string>& feature_names() {
  static const std::vector<std::string> names = make_names();
  return names;
}

Features extract_features(const PrimFunc& lowered) {
  KILN_USER_CHECK(lowered.defined()) << "extract_features: the function is null; pass the result of te::lower";
  StoreWalker walker(lowered);
  walker.visit_stmt(lowered->body);
  // Second pass: what each row is worth within its function. Equal rows stay
  // equal (both columns depend on the row and on totals only).
  std::vector<float>& v = walker.rows;
  const double total = walker.total_elems;
  for (int r = 0; r < walker.num_rows; ++r) {
    float* row = v.data() + static_cast<size_t>(r) * kNumColumns;
    row[func_stores] = slog(static_cast<double>(walker.num_stores));
    row[work_share] = total > 0 ? static_cast<float>((std::exp2(static_cast<double>(row[store_elems])) - 1) / total) : 0.f;
  }
  Features f;
  f.rows = walker.num_rows;
  f.cols = kNumColumns;
  f.values = std::move(walker.rows);
  f.counts = std::move(walker.counts);
  return f;
}

Features candidate_features(const te::Schedule& sch, const std::vector<te::Tensor>& args) {
  te::LowerOptions options;
  options.expand_loops = false;
  return extract_features(te::lower(sch, args, "main", options));
}

}  // namespace kiln::tuner
