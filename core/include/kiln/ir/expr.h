/** \file
 * Expressions of the kiln IR.
 *
 * Each node is a struct with public, immutable fields and a static `make`
 * that checks its inputs (so building a node doubles as verification). The
 * handle `Expr` holds a counted reference; `e.as<Add>()` downcasts by tag
 * without RTTI. Integer division and modulo come in two flavours: Div/Mod
 * truncate toward zero (C semantics), FloorDiv/FloorMod round toward
 * negative infinity (Python semantics, what index arithmetic uses). For
 * floats Div is true division. Vectors are expressions with lanes > 1: Ramp
 * (base, base + stride, ...) and Broadcast (the same value in every lane).
 */
#ifndef KILN_IR_EXPR_H
#define KILN_IR_EXPR_H

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/ir/dtype.h"
#include "kiln/ir/object.h"

namespace kiln {

#define KILN_FOR_EACH_EXPR_NODE(X) \
  X(IntImm)                        \
  X(FloatImm)                      \
  X(StringImm)                     \
  X(Variable)                      \
  X(Add)                           \
  X(Sub)                           \
  X(Mul)                           \
  X(Div)                           \
  X(Mod)                           \
  X(FloorDiv)                      \
  X(FloorMod)                      \
  X(Min)                           \
  X(Max)                           \
  X(EQ)                            \
  X(NE)                            \
  X(LT)                            \
  X(LE)                            \
  X(GT)                            \
  X(GE)                            \
  X(And)                           \
  X(Or)                            \
  X(Not)                           \
  X(Select)                        \
  X(Cast)                          \
  X(Call)                          \
  X(BufferLoad)                    \
  X(TensorLoad)                    \
  X(Ramp)                          \
  X(Broadcast)                     \
  X(Let)                           \
  X(Reduce)

#define KILN_FOR_EACH_STMT_NODE(X) \
  X(For)                           \
  X(BufferStore)                   \
  X(Allocate)                      \
  X(Seq)                           \
  X(IfThenElse)                    \
  X(LetStmt)                       \
  X(Evaluate)                      \
  X(AttrStmt)                      \
  X(AssertStmt)

/** One tag per IR node class; `as<T>()` compares it. */
enum class IRNodeKind : uint8_t {
#define KILN_X(name) name,
  KILN_FOR_EACH_EXPR_NODE(KILN_X) KILN_FOR_EACH_STMT_NODE(KILN_X)
#undef KILN_X
};

const char* ir_node_kind_name(IRNodeKind kind);

struct IRNode : public Object {
  explicit IRNode(IRNodeKind k) : kind(k) {}
  const IRNodeKind kind;
};

struct BaseExprNode : public IRNode {
  BaseExprNode(IRNodeKind k, DataType t) : IRNode(k), dtype(t) {}
  const DataType dtype;
};

/** CRTP base: fixes the node's tag. */
template <typename T>
struct ExprNode : public BaseExprNode {
  explicit ExprNode(DataType t) : BaseExprNode(T::kKind, t) {}
};

/** Handle to an immutable expression. */
class Expr : public Ref<BaseExprNode> {
 public:
  Expr() = default;
  Expr(const BaseExprNode* n) : Ref<BaseExprNode>(n) {}
  template <typename U>
  Expr(const Ref<U>& r) : Ref<BaseExprNode>(r) {}
  /** An int32 immediate. */
  Expr(int v);
  /** A float32 immediate (kiln's default float). */
  Expr(float v);
  /** A float64 immediate. */
  Expr(double v);

  DataType dtype() const { return get()->dtype; }

