// Symbolic shapes at the call boundary (kiln/runtime/arg_binder.h): shape
// variables are bound from the arrays, every other use is checked, and no
// call can make a kernel touch memory outside the arrays it was given. Each
// case runs through the reference interpreter (interpret_args) and, with the
// LLVM backend, through a compiled Module's call and time_evaluator.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "kiln/codegen/kernel_metadata.h"
#include "kiln/interp/interpreter.h"
#include "kiln/ir/op.h"
#include "kiln/runtime/arg_binder.h"
#include "kiln/support/error.h"
#include "kiln/te/lower.h"
#ifdef KILN_WITH_LLVM
#include "kiln/driver/build.h"
#endif

namespace kiln {
namespace {

using te::Tensor;
const DataType f32 = DataType::Float(32);

// A kernel and every way to call it.
struct Kernel {
  PrimFunc func;
  Module mod;  // undefined without the LLVM backend

  Kernel(const std::vector<Tensor>& args, const std::vector<Tensor>& outs, const std::string& name) {
    te::Schedule s = te::create_schedule(outs);
    func = te::lower(s, args, name);
#ifdef KILN_WITH_LLVM
    mod = build(s, args, "llvm", name);
#endif
  }

  // Every call path: each must succeed or throw.
  std::vector<std::function<void(const std::vector<Arg>&)>> paths() const {
    std::vector<std::function<void(const std::vector<Arg>&)>> out;
    out.push_back([this](const std::vector<Arg>& a) { interpret_args(func, a); });
    if (mod.defined()) {
      out.push_back([this](const std::vector<Arg>& a) { mod.call(func.name(), a); });
      out.push_back([this](const std::vector<Arg>& a) { mod.time_evaluator(func.name(), a, 1, 1); });
    }
    return out;
  }

