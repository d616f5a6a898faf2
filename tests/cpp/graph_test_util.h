// Shared pieces of the graph tests (tests/cpp/graph_*_test.cpp): random
// arrays, the small two-input model the export tests round-trip, and a
// temporary directory.
#ifndef KILN_TESTS_GRAPH_TEST_UTIL_H
#define KILN_TESTS_GRAPH_TEST_UTIL_H

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "kiln/graph/graph.h"
#include "kiln/graph/op_registry.h"
#include "kiln/runtime/ndarray.h"

namespace kiln::graph::testing {

/** Uniform values in [-1, 1) of float32 (or float64). */
inline NDArray random_array(std::vector<int64_t> shape, uint32_t seed, DataType dt = DataType::Float(32)) {
  NDArray a = NDArray::empty(shape, dt);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1, 1);
  for (int64_t i = 0; i < a.numel(); ++i) {
    if (dt == DataType::Float(64)) a.data_as<double>()[i] = d(rng);
    else a.data_as<float>()[i] = d(rng);
  }
  return a;
}

/** y = (Relu(Conv(x, w) + b) + x2) * s and z = Relu(...) + x2: two inputs, two outputs, constants. */
inline Graph small_graph() {
  auto x = make_input("x", {{1, 3, 8, 8}, DataType::Float(32)});
  auto x2 = make_input("x2", {{1, 4, 8, 8}, DataType::Float(32)});
  Attrs conv_attrs;
  conv_attrs.set("pads", std::vector<int64_t>{1, 1, 1, 1});
  Value conv = make_op("Conv", {x->output(), make_constant("w", random_array({4, 3, 3, 3}, 1))->output(),
                                make_constant("b", random_array({4}, 2))->output()}, conv_attrs, "conv")->output();
  Value relu = make_op("Relu", {conv}, {}, "relu")->output();
  Value add = make_op("Add", {relu, x2->output()}, {}, "add")->output();
  Value mul = make_op("Mul", {add, make_constant("s", random_array({1, 4, 1, 1}, 3))->output()}, {}, "mul")->output();
  return Graph::make({x, x2}, {mul, add}, {"y", "z"});
}

/** A fresh directory under the system's temporary one, removed with the object. */
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::string t = (std::filesystem::temp_directory_path() / "kiln_graph_test_XXXXXX").string();
    EXPECT_TRUE(mkdtemp(t.data()));
    path = t;
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

}  // namespace kiln::graph::testing

#endif  // KILN_TESTS_GRAPH_TEST_UTIL_H
