// Reshape constraints (kiln/graph/shape_constraints.h): a reshape whose
// element counts agree only at some sizes compiles, the plan carries
// "input count == output count", and a run that breaks it is refused naming
// the node, the variables and their values, while provable reshapes add none.
#include <gtest/gtest.h>

#include <string>

#include "kiln/graph/executor.h"
#include "kiln/graph/shape_constraints.h"
#include "kiln/support/error.h"
#include "error_of.h"

namespace kiln::graph {
namespace {

const DataType f32 = DataType::Float(32);

Value int64s(const std::string& name, const std::vector<int64_t>& v) {
  NDArray a = NDArray::empty({static_cast<int64_t>(v.size())}, DataType::Int(64));
  std::copy(v.begin(), v.end(), a.data_as<int64_t>());
  return make_constant(name, a)->output();
}

NDArray iota(std::vector<int64_t> shape) {
  NDArray a = NDArray::empty(shape, f32);
  for (int64_t i = 0; i < a.numel(); ++i) a.data_as<float>()[i] = static_cast<float>(i);
  return a;
}

using kiln::testing::error_of;

// x [batch, n] seen as [batch, 2, 3] (needs n == 6) and as [batch, n / 2, 2] through a -1 (needs n even) ... and a provable one.
Graph reshapes() {
  auto x = make_input("x", TensorType{{Dim::var("batch"), Dim::var("n")}, f32});
  Value six = make_op("Reshape", {x->output(), int64s("s1", {0, 2, 3})}, {}, "six")->output();
  Value pairs = make_op("Reshape", {x->output(), int64s("s2", {0, -1, 2})}, {}, "pairs")->output();
  Value flat = make_op("Reshape", {x->output(), int64s("s3", {-1})}, {}, "flat")->output();
  return Graph::make({x}, {make_op("Relu", {six})->output(), make_op("Relu", {pairs})->output(), make_op("Relu", {flat})->output()});
}

TEST(ShapeConstraints, UnprovableReshapesBecomeRunChecks) {
  Graph g = reshapes();
  std::vector<ShapeConstraint> cs = reshape_constraints(g, {"batch", "n"});
  ASSERT_EQ(cs.size(), 2u) << "'flat' is provable and adds none";
  EXPECT_NE(cs[0].text.find("Reshape 'six' of [batch, n] to [batch, 2, 3]: batch*n == batch*6"), std::string::npos) << cs[0].text;
  EXPECT_NE(cs[1].text.find("Reshape 'pairs'"), std::string::npos) << cs[1].text;
  EXPECT_NE(error_of([&] { reshape_constraints(g, {"batch"}); }).find("shape variable 'n'"), std::string::npos);

  Executor exe = compile(g);
  EXPECT_EQ(exe.plan().constraints.size(), 2u);
  std::vector<NDArray> out = exe.run({iota({3, 6})});
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].shape(), (std::vector<int64_t>{3, 2, 3}));
  EXPECT_EQ(out[1].shape(), (std::vector<int64_t>{3, 3, 2}));
  for (int64_t i = 0; i < 18; ++i) EXPECT_EQ(out[0].data_as<float>()[i], static_cast<float>(i));
  std::string msg = error_of([&] { exe.run({iota({2, 7})}); });
  EXPECT_NE(msg.find("constraint 'Reshape 'six'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("batch = 2 (from input 'x' dimension 0), n = 7"), std::string::npos) << msg;
}

TEST(ShapeConstraints, AMinusOneBesideConstantsIsADivisibility) {
  auto x = make_input("x", TensorType{{Dim::var("batch"), Dim::var("n")}, f32});
  Value rows = make_op("Reshape", {x->output(), int64s("s", {-1, 6})}, {}, "rows")->output();
  std::vector<ShapeConstraint> cs = reshape_constraints(Graph::make({x}, {rows}), {"batch", "n"});
  ASSERT_EQ(cs.size(), 1u);
  EXPECT_EQ(cs[0].kind, ShapeConstraint::Kind::Divisible);
  EXPECT_EQ(cs[0].divisor, 6);
  EXPECT_NE(cs[0].text.find("batch*n % 6 == 0"), std::string::npos) << cs[0].text;
}

TEST(ShapeConstraints, CountsThatNeverAgreeAreRefusedAtCompileTime) {
  auto x = make_input("x", TensorType{{Dim::var("batch"), Dim::var("n")}, f32});
  std::string msg = error_of([&] { make_op("Reshape", {x->output(), int64s("s", {0, 0, 2})}, {}, "twice"); });
  EXPECT_NE(msg.find("the counts differ for every size but 0"), std::string::npos) << msg;
}

}  // namespace
}  // namespace kiln::graph