  template <typename T>
  const T* as() const {
    const BaseExprNode* n = get();
    return n && n->kind == T::kKind ? static_cast<const T*>(n) : nullptr;
  }
};

#define KILN_DECLARE_NODE(T) static constexpr IRNodeKind kKind = IRNodeKind::T

struct IntImm : public ExprNode<IntImm> {
  KILN_DECLARE_NODE(IntImm);
  IntImm(DataType t, int64_t v) : ExprNode(t), value(v) {}
  /** Integer or bool immediate; the value is wrapped to the type's width. */
  static Expr make(DataType t, int64_t value);
  const int64_t value;
};

struct FloatImm : public ExprNode<FloatImm> {
  KILN_DECLARE_NODE(FloatImm);
  FloatImm(DataType t, double v) : ExprNode(t), value(v) {}
  static Expr make(DataType t, double value);
  const double value;
};

/** A string literal: only as an argument of calls and asserts. */
struct StringImm : public ExprNode<StringImm> {
  KILN_DECLARE_NODE(StringImm);
  StringImm(std::string v) : ExprNode(DataType::Handle()), value(std::move(v)) {}
  static Expr make(std::string value);
  const std::string value;
};

/** A variable. Identity is the node itself: two Variables with one name are different. */
struct Variable : public ExprNode<Variable> {
  KILN_DECLARE_NODE(Variable);
  Variable(DataType t, std::string n) : ExprNode(t), name(std::move(n)) {}
  const std::string name;
};

/** Handle to a Variable. */
class Var : public Expr {
 public:
  Var() = default;
  explicit Var(std::string name, DataType t = DataType::Int(32));
  explicit Var(const Variable* v) : Expr(v) {}
  const Variable* get() const { return static_cast<const Variable*>(Expr::get()); }
  const Variable* operator->() const { return get(); }
  const std::string& name() const { return get()->name; }
};

template <typename T>
struct BinaryNode : public ExprNode<T> {
  BinaryNode(DataType t, Expr x, Expr y) : ExprNode<T>(t), a(std::move(x)), b(std::move(y)) {}
  /** Both operands must have the same dtype (op.h promotes; make checks). */
  static Expr make(Expr a, Expr b);
  const Expr a, b;
};

#define KILN_BINARY_NODE(T)                          \
  struct T : public BinaryNode<T> {                  \
    KILN_DECLARE_NODE(T);                            \
    using BinaryNode<T>::BinaryNode;                 \
  }
KILN_BINARY_NODE(Add);
KILN_BINARY_NODE(Sub);
KILN_BINARY_NODE(Mul);
KILN_BINARY_NODE(Div);
KILN_BINARY_NODE(Mod);
KILN_BINARY_NODE(FloorDiv);
KILN_BINARY_NODE(FloorMod);
KILN_BINARY_NODE(Min);
KILN_BINARY_NODE(Max);
#undef KILN_BINARY_NODE

/** Comparisons: operands of one dtype, result bool with the operands' lanes. */
template <typename T>
struct CmpNode : public ExprNode<T> {
  CmpNode(DataType t, Expr x, Expr y) : ExprNode<T>(t), a(std::move(x)), b(std::move(y)) {}
  static Expr make(Expr a, Expr b);
  const Expr a, b;
};
#define KILN_CMP_NODE(T)          \
  struct T : public CmpNode<T> {  \
    KILN_DECLARE_NODE(T);         \
    using CmpNode<T>::CmpNode;    \
  }
KILN_CMP_NODE(EQ);
KILN_CMP_NODE(NE);
KILN_CMP_NODE(LT);
KILN_CMP_NODE(LE);
KILN_CMP_NODE(GT);
KILN_CMP_NODE(GE);
#undef KILN_CMP_NODE

/** Logical and/or of bools. */
struct And : public BinaryNode<And> {
  KILN_DECLARE_NODE(And);
  using BinaryNode<And>::BinaryNode;
};
struct Or : public BinaryNode<Or> {
  KILN_DECLARE_NODE(Or);
  using BinaryNode<Or>::BinaryNode;
};

struct Not : public ExprNode<Not> {
  KILN_DECLARE_NODE(Not);
  Not(DataType t, Expr x) : ExprNode(t), a(std::move(x)) {}
  static Expr make(Expr a);
  const Expr a;
};

/** Both branches are evaluated; use Call(if_then_else) when one may be out of bounds. */
struct Select : public ExprNode<Select> {
  KILN_DECLARE_NODE(Select);
  Select(DataType t, Expr c, Expr x, Expr y) : ExprNode(t), condition(std::move(c)), true_value(std::move(x)), false_value(std::move(y)) {}
  static Expr make(Expr condition, Expr true_value, Expr false_value);
  const Expr condition, true_value, false_value;
};

struct Cast : public ExprNode<Cast> {
  KILN_DECLARE_NODE(Cast);
  Cast(DataType t, Expr x) : ExprNode(t), value(std::move(x)) {}
  static Expr make(DataType t, Expr value);
  const Expr value;
};

/** Built-in functions a Call can name. Math functions apply lane-wise to floats. */
enum class Intrinsic : uint8_t {
  Exp, Log, Sqrt, Rsqrt, Tanh, Erf, Pow, Fabs, Sigmoid, Floor, Ceil, Round, Trunc, Sin, Cos, Abs,
  /** if_then_else(c, t, f): evaluates only the branch taken (safe for padding). */
  IfThenElse,
  /** likely(c): a hint that c is usually true; value is c. */
  Likely,
  /**
   * sync_threads("shared"): a barrier of the threads of a GPU block
   * (__syncthreads); an int32 call used only as Evaluate. Inserted by
   * pass::insert_barriers (kiln/pass/gpu.h).
   */
  SyncThreads,
  /**
   * thread_allreduce("sum", n, t, value): the reduction ("sum", "max", "min"
   * or "prod") of `value` over the threads t = 0..n-1 of a GPU block's
   * threadIdx.x, where `value` is an expression of the variable t, which the
   * call binds (each thread evaluates it with t = its threadIdx.x; threads
   * from n on contribute the identity). Stands only in a block-level store,
   * which every thread of the block reaches; the operands are combined in
   * the tree order of pass::lower_thread_allreduce (kiln/pass/gpu.h), which
   * the CUDA code and the GPU simulator share. Made by that pass.
   */
  ThreadAllreduce,
  /**
   * pack_bf16x2(lo, hi): two float32 values rounded to bfloat16 (nearest
   * even) and packed into one uint32, lo in the low half: the operand
   * layout of the bfloat16 dot products.
   */
  PackBF16x2,
  /**
   * dot_bf16x2(a, b): the float32 dot product of two pairs of bfloat16
   * packed by pack_bf16x2, lo*lo + hi*hi rounded once (the products are
   * exact in float32). `acc + dot_bf16x2(a, b)` on a target with AVX-512
   * BF16 becomes vdpbf16ps, which adds hi*hi then lo*lo to acc, rounding
   * after each add and flushing denormals (as a contracted multiply-add may
   * differ from its two steps).
   */
  DotBF16x2,
  /**
   * Warp matrix operations on 16x16 tiles (tensor cores; made by
   * pass::lower_tensor_core, see kiln/pass/gpu.h, and read through
   * pass::MmaCall). int32 calls used only as Evaluate, run by all 32 lanes
   * of a warp alike. The first four arguments name the float32 accumulator
   * tile: acc (a load of its element (0, 0), element (r, c) being acc's
   * index + r*ld + c), ld, and the tile's fragment number of the warp's
   * frags fragments (free of thread variables).
   *   mma_fill(acc, ld, frag, frags, value):             tile = value
   *   mma_sync(acc, ld, frag, frags, a, ar, ak, b, bk, bc):
   *       tile[r][c] += sum over k of a[r*ar + k*ak] * b[k*bk + c*bc]
   *       (16x16x16; a and b load their tiles' first element, float16 or
   *       bfloat16, one of each pair of strides 1; products exact in float32)
   *   mma_store(acc, ld, frag, frags, d, dr, dc):         d[r*dr + c*dc] = tile
   */
  MmaFill,
  MmaSync,
  MmaStore,
  /**
   * dot_i8x4(a, b): the int32 dot product of the four bytes packed in a
   * and the four in b (byte j in bits 8j..8j+7), each byte signed when its
   * operand is int32 and unsigned when uint32: sum over j of a_j * b_j
   * (exact: at most 4 * 255 * 255). `acc + dot_i8x4(a, b)` wraps like int32
   * addition. The LLVM backend makes it vpdpbusd for uint32 a and int32 b
   * on AVX-512 VNNI / AVX-VNNI, sdot (both int32) and udot (both uint32) on
   * AArch64 with dotprod, and widening integer code elsewhere.
   */
  DotI8x4,
};
const char* intrinsic_name(Intrinsic op);
/** Looks an intrinsic up by name; throws kiln::Error naming the known ones. */
Intrinsic intrinsic_from_name(const std::string& name);

struct Call : public ExprNode<Call> {
  KILN_DECLARE_NODE(Call);
  Call(DataType t, Intrinsic o, std::vector<Expr> a) : ExprNode(t), op(o), args(std::move(a)) {}
  static Expr make(DataType t, Intrinsic op, std::vector<Expr> args);
  const Intrinsic op;
  const std::vector<Expr> args;
};

struct BufferNode;
class Buffer;

/** Reads buffer[indices...]. After storage flattening there is one index. A Ramp index makes a vector load. */
struct BufferLoad : public ExprNode<BufferLoad> {
  KILN_DECLARE_NODE(BufferLoad);
  BufferLoad(DataType t, Ref<BufferNode> b, std::vector<Expr> i, Expr p = Expr());
  /** A predicate (a bool vector of the load's lanes) reads only the lanes
      where it holds: the others touch no memory and read 0 (a masked tail). */
  static Expr make(const Buffer& buffer, std::vector<Expr> indices, Expr predicate = Expr());
  const Ref<BufferNode> buffer;
  const std::vector<Expr> indices;
  const Expr predicate;  // undefined: every lane
};

/** Something a compute body can read by multi-dimensional index before lowering: a te Tensor. */
struct ProducerNode : public Object {
  virtual const std::string& producer_name() const = 0;
  virtual DataType producer_dtype() const = 0;
  virtual const std::vector<Expr>& producer_shape() const = 0;
};

/** Reads a tensor (a producer) at indices; lowering turns it into a BufferLoad. */
struct TensorLoad : public ExprNode<TensorLoad> {
  KILN_DECLARE_NODE(TensorLoad);
  TensorLoad(DataType t, Ref<ProducerNode> p, std::vector<Expr> i) : ExprNode(t), producer(std::move(p)), indices(std::move(i)) {}
  static Expr make(Ref<ProducerNode> producer, std::vector<Expr> indices);
  const Ref<ProducerNode> producer;
  const std::vector<Expr> indices;
};

/** base, base + stride, ..., base + (lanes-1)*stride. */
struct Ramp : public ExprNode<Ramp> {
  KILN_DECLARE_NODE(Ramp);
  Ramp(DataType t, Expr b, Expr s, int l) : ExprNode(t), base(std::move(b)), stride(std::move(s)), lanes(l) {}
  static Expr make(Expr base, Expr stride, int lanes);
  const Expr base, stride;
  const int lanes;
};

struct Broadcast : public ExprNode<Broadcast> {
  KILN_DECLARE_NODE(Broadcast);
  Broadcast(DataType t, Expr v, int l) : ExprNode(t), value(std::move(v)), lanes(l) {}
  static Expr make(Expr value, int lanes);
  const Expr value;
  const int lanes;
};

struct Let : public ExprNode<Let> {
  KILN_DECLARE_NODE(Let);
  Let(DataType t, Var v, Expr x, Expr b) : ExprNode(t), var(std::move(v)), value(std::move(x)), body(std::move(b)) {}
  static Expr make(Var var, Expr value, Expr body);
  const Var var;
  const Expr value, body;
};

/** A half-open interval [min, min + extent). */
struct Range {
  Expr min, extent;
  Range() = default;
  Range(Expr m, Expr e) : min(std::move(m)), extent(std::move(e)) {}
};

enum class IterVarKind : uint8_t { DataPar, Reduce, ThreadIndex, Opaque };

/** A loop variable with its domain: an axis of a compute op or a schedule. */
struct IterVarNode : public Object {
  IterVarNode(Var v, Range d, IterVarKind k, std::string tag) : var(std::move(v)), dom(std::move(d)), kind(k), thread_tag(std::move(tag)) {}
  const Var var;
  const Range dom;
  const IterVarKind kind;
  /** For ThreadIndex: "blockIdx.x", "threadIdx.y", ... */
  const std::string thread_tag;
};
class IterVar : public Ref<IterVarNode> {
 public:
  IterVar() = default;
  IterVar(const IterVarNode* n) : Ref<IterVarNode>(n) {}
  IterVar(Var var, Range dom, IterVarKind kind, std::string thread_tag = "");
  const Var& var() const { return get()->var; }
  const Range& dom() const { return get()->dom; }
  IterVarKind kind() const { return get()->kind; }
  const std::string& name() const { return get()->var.name(); }
};

enum class ReduceKind : uint8_t { Sum, Max, Min, Prod };
const char* reduce_kind_name(ReduceKind k);
/** The identity element of a reduction for a dtype (0, -inf/lowest, +inf/max, 1). */
Expr reduce_identity(ReduceKind k, DataType t);
/** Combines an accumulator and a value: a + b, max(a, b), ... */
Expr reduce_combine(ReduceKind k, Expr acc, Expr value);

/** A reduction over `axis` of `source` where `condition` holds. Only at the top of a compute body. */
struct Reduce : public ExprNode<Reduce> {
  KILN_DECLARE_NODE(Reduce);
  Reduce(DataType t, ReduceKind k, Expr s, std::vector<IterVar> a, Expr c) : ExprNode(t), reduce_kind(k), source(std::move(s)), axis(std::move(a)), condition(std::move(c)) {}
  static Expr make(ReduceKind kind, Expr source, std::vector<IterVar> axis, Expr condition = Expr());
  const ReduceKind reduce_kind;
  const Expr source;
  const std::vector<IterVar> axis;
  /** Always defined (true when there is no condition). */
  const Expr condition;
};

/** Handy constants. */
Expr make_const(DataType t, double value);
Expr make_zero(DataType t);
inline Expr const_true(int lanes = 1) { return IntImm::make(DataType::Bool(lanes), 1); }
inline Expr const_false(int lanes = 1) { return IntImm::make(DataType::Bool(lanes), 0); }
/** The integer value of an IntImm (or of a Broadcast of one), or nullptr. */
const int64_t* as_const_int(const Expr& e);
bool is_const_int(const Expr& e, int64_t value);
inline bool is_zero(const Expr& e) { return is_const_int(e, 0); }
inline bool is_one(const Expr& e) { return is_const_int(e, 1); }

}  // namespace kiln

#endif  // KILN_IR_EXPR_H
