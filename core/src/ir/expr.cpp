#include "kiln/ir/expr.h"

#include <cmath>
#include <limits>
#include <mutex>
#include <unordered_map>

#include "kiln/ir/buffer.h"
#include "kiln/ir/variable_serial.h"
#include "kiln/support/error.h"

namespace kiln {

const char* ir_node_kind_name(IRNodeKind kind) {
  switch (kind) {
#define KILN_X(T) \
  case IRNodeKind::T: return #T;
    KILN_FOR_EACH_EXPR_NODE(KILN_X)
    KILN_FOR_EACH_STMT_NODE(KILN_X)
#undef KILN_X
  }
  return "?";
}

Expr::Expr(int v) : Expr(IntImm::make(DataType::Int(32), v)) {}
Expr::Expr(float v) : Expr(FloatImm::make(DataType::Float(32), v)) {}
Expr::Expr(double v) : Expr(FloatImm::make(DataType::Float(64), v)) {}

Expr IntImm::make(DataType t, int64_t value) {
  KILN_CHECK(t.is_scalar() && (t.is_integer() || t.is_bool())) << "IntImm of type " << t.str();
  if (t.is_bool()) value = value != 0;
  else if (t.bits() < 64) {
    // Wrap to the width of the type, sign-extending for signed types.
    uint64_t mask = (uint64_t(1) << t.bits()) - 1;
    uint64_t u = static_cast<uint64_t>(value) & mask;
    if (t.is_int() && (u >> (t.bits() - 1)) & 1) u |= ~mask;
    value = static_cast<int64_t>(u);
  }
  return new IntImm(t, value);
}

Expr FloatImm::make(DataType t, double value) {
  KILN_CHECK(t.is_scalar() && t.is_float()) << "FloatImm of type " << t.str();
  if (t.bits() == 32) value = static_cast<float>(value);
  return new FloatImm(t, value);
}

Expr StringImm::make(std::string value) { return new StringImm(std::move(value)); }

namespace {
// Address -> creation serial. A freed Variable's address is overwritten when reused.
std::mutex serial_mu;
std::unordered_map<const Variable*, uint64_t>& serials() {
  static auto* m = new std::unordered_map<const Variable*, uint64_t>();
  return *m;
}
uint64_t next_serial = 0;

const Variable* with_serial(const Variable* v) {
  std::lock_guard<std::mutex> lock(serial_mu);
  serials()[v] = ++next_serial;
  return v;
}
}  // namespace

uint64_t variable_serial(const Variable* v) {
  std::lock_guard<std::mutex> lock(serial_mu);
  auto it = serials().find(v);
  return it == serials().end() ? 0 : it->second;
}

Var::Var(std::string name, DataType t) : Expr(with_serial(new Variable(t, std::move(name)))) {}

template <typename T>
Expr BinaryNode<T>::make(Expr a, Expr b) {
  KILN_CHECK(a.defined() && b.defined()) << ir_node_kind_name(T::kKind) << " of an undefined operand";
  KILN_CHECK(a.dtype() == b.dtype()) << ir_node_kind_name(T::kKind) << " of mismatched types " << a.dtype().str() << " and " << b.dtype().str();
  if constexpr (std::is_same_v<T, And> || std::is_same_v<T, Or>) {
    KILN_CHECK(a.dtype().is_bool()) << ir_node_kind_name(T::kKind) << " of non-bool " << a.dtype().str();
  }
  if constexpr (std::is_same_v<T, FloorDiv> || std::is_same_v<T, FloorMod> || std::is_same_v<T, Mod>) {
    KILN_CHECK(a.dtype().is_integer() || std::is_same_v<T, Mod>) << ir_node_kind_name(T::kKind) << " of non-integer " << a.dtype().str();
  }
  DataType t = a.dtype();
  return new T(t, std::move(a), std::move(b));
}

template <typename T>
Expr CmpNode<T>::make(Expr a, Expr b) {
  KILN_CHECK(a.defined() && b.defined()) << ir_node_kind_name(T::kKind) << " of an undefined operand";
  KILN_CHECK(a.dtype() == b.dtype()) << ir_node_kind_name(T::kKind) << " of mismatched types " << a.dtype().str() << " and " << b.dtype().str();
  DataType t = DataType::Bool(a.dtype().lanes());
  return new T(t, std::move(a), std::move(b));
}

#define KILN_X(T) template struct BinaryNode<T>;
KILN_X(Add) KILN_X(Sub) KILN_X(Mul) KILN_X(Div) KILN_X(Mod) KILN_X(FloorDiv) KILN_X(FloorMod) KILN_X(Min) KILN_X(Max) KILN_X(And) KILN_X(Or)
#undef KILN_X
#define KILN_X(T) template struct CmpNode<T>;
KILN_X(EQ) KILN_X(NE) KILN_X(LT) KILN_X(LE) KILN_X(GT) KILN_X(GE)
#undef KILN_X

Expr Not::make(Expr a) {
  KILN_CHECK(a.defined() && a.dtype().is_bool()) << "Not of non-bool";
  DataType t = a.dtype();
  return new Not(t, std::move(a));
}

Expr Select::make(Expr c, Expr t, Expr f) {
  KILN_CHECK(c.defined() && t.defined() && f.defined()) << "Select of an undefined operand";
  KILN_CHECK(c.dtype().is_bool()) << "Select condition must be bool, not " << c.dtype().str();
  KILN_CHECK(t.dtype() == f.dtype()) << "Select of mismatched types " << t.dtype().str() << " and " << f.dtype().str();
  KILN_CHECK(c.dtype().lanes() == 1 || c.dtype().lanes() == t.dtype().lanes()) << "Select condition lanes differ from value lanes";
  DataType ty = t.dtype();
  return new Select(ty, std::move(c), std::move(t), std::move(f));
}

Expr Cast::make(DataType t, Expr v) {
  KILN_CHECK(v.defined()) << "Cast of undefined";
  KILN_CHECK(t.lanes() == v.dtype().lanes()) << "Cast from " << v.dtype().str() << " to " << t.str() << " changes lanes";
  return new Cast(t, std::move(v));
}

static const char* const kIntrinsicNames[] = {"exp", "log", "sqrt", "rsqrt", "tanh", "erf", "pow", "fabs", "sigmoid", "floor", "ceil", "round", "trunc", "sin", "cos", "abs", "if_then_else", "likely", "sync_threads", "thread_allreduce", "pack_bf16x2", "dot_bf16x2", "mma_fill", "mma_sync", "mma_store", "dot_i8x4"};

const char* intrinsic_name(Intrinsic op) { return kIntrinsicNames[static_cast<int>(op)]; }

Intrinsic intrinsic_from_name(const std::string& name) {
  std::string known;
  for (size_t i = 0; i < std::size(kIntrinsicNames); ++i) {
    if (name == kIntrinsicNames[i]) return static_cast<Intrinsic>(i);
    known += (i ? ", " : "") + std::string(kIntrinsicNames[i]);
  }
  KILN_USER_ERROR() << "unknown intrinsic '" << name << "'; known: " << known;
  return Intrinsic::Exp;
}

Expr Call::make(DataType t, Intrinsic op, std::vector<Expr> args) {
  for (const Expr& a : args) KILN_CHECK(a.defined()) << "call of " << intrinsic_name(op) << " with an undefined argument";
  bool pairs = op == Intrinsic::PackBF16x2 || op == Intrinsic::DotBF16x2;
  size_t want = op == Intrinsic::ThreadAllreduce ? 4 : op == Intrinsic::IfThenElse ? 3 : op == Intrinsic::Pow || pairs || op == Intrinsic::DotI8x4 ? 2 : 1;
  if (op == Intrinsic::MmaFill || op == Intrinsic::MmaSync || op == Intrinsic::MmaStore) want = op == Intrinsic::MmaFill ? 5 : op == Intrinsic::MmaSync ? 10 : 7;
  KILN_CHECK(args.size() == want) << intrinsic_name(op) << " takes " << want << " arguments, got " << args.size();
  if (pairs) {
    // pack: float32 -> uint32; dot: uint32 pairs -> float32; lanes agree.
    DataType in = op == Intrinsic::PackBF16x2 ? DataType::Float(32, t.lanes()) : DataType::UInt(32, t.lanes());
    DataType out = op == Intrinsic::PackBF16x2 ? DataType::UInt(32, t.lanes()) : DataType::Float(32, t.lanes());
    KILN_CHECK(t == out && args[0].dtype() == in && args[1].dtype() == in)
        << intrinsic_name(op) << " takes two " << in.str() << " and gives " << out.str() << ", got " << args[0].dtype().str() << ", " << args[1].dtype().str()
        << " -> " << t.str();
  }
  if (op == Intrinsic::DotI8x4) {
    auto word = [&](DataType d) { return (d.is_int() || d.is_uint()) && d.bits() == 32 && d.lanes() == t.lanes(); };
    KILN_CHECK(args.size() == 2 && t == DataType::Int(32, t.lanes()) && word(args[0].dtype()) && word(args[1].dtype()))
        << "dot_i8x4 takes two int32/uint32 words of packed bytes and gives int32, got " << args[0].dtype().str() << ", " << args[1].dtype().str()
        << " -> " << t.str();
  }
  if (op == Intrinsic::ThreadAllreduce) {
    const StringImm* reducer = args[0].as<StringImm>();
    const IntImm* n = args[1].as<IntImm>();
    KILN_CHECK(reducer && (reducer->value == "sum" || reducer->value == "prod" || reducer->value == "max" || reducer->value == "min"))
        << "thread_allreduce's first argument names its reducer: \"sum\", \"prod\", \"max\" or \"min\"";
    KILN_CHECK(n && n->value > 0 && args[2].as<Variable>() && args[3].dtype() == t) << "thread_allreduce(reducer, n > 0 constant, thread variable, value of the call's type)";
  }
  return new Call(t, op, std::move(args));
}

BufferLoad::BufferLoad(DataType t, Ref<BufferNode> b, std::vector<Expr> i, Expr p)
    : ExprNode(t), buffer(std::move(b)), indices(std::move(i)), predicate(std::move(p)) {}

Expr BufferLoad::make(const Buffer& buffer, std::vector<Expr> indices, Expr predicate) {
  KILN_CHECK(buffer.defined()) << "load from an undefined buffer";
  KILN_CHECK(static_cast<int>(indices.size()) == buffer.ndim()) << "load from " << buffer.name() << " with " << indices.size() << " indices, buffer has " << buffer.ndim() << " dimensions";
  int lanes = 1;
  for (const Expr& i : indices) {
    KILN_CHECK(i.defined() && i.dtype().is_integer()) << "load from " << buffer.name() << " with a non-integer index";
    lanes = std::max(lanes, i.dtype().lanes());
  }
  KILN_CHECK(!predicate.defined() || (predicate.dtype().is_bool() && predicate.dtype().lanes() == lanes && lanes > 1))
      << "load from " << buffer.name() << ": its predicate must be a bool vector of the load's " << lanes << " lanes";
  return new BufferLoad(buffer.dtype().with_lanes(lanes), buffer, std::move(indices), std::move(predicate));
}

Expr TensorLoad::make(Ref<ProducerNode> producer, std::vector<Expr> indices) {
  KILN_CHECK(producer.defined()) << "read of an undefined tensor";
  KILN_USER_CHECK(indices.size() == producer->producer_shape().size()) << "tensor " << producer->producer_name() << " has " << producer->producer_shape().size() << " dimensions but is indexed with " << indices.size();
  for (const Expr& i : indices) KILN_USER_CHECK(i.defined() && i.dtype().is_integer() && i.dtype().is_scalar()) << "tensor " << producer->producer_name() << " indexed with a non-integer expression";
  DataType t = producer->producer_dtype();
  return new TensorLoad(t, std::move(producer), std::move(indices));
}

Expr Ramp::make(Expr base, Expr stride, int lanes) {
  KILN_CHECK(base.defined() && stride.defined() && base.dtype().is_scalar() && base.dtype() == stride.dtype()) << "Ramp of mismatched base/stride";
  KILN_CHECK(lanes > 1) << "Ramp of " << lanes << " lanes";
  DataType t = base.dtype().with_lanes(lanes);
  return new Ramp(t, std::move(base), std::move(stride), lanes);
}

Expr Broadcast::make(Expr value, int lanes) {
  KILN_CHECK(value.defined() && value.dtype().is_scalar()) << "Broadcast of a non-scalar";
  KILN_CHECK(lanes > 1) << "Broadcast of " << lanes << " lanes";
  DataType t = value.dtype().with_lanes(lanes);
  return new Broadcast(t, std::move(value), lanes);
}

Expr Let::make(Var var, Expr value, Expr body) {
  KILN_CHECK(value.defined() && body.defined() && var.dtype() == value.dtype()) << "Let of mismatched types";
  DataType t = body.dtype();
  return new Let(t, std::move(var), std::move(value), std::move(body));
}

IterVar::IterVar(Var var, Range dom, IterVarKind kind, std::string thread_tag) : IterVar(new IterVarNode(std::move(var), std::move(dom), kind, std::move(thread_tag))) {}

const char* reduce_kind_name(ReduceKind k) {
  switch (k) {
    case ReduceKind::Sum: return "sum";
    case ReduceKind::Max: return "max";
    case ReduceKind::Min: return "min";
    case ReduceKind::Prod: return "prod";
  }
  return "?";
}

static Expr lowest_value(DataType t) {
  if (t.is_float()) return FloatImm::make(t, -std::numeric_limits<double>::infinity());
  if (t.is_uint() || t.is_bool()) return IntImm::make(t, 0);
  return IntImm::make(t, t.bits() == 64 ? std::numeric_limits<int64_t>::min() : -(int64_t(1) << (t.bits() - 1)));
}

static Expr highest_value(DataType t) {
  if (t.is_float()) return FloatImm::make(t, std::numeric_limits<double>::infinity());
  if (t.is_bool()) return IntImm::make(t, 1);
  if (t.is_uint()) return IntImm::make(t, t.bits() == 64 ? -1 : static_cast<int64_t>((uint64_t(1) << t.bits()) - 1));
  return IntImm::make(t, t.bits() == 64 ? std::numeric_limits<int64_t>::max() : (int64_t(1) << (t.bits() - 1)) - 1);
}

Expr reduce_identity(ReduceKind k, DataType t) {
  KILN_CHECK(t.is_scalar()) << "reduction identity of a vector type";
  switch (k) {
    case ReduceKind::Sum: return make_const(t, 0);
    case ReduceKind::Prod: return make_const(t, 1);
    case ReduceKind::Max: return lowest_value(t);
    case ReduceKind::Min: return highest_value(t);
  }
  return Expr();
}

Expr reduce_combine(ReduceKind k, Expr acc, Expr value) {
  switch (k) {
    case ReduceKind::Sum: return Add::make(std::move(acc), std::move(value));
    case ReduceKind::Prod: return Mul::make(std::move(acc), std::move(value));
    case ReduceKind::Max: return Max::make(std::move(acc), std::move(value));
    case ReduceKind::Min: return Min::make(std::move(acc), std::move(value));
  }
  return Expr();
}

Expr Reduce::make(ReduceKind kind, Expr source, std::vector<IterVar> axis, Expr condition) {
  KILN_CHECK(source.defined() && source.dtype().is_scalar()) << "Reduce of an undefined or vector source";
  for (const IterVar& iv : axis) KILN_CHECK(iv.defined() && iv.kind() == IterVarKind::Reduce) << "Reduce over a non-reduction axis";
  if (!condition.defined()) condition = const_true();
  KILN_CHECK(condition.dtype() == DataType::Bool()) << "Reduce condition must be a scalar bool";
  DataType t = source.dtype();
  return new Reduce(t, kind, std::move(source), std::move(axis), std::move(condition));
}

Expr make_const(DataType t, double value) {
  if (t.is_vector()) return Broadcast::make(make_const(t.element_of(), value), t.lanes());
  if (t.is_float()) return FloatImm::make(t, value);
  return IntImm::make(t, static_cast<int64_t>(value));
}

Expr make_zero(DataType t) { return make_const(t, 0); }

const int64_t* as_const_int(const Expr& e) {
  if (!e.defined()) return nullptr;
  if (const IntImm* i = e.as<IntImm>()) return &i->value;
  if (const Broadcast* b = e.as<Broadcast>()) return as_const_int(b->value);
  return nullptr;
}

bool is_const_int(const Expr& e, int64_t value) {
  const int64_t* v = as_const_int(e);
  return v && *v == value;
}

}  // namespace kiln
