// Constant integer bounds: interval arithmetic on int64 with saturation to
// kNegInf/kPosInf, so an overflowing bound becomes "unbounded" rather than a
// wrong finite number.

#include <algorithm>

#include "simplify_internal.h"

namespace kiln::arith::detail {

namespace {
constexpr int64_t kNegInf = ConstIntBound::kNegInf;
constexpr int64_t kPosInf = ConstIntBound::kPosInf;

bool is_inf(int64_t v) { return v == kNegInf || v == kPosInf; }
int sign(int64_t v) { return v > 0 ? 1 : v < 0 ? -1 : 0; }
ConstIntBound everything() { return {}; }
ConstIntBound point(int64_t v) { return {v, v}; }

// The values a type can hold, exactly (uint64's top half folds into kPosInf).
ConstIntBound exact_range(DataType t) {
  if (t.is_bool()) return {0, 1};
  if (t.is_int()) {
    if (t.bits() >= 64) return everything();
    return {-(int64_t(1) << (t.bits() - 1)), (int64_t(1) << (t.bits() - 1)) - 1};
  }
  if (t.is_uint()) return {0, t.bits() >= 63 ? kPosInf : (int64_t(1) << t.bits()) - 1};
  return everything();
}

// For wrapping types a bound that leaves the type's range means the value
// may have wrapped anywhere; no-overflow types keep the bound as computed.
ConstIntBound fit(DataType t, ConstIntBound b) {
  if (no_overflow(t) || !(t.is_integer() || t.is_bool())) return b;
  ConstIntBound r = exact_range(t);
  if (b.min < r.min || b.max > r.max) return type_bound(t);
  return b;
}

ConstIntBound bound_mul(ConstIntBound a, ConstIntBound b) {
  int64_t c[4] = {sat_mul(a.min, b.min), sat_mul(a.min, b.max), sat_mul(a.max, b.min), sat_mul(a.max, b.max)};
  return {*std::min_element(c, c + 4), *std::max_element(c, c + 4)};
}

// x / y for bound ends, with the conventions that make the corner method
// exact for sign-definite divisors: inf / finite = inf (signed), finite / inf
// rounds toward 0 (trunc) or toward -inf (floor).
int64_t end_div(int64_t x, int64_t y, bool floor) {
  if (is_inf(x)) return sign(x) * sign(y) > 0 ? kPosInf : kNegInf;
  if (is_inf(y)) return floor && x != 0 && sign(x) != sign(y) ? -1 : 0;
  return floor ? floor_div(x, y) : x / y;
}

ConstIntBound div_corners(ConstIntBound a, int64_t ylo, int64_t yhi, bool floor) {
  int64_t c[4] = {end_div(a.min, ylo, floor), end_div(a.min, yhi, floor), end_div(a.max, ylo, floor), end_div(a.max, yhi, floor)};
  return {*std::min_element(c, c + 4), *std::max_element(c, c + 4)};
}

// Division by zero is undefined, so the divisor range is split around 0 and
// each sign-definite half handled by its corners.
ConstIntBound bound_div(ConstIntBound a, ConstIntBound b, bool floor) {
  std::optional<ConstIntBound> r;
  if (b.max >= 1) r = div_corners(a, std::max<int64_t>(b.min, 1), b.max, floor);
  if (b.min <= -1) {
    ConstIntBound n = div_corners(a, b.min, std::min<int64_t>(b.max, -1), floor);
    r = r ? bound_union(*r, n) : n;
  }
  return r ? *r : everything();
}

int64_t abs_end(int64_t v) { return v < 0 ? sat_neg(v) : v; }
int64_t max_abs(ConstIntBound b) { return std::max(abs_end(b.min), abs_end(b.max)); }

ConstIntBound bound_floormod(ConstIntBound a, ConstIntBound b) {
  if (b.is_const() && b.min > 0) {
    int64_t c = b.min;
    if (a.bounded() && floor_div(a.min, c) == floor_div(a.max, c)) return {floor_mod(a.min, c), floor_mod(a.max, c)};
  }
  if (b.min >= 1) return {0, a.min >= 0 ? std::min(a.max, sat_add(b.max, -1)) : sat_add(b.max, -1)};
  if (b.max <= -1) return {a.max <= 0 ? std::max(a.min, sat_add(b.min, 1)) : sat_add(b.min, 1), 0};
  int64_t m = sat_add(max_abs(b), -1);
  return {sat_neg(m), m};
}

// C remainder: the sign follows the dividend and |r| < |b|.
ConstIntBound bound_truncmod(ConstIntBound a, ConstIntBound b) {
  if (b.is_const() && b.min != 0 && a.bounded() && (a.min >= 0 || a.max <= 0)) {
    int64_t c = b.min;
    if (a.min / c == a.max / c) return {std::min(a.min % c, a.max % c), std::max(a.min % c, a.max % c)};
  }
  int64_t m = sat_add(max_abs(b), -1);
  ConstIntBound r{std::max(a.min, sat_neg(m)), std::min(a.max, m)};
  if (a.min >= 0) r.min = 0;
  if (a.max <= 0) r.max = 0;
  return r;
}

ConstIntBound bound_cast(DataType to, DataType from, ConstIntBound b) {
  if (to.is_bool()) return {0, 1};
  if (!(to.is_integer())) return everything();
  if (!(from.is_integer() || from.is_bool())) return type_bound(to);
  ConstIntBound r = exact_range(to);
  if (b.min >= r.min && b.max <= r.max) return b;
  return type_bound(to);
}

class BoundEvaluator : public IRVisitor {
 public:
  explicit BoundEvaluator(const Facts& facts) : facts_(facts) {}

