#include "kiln/interp/interpreter.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "gpu_hooks.h"
#include "kiln/pass/gpu.h"
#include "interp_value.h"
#include "kiln/codegen/kernel_metadata.h"
#include "kiln/runtime/arg_binder.h"
#include "kiln/support/error.h"

namespace kiln {
namespace {

using interp::kMaxLanes;
using interp::Lane;
using interp::Value;

// Sizes above this are surely a bug (a wrapped or garbage shape), not a tensor.
constexpr int64_t kMaxAllocBytes = int64_t(1) << 36;

/** The memory behind one data variable: a parameter's or an Allocate's. */
struct Storage {
  std::string name;
  uint8_t* data = nullptr;
  int64_t nbytes = 0;
  std::unique_ptr<uint8_t[]> owned;
};

/**
 * A binding slot. Slots stay in their map once created and are only marked
 * unbound, so a Let or loop inside a hot loop allocates nothing.
 */
template <typename T>
struct Slot {
  T value;
  bool bound = false;
};

/** Binds `key` in `map` for its lifetime and restores the outer binding (if any) afterwards. */
template <typename T>
class ScopedBind {
 public:
  ScopedBind(std::unordered_map<const Variable*, Slot<T>>& map, const Variable* key, T value) : slot_(map[key]) {
    if (slot_.bound) outer_.emplace(std::move(slot_.value));
    slot_.value = std::move(value);
    slot_.bound = true;
  }
  ~ScopedBind() {
    if (outer_) slot_.value = std::move(*outer_);
    else slot_.bound = false;
  }
  ScopedBind(const ScopedBind&) = delete;
  ScopedBind& operator=(const ScopedBind&) = delete;
  T& value() { return slot_.value; }

 private:
  Slot<T>& slot_;
  std::optional<T> outer_;
};

class Interpreter {
 public:
  Interpreter(const PrimFunc& f, interp::GpuHooks* hooks) : func_(f), hooks_(hooks) {}
  void run(const std::vector<void*>& args);

 private:
  Value eval(const Expr& e);
  void exec(const Stmt& s);

  int64_t eval_index(const Expr& e, const char* what);
  Value eval_variable(const Variable* op);
  Value eval_binary(const BaseExprNode* op, const Expr& a, const Expr& b);
  Value eval_compare(const BaseExprNode* op, const Expr& a, const Expr& b);
  Value eval_select(const Select* op);
  Value eval_cast(const Cast* op);
  Value eval_call(const Call* op);
  Value eval_if_then_else(const Call* op);
  Value eval_bf16_pairs(const Call* op);
  Value eval_dot_i8x4(const Call* op);
  Value eval_ramp(const Ramp* op);
  Value eval_load(const BufferLoad* op);
  Value sync_threads();
  Value thread_allreduce(const Call* op);
  Value eval_mma(const pass::MmaCall& m);
  uint8_t* tile_element(const BufferLoad* first, int64_t first_offset, int64_t delta, bool write);
  [[noreturn]] void not_lowered(const char* what, const std::string& name);

  void exec_for(const For* op);
  void exec_store(const BufferStore* op);
  void exec_allocate(const Allocate* op);
  void exec_assert(const AssertStmt* op);

  Storage& storage_of(const BufferNode* b);
  int64_t element_span(const BufferNode* b);
  int access_offsets(const BufferNode* b, const std::vector<Expr>& indices, const Expr& predicate, const char* what, bool maskable, int64_t* offsets, uint64_t* active);
  const std::vector<Expr>& strides_of(const BufferNode* b);
  void check_in_bounds(const BufferNode* b, const Storage& s, const char* what, const int64_t* offsets, int lanes, uint64_t active);

  PrimFunc func_;
  // The GPU simulator's observer (null for plain interpretation).
  interp::GpuHooks* hooks_;
  std::unordered_map<const Variable*, Slot<Value>> env_;
  // Keyed by the buffer's data variable: storage flattening makes new 1-D
  // Buffer nodes that share `data` with the original, so the node is no key.
  std::unordered_map<const Variable*, Slot<Storage*>> storage_;
  std::vector<std::unique_ptr<Storage>> param_storage_;
  std::unordered_map<const BufferNode*, std::vector<Expr>> strides_cache_;
  // Lanes of the innermost vector if_then_else whose branch is being
  // evaluated, and which of them take it: loads of that many lanes skip the
  // others, so padding reads that are never used are not bounds errors.
  uint64_t mask_ = ~uint64_t(0);
  int mask_lanes_ = 0;

