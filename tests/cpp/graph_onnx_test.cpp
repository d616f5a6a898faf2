// The ONNX importer from C++: a model the test serialises itself (Relu,
// then Add of an initializer), read back by from_onnx_bytes, compiled and
// run; and the importer's errors for bytes that are not a model.
//
// The model is written in the protobuf wire format by a few lines here
// rather than with the onnx::ModelProto classes: kiln_graph links
// onnx_proto privately, so a test executable linked against kiln_graph alone
// cannot call them (the linker wants libonnx_proto on its command line).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "kiln/graph/executor.h"
#include "kiln/graph/onnx.h"
#include "kiln/graph/op_registry.h"
#include "kiln/support/error.h"

namespace kiln::graph {
namespace {

// One protobuf message in the wire format: (field number, wire type) keys, then values.
class Message {
 public:
  Message& varint(int field, uint64_t v) {
    key(field, 0);
    put_varint(v);
    return *this;
  }
  Message& bytes(int field, const std::string& s) {
    key(field, 2);
    put_varint(s.size());
    out_ += s;
    return *this;
  }
  Message& message(int field, const Message& m) { return bytes(field, m.out_); }
  Message& fixed32(int field, float v) {
    key(field, 5);
    char b[4];
    std::memcpy(b, &v, 4);  // little-endian, as the wire format is
    out_.append(b, 4);
    return *this;
  }
  const std::string& str() const { return out_; }

 private:
  void key(int field, int wire_type) { put_varint(static_cast<uint64_t>(field) << 3 | wire_type); }
  void put_varint(uint64_t v) {
    for (; v >= 0x80; v >>= 7) out_ += static_cast<char>(v | 0x80);
    out_ += static_cast<char>(v);
  }
  std::string out_;
};

// Field numbers of onnx.proto.
enum ModelField { kIrVersion = 1, kGraph = 7, kOpsetImport = 8 };
enum GraphField { kNode = 1, kGraphName = 2, kInitializer = 5, kInput = 11, kOutput = 12 };
enum NodeField { kNodeInput = 1, kNodeOutput = 2, kNodeName = 3, kOpType = 4 };
enum TensorField { kDims = 1, kDataType = 2, kFloatData = 4, kTensorName = 8 };
constexpr int kFloat = 1;  // TensorProto::FLOAT

Message node(const std::string& op, const std::vector<std::string>& inputs, const std::string& output, const std::string& name = "") {
  Message n;
  for (const std::string& i : inputs) n.bytes(kNodeInput, i);
  n.bytes(kNodeOutput, output).bytes(kOpType, op);
  if (!name.empty()) n.bytes(kNodeName, name);
  return n;
}

// y = Relu(x) + b, x: float32[batch, 3] (a symbolic batch), b: an initializer.
std::string relu_add_model(const std::vector<float>& bias) {
  Message dim_batch, dim3, shape, tensor_type, type, x;
  dim_batch.bytes(2, "batch");  // Dimension.dim_param
  dim3.varint(1, 3);            // Dimension.dim_value
  shape.message(1, dim_batch).message(1, dim3);
  tensor_type.varint(1, kFloat).message(2, shape);  // TypeProto.Tensor: elem_type, shape
  type.message(1, tensor_type);                     // TypeProto.tensor_type
  x.bytes(1, "x").message(2, type);                 // ValueInfoProto: name, type
  Message b;
  b.varint(kDims, bias.size()).varint(kDataType, kFloat).bytes(kTensorName, "b");
  for (float v : bias) b.fixed32(kFloatData, v);
  Message y;
  y.bytes(1, "y");
  Message g;
  g.message(kNode, node("Relu", {"x"}, "r", "relu")).message(kNode, node("Add", {"r", "b"}, "y"));
  g.bytes(kGraphName, "relu_add").message(kInitializer, b).message(kInput, x).message(kOutput, y);
  Message opset;
  opset.varint(2, 13);  // OperatorSetIdProto.version (domain "": the default)
  Message model;
  model.varint(kIrVersion, 7).message(kOpsetImport, opset).message(kGraph, g);
  return model.str();
}

TEST(GraphOnnx, ReluAddFromBytes) {
  std::vector<float> bias = {0.5f, -1.f, 2.f};
  Graph g = from_onnx_bytes(relu_add_model(bias), {{"x", {2, 3}}});
  ASSERT_EQ(g.inputs().size(), 1u);  // the initializer is a constant, not an input
  EXPECT_EQ(g.inputs()[0]->name, "x");
  EXPECT_EQ(g.inputs()[0]->types[0], (TensorType{{2, 3}, DataType::Float(32)}));
  EXPECT_EQ(g.output_names(), std::vector<std::string>{"y"});
  std::vector<const OpNode*> ops = g.op_nodes();
  ASSERT_EQ(ops.size(), 2u);
  EXPECT_EQ(ops[0]->op->name, "Relu");
  EXPECT_EQ(ops[0]->name, "relu");
  EXPECT_EQ(ops[1]->name, "Add_1");  // unnamed: op type and index

  std::vector<float> xs = {-1.f, 2.f, -3.f, 4.f, 0.f, -0.5f};
  NDArray x = NDArray::empty({2, 3}, DataType::Float(32));
  std::memcpy(x.data(), xs.data(), sizeof(float) * xs.size());
  std::vector<NDArray> out = compile(g).run({x});
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(out[0].shape(), (std::vector<int64_t>{2, 3}));
  for (int i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(out[0].data_as<float>()[i], std::max(xs[i], 0.f) + bias[i % 3]) << i;
}

// Throws kiln::Error (not a crash or InternalError) whose message contains `part`.
template <typename F>
void expect_error(F f, const std::string& part) {
  try {
    f();
    FAIL() << "no error; expected one containing '" << part << "'";
  } catch (const InternalError& e) {
    FAIL() << "internal error: " << e.what();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(GraphOnnx, BadBytes) {
  std::string good = relu_add_model({1.f, 2.f, 3.f});
  expect_error([&] { from_onnx_bytes(good.substr(0, good.size() / 2), {{"x", {1, 3}}}); }, "not an ONNX model");
  expect_error([&] { from_onnx_bytes(std::string("\xff\xff\xff\xff garbage", 12)); }, "not an ONNX model");
  expect_error([&] { from_onnx_bytes(""); }, "hold no ONNX graph");
  expect_error([&] { from_onnx("/nonexistent/model.onnx"); }, "cannot open the ONNX file '/nonexistent/model.onnx'");
  // The symbolic batch without a shape for it stays the shape variable "batch".
  Graph g = from_onnx_bytes(good);
  EXPECT_EQ(g.inputs()[0]->types[0].str(), "float32[batch, 3]");
  EXPECT_EQ(g.outputs()[0].type().str(), "float32[batch, 3]");
}

}  // namespace
}  // namespace kiln::graph