  ConstIntBound get(const Expr& e) {
    DataType t = e.dtype();
    if (!(t.is_integer() || t.is_bool())) return everything();
    if (t.is_bool() && !e.as<IntImm>() && !e.as<Broadcast>()) return {0, 1};
    visit_expr(e);
    return result_;
  }

 protected:
  using IRVisitor::visit;
  void visit(const IntImm* op) override {
    result_ = op->dtype.is_uint() && op->dtype.bits() == 64 && op->value < 0 ? type_bound(op->dtype) : point(op->value);
  }
  void visit(const Variable* op) override {
    if (auto it = local_.find(op); it != local_.end()) {
      result_ = it->second;
    } else if (auto f = facts_.find(op); f != facts_.end()) {
      result_ = f->second.bound;
    } else {
      result_ = type_bound(op->dtype);
    }
  }
  void visit(const Add* op) override { linear(op); }
  void visit(const Sub* op) override { linear(op); }
  void visit(const Mul* op) override {
    const IntImm* ca = op->a.as<IntImm>();
    const IntImm* cb = op->b.as<IntImm>();
    if (cb) result_ = bound_scale(get(op->a), cb->value);
    else if (ca) result_ = bound_scale(get(op->b), ca->value);
    else result_ = bound_mul(get(op->a), get(op->b));
    result_ = fit(op->dtype, result_);
  }
  void visit(const Div* op) override { result_ = fit(op->dtype, bound_div(get(op->a), get(op->b), false)); }
  void visit(const FloorDiv* op) override { result_ = fit(op->dtype, bound_div(get(op->a), get(op->b), true)); }
  void visit(const Mod* op) override { result_ = bound_truncmod(get(op->a), get(op->b)); }
  void visit(const FloorMod* op) override { result_ = bound_floormod(get(op->a), get(op->b)); }
  void visit(const Min* op) override {
    ConstIntBound a = get(op->a), b = get(op->b);
    result_ = {std::min(a.min, b.min), std::min(a.max, b.max)};
  }
  void visit(const Max* op) override {
    ConstIntBound a = get(op->a), b = get(op->b);
    result_ = {std::max(a.min, b.min), std::max(a.max, b.max)};
  }
  void visit(const Select* op) override { result_ = bound_union(get(op->true_value), get(op->false_value)); }
  void visit(const Cast* op) override { result_ = bound_cast(op->dtype, op->value.dtype(), get(op->value)); }
  void visit(const Call* op) override {
    if (op->op == Intrinsic::IfThenElse) {
      result_ = bound_union(get(op->args[1]), get(op->args[2]));
    } else if (op->op == Intrinsic::Abs && op->dtype.is_int()) {
      ConstIntBound a = get(op->args[0]);
      result_ = fit(op->dtype, a.min >= 0 ? a : a.max <= 0 ? ConstIntBound{sat_neg(a.max), sat_neg(a.min)} : ConstIntBound{0, max_abs(a)});
    } else {
      result_ = type_bound(op->dtype);
    }
  }
  void visit(const BufferLoad* op) override { result_ = type_bound(op->dtype); }
  void visit(const TensorLoad* op) override { result_ = type_bound(op->dtype); }
  void visit(const Reduce* op) override { result_ = type_bound(op->dtype); }
  void visit(const Ramp* op) override {
    ConstIntBound steps = bound_mul(get(op->stride), {0, op->lanes - 1});
    result_ = fit(op->dtype, bound_add(get(op->base), steps));
  }
  void visit(const Broadcast* op) override { result_ = get(op->value); }
  void visit(const Let* op) override {
    ConstIntBound v = get(op->value);
    auto old = local_.find(op->var.get());
    std::optional<ConstIntBound> saved;
    if (old != local_.end()) saved = old->second;
    local_[op->var.get()] = v;
    result_ = get(op->body);
    if (saved) local_[op->var.get()] = *saved;
    else local_.erase(op->var.get());
  }

