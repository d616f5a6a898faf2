// Tests of the graph IR (graph.h, op_registry.h, rewrite.h): construction,
// attribute schemas, the printer, structural equality and the rewriter.
#include <gtest/gtest.h>

#include <cstring>

#include "kiln/graph/graph.h"
#include "kiln/graph/op_registry.h"
#include "kiln/graph/rewrite.h"
#include "kiln/support/error.h"
#include "error_of.h"

namespace kiln::graph {
namespace {

using kiln::testing::error_of;

NDArray filled(std::vector<int64_t> shape, float v) {
  NDArray a = NDArray::empty(shape, DataType::Float(32));
  for (int64_t i = 0; i < a.numel(); ++i) a.data_as<float>()[i] = v + static_cast<float>(i);
  return a;
}

// A test-only operator with attributes of every kind and a required one.
const OpDef& attr_op() {
  static const OpDef& def = register_op([] {
    OpDef d;
    d.name = "test.Attrs";
    d.attrs = {{"alpha", AttrKind::Float, 0.5}, {"axes", AttrKind::Ints, std::vector<int64_t>{}}, {"mode", AttrKind::String, std::string("a")},
               {"k", AttrKind::Int, std::nullopt}};
    d.pattern = Pattern::Elementwise;
    d.infer = [](const OpCall& c) { return std::vector<TensorType>{c.input_types[0]}; };
    return d;
  }());
  return def;
}

TEST(GraphIr, BuildPrintAndTypes) {
  auto x = make_input("x", {{2, 3}, DataType::Float(32)});
  auto b = make_constant("bias", filled({3}, 1));
  auto add = make_op("Add", {x->output(), b->output()}, {}, "add0");
  auto relu = make_op("Relu", {add->output()});
  Graph g = Graph::make({x}, {relu->output()});
  EXPECT_EQ(relu->types[0].str(), "float32[2, 3]");
  EXPECT_EQ(g.str(),
            "graph(%x: float32[2, 3]) {\n"
            "  %c0 = constant float32[3]  # bias\n"
            "  %0 = Add(%x, %c0) : float32[2, 3]  # add0\n"
            "  %1 = Relu(%0) : float32[2, 3]\n"
            "  return %1\n"
            "}");
  EXPECT_EQ(g.op_nodes().size(), 2u);
  EXPECT_EQ(g.output_names(), std::vector<std::string>{"output0"});
}

TEST(GraphIr, ConstantsAreHeldByReference) {
  NDArray w = filled({4}, 0);
  auto c = make_constant("w", w);
  EXPECT_EQ(c->data.data(), w.data());
}

TEST(GraphIr, AttributeSchemaFillsDefaultsAndNamesProblems) {
  attr_op();
  auto x = make_input("x", {{2}, DataType::Float(32)});
  auto n = make_op("test.Attrs", {x->output()}, Attrs({{"k", int64_t(3)}, {"alpha", int64_t(2)}}));
  EXPECT_EQ(n->attrs.get_int("k"), 3);
  EXPECT_DOUBLE_EQ(n->attrs.get_float("alpha"), 2.0);  // an int for a float attribute converts
  EXPECT_EQ(n->attrs.get_string("mode"), "a");
  EXPECT_TRUE(n->attrs.get_ints("axes").empty());
  std::string e = error_of([&] { make_op("test.Attrs", {x->output()}, {}, "n1"); });
  EXPECT_NE(e.find("lacks the required attribute 'k'"), std::string::npos) << e;
  e = error_of([&] { make_op("test.Attrs", {x->output()}, Attrs({{"k", int64_t(1)}, {"beta", 1.0}}), "n2"); });
  EXPECT_NE(e.find("has attribute 'beta'"), std::string::npos) << e;
  EXPECT_NE(e.find("alpha, axes, mode, k"), std::string::npos) << e;
  e = error_of([&] { make_op("test.Attrs", {x->output()}, Attrs({{"k", std::string("x")}}), "n3"); });
  EXPECT_NE(e.find("'k' must be an integer"), std::string::npos) << e;
}

TEST(GraphIr, UnknownOpListsTheSupportedOnes) {
  auto x = make_input("x", {{2}, DataType::Float(32)});
  std::string e = error_of([&] { make_op("Frobnicate", {x->output()}); });
  EXPECT_NE(e.find("unknown operator 'Frobnicate'"), std::string::npos) << e;
  EXPECT_NE(e.find("Relu"), std::string::npos) << e;
  EXPECT_EQ(e.find("kiln.fused"), std::string::npos) << e;
}

TEST(GraphIr, ShapeErrorsNameTheNode) {
  auto x = make_input("x", {{2, 3}, DataType::Float(32)});
  auto y = make_input("y", {{4}, DataType::Float(32)});
  std::string e = error_of([&] { make_op("Add", {x->output(), y->output()}, {}, "bad_add"); });
  EXPECT_NE(e.find("Add node 'bad_add'"), std::string::npos) << e;
  EXPECT_NE(e.find("do not broadcast"), std::string::npos) << e;
  e = error_of([&] { make_op("Add", {x->output()}, {}, "one_input"); });
  EXPECT_NE(e.find("has 1 inputs; Add takes 2"), std::string::npos) << e;
  e = error_of([&] { make_input("z", {{-1, 3}, DataType::Float(32)}); });
  EXPECT_NE(e.find("a dimension is a size (>= 0) or a shape variable"), std::string::npos) << e;
}

TEST(GraphIr, GraphMustDeclareItsInputs) {
  auto x = make_input("x", {{2}, DataType::Float(32)});
  auto y = make_input("y", {{2}, DataType::Float(32)});
  auto add = make_op("Add", {x->output(), y->output()});
  std::string e = error_of([&] { Graph::make({x}, {add->output()}); });
  EXPECT_NE(e.find("reads input 'y'"), std::string::npos) << e;
}

TEST(GraphIr, StructuralEqualityIgnoresNamesButNotConstants) {
  auto build = [](const std::string& prefix, float bias) {
    auto x = make_input(prefix + "x", {{2, 3}, DataType::Float(32)});
    auto add = make_op("Add", {x->output(), make_constant(prefix + "b", filled({3}, bias))->output()}, {}, prefix + "add");
    return Graph::make({x}, {make_op("Relu", {add->output()})->output()});
  };
  Graph a = build("a", 1), b = build("b", 1), c = build("c", 2);
  EXPECT_TRUE(structural_equal(a, b));
  EXPECT_EQ(structural_hash(a), structural_hash(b));
  EXPECT_FALSE(structural_equal(a, c));
  EXPECT_NE(structural_hash(a), structural_hash(c));
}

TEST(GraphIr, RewriteKeepsUnchangedGraphsAndReinfersTypes) {
  auto x = make_input("x", {{2, 3}, DataType::Float(32)});
  auto relu = make_op("Relu", {x->output()});
  auto add = make_op("Add", {relu->output(), x->output()});
  Graph g = Graph::make({x}, {add->output()});
  EXPECT_TRUE(rewrite_graph(g, [](const Ref<OpNode>&) { return std::vector<Value>{}; }).same_as(g));
  // Drop the Relu: Add now reads x twice.
  Graph r = rewrite_graph(g, [](const Ref<OpNode>& n) -> std::vector<Value> {
    if (n->op->name == "Relu") return {n->inputs[0]};
    return {};
  });
  ASSERT_EQ(r.op_nodes().size(), 1u);
  EXPECT_EQ(r.op_nodes()[0]->inputs[0].node.get(), x.get());
  EXPECT_EQ(r.op_nodes()[0]->inputs[1].node.get(), x.get());
}

}  // namespace
}  // namespace kiln::graph
