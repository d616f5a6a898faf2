// Tests of the IR core: dtypes, node checks, operator promotion, functors,
// the printer (golden text) and structural equality / hashing.
#include <gtest/gtest.h>

#include <random>
#include <unordered_map>

#include "kiln/ir/functor.h"
#include "kiln/ir/op.h"
#include "kiln/ir/printer.h"
#include "kiln/ir/structural.h"
#include "kiln/support/error.h"

namespace kiln {
namespace {

const DataType f32 = DataType::Float(32);
const DataType f64 = DataType::Float(64);
const DataType i32 = DataType::Int(32);
const DataType i64 = DataType::Int(64);

// A stand-in for a te Tensor: TensorLoad needs a producer.
struct FakeTensor : public ProducerNode {
  FakeTensor(std::string n, DataType t, std::vector<Expr> s) : name(std::move(n)), dtype(t), shape(std::move(s)) {}
  const std::string& producer_name() const override { return name; }
  DataType producer_dtype() const override { return dtype; }
  const std::vector<Expr>& producer_shape() const override { return shape; }
  std::string name;
  DataType dtype;
  std::vector<Expr> shape;
};

Ref<ProducerNode> fake_tensor(const std::string& name, std::vector<Expr> shape) { return new FakeTensor(name, f32, std::move(shape)); }

IterVar reduce_axis(const std::string& name, int extent) { return IterVar(Var(name), Range(0, extent), IterVarKind::Reduce); }

// ---------------------------------------------------------------- dtype

TEST(DType, ParseAndStrRoundTrip) {
  for (const char* s : {"int8", "int16", "int32", "int64", "uint8", "uint64", "float16", "float32", "float64", "bfloat16", "bool", "float32x8", "int32x4", "boolx16", "handle"}) {
    DataType t = DataType::parse(s);
    EXPECT_EQ(t.str(), s);
    EXPECT_EQ(DataType::parse(t.str()), t);
  }
  EXPECT_EQ(DataType::parse("float32x8"), DataType::Float(32, 8));
  EXPECT_EQ(DataType::parse("float32x8").lanes(), 8);
  EXPECT_EQ(DataType::parse("bool").bits(), 1);
  EXPECT_EQ(DataType::Int(64).bytes(), 8);
}

TEST(DType, ParseErrors) {
  for (const char* s : {"float33", "int7", "bfloat32", "foo", "", "float32xq", "float32x0", "int3a"}) {
    EXPECT_THROW(DataType::parse(s), Error) << s;
  }
  try {
    DataType::parse("float33");
    FAIL() << "float33 parsed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("float33"), std::string::npos) << "the message names the bad dtype";
  }
}

// ---------------------------------------------------------------- nodes

TEST(Nodes, MakeChecksItsInputs) {
  Var x("x"), f("f", f32);
  EXPECT_THROW(Add::make(x, f), InternalError);
  EXPECT_THROW(Select::make(x, x, x), InternalError);
  EXPECT_THROW(Ramp::make(x, x, 1), InternalError);
  EXPECT_THROW(Broadcast::make(Ramp::make(x, 1, 4), 4), InternalError);
  EXPECT_THROW(Cast::make(DataType::Float(32, 4), x), InternalError);
  EXPECT_THROW(For::make(x, 0, 8, ForKind::ThreadBinding, make_nop()), InternalError);
  Buffer a = Buffer::make("A", f32, {16});
  EXPECT_THROW(BufferStore::make(a, x, {x}), InternalError) << "int32 value into a float32 buffer";
  EXPECT_THROW(BufferLoad::make(a, {x, x}), InternalError) << "two indices into a 1-d buffer";
  EXPECT_THROW(BufferLoad::make(a, {f}), InternalError) << "float index";
  EXPECT_THROW(TensorLoad::make(fake_tensor("T", {4, 4}), {x}), Error);  // a user error: te reads are written by users
  EXPECT_EQ(Add::make(x, x).dtype(), i32);
  EXPECT_EQ(LT::make(f, f).dtype(), DataType::Bool());
  EXPECT_EQ(BufferLoad::make(a, {Ramp::make(x, 1, 8)}).dtype(), DataType::Float(32, 8));
}

TEST(Nodes, IntImmWrapsToWidth) {
  EXPECT_EQ(IntImm::make(DataType::Int(8), 200).as<IntImm>()->value, -56);
  EXPECT_EQ(IntImm::make(DataType::UInt(8), 300).as<IntImm>()->value, 44);
  EXPECT_EQ(IntImm::make(DataType::Bool(), 5).as<IntImm>()->value, 1);
}

TEST(Nodes, SeqFlattensAndCollapses) {
  Stmt a = Evaluate::make(1), b = Evaluate::make(2), c = Evaluate::make(3);
  Stmt s = Seq::make({a, Seq::make({b, c})});
  ASSERT_TRUE(s.as<Seq>());
  EXPECT_EQ(s.as<Seq>()->seq.size(), 3u);
  EXPECT_TRUE(Seq::make({a, Stmt()}).same_as(a));
  EXPECT_TRUE(is_nop(Seq::make({})));
}

// ---------------------------------------------------------------- promotion

TEST(Promotion, ImmediateAdaptsToTheOtherSide) {
  Var x("x"), y("y", i64), h("h", DataType::Int(16));
  Expr e = x + 1;
  ASSERT_TRUE(e.as<Add>());
  EXPECT_EQ(e.dtype(), i32);
  EXPECT_TRUE(e.as<Add>()->b.as<IntImm>());
  Expr g = y + 1;
  EXPECT_EQ(g.dtype(), i64);
  ASSERT_TRUE(g.as<Add>()->b.as<IntImm>()) << "the immediate is re-typed, not cast";
  EXPECT_EQ(g.as<Add>()->b.dtype(), i64);
  EXPECT_EQ((1 + h).dtype(), DataType::Int(16));
  // A float immediate next to an integer expression makes it float32.
  Expr k = x * 1.5f;
  EXPECT_EQ(k.dtype(), f32);
  EXPECT_TRUE(k.as<Mul>()->a.as<Cast>());
}

TEST(Promotion, MixedTypes) {
  Var i("i"), f("f", f32), d("d", f64), b("b", DataType::Int(8)), u("u", DataType::UInt(32));
  Expr e = i + f;
  EXPECT_EQ(e.dtype(), f32);
  EXPECT_TRUE(e.as<Add>()->a.as<Cast>()) << "int is cast to the float type";
  Expr g = f + d;
  EXPECT_EQ(g.dtype(), f64);
  EXPECT_TRUE(g.as<Add>()->a.as<Cast>());
  EXPECT_EQ((b + i).dtype(), i32) << "wider integer wins";
  EXPECT_EQ((i + u).dtype(), i32) << "int with uint of one width gives int";
  EXPECT_EQ((i < f).dtype(), DataType::Bool());
  EXPECT_THROW((i < 3) + (i < 4), Error) << "arithmetic on bools";
  EXPECT_THROW(floordiv(f, f), Error);
  EXPECT_EQ(exp(i).dtype(), f32) << "math on an int casts to float32";
}

TEST(Promotion, VectorsBroadcastScalars) {
  Var x("x");
  Expr r = Ramp::make(x, 1, 8);
  Expr e = r + 2;
  EXPECT_EQ(e.dtype(), DataType::Int(32, 8));
  ASSERT_TRUE(e.as<Add>()->b.as<Broadcast>());
  EXPECT_EQ(e.as<Add>()->b.as<Broadcast>()->lanes, 8);
  Expr fv = Broadcast::make(Expr(1.0f), 8);
  EXPECT_EQ((fv * x).dtype(), DataType::Float(32, 8));
  EXPECT_THROW(r + Ramp::make(x, 1, 4), Error);
}

// ---------------------------------------------------------------- functors

Stmt sample_nest(Var* i_out = nullptr) {
  Var i("i"), j("j"), n("n");
  Buffer a = Buffer::make("A", f32, {64, 64}), b = Buffer::make("B", f32, {64, 64});
  Stmt store = BufferStore::make(b, BufferLoad::make(a, {i, j}) * 2.0f, {i, j});
  Stmt guarded = IfThenElse::make(i < n, store, BufferStore::make(b, Expr(0.0f), {i, j}));
  if (i_out) *i_out = i;
  return For::make(i, 0, 64, ForKind::Parallel, For::make(j, 0, 64, ForKind::Serial, guarded));
}

TEST(Functor, MutatorThatChangesNothingReturnsTheSameNode) {
  class Nothing : public IRMutator {};
  Stmt s = sample_nest();
  EXPECT_TRUE(Nothing().mutate(s).same_as(s));
  Expr e = select(Var("x") < 3, exp(Var("y", f32)), Expr(1.0f));
  EXPECT_TRUE(Nothing().mutate(e).same_as(e));
}

TEST(Functor, MutatorRebuildsOnlyWhatChanged) {
  // Replaces the constant 2f by 3f and nothing else.
  class Bump : public IRMutator {
   protected:
    using IRMutator::visit;
    Expr visit(const FloatImm* op) override { return op->value == 2.0 ? Expr(3.0f) : Expr(op); }
  };
  Stmt s = sample_nest();
  Stmt t = Bump().mutate(s);
  EXPECT_FALSE(t.same_as(s));
  EXPECT_NE(to_string(t).find("A[i, j]*3f"), std::string::npos) << to_string(t);
  const IfThenElse* before = s.as<For>()->body.as<For>()->body.as<IfThenElse>();
  const IfThenElse* after = t.as<For>()->body.as<For>()->body.as<IfThenElse>();
  EXPECT_TRUE(after->else_case.same_as(before->else_case)) << "untouched branch is shared";
}

TEST(Functor, Substitute) {
  Var x("x"), y("y");
  Expr e = x * 2 + y;
  Expr r = substitute(e, [&](const Variable* v) { return v == x.get() ? y + 1 : Expr(); });
  EXPECT_EQ(to_string(r), "(y + 1)*2 + y");
  EXPECT_TRUE(substitute(e, [](const Variable*) { return Expr(); }).same_as(e));
  Var i;
  Stmt s = sample_nest(&i);
  Stmt t = substitute(s, [&](const Variable* v) { return v->name == "n" ? Expr(32) : Expr(); });
  EXPECT_NE(to_string(t).find("if (i < 32)"), std::string::npos) << to_string(t);
  EXPECT_FALSE(uses_var(t, [](const Variable* v) { return v->name == "n"; }));
  EXPECT_TRUE(uses_var(s, [](const Variable* v) { return v->name == "n"; }));
}

// ---------------------------------------------------------------- printer

TEST(Printer, ExpressionPrecedence) {
  Var i("i"), j("j"), a("a"), b("b"), c("c");
  EXPECT_EQ(to_string(i * 64 + j), "i*64 + j");
  EXPECT_EQ(to_string(i * (64 + j)), "i*(64 + j)");
  EXPECT_EQ(to_string(a - b - c), "a - b - c");
  EXPECT_EQ(to_string(a - (b - c)), "a - (b - c)");
  EXPECT_EQ(to_string(a + (b + c)), "a + (b + c)");
  EXPECT_EQ(to_string(a * b / c), "a*b / c");
  EXPECT_EQ(to_string(a / (b * c)), "a / (b*c)");
  EXPECT_EQ(to_string(a % 4), "a % 4");
  EXPECT_EQ(to_string(a + Expr(-3)), "a + -3");
  EXPECT_EQ(to_string(floordiv(i, 8) + floormod(i, 8)), "floordiv(i, 8) + floormod(i, 8)");
  EXPECT_EQ(to_string((a < b && b < c) || a == 0), "(a < b && b < c) || a == 0");
  EXPECT_EQ(to_string(a < b || b < c || a == 0), "a < b || b < c || a == 0");
  EXPECT_EQ(to_string((a < b) == (b < c)), "(a < b) == (b < c)");
  EXPECT_EQ(to_string(a < b && (b < c || a == 0)), "a < b && (b < c || a == 0)");
  EXPECT_EQ(to_string(!(a < b)), "!(a < b)");
  EXPECT_EQ(to_string(min(a, b + 1)), "min(a, b + 1)");
  EXPECT_EQ(to_string(select(a < b, a, max(b, c))), "select(a < b, a, max(b, c))");
}

TEST(Printer, Immediates) {
  EXPECT_EQ(to_string(Expr(3)), "3");
  EXPECT_EQ(to_string(Expr(-3)), "-3");
  EXPECT_EQ(to_string(IntImm::make(i64, 3)), "(int64)3");
  EXPECT_EQ(to_string(IntImm::make(DataType::UInt(8), 255)), "(uint8)255");
  EXPECT_EQ(to_string(IntImm::make(DataType::UInt(64), -1)), "(uint64)18446744073709551615");
  EXPECT_EQ(to_string(Expr(1.5f)), "1.5f");
  EXPECT_EQ(to_string(Expr(0.0f)), "0f");
  EXPECT_EQ(to_string(Expr(0.1f)), "0.1f");
  EXPECT_EQ(to_string(Expr(1.5)), "1.5");
  EXPECT_EQ(to_string(Expr(2.0)), "2.0") << "a float64 never reads as an int";
  EXPECT_EQ(to_string(FloatImm::make(DataType::Float(16), 1.0)), "(float16)1.0");
  EXPECT_EQ(to_string(reduce_identity(ReduceKind::Max, f32)), "(float32)-inf");
  EXPECT_EQ(to_string(const_true()), "true");
  EXPECT_EQ(to_string(const_false()), "false");
  EXPECT_EQ(to_string(StringImm::make("a\"b")), "\"a\\\"b\"");
}

TEST(Printer, CallsLoadsAndVectors) {
  Var x("x"), k("k"), i("i");
  Var f("f", f32);
  Buffer a = Buffer::make("A", f32, {64, 64});
  EXPECT_EQ(to_string(cast(f32, x)), "float32(x)");
  EXPECT_EQ(to_string(exp(f) + 1.0f), "exp(f) + 1f");
  EXPECT_EQ(to_string(if_then_else(x < 4, f, Expr(0.0f))), "if_then_else(x < 4, f, 0f)");
  EXPECT_EQ(to_string(BufferLoad::make(a, {i, x * 2})), "A[i, x*2]");
  EXPECT_EQ(to_string(TensorLoad::make(fake_tensor("T", {8, 8}), {i, x})), "T(i, x)");
  EXPECT_EQ(to_string(Ramp::make(x * 8, 1, 8)), "ramp(x*8, 1, 8)");
  EXPECT_EQ(to_string(Broadcast::make(f, 4)), "x4(f)");
  EXPECT_EQ(to_string(Cast::make(DataType::Float(32, 4), Ramp::make(x, 1, 4))), "float32x4(ramp(x, 1, 4))");
  EXPECT_EQ(to_string(Let::make(k, x + 1, k * k)), "(let k = x + 1 in k*k)");
  IterVar r = reduce_axis("r", 16);
  Ref<ProducerNode> t = fake_tensor("T", {8, 16});
  Expr src = TensorLoad::make(t, {i, r.var()});
  EXPECT_EQ(to_string(Reduce::make(ReduceKind::Sum, src, {r})), "sum(T(i, r), axis=[r])");
  EXPECT_EQ(to_string(Reduce::make(ReduceKind::Max, src, {r}, r.var() < i)), "max(T(i, r), axis=[r], where=r < i)");
}

TEST(Printer, LoopNestGolden) {
  Var i("i"), j("j"), n("n");
  Buffer a = Buffer::make("A", f32, {64, 64}), b = Buffer::make("B", f32, {64, 64});
  Buffer t = Buffer::make("T", f32, {4, 8}, "local");
  Stmt store = BufferStore::make(b, BufferLoad::make(a, {i, j}) * 2.0f + 1.0f, {i, j});
  Stmt guarded = IfThenElse::make(i < n, store, BufferStore::make(b, Expr(0.0f), {i, j}));
  Stmt inner = For::make(j, 0, 64, ForKind::Serial, guarded);
  Stmt vec = BufferStore::make(t, Broadcast::make(Expr(1.5f), 8), {0, Ramp::make(0, 1, 8)});
  Stmt body = For::make(i, 0, 64, ForKind::Parallel, Allocate::make(t, Seq::make({inner, vec})));
  PrimFunc f = PrimFunc::make("f", {Param{Var("A", DataType::Handle()), a}, Param{Var("B", DataType::Handle()), b}, Param{n, Buffer()}}, body);
  EXPECT_EQ(to_string(f),
            "func f(A: float32[64, 64], B: float32[64, 64], n: int32) {\n"
            "  parallel (i, 0, 64) {\n"
            "    allocate T.local[float32 * 4 * 8] {\n"
            "      for (j, 0, 64) {\n"
            "        if (i < n) {\n"
            "          B[i, j] = A[i, j]*2f + 1f\n"
            "        } else {\n"
            "          B[i, j] = 0f\n"
            "        }\n"
            "      }\n"
            "      T[0, ramp(0, 1, 8)] = x8(1.5f)\n"
            "    }\n"
            "  }\n"
            "}\n");
}

TEST(Printer, OtherStatements) {
  Var x("x"), bx("bx"), k("k");
  Buffer c = Buffer::make("C", f32, {x + 1});
  Stmt store = BufferStore::make(c, Expr(1.0f), {k});
  Stmt s = AttrStmt::make("pragma_unroll", 4,
                          AssertStmt::make(x > 0, "x must be positive",
                                           LetStmt::make(k, x * 2, For::make(bx, 0, 8, ForKind::ThreadBinding, store, "blockIdx.x"))));
  EXPECT_EQ(to_string(s),
            "attr pragma_unroll = 4 {\n"
            "  assert(x > 0, \"x must be positive\")\n"
            "  let k = x*2\n"
            "  thread_binding[blockIdx.x] (bx, 0, 8) {\n"
            "    C[k] = 1f\n"
            "  }\n"
            "}\n");
  Stmt loops = Seq::make({For::make(x, 0, 4, ForKind::Vectorized, Evaluate::make(exp(Var("f", f32)))), For::make(x, 0, 2, ForKind::Unrolled, make_nop())});
  EXPECT_EQ(to_string(loops),
            "vectorized (x, 0, 4) {\n"
            "  exp(f)\n"
            "}\n"
            "unrolled (x, 0, 2) {\n"
            "  0\n"
            "}\n");
  Stmt chain = IfThenElse::make(x < 0, store, IfThenElse::make(x < 5, store));
  EXPECT_EQ(to_string(chain),
            "if (x < 0) {\n"
            "  C[k] = 1f\n"
            "} else if (x < 5) {\n"
            "  C[k] = 1f\n"
            "}\n");
  EXPECT_EQ(to_string(Allocate::make(Buffer::make("S", f32, {x + 1, 4}, "shared"), make_nop())),
            "allocate S.shared[float32 * (x + 1) * 4] {\n"
            "  0\n"
            "}\n");
}

// ---------------------------------------------------------------- structural

Stmt copy_loop(int extent, DataType dtype = f32, int64_t shape = 64) {
  // Fresh variables and buffers every call: loops built twice are alpha-equivalent.
  Var i("i");
  Buffer a = Buffer::make("A", dtype, {static_cast<int>(shape)});
  Buffer t = Buffer::make("T", dtype, {static_cast<int>(shape)}, "local");
  Stmt body = Seq::make({BufferStore::make(t, BufferLoad::make(a, {i}), {i}), BufferStore::make(a, BufferLoad::make(t, {i}), {i})});
  return Allocate::make(t, For::make(i, 0, extent, ForKind::Serial, body));
}

TEST(Structural, AlphaEquivalentLoopsAreEqual) {
  Var i("i"), j("j");
  Buffer a = Buffer::make("A", f32, {64});
  Stmt s1 = For::make(i, 0, 64, ForKind::Serial, BufferStore::make(a, Expr(1.0f), {i}));
  Stmt s2 = For::make(j, 0, 64, ForKind::Serial, BufferStore::make(a, Expr(1.0f), {j}));
  EXPECT_TRUE(structural_equal(s1, s2));
  EXPECT_EQ(structural_hash(s1), structural_hash(s2));
  // The same loop variable in both: still equal, and a loop over the
  // wrong variable is not.
  Stmt s3 = For::make(i, 0, 64, ForKind::Serial, BufferStore::make(a, Expr(1.0f), {j}));
  EXPECT_FALSE(structural_equal(s1, s3));
  EXPECT_FALSE(structural_equal(s1, s3, true)) << "j is free in s3 but bound in s1";
  Expr l1 = Let::make(i, Expr(3), i * i), l2 = Let::make(j, Expr(3), j * j);
  EXPECT_TRUE(structural_equal(l1, l2));
  EXPECT_EQ(structural_hash(l1), structural_hash(l2));
}

TEST(Structural, BindingsAreScopedAndPositional) {
  Var i("i"), j("j"), k("k"), x("x"), y("y");
  Buffer a = Buffer::make("A", f32, {8, 8});
  // One shared body node under swapped loops: the same pointer below the root
  // does not mean equal, because i and j are bound at other positions.
  Stmt body = BufferStore::make(a, Expr(1.0f), {i, j});
  Stmt ij = For::make(i, 0, 8, ForKind::Serial, For::make(j, 0, 8, ForKind::Serial, body));
  Stmt ji = For::make(j, 0, 8, ForKind::Serial, For::make(i, 0, 8, ForKind::Serial, body));
  EXPECT_FALSE(structural_equal(ij, ji));
  EXPECT_NE(structural_hash(ij), structural_hash(ji));
  // Sibling loops reusing one variable match sibling loops over two.
  auto loop = [&](const Var& v) { return For::make(v, 0, 8, ForKind::Serial, BufferStore::make(a, Expr(1.0f), {v, v})); };
  Stmt reuse = Seq::make({loop(i), loop(i)}), two = Seq::make({loop(j), loop(k)});
  EXPECT_TRUE(structural_equal(reuse, two));
  EXPECT_EQ(structural_hash(reuse), structural_hash(two));
  // A let shadowing a free variable: the outer use stays free after the let.
  Expr e1 = x + Let::make(x, Expr(1), x) + x;
  Expr e2 = y + Let::make(k, Expr(1), k) + y;
  Expr e3 = y + Let::make(k, Expr(1), k) + k;
  EXPECT_TRUE(structural_equal(e1, e2, true));
  EXPECT_EQ(structural_hash(e1), structural_hash(e2));
  EXPECT_FALSE(structural_equal(e1, e3, true));
  EXPECT_FALSE(structural_equal(e1, e2)) << "free x and y differ by identity";
  // Loop kind, bounds and loop-variable dtype are part of the structure.
  Var wide("w", i64);
  EXPECT_FALSE(structural_equal(loop(i), For::make(j, 0, 8, ForKind::Parallel, BufferStore::make(a, Expr(1.0f), {j, j}))));
  EXPECT_FALSE(structural_equal(loop(i), For::make(j, 1, 8, ForKind::Serial, BufferStore::make(a, Expr(1.0f), {j, j}))));
  EXPECT_FALSE(structural_equal(loop(i), For::make(wide, IntImm::make(i64, 0), IntImm::make(i64, 8), ForKind::Serial, BufferStore::make(a, Expr(1.0f), {wide, wide}))));
}

TEST(Structural, AllocatedBuffersAndFreeBuffers) {
  // A and T are fresh in each call: T is bound by Allocate, A is free.
  Stmt a = copy_loop(64), b = copy_loop(64);
  EXPECT_FALSE(structural_equal(a, b)) << "free buffer A differs by identity";
  EXPECT_TRUE(structural_equal(a, b, true));
  EXPECT_EQ(structural_hash(a), structural_hash(b));
  EXPECT_FALSE(structural_equal(a, copy_loop(32), true));
  EXPECT_FALSE(structural_equal(a, copy_loop(64, f64), true));
  EXPECT_FALSE(structural_equal(a, copy_loop(64, f32, 128), true));
  EXPECT_NE(structural_hash(a), structural_hash(copy_loop(32)));
  EXPECT_NE(structural_hash(a), structural_hash(copy_loop(64, f64)));
  EXPECT_NE(structural_hash(a), structural_hash(copy_loop(64, f32, 128)));
}

TEST(Structural, ConstantsAndDtypes) {
  Var x("x");
  EXPECT_FALSE(structural_equal(x + 1, x + 2));
  EXPECT_FALSE(structural_equal(Expr(1), IntImm::make(i64, 1)));
  EXPECT_FALSE(structural_equal(Expr(1.0f), Expr(1.0)));
  EXPECT_FALSE(structural_equal(Expr(0.0f), Expr(-0.0f))) << "floats compare bitwise";
  Expr nan1 = FloatImm::make(f32, std::nan("")), nan2 = FloatImm::make(f32, -std::nan(""));
  EXPECT_TRUE(structural_equal(nan1, nan2));
  EXPECT_EQ(structural_hash(nan1), structural_hash(nan2));
  EXPECT_FALSE(structural_equal(x + 1, x - 1));
  EXPECT_FALSE(structural_equal(Broadcast::make(x, 4), Broadcast::make(x, 8)));
  EXPECT_FALSE(structural_equal(cast(f32, x), cast(f64, x)));
  EXPECT_FALSE(structural_equal(exp(Var("f", f32)), Expr(Call::make(f32, Intrinsic::Log, {Var("f", f32)})), true));
  EXPECT_TRUE(structural_equal(x * 2 + 1, x * 2 + 1));
  EXPECT_EQ(structural_hash(x * 2 + 1), structural_hash(x * 2 + 1));
  EXPECT_NE(structural_hash(x + 1), structural_hash(x + 2));
  EXPECT_NE(structural_hash(Expr(1)), structural_hash(IntImm::make(i64, 1)));
}

TEST(Structural, FreeVariables) {
  Var x("x"), y("y"), z("z"), w("w", i64);
  EXPECT_FALSE(structural_equal(x + 1, y + 1));
  EXPECT_TRUE(structural_equal(x + 1, y + 1, true));
  EXPECT_EQ(structural_hash(x + 1), structural_hash(y + 1)) << "hash maps free vars by first occurrence";
  // The mapping is one-to-one and kept for the whole comparison.
  EXPECT_TRUE(structural_equal(x * y + x, y * z + y, true));
  EXPECT_FALSE(structural_equal(x * y + x, y * z + z, true));
  EXPECT_FALSE(structural_equal(x * x, y * z, true));
  EXPECT_FALSE(structural_equal(x * y, z * z, true));
  EXPECT_NE(structural_hash(x * x), structural_hash(y * z));
  EXPECT_FALSE(structural_equal(cast(i64, x) + 1, w + 1, true)) << "dtypes still matter";
  EXPECT_TRUE(structural_equal(x * y + x, x * y + x));
}

TEST(Structural, ReduceAndTensorLoad) {
  Ref<ProducerNode> t = fake_tensor("T", {8, 16});
  Var i("i");
  IterVar r1 = reduce_axis("r", 16), r2 = reduce_axis("s", 16), r3 = reduce_axis("r", 8);
  Expr a = Reduce::make(ReduceKind::Sum, TensorLoad::make(t, {i, r1.var()}), {r1});
  Expr b = Reduce::make(ReduceKind::Sum, TensorLoad::make(t, {i, r2.var()}), {r2});
  Expr c = Reduce::make(ReduceKind::Sum, TensorLoad::make(t, {i, r3.var()}), {r3});
  Expr d = Reduce::make(ReduceKind::Max, TensorLoad::make(t, {i, r2.var()}), {r2});
  EXPECT_TRUE(structural_equal(a, b));
  EXPECT_EQ(structural_hash(a), structural_hash(b));
  EXPECT_FALSE(structural_equal(a, c)) << "axis extent differs";
  EXPECT_FALSE(structural_equal(a, d)) << "reduction kind differs";
  // Another tensor of the same type and shape is another free object.
  Ref<ProducerNode> u = fake_tensor("U", {8, 16});
  Expr e = Reduce::make(ReduceKind::Sum, TensorLoad::make(u, {i, r2.var()}), {r2});
  EXPECT_FALSE(structural_equal(a, e));
  EXPECT_TRUE(structural_equal(a, e, true));
  EXPECT_EQ(structural_hash(a), structural_hash(e));
}

TEST(Structural, PrimFuncsMatchParamsInOrder) {
  auto make = [](const std::string& name, int size, bool swap) {
    Var n("n"), i("i");
    Buffer a = Buffer::make("A", f32, {size}), b = Buffer::make("B", f32, {size});
    Stmt body = For::make(i, 0, n, ForKind::Serial, BufferStore::make(b, BufferLoad::make(a, {i}) + 1.0f, {i}));
    Param pa{Var(), a}, pb{Var(), b}, pn{n, Buffer()};
    return PrimFunc::make(name, swap ? std::vector<Param>{pb, pa, pn} : std::vector<Param>{pa, pb, pn}, body);
  };
  PrimFunc f = make("f", 64, false), g = make("g", 64, false);
  EXPECT_TRUE(structural_equal(f, g)) << "names are ignored";
  EXPECT_EQ(structural_hash(f), structural_hash(g));
  EXPECT_FALSE(structural_equal(f, make("f", 32, false)));
  EXPECT_FALSE(structural_equal(f, make("f", 64, true))) << "parameter order matters";
  EXPECT_NE(structural_hash(f), structural_hash(make("f", 64, true)));
}

// Random small integer expressions over three free variables.
Expr random_expr(std::mt19937& rng, const std::vector<Var>& vars, int depth) {
  std::uniform_int_distribution<int> pick(0, 9);
  if (depth == 0 || pick(rng) < 2) {
    int leaf = std::uniform_int_distribution<int>(0, 9)(rng);
    return leaf < 3 ? Expr(vars[leaf]) : Expr(leaf - 3);
  }
  Expr a = random_expr(rng, vars, depth - 1), b = random_expr(rng, vars, depth - 1);
  switch (pick(rng) % 7) {
    case 0: return Add::make(a, b);
    case 1: return Sub::make(a, b);
    case 2: return Mul::make(a, b);
    case 3: return Min::make(a, b);
    case 4: return Max::make(a, b);
    case 5: return FloorDiv::make(a, b);
    default: return Select::make(LT::make(a, b), a, b);
  }
}

TEST(Structural, HashDistinguishesRandomExpressions) {
  std::mt19937 rng(1234);
  std::vector<Var> vars = {Var("x"), Var("y"), Var("z")};
  std::vector<Expr> distinct;
  for (int tries = 0; tries < 5000 && distinct.size() < 400; ++tries) {
    Expr e = random_expr(rng, vars, 3);
    bool seen = false;
    for (const Expr& d : distinct) seen = seen || structural_equal(d, e, true);
    if (!seen) distinct.push_back(e);
  }
  ASSERT_GE(distinct.size(), 300u);
  std::unordered_map<uint64_t, Expr> by_hash;
  for (const Expr& e : distinct) {
    auto [it, inserted] = by_hash.emplace(structural_hash(e), e);
    EXPECT_TRUE(inserted) << to_string(e) << " collides with " << to_string(it->second);
  }
  // Rebuilt with fresh variables, each expression keeps its hash.
  std::vector<Var> fresh = {Var("p"), Var("q"), Var("r")};
  for (const Expr& e : distinct) {
    Expr renamed = substitute(e, [&](const Variable* v) {
      for (int k = 0; k < 3; ++k) {
        if (v == vars[k].get()) return Expr(fresh[k]);
      }
      return Expr();
    });
    EXPECT_TRUE(structural_equal(e, renamed, true));
    EXPECT_EQ(structural_hash(e), structural_hash(renamed));
  }
}

TEST(Printer, ShadowedLoopVariablesGetSuffixes) {
  // Two different variables named i, one inside the other's loop: the inner prints as i_1.
  Var outer("i"), inner("i");
  Buffer b = Buffer::make("B", DataType::Int(32), {Expr(16)});
  Stmt s = For::make(outer, 0, 4, ForKind::Serial,
                     Seq::make({For::make(inner, 0, outer, ForKind::Serial, BufferStore::make(b, inner + outer, {inner * 4 + outer})),
                                For::make(inner, 0, 2, ForKind::Serial, BufferStore::make(b, inner, {inner}))}));
  EXPECT_EQ(to_string(s),
            "for (i, 0, 4) {\n"
            "  for (i_1, 0, i) {\n"
            "    B[i_1*4 + i] = i_1 + i\n"
            "  }\n"
            "  for (i_1, 0, 2) {\n"
            "    B[i_1] = i_1\n"
            "  }\n"
            "}\n");
}

}  // namespace
}  // namespace kiln