  // Every path throws kiln::Error containing all fragments.
  void expect_error(const std::vector<Arg>& args, std::initializer_list<std::string> fragments) const {
    for (const auto& call : paths()) {
      try {
        call(args);
        ADD_FAILURE() << "expected kiln::Error containing '" << *fragments.begin() << "'";
      } catch (const Error& e) {
        std::string msg = e.what();
        for (const std::string& f : fragments) EXPECT_NE(msg.find(f), std::string::npos) << "message: " << msg << "\nmissing: " << f;
      }
    }
  }
};

NDArray filled(std::vector<int64_t> shape, float start) {
  NDArray a = NDArray::empty(shape, f32);
  for (int64_t i = 0; i < a.numel(); ++i) a.data_as<float>()[i] = start + static_cast<float>(i);
  return a;
}

// A 1-D float32 view of `count` elements into caller memory (like numpy's p[:10]).
struct View {
  int64_t shape[1];
  DLTensor t;
  View(float* data, int64_t count) : shape{count}, t{data, DLDevice{kDLCPU, 0}, 1, DLDataType{kDLFloat, 32, 1}, shape, nullptr, 0} {}
};

struct Vadd {
  Var n{"n"};
  Tensor A = te::placeholder({n}, f32, "A"), B = te::placeholder({n}, f32, "B");
  Tensor C = te::compute({n}, [&](const std::vector<Var>& i) { return A(i[0]) + B(i[0]); }, "C");
  Kernel k{{A, B, C}, {C}, "vadd"};
};

TEST(ArgBinding, MetadataCarriesSymbolicDims) {
  Vadd v;
  KernelInfo info = codegen::kernel_info(v.k.func);
  ASSERT_EQ(info.params.size(), 4u);
  EXPECT_EQ(info.params[0].shape, std::vector<int64_t>{-1});
  EXPECT_EQ(info.params[0].dims, std::vector<ShapeExpr>{ShapeExpr::param(3)});
  EXPECT_EQ(info.params[3].name, "n");
  EXPECT_EQ(KernelInfo::from_json(info.to_json()), info) << info.to_json();
}

TEST(ArgBinding, ExplicitScalarThatDisagreesIsRefused) {
  // The issue's case: f(p[:10], q[:10], 20) with 20-element p, q wrote 10 elements past the view.
  Vadd v;
  std::vector<float> p(20, 1.f), q(20, 2.f), r(20, -7.f);
  View pv(p.data(), 10), qv(q.data(), 10), rv(r.data(), 10);
  v.k.expect_error({&pv.t, &qv.t, &rv.t, 20},
                   {"vadd: argument 3 'n' = 20 disagrees with argument 0 'A' dimension 0, which is 10"});
  for (float x : r) EXPECT_EQ(x, -7.f) << "nothing was written";
  // The right value, or none, runs on the views only.
  for (const auto& call : v.k.paths()) {
    std::fill(r.begin(), r.end(), -7.f);
    call({&pv.t, &qv.t, &rv.t, 10});
    for (int i = 0; i < 20; ++i) EXPECT_EQ(r[i], i < 10 ? 3.f : -7.f) << "element " << i;
    std::fill(r.begin(), r.end(), -7.f);
    call({&pv.t, &qv.t, &rv.t});
    for (int i = 0; i < 20; ++i) EXPECT_EQ(r[i], i < 10 ? 3.f : -7.f) << "element " << i;
  }
}

TEST(ArgBinding, ArraysBeyond32BitIndexingAreRefused) {
  // 3e9 elements: the kernel's int32 offsets would wrap. The views point at a small buffer that is never read.
  Vadd v;
  std::vector<float> small(4, 0.f);
  View a(small.data(), 3000000000), b(small.data(), 3000000000), c(small.data(), 3000000000);
  v.k.expect_error({&a.t, &b.t, &c.t}, {"argument 0 'A' has shape [3000000000]", "2147483647 (2^31 - 1)"});
  View negative(small.data(), -5);
  v.k.expect_error({&negative.t, &b.t, &c.t}, {"argument 0 'A' has a negative dimension"});
}

TEST(ArgBinding, ConstantShapesBeyond32BitIndexingAreRefusedAtCompileTime) {
  // 65536 x 65537 elements wrap in int32 to 65536, a small positive size: the allocation would be far too small.
  for (std::vector<Expr> shape : {std::vector<Expr>{65536, 65537}, std::vector<Expr>{64, 3, 4000, 4000}}) {
    Tensor A = te::placeholder(shape, f32, "A");
    auto at = [](const std::vector<Var>& i) { return std::vector<Expr>(i.begin(), i.end()); };
    Tensor B = te::compute(shape, [&](const std::vector<Var>& i) { return A(at(i)) * 2.f; }, "B");
    Tensor C = te::compute(shape, [&](const std::vector<Var>& i) { return B(at(i)) + 1.f; }, "C");
    try {
      Kernel k({A, C}, {C}, "huge");
      ADD_FAILURE() << "a buffer of more than 2^31 - 1 elements was accepted";
    } catch (const Error& e) {  // a user error (an InternalError is not an Error)
      std::string msg = e.what();
      EXPECT_NE(msg.find("2147483647 (2^31 - 1)"), std::string::npos) << msg;
      EXPECT_NE(msg.find("buffer '"), std::string::npos) << msg;
    }
  }
}

TEST(ArgBinding, InfersTheTrailingScalar) {
  Vadd v;
  for (int64_t n : {0, 1, 17, 100}) {
    NDArray a = filled({n}, 1.f), b = filled({n}, 100.f);
    for (const auto& call : v.k.paths()) {
      NDArray c = filled({n}, -1.f);
      call({a, b, c});
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(c.data_as<float>()[i], 101.f + 2.f * i) << "n=" << n;
    }
  }
}

TEST(ArgBinding, ArraysThatDisagreeOnAVariable) {
  Vadd v;
  NDArray a = filled({10}, 0.f), b = filled({12}, 0.f), c = filled({10}, 0.f);
  v.k.expect_error({a, b, c}, {"vadd: argument 1 'B' has 12 in dimension 0 (shape [12]), expected n",
                               "n = 10 (from argument 0 'A' dimension 0)"});
  v.k.expect_error({a, c, b, 10}, {"argument 3 'n' = 10 disagrees with argument 2 'C' dimension 0, which is 12 (shape [12])"});
}

TEST(ArgBinding, TwoVariablesIn2D) {
  Var m("m"), n("n");
  Tensor A = te::placeholder({m, n}, f32, "A");
  Tensor T = te::compute({n, m}, [&](const std::vector<Var>& i) { return A(i[1], i[0]) * 2.f; }, "T");
  Kernel k({A, T}, {T}, "transpose");
  NDArray a = filled({3, 5}, 0.f);
  for (const auto& call : k.paths()) {
    NDArray t = filled({5, 3}, -1.f);
    call({a, t});
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 5; ++j) ASSERT_EQ(t.data_as<float>()[j * 3 + i], 2.f * (i * 5 + j));
  }
  k.expect_error({a, filled({5, 4}, 0.f)}, {"argument 1 'T' has 4 in dimension 1 (shape [5, 4]), expected m",
                                             "m = 3 (from argument 0 'A' dimension 0)"});
  k.expect_error({a, filled({3, 5}, 0.f)}, {"argument 1 'T' has 3 in dimension 0"});
  k.expect_error({a, filled({5, 3}, 0.f), 3, 6}, {"argument 3 'n' = 6 disagrees with argument 0 'A' dimension 1, which is 5"});
}

TEST(ArgBinding, ExpressionDimensionsAreChecked) {
  // B[i] = A[i] + A[i + 1]: A has n + 1 elements, n comes from B.
  Var n("n");
  Tensor A = te::placeholder({n + 1}, f32, "A");
  Tensor B = te::compute({n}, [&](const std::vector<Var>& i) { return A(i[0]) + A(i[0] + 1); }, "B");
  Kernel k({A, B}, {B}, "pairs");
  NDArray a = filled({11}, 0.f);
  for (const auto& call : k.paths()) {
    NDArray b = filled({10}, 0.f);
    call({a, b});
    for (int i = 0; i < 10; ++i) ASSERT_EQ(b.data_as<float>()[i], 2.f * i + 1);
  }
  k.expect_error({filled({10}, 0.f), filled({10}, 0.f)},
                 {"pairs: argument 0 'A' has 10 in dimension 0 (shape [10]), expected n + 1 with n = 10 (from argument 1 'B' dimension 0)"});
  k.expect_error({a, filled({10}, 0.f), 12}, {"argument 2 'n' = 12 disagrees with argument 1 'B' dimension 0, which is 10"});
}

TEST(ArgBinding, VariableOnlyInExpressionsMustBePassed) {
  // Y = X * 3 on 2 * m elements: no array has m as a plain dimension.
  Var m("m");
  Tensor X = te::placeholder({m * 2}, f32, "X");
  Tensor Y = te::compute({m * 2}, [&](const std::vector<Var>& i) { return X(i[0]) * 3.f; }, "Y");
  Kernel k({X, Y}, {Y}, "triple");
  NDArray x = filled({8}, 1.f);
  k.expect_error({x, filled({8}, 0.f)}, {"triple: expected 3 arguments (X, Y, m), got 2",
                                         "'m' is not a dimension of any array passed, so it must be given"});
  k.expect_error({x, filled({8}, 0.f), 5}, {"argument 0 'X' has 8 in dimension 0 (shape [8]), expected m * 2 with m = 5 (from argument 2)"});
  for (const auto& call : k.paths()) {
    NDArray y = filled({8}, 0.f);
    call({x, y, 4});
    for (int i = 0; i < 8; ++i) ASSERT_EQ(y.data_as<float>()[i], 3.f * (1 + i));
  }
}

TEST(ArgBinding, WrongDtypeRankAndConstantShape) {
  Vadd v;
  NDArray a = filled({4}, 0.f);
  v.k.expect_error({a, NDArray::empty({4}, DataType::Float(64)), a}, {"argument 1 'B' has dtype float64, expected float32"});
  v.k.expect_error({a, filled({2, 2}, 0.f), a}, {"argument 1 'B' has rank 2, expected rank 1 (shape [n])"});
  Tensor P = te::placeholder({16}, f32, "P");
  Tensor Q = te::compute({16}, [&](const std::vector<Var>& i) { return P(i[0]) + 1.f; }, "Q");
  Kernel k({P, Q}, {Q}, "inc16");
  k.expect_error({filled({16}, 0.f), filled({15}, 0.f)}, {"inc16: argument 1 'Q' has 15 in dimension 0 (shape [15]), expected 16"});
}

TEST(ArgBinding, StridedBufferBindsItsStrides) {
  // A hand-written kernel whose input has a symbolic row stride s: a strided
  // view (every other row of a bigger array) is accepted and honoured.
  Var m("m"), n("n"), s("s"), i("i"), j("j");
  Buffer A = Buffer::make("A", f32, {m, n}, "global", {s, 1});
  Buffer B = Buffer::make("B", f32, {m, n});
  Stmt body = For::make(i, 0, m, ForKind::Serial,
                        For::make(j, 0, n, ForKind::Serial, BufferStore::make(B, BufferLoad::make(A, {i, j}), {i, j})));
  PrimFunc f = PrimFunc::make("copy", {{A->data, A}, {B->data, B}, {m, Buffer()}, {n, Buffer()}, {s, Buffer()}}, body);
  std::vector<float> big(6 * 4);
  for (size_t x = 0; x < big.size(); ++x) big[x] = float(x);
  int64_t shape[2] = {3, 4}, strides[2] = {8, 1};
  DLTensor rows{big.data(), DLDevice{kDLCPU, 0}, 2, DLDataType{kDLFloat, 32, 1}, shape, strides, 0};
  NDArray b = NDArray::empty({3, 4}, f32);
  interpret_args(f, {&rows, b});
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 4; ++c) ASSERT_EQ(b.data_as<float>()[r * 4 + c], big[r * 8 + c]);
  int64_t bad_strides[2] = {8, 2};
  DLTensor cols{big.data(), DLDevice{kDLCPU, 0}, 2, DLDataType{kDLFloat, 32, 1}, shape, bad_strides, 0};
  try {
    interpret_args(f, {&cols, b});
    ADD_FAILURE() << "a column stride of 2 must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("argument 0 'A' has 2 in stride 1 (strides [8, 2]), expected 1"), std::string::npos) << e.what();
  }
}