 private:
  // Sums go through linear forms so shared atoms cancel (x - x is [0, 0]);
  // that regrouping is only sound when nothing wraps.
  void linear(const BaseExprNode* op) {
    Expr e(op);
    if (no_overflow(op->dtype) && op->dtype.is_scalar()) {
      result_ = linear_bound(linear_form(e), [this](const Expr& atom) { return get(atom); });
      return;
    }
    const Add* add = e.as<Add>();
    const Sub* sub = e.as<Sub>();
    ConstIntBound a = get(add ? add->a : sub->a);
    ConstIntBound b = get(add ? add->b : sub->b);
    if (sub) b = {sat_neg(b.max), sat_neg(b.min)};
    result_ = fit(op->dtype, bound_add(a, b));
  }

  const Facts& facts_;
  std::unordered_map<const Variable*, ConstIntBound> local_;
  ConstIntBound result_;
};
}  // namespace

int64_t sat_add(int64_t a, int64_t b) {
  if (a == kNegInf || b == kNegInf) return (a == kPosInf || b == kPosInf) ? 0 : kNegInf;
  if (a == kPosInf || b == kPosInf) return kPosInf;
  int64_t r;
  if (__builtin_add_overflow(a, b, &r) || is_inf(r)) return a > 0 ? kPosInf : kNegInf;
  return r;
}

int64_t sat_neg(int64_t a) {
  if (a == kNegInf) return kPosInf;
  if (a == kPosInf) return kNegInf;
  return -a;
}

int64_t sat_mul(int64_t a, int64_t b) {
  if (a == 0 || b == 0) return 0;
  if (is_inf(a) || is_inf(b)) return sign(a) * sign(b) > 0 ? kPosInf : kNegInf;
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r) || is_inf(r)) return sign(a) * sign(b) > 0 ? kPosInf : kNegInf;
  return r;
}

ConstIntBound bound_add(ConstIntBound a, ConstIntBound b) { return {sat_add(a.min, b.min), sat_add(a.max, b.max)}; }

ConstIntBound bound_scale(ConstIntBound a, int64_t k) {
  int64_t x = sat_mul(a.min, k), y = sat_mul(a.max, k);
  return {std::min(x, y), std::max(x, y)};
}

ConstIntBound bound_union(ConstIntBound a, ConstIntBound b) { return {std::min(a.min, b.min), std::max(a.max, b.max)}; }

int64_t floor_div(int64_t a, int64_t b) {
  if (b == -1) return a == kNegInf ? a : -a;  // the one quotient that overflows wraps, as the hardware would
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

int64_t floor_mod(int64_t a, int64_t b) {
  if (b == -1) return 0;
  int64_t r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

ConstIntBound type_bound(DataType t) {
  if (t.is_bool()) return {0, 1};
  if (t.is_integer() && t.bits() <= 16) return exact_range(t);
  if (t.is_uint()) return {0, kPosInf};
  return everything();
}

ConstIntBound const_int_bound(const Expr& e, const Facts& facts) {
  KILN_CHECK(e.defined()) << "const_int_bound of an undefined expression";
  return BoundEvaluator(facts).get(e);
}

}  // namespace kiln::arith::detail