  /** Sets the lane mask for one branch of a vector if_then_else, restoring the outer one after. */
  struct LaneMask {
    LaneMask(Interpreter* in, uint64_t mask, int lanes) : in_(in), mask_(in->mask_), lanes_(in->mask_lanes_) {
      in->mask_ = mask;
      in->mask_lanes_ = lanes;
    }
    ~LaneMask() {
      in_->mask_ = mask_;
      in_->mask_lanes_ = lanes_;
    }
    Interpreter* in_;
    uint64_t mask_;
    int lanes_;
  };
};

// ---------------------------------------------------------------- set-up

Value handle_value(const void* p) {
  Value v(DataType::Handle());
  v.lane[0].i = static_cast<int64_t>(reinterpret_cast<uintptr_t>(p));
  return v;
}

void Interpreter::run(const std::vector<void*>& args) {
  const std::vector<Param>& params = func_.params();
  KILN_USER_CHECK(args.size() == params.size()) << "function takes " << params.size() << " arguments, got " << args.size();
  // Scalars first: buffer shapes may name them (symbolic shapes).
  for (size_t i = 0; i < params.size(); ++i) {
    const Param& p = params[i];
    if (p.is_buffer()) continue;
    KILN_USER_CHECK(p.var.defined()) << "parameter " << i << " is neither a buffer nor a variable";
    KILN_USER_CHECK(args[i] != nullptr) << "argument " << i << " (scalar '" << p.var.name() << "') is a null pointer";
    DataType t = p.var.dtype();
    KILN_USER_CHECK(t.is_scalar()) << "scalar parameter '" << p.var.name() << "' has vector type " << t.str();
    Value v(t);
    v.lane[0] = interp::load_lane(t, static_cast<const uint8_t*>(args[i]));
    Slot<Value>& slot = env_[p.var.get()];
    slot.value = v;
    slot.bound = true;
  }
  for (size_t i = 0; i < params.size(); ++i) {
    const Param& p = params[i];
    if (!p.is_buffer()) continue;
    const BufferNode* b = p.buffer.get();
    KILN_USER_CHECK(args[i] != nullptr) << "argument " << i << " (buffer '" << b->name << "') is a null pointer";
    auto s = std::make_unique<Storage>();
    s->name = b->name;
    s->data = static_cast<uint8_t*>(args[i]);
    s->nbytes = element_span(b) * b->dtype.bytes();
    for (const Variable* key : {b->data.get(), p.var.get()}) {
      if (!key) continue;
      storage_[key] = {s.get(), true};
      env_[key] = {handle_value(s->data), true};
    }
    param_storage_.push_back(std::move(s));
  }
  exec(func_.body());
}

// Elements covered by a buffer's layout: the product of the shape, or with
// explicit strides the furthest element plus one.
int64_t Interpreter::element_span(const BufferNode* b) {
  int64_t span = 1, last = 0;
  for (size_t d = 0; d < b->shape.size(); ++d) {
    int64_t n = eval_index(b->shape[d], "shape");
    KILN_USER_CHECK(n >= 0) << "buffer '" << b->name << "' has negative extent " << n << " in dimension " << d;
    if (n == 0) return 0;
    span *= n;
    KILN_USER_CHECK(span <= kMaxAllocBytes) << "buffer '" << b->name << "' is too large (" << span << "+ elements)";
    if (!b->strides.empty()) last += (n - 1) * eval_index(b->strides[d], "stride");
  }
  return b->strides.empty() ? span : last + 1;
}

// ------------------------------------------------------------- expressions

Value Interpreter::eval(const Expr& e) {
  KILN_CHECK(e.defined()) << "evaluating an undefined expression";
  const BaseExprNode* n = e.get();
  switch (n->kind) {
    case IRNodeKind::IntImm: {
      Value v(n->dtype);
      v.lane[0].i = static_cast<const IntImm*>(n)->value;
      return v;
    }
    case IRNodeKind::FloatImm: {
      Value v(n->dtype);
      v.lane[0].f = interp::round_to_type(n->dtype, static_cast<const FloatImm*>(n)->value);
      return v;
    }
    case IRNodeKind::StringImm: KILN_USER_ERROR() << "a string literal is not a value (only an assert message or call argument)"; break;
    case IRNodeKind::Variable: return eval_variable(static_cast<const Variable*>(n));
#define KILN_X(T) \
  case IRNodeKind::T: return eval_binary(n, static_cast<const T*>(n)->a, static_cast<const T*>(n)->b);
      KILN_X(Add) KILN_X(Sub) KILN_X(Mul) KILN_X(Div) KILN_X(Mod) KILN_X(FloorDiv) KILN_X(FloorMod) KILN_X(Min) KILN_X(Max) KILN_X(And) KILN_X(Or)
#undef KILN_X
#define KILN_X(T) \
  case IRNodeKind::T: return eval_compare(n, static_cast<const T*>(n)->a, static_cast<const T*>(n)->b);
      KILN_X(EQ) KILN_X(NE) KILN_X(LT) KILN_X(LE) KILN_X(GT) KILN_X(GE)
#undef KILN_X
    case IRNodeKind::Not: {
      Value v = eval(static_cast<const Not*>(n)->a);
      for (int l = 0; l < v.lanes(); ++l) v.lane[l].i = !v.lane[l].i;
      return v;
    }
    case IRNodeKind::Select: return eval_select(static_cast<const Select*>(n));
    case IRNodeKind::Cast: return eval_cast(static_cast<const Cast*>(n));
    case IRNodeKind::Call: return eval_call(static_cast<const Call*>(n));
    case IRNodeKind::BufferLoad: return eval_load(static_cast<const BufferLoad*>(n));
    case IRNodeKind::TensorLoad: not_lowered("a TensorLoad of tensor", static_cast<const TensorLoad*>(n)->producer->producer_name());
    case IRNodeKind::Ramp: return eval_ramp(static_cast<const Ramp*>(n));
    case IRNodeKind::Broadcast: {
      const Broadcast* op = static_cast<const Broadcast*>(n);
      Value s = eval(op->value);
      Value v(n->dtype);
      std::fill_n(v.lane, op->lanes, s.lane[0]);
      return v;
    }
    case IRNodeKind::Let: {
      const Let* op = static_cast<const Let*>(n);
      ScopedBind<Value> bind(env_, op->var.get(), eval(op->value));
      return eval(op->body);
    }
    case IRNodeKind::Reduce: not_lowered("a Reduce", "");
#define KILN_X(T) case IRNodeKind::T:
      KILN_FOR_EACH_STMT_NODE(KILN_X)
#undef KILN_X
      KILN_UNREACHABLE() << "statement node " << ir_node_kind_name(n->kind) << " in an expression";
  }
  return Value(DataType::Void());
}

void Interpreter::not_lowered(const char* what, const std::string& name) {
  KILN_USER_ERROR() << "the function is not lowered: it contains " << what << (name.empty() ? "" : " '" + name + "'") << "; run lowering before interpreting it";
  throw Error("not lowered");  // not reached: the line above throws
}

int64_t Interpreter::eval_index(const Expr& e, const char* what) {
  Value v = eval(e);
  KILN_USER_CHECK(v.lanes() == 1 && (v.type.is_integer() || v.type.is_bool())) << "a " << what << " must be a scalar integer, got " << v.type.str();
  return v.lane[0].i;
}

Value Interpreter::eval_variable(const Variable* op) {
  auto it = env_.find(op);
  KILN_USER_CHECK(it != env_.end() && it->second.bound) << "variable '" << op->name << "' is not bound: it is not a parameter, a loop variable or a let in scope";
  return it->second.value;
}

Value Interpreter::eval_binary(const BaseExprNode* op, const Expr& ea, const Expr& eb) {
  Value a = eval(ea), b = eval(eb);
  KILN_CHECK(a.type == b.type && a.type == op->dtype) << ir_node_kind_name(op->kind) << " of " << a.type.str() << " and " << b.type.str();
  DataType t = op->dtype.element_of();
  IRNodeKind k = op->kind;
  bool divides = k == IRNodeKind::Div || k == IRNodeKind::Mod || k == IRNodeKind::FloorDiv || k == IRNodeKind::FloorMod;
  Value r(op->dtype);
  for (int l = 0; l < r.lanes(); ++l) {
    KILN_USER_CHECK(!divides || t.is_float() || b.lane[l].i != 0) << "integer division by zero (" << ir_node_kind_name(k) << " of " << op->dtype.str() << ", dividend " << a.lane[l].i << ")";
    r.lane[l] = interp::binary_lane(k, t, a.lane[l], b.lane[l]);
  }
  return r;
}

Value Interpreter::eval_compare(const BaseExprNode* op, const Expr& ea, const Expr& eb) {
  Value a = eval(ea), b = eval(eb);
  KILN_CHECK(a.type == b.type) << ir_node_kind_name(op->kind) << " of " << a.type.str() << " and " << b.type.str();
  DataType t = a.type.element_of();
  Value r(op->dtype);
  for (int l = 0; l < r.lanes(); ++l) r.lane[l].i = interp::compare_lane(op->kind, t, a.lane[l], b.lane[l]);
  return r;
}

// Both sides are evaluated (that is Select's meaning); only if_then_else skips one.
Value Interpreter::eval_select(const Select* op) {
  Value c = eval(op->condition), t = eval(op->true_value), f = eval(op->false_value);
  Value r(op->dtype);
  for (int l = 0; l < r.lanes(); ++l) r.lane[l] = c.lane[c.lanes() == 1 ? 0 : l].i ? t.lane[l] : f.lane[l];
  return r;
}

Value Interpreter::eval_cast(const Cast* op) {
  Value v = eval(op->value);
  DataType from = v.type.element_of(), to = op->dtype.element_of();
  Value r(op->dtype);
  for (int l = 0; l < r.lanes(); ++l) r.lane[l] = interp::cast_lane(from, to, v.lane[l]);
  return r;
}

Value Interpreter::eval_call(const Call* op) {
  if (op->op == Intrinsic::IfThenElse) return eval_if_then_else(op);
  if (op->op == Intrinsic::Likely) return eval(op->args[0]);
  if (op->op == Intrinsic::SyncThreads) return sync_threads();
  if (op->op == Intrinsic::ThreadAllreduce) return thread_allreduce(op);
  if (pass::MmaCall m; pass::as_mma(Expr(op), &m)) return eval_mma(m);
  if (op->op == Intrinsic::PackBF16x2 || op->op == Intrinsic::DotBF16x2) return eval_bf16_pairs(op);
  if (op->op == Intrinsic::DotI8x4) return eval_dot_i8x4(op);
  DataType t = op->dtype.element_of();
  Value a = eval(op->args[0]);
  Value b = op->args.size() > 1 ? eval(op->args[1]) : a;
  KILN_CHECK(a.lanes() == op->dtype.lanes() && b.lanes() == a.lanes()) << intrinsic_name(op->op) << " of " << a.type.str() << " returning " << op->dtype.str();
  Value r(op->dtype);
  for (int l = 0; l < r.lanes(); ++l) {
    // Arguments are normally of the call's type already (call_math casts); convert if not.
    Lane x = a.type.element_of() == t ? a.lane[l] : interp::cast_lane(a.type.element_of(), t, a.lane[l]);
    Lane y = b.type.element_of() == t ? b.lane[l] : interp::cast_lane(b.type.element_of(), t, b.lane[l]);
    r.lane[l] = interp::math_lane(op->op, t, x, y);
  }
  return r;
}

// pack_bf16x2 and dot_bf16x2 lane by lane, as their doc in expr.h says.
Value Interpreter::eval_bf16_pairs(const Call* op) {
  Value a = eval(op->args[0]), b = eval(op->args[1]);
  Value r(op->dtype);
  for (int l = 0; l < r.lanes(); ++l) {
    if (op->op == Intrinsic::PackBF16x2) {
      uint32_t lo = interp::float_to_bfloat16(static_cast<float>(a.lane[l].f)), hi = interp::float_to_bfloat16(static_cast<float>(b.lane[l].f));
      r.lane[l].i = static_cast<int64_t>(lo | (hi << 16));
      continue;
    }
    auto half = [](int64_t v, int k) { return interp::bfloat16_to_float(static_cast<uint16_t>(static_cast<uint64_t>(v) >> (16 * k))); };
    float lo = half(a.lane[l].i, 0) * half(b.lane[l].i, 0);  // exact: 8-bit significands
    r.lane[l].f = std::fma(half(a.lane[l].i, 1), half(b.lane[l].i, 1), lo);
  }
  return r;
}

// dot_i8x4 lane by lane: each operand's bytes signed when it is int32.
Value Interpreter::eval_dot_i8x4(const Call* op) {
  Value a = eval(op->args[0]), b = eval(op->args[1]);
  bool sa = op->args[0].dtype().is_int(), sb = op->args[1].dtype().is_int();
  auto byte = [](int64_t w, int j, bool is_signed) -> int64_t {
    auto u = static_cast<uint8_t>(static_cast<uint64_t>(w) >> (8 * j));
    return is_signed ? static_cast<int64_t>(static_cast<int8_t>(u)) : static_cast<int64_t>(u);
  };
  Value r(op->dtype);
  for (int l = 0; l < r.lanes(); ++l) {
    int64_t s = 0;
    for (int j = 0; j < 4; ++j) s += byte(a.lane[l].i, j, sa) * byte(b.lane[l].i, j, sb);
    r.lane[l].i = s;
  }
  return r;
}

Value Interpreter::eval_if_then_else(const Call* op) {
  Value c = eval(op->args[0]);
  if (c.lanes() == 1) return eval(c.lane[0].i ? op->args[1] : op->args[2]);
  // A vector condition: evaluate each branch with the lanes that take it, so
  // that a load in a branch is only checked (and done) in those lanes.
  int n = c.lanes();
  KILN_CHECK(n == op->dtype.lanes()) << "if_then_else of a " << n << "-lane condition and " << op->dtype.str() << " values";
  uint64_t taken = 0;
  for (int l = 0; l < n; ++l) taken |= uint64_t(c.lane[l].i != 0) << l;
  uint64_t outer = mask_lanes_ == n ? mask_ : ~uint64_t(0);
  uint64_t all = n == 64 ? ~uint64_t(0) : (uint64_t(1) << n) - 1;
  Value r(op->dtype);
  for (int branch = 0; branch < 2; ++branch) {
    uint64_t lanes = (branch == 0 ? taken : ~taken) & outer & all;
    if (!lanes) continue;
    Value v;
    {
      LaneMask scope(this, lanes, n);
      v = eval(op->args[branch + 1]);
    }
    for (int l = 0; l < n; ++l)
      if ((lanes >> l) & 1) r.lane[l] = v.lane[l];
  }
  return r;
}

Value Interpreter::eval_ramp(const Ramp* op) {
  Value base = eval(op->base), stride = eval(op->stride);
  DataType t = op->base.dtype();
  Value r(op->dtype);
  for (int l = 0; l < op->lanes; ++l) {
    Lane k;
    if (t.is_float()) k.f = l;
    else k.i = l;
    r.lane[l] = interp::binary_lane(IRNodeKind::Add, t, base.lane[0], interp::binary_lane(IRNodeKind::Mul, t, stride.lane[0], k));
  }
  return r;
}

// ------------------------------------------------------------------ memory

Storage& Interpreter::storage_of(const BufferNode* b) {
  auto it = storage_.find(b->data.get());
  if (it != storage_.end() && it->second.bound) return *it->second.value;
  // A helpful hint for the likeliest cause: a pass rebuilt the buffer with a fresh data variable.
  bool same_name = false;
  for (const auto& [var, slot] : storage_) same_name |= slot.bound && slot.value->name == b->name;
  KILN_USER_ERROR() << "buffer '" << b->name << "' has no storage: its data variable is not a parameter's and no enclosing Allocate provides it"
                    << (same_name ? " (a live buffer of the same name has another data variable: a pass rebuilt it without keeping `data`)" : "");
  return *it->second.value;
}

const std::vector<Expr>& Interpreter::strides_of(const BufferNode* b) {
  auto it = strides_cache_.find(b);
  if (it == strides_cache_.end()) it = strides_cache_.emplace(b, Buffer(b).effective_strides()).first;
  return it->second;
}

// Flattens the indices of an access into one element offset per lane and
// checks each index against its dimension. Returns the number of lanes and
// in *active the lanes to access: all of them, except for a load under a
// vector if_then_else, which touches only the lanes taking its branch, and a
// predicated (masked) access, which touches only the lanes its predicate holds in.
int Interpreter::access_offsets(const BufferNode* b, const std::vector<Expr>& indices, const Expr& predicate, const char* what, bool maskable, int64_t* offsets,
                                uint64_t* active) {
  KILN_CHECK(indices.size() == b->shape.size()) << what << " of '" << b->name << "' with " << indices.size() << " indices";
  int lanes = 1;
  for (const Expr& i : indices) lanes = std::max(lanes, i.dtype().lanes());
  KILN_USER_CHECK(lanes <= kMaxLanes) << what << " of '" << b->name << "' with " << lanes << " lanes; the interpreter handles at most " << kMaxLanes;
  *active = maskable && mask_lanes_ == lanes ? mask_ : ~uint64_t(0);
  if (predicate.defined()) {
    Value p = eval(predicate);
    KILN_CHECK(p.lanes() == lanes) << what << " of '" << b->name << "': a predicate of " << p.lanes() << " lanes for " << lanes << "-lane indices";
    for (int l = 0; l < lanes; ++l)
      if (!p.lane[l].i) *active &= ~(uint64_t(1) << l);
  }
  if (indices.size() == 1 && b->strides.empty()) {
    // The common case after flattening: the index is the offset; the storage check suffices.
    Value idx = eval(indices[0]);
    for (int l = 0; l < lanes; ++l) offsets[l] = idx.lane[l].i;
    return lanes;
  }
  const std::vector<Expr>& strides = strides_of(b);
  std::fill_n(offsets, lanes, 0);
  for (size_t d = 0; d < indices.size(); ++d) {
    Value idx = eval(indices[d]);
    int64_t extent = eval_index(b->shape[d], "shape");
    int64_t stride = eval_index(strides[d], "stride");
    for (int l = 0; l < lanes; ++l) {
      int64_t i = idx.lane[idx.lanes() == 1 ? 0 : l].i;
      KILN_USER_CHECK(!((*active >> l) & 1) || (i >= 0 && i < extent)) << "out-of-bounds " << what << " of buffer '" << b->name << "': index " << i << " of dimension " << d << " is outside [0, " << extent << ")";
      offsets[l] += i * stride;
    }
  }
  return lanes;
}

void Interpreter::check_in_bounds(const BufferNode* b, const Storage& s, const char* what, const int64_t* offsets, int lanes, uint64_t active) {
  int64_t extent = s.nbytes / b->dtype.bytes();
  for (int l = 0; l < lanes; ++l) {
    if (!((active >> l) & 1)) continue;
    KILN_USER_CHECK(offsets[l] >= 0 && offsets[l] < extent) << "out-of-bounds " << what << " of buffer '" << b->name << "': index " << offsets[l] << " is outside [0, " << extent << ")"
                                                            << (lanes > 1 ? " (lane " + std::to_string(l) + " of " + std::to_string(lanes) + ")" : "");
  }
}

Value Interpreter::eval_load(const BufferLoad* op) {
  const BufferNode* b = op->buffer.get();
  Storage& s = storage_of(b);
  int64_t offsets[kMaxLanes];
  uint64_t active;
  int lanes = access_offsets(b, op->indices, op->predicate, "load", true, offsets, &active);
  KILN_CHECK(lanes == op->dtype.lanes()) << "load of " << op->dtype.str() << " from '" << b->name << "' with " << lanes << "-lane indices";
  check_in_bounds(b, s, "load", offsets, lanes, active);
  Value r(op->dtype);
  int bytes = b->dtype.bytes();
  for (int l = 0; l < lanes; ++l) {
    if ((active >> l) & 1) r.lane[l] = interp::load_lane(b->dtype, s.data + offsets[l] * bytes);
    else r.lane[l].i = 0;
  }
  if (hooks_)
    for (int l = 0; l < lanes; ++l)
      if ((active >> l) & 1) hooks_->access(b, s.data + offsets[l] * bytes, false);
  return r;
}

// Serially, a barrier has nothing to wait for; the GPU simulator counts it.
Value Interpreter::sync_threads() {
  if (hooks_) hooks_->barrier();
  Value v(DataType::Int(32));
  v.lane[0].i = 0;
  return v;
}

// The warp matrix calls (Intrinsic::MmaFill, MmaSync, MmaStore; see
// kiln/ir/expr.h) as the whole warp that reaches them: the simulator runs a
// warp's nest once (the nest binds no threadIdx.x), so one evaluation does
// the work of its 32 lanes. Sums run over k in order, in float32.
Value Interpreter::eval_mma(const pass::MmaCall& m) {
  constexpr int kTile = 16;
  const DataType f32 = DataType::Float(32);
  int64_t acc = eval_index(m.acc->indices[0], "tensor-core accumulator index");
  auto at = [&](int r, int c) { return r * m.ld + c; };
  if (m.op == Intrinsic::MmaFill) {
    Lane v = eval(m.value).lane[0];
    for (int r = 0; r < kTile; ++r)
      for (int c = 0; c < kTile; ++c) interp::store_lane(f32, tile_element(m.acc, acc, at(r, c), true), v);
  } else if (m.op == Intrinsic::MmaSync) {
    int64_t a = eval_index(m.a->indices[0], "tensor-core operand index"), b = eval_index(m.b->indices[0], "tensor-core operand index");
    DataType ta = m.a->buffer->dtype, tb = m.b->buffer->dtype;
    for (int r = 0; r < kTile; ++r) {
      for (int c = 0; c < kTile; ++c) {
        float sum = static_cast<float>(interp::load_lane(f32, tile_element(m.acc, acc, at(r, c), false)).f);
        for (int k = 0; k < kTile; ++k) {
          float x = static_cast<float>(interp::load_lane(ta, tile_element(m.a, a, r * m.a_row + k * m.a_k, false)).f);
          float y = static_cast<float>(interp::load_lane(tb, tile_element(m.b, b, k * m.b_k + c * m.b_col, false)).f);
          sum += x * y;
        }
        Lane out;
        out.f = sum;
        interp::store_lane(f32, tile_element(m.acc, acc, at(r, c), true), out);
      }
    }
  } else {
    int64_t d = eval_index(m.d->indices[0], "tensor-core store index");
    for (int r = 0; r < kTile; ++r)
      for (int c = 0; c < kTile; ++c) {
        Lane v = interp::load_lane(f32, tile_element(m.acc, acc, at(r, c), false));
        interp::store_lane(m.d->buffer->dtype, tile_element(m.d, d, r * m.d_row + c * m.d_col, true), v);
      }
  }
  Value v(DataType::Int(32));
  v.lane[0].i = 0;
  return v;
}

// Element `delta` past a tile's first element (at first_offset in first's buffer), bounds-checked and told to the simulator.
uint8_t* Interpreter::tile_element(const BufferLoad* first, int64_t first_offset, int64_t delta, bool write) {
  const BufferNode* b = first->buffer.get();
  Storage& s = storage_of(b);
  int64_t offset = first_offset + delta;
  check_in_bounds(b, s, write ? "tensor-core store" : "tensor-core load", &offset, 1, 1);
  uint8_t* p = s.data + offset * b->dtype.bytes();
  if (hooks_) hooks_->access(b, p, write);
  return p;
}

// The collective of pass::lower_thread_allreduce in its tree order (see
// kiln/pass/gpu.h), so the simulator gives the bits the GPU gives: each
// thread's operand evaluated as that thread, the warps' trees, and with
// more than one warp the barrier and the tree over the warps' results.
Value Interpreter::thread_allreduce(const Call* op) {
  const std::string& reducer = op->args[0].as<StringImm>()->value;
  IRNodeKind combine = IRNodeKind::Add;
  ReduceKind kind = ReduceKind::Sum;
  for (auto [k, node] : {std::pair{ReduceKind::Sum, IRNodeKind::Add}, {ReduceKind::Prod, IRNodeKind::Mul}, {ReduceKind::Max, IRNodeKind::Max}, {ReduceKind::Min, IRNodeKind::Min}})
    if (reducer == reduce_kind_name(k)) kind = k, combine = node;
  DataType t = op->dtype;
  int64_t n = eval_index(op->args[1], "thread_allreduce extent");
  int64_t warps = (n + 31) / 32;
  Lane identity = eval(reduce_identity(kind, t)).lane[0];
  std::vector<Lane> v(warps * 32, identity);
  {
    const Variable* each = op->args[2].as<Variable>();
    ScopedBind<Value> bind(env_, each, Value(each->dtype));
    for (int64_t k = 0; k < n; ++k) {
      bind.value().lane[0].i = k;
      if (hooks_) hooks_->enter_thread_loop("threadIdx.x", k);
      v[k] = eval(op->args[3]).lane[0];
    }
    if (hooks_) hooks_->exit_thread_loop("threadIdx.x");
  }
  // Lane l takes lane l + o for o = P/2 .. 1; lane 0 ends with the whole.
  auto tree = [&](Lane* lanes, int64_t count) {
    int64_t p = 1;
    while (p < count) p *= 2;
    for (int64_t o = p / 2; o >= 1; o /= 2)
      for (int64_t l = 0; l < o; ++l) lanes[l] = interp::binary_lane(combine, t, lanes[l], lanes[l + o]);
  };
  for (int64_t w = 0; w < warps; ++w) tree(&v[w * 32], std::min<int64_t>(n, 32));
  if (warps > 1) {
    if (hooks_) hooks_->barrier();
    std::vector<Lane> first(32, identity);
    for (int64_t w = 0; w < warps; ++w) first[w] = v[w * 32];
    tree(first.data(), warps);
    v[0] = first[0];
  }
  Value r(t);
  r.lane[0] = v[0];
  return r;
}

// -------------------------------------------------------------- statements

void Interpreter::exec(const Stmt& s) {
  KILN_CHECK(s.defined()) << "executing an undefined statement";
  const BaseStmtNode* n = s.get();
  switch (n->kind) {
    case IRNodeKind::For: return exec_for(static_cast<const For*>(n));
    case IRNodeKind::BufferStore: return exec_store(static_cast<const BufferStore*>(n));
    case IRNodeKind::Allocate: return exec_allocate(static_cast<const Allocate*>(n));
    case IRNodeKind::Seq:
      for (const Stmt& child : static_cast<const Seq*>(n)->seq) exec(child);
      return;
    case IRNodeKind::IfThenElse: {
      const IfThenElse* op = static_cast<const IfThenElse*>(n);
      if (eval_index(op->condition, "condition")) exec(op->then_case);
      else if (op->else_case.defined()) exec(op->else_case);
      return;
    }
    case IRNodeKind::LetStmt: {
      const LetStmt* op = static_cast<const LetStmt*>(n);
      ScopedBind<Value> bind(env_, op->var.get(), eval(op->value));
      return exec(op->body);
    }
    case IRNodeKind::Evaluate: {
      const Evaluate* op = static_cast<const Evaluate*>(n);
      if (!op->value.as<StringImm>()) eval(op->value);
      return;
    }
    case IRNodeKind::AttrStmt: return exec(static_cast<const AttrStmt*>(n)->body);
    case IRNodeKind::AssertStmt: return exec_assert(static_cast<const AssertStmt*>(n));
#define KILN_X(T) case IRNodeKind::T:
      KILN_FOR_EACH_EXPR_NODE(KILN_X)
#undef KILN_X
      KILN_UNREACHABLE() << "expression node " << ir_node_kind_name(n->kind) << " as a statement";
  }
}

// Every loop kind runs serially in order: parallel, vectorized, unrolled and
// thread-bound loops mean the same as a serial loop for a race-free body.
void Interpreter::exec_for(const For* op) {
  int64_t min = eval_index(op->min, "loop min");
  int64_t extent = eval_index(op->extent, "loop extent");
  DataType t = op->loop_var.dtype();
  ScopedBind<Value> bind(env_, op->loop_var.get(), Value(t));
  Value& v = bind.value();
  bool bound = hooks_ && op->kind == ForKind::ThreadBinding;
  for (int64_t k = 0; k < extent; ++k) {
    v.lane[0].i = interp::wrap_int(t, min + k);
    if (bound) hooks_->enter_thread_loop(op->thread_tag, min + k);
    exec(op->body);
  }
  if (bound) hooks_->exit_thread_loop(op->thread_tag);
}

void Interpreter::exec_store(const BufferStore* op) {
  const BufferNode* b = op->buffer.get();
  Storage& s = storage_of(b);
  Value v = eval(op->value);
  int64_t offsets[kMaxLanes];
  uint64_t active;
  int lanes = access_offsets(b, op->indices, op->predicate, "store", false, offsets, &active);
  KILN_CHECK(v.lanes() == lanes || v.lanes() == 1) << "store of " << v.type.str() << " to '" << b->name << "' with " << lanes << "-lane indices";
  check_in_bounds(b, s, "store", offsets, lanes, active);
  int bytes = b->dtype.bytes();
  DataType from = v.type.element_of();
  for (int l = 0; l < lanes; ++l) {
    if (!((active >> l) & 1)) continue;
    Lane x = v.lane[v.lanes() == 1 ? 0 : l];
    if (from != b->dtype) x = interp::cast_lane(from, b->dtype, x);
    interp::store_lane(b->dtype, s.data + offsets[l] * bytes, x);
    if (hooks_) hooks_->access(b, s.data + offsets[l] * bytes, true);
  }
}

void Interpreter::exec_allocate(const Allocate* op) {
  const BufferNode* b = op->buffer.get();
  Storage storage;
  storage.name = b->name;
  storage.nbytes = element_span(b) * b->dtype.bytes();
  KILN_USER_CHECK(storage.nbytes <= kMaxAllocBytes) << "allocation of buffer '" << b->name << "' is too large (" << storage.nbytes << " bytes)";
  storage.owned = std::make_unique<uint8_t[]>(storage.nbytes);
  storage.data = storage.owned.get();
  // Poisoned, not zeroed: code that reads before writing shows NaNs or garbage.
  interp::poison(b->dtype, storage.data, storage.nbytes / b->dtype.bytes());
  if (hooks_) hooks_->allocate(b, storage.data, storage.nbytes);
  ScopedBind<Storage*> bind_storage(storage_, b->data.get(), &storage);
  ScopedBind<Value> bind_handle(env_, b->data.get(), handle_value(storage.data));
  exec(op->body);
}

void Interpreter::exec_assert(const AssertStmt* op) {
  Value c = eval(op->condition);
  for (int l = 0; l < c.lanes(); ++l) KILN_USER_CHECK(c.lane[l].i) << "assertion failed: " << op->message;
  exec(op->body);
}

}  // namespace

void interpret(const PrimFunc& f, const std::vector<void*>& args) {
  KILN_USER_CHECK(f.defined()) << "interpret of an undefined function";
  try {
    Interpreter(f, nullptr).run(args);
  } catch (const Exception& e) {
    // Name the function, for a user error and a kiln bug alike: the oracle runs many of them in one test.
    rethrow_as(e, "in function '" + f.name() + "': " + e.what());
  }
}

void interpret_args(const PrimFunc& f, const std::vector<Arg>& args) {
  KILN_USER_CHECK(f.defined()) << "interpret_args of an undefined function";
  PackedArgs packed(codegen::kernel_info(f), args);
  interpret(f, std::vector<void*>(packed.data(), packed.data() + packed.size()));
}

namespace interp {
void interpret_with_hooks(const PrimFunc& f, const std::vector<void*>& args, GpuHooks* hooks) {
  KILN_USER_CHECK(f.defined()) << "simulating an undefined function";
  try {
    Interpreter(f, hooks).run(args);
  } catch (const Exception& e) {
    rethrow_as(e, "in function '" + f.name() + "': " + e.what());
  }
}
}  // namespace interp

}  // namespace kiln