TEST(ArgBinding, RejectsMetadataThatCannotBeChecked) {
  Var n("n");
  Buffer A = Buffer::make("A", f32, {select(n > 4, n, 4)});
  PrimFunc f = PrimFunc::make("k", {{A->data, A}, {n, Buffer()}}, Evaluate::make(0));
  try {
    codegen::kernel_info(f);
    ADD_FAILURE() << "a select dimension cannot be checked";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("dimension 0 of buffer 'A'"), std::string::npos) << e.what();
  }
  KernelInfo bad{"k", {{"A", true, f32, {-1}, {ShapeExpr::param(0)}, {}}}};
  EXPECT_THROW(check_shape_metadata(bad), Error) << "a dimension may only read scalar parameters";
  // Corrupt "dims" in an exported library's metadata is named, not trusted.
  const char* unknown_op = R"({"name": "k", "params": [{"name": "A", "kind": "buffer", "dtype": "float32", "shape": [-1],
                               "dims": [{"op": "pow", "a": 2, "b": 3}]}]})";
  try {
    KernelInfo::from_json(unknown_op);
    ADD_FAILURE() << "an unknown op must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown op \"pow\""), std::string::npos) << e.what();
  }
}

TEST(ArgBinding, ShapeExprArithmetic) {
  using Op = ShapeExpr::Op;
  int64_t vals[1] = {-7};
  auto eval = [&](Op op, int64_t b) { return ShapeExpr::binary(op, ShapeExpr::param(0), ShapeExpr::constant(b)).eval(vals, 1); };
  // Against C++'s own truncating and the floor definitions.
  EXPECT_EQ(eval(Op::Div, 2), -7 / 2);
  EXPECT_EQ(eval(Op::Mod, 2), -7 % 2);
  EXPECT_EQ(eval(Op::FloorDiv, 2), -4);
  EXPECT_EQ(eval(Op::FloorMod, 2), 1);
  EXPECT_EQ(eval(Op::Min, 3), -7);
  EXPECT_EQ(eval(Op::Max, 3), 3);
  EXPECT_FALSE(eval(Op::FloorDiv, 0)) << "division by zero has no value";
  vals[0] = INT64_MAX;
  EXPECT_FALSE(eval(Op::Mul, 2)) << "overflow has no value";
  EXPECT_EQ(ShapeExpr::binary(Op::Mul, ShapeExpr::binary(Op::Add, ShapeExpr::param(0), ShapeExpr::constant(3)),
                              ShapeExpr::constant(2)).str({"n"}),
            "(n + 3) * 2");
}

}  // namespace
}  // namespace kiln
