// The ONNX importer (kiln/graph/onnx.h): reads the ModelProto, makes
// constants of the initializers and Constant nodes, inputs of the remaining
// graph inputs (static shapes, or the caller's), and one kiln node (or a few)
// per ONNX node, in the model's order (ONNX lists nodes topologically).
#include "kiln/graph/onnx.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <unordered_map>

#include "kiln/support/error.h"
#include "onnx_internal.h"

namespace kiln::graph {

namespace {

using namespace onnx_detail;

constexpr int64_t kMinOpset = 11;
constexpr int64_t kMaxOpset = 17;

bool is_default_domain(const std::string& d) { return d.empty() || d == "ai.onnx"; }

std::string join(const std::vector<std::string>& names) {
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : ", ") + n;
  return s.empty() ? "none" : s;
}

class Importer {
 public:
  Importer(const onnx::ModelProto& model, const InputShapes& shapes) : model_(model), graph_(model.graph()), shapes_(shapes) {}

  Graph run() {
    read_opset();
    for (const onnx::TensorProto& t : graph_.initializer())
      define(t.name(), make_constant(t.name(), tensor_from_onnx(t, "initializer '" + t.name() + "'"))->output());
    add_inputs();
    for (int i = 0; i < graph_.node_size(); ++i) add_node(graph_.node(i), i);
    std::vector<Value> outputs;
    std::vector<std::string> names;
    for (const onnx::ValueInfoProto& o : graph_.output()) {
      outputs.push_back(lookup(o.name(), "the graph output '" + o.name() + "'"));
      names.push_back(o.name());
    }
    KILN_USER_CHECK(!outputs.empty()) << "the ONNX graph '" << graph_.name() << "' has no outputs";
    return Graph::make(inputs_, outputs, names);
  }

 private:
  void read_opset() {
    bool found = false;
    for (const onnx::OperatorSetIdProto& o : model_.opset_import())
      if (is_default_domain(o.domain())) opset_ = o.version(), found = true;
    KILN_USER_CHECK(found) << "the ONNX model imports no opset of the default domain (opset_import lists none for '' / 'ai.onnx')";
    KILN_USER_CHECK(opset_ >= kMinOpset && opset_ <= kMaxOpset)
        << "the ONNX model uses opset " << opset_ << "; kiln imports opsets " << kMinOpset << " to " << kMaxOpset
        << " (convert it with onnx.version_converter.convert_version(model, 13))";
  }

  void define(const std::string& name, Value v) { values_[name] = std::move(v); }

  // The value named `name`; `reader` says who reads it, for the error.
  Value lookup(const std::string& name, const std::string& reader) const {
    auto it = values_.find(name);
    auto absent = absent_.find(name);
    KILN_USER_CHECK(it != values_.end())
        << reader << " reads '" << name << "', "
        << (absent != absent_.end() ? absent->second
                                    : "which is neither a graph input, an initializer nor the output of an earlier node (a missing "
                                      "initializer, or nodes out of order?)");
    return it->second;
  }

  void add_inputs() {
    std::vector<std::string> names;
    for (const onnx::ValueInfoProto& in : graph_.input()) {
      if (values_.count(in.name())) continue;  // an initializer: a constant, not a model input
      Ref<InputNode> node = make_input(in.name(), input_type(in));
      define(in.name(), node->output());
      inputs_.push_back(node);
      names.push_back(in.name());
    }
    for (const auto& [name, shape] : shapes_)
      KILN_USER_CHECK(std::find(names.begin(), names.end(), name) != names.end())
          << "shapes names '" << name << "', which is not an input of the model (its inputs: " << join(names) << ")";
  }

  TensorType input_type(const onnx::ValueInfoProto& in) const {
    const std::string what = "ONNX input '" + in.name() + "'";
    KILN_USER_CHECK(in.type().has_tensor_type()) << what << " is not a tensor (kiln takes tensor inputs only)";
    const onnx::TypeProto::Tensor& tt = in.type().tensor_type();
    TensorType t;
    t.dtype = dtype_from_onnx(tt.elem_type(), what);
    auto given = shapes_.find(in.name());
    if (given != shapes_.end()) {
      const Shape& want = given->second;
      for (const Dim& d : want)
        KILN_USER_CHECK(d.is_symbolic() || d.value() >= 0)
            << "shapes['" << in.name() << "'] = " << shape_to_string(want) << " has a negative dimension";
      KILN_USER_CHECK(!tt.has_shape() || tt.shape().dim_size() == static_cast<int>(want.size()))
          << "shapes['" << in.name() << "'] = " << shape_to_string(want) << " has " << want.size()
          << " dimensions, but the model's input '" << in.name() << "' has " << tt.shape().dim_size() << " (" << declared_shape(tt) << ")";
      // A static dimension is baked into the model (reshape constants, weights): only symbolic or unknown ones can be set.
      for (int i = 0; tt.has_shape() && i < tt.shape().dim_size(); ++i) {
        const auto& d = tt.shape().dim(i);
        KILN_USER_CHECK(!d.has_dim_value() || want[i] == d.dim_value())
            << "shapes['" << in.name() << "'] = " << shape_to_string(want) << " sets axis " << i << " to " << want[i].str()
            << ", but the model declares that axis static as " << d.dim_value() << " (" << declared_shape(tt)
            << "); only symbolic or unknown dimensions can be set: pass " << d.dim_value()
            << " there, or export the model with that axis dynamic (torch.onnx.export(..., dynamic_axes=...))";
      }
      t.shape = want;
      return t;
    }
    KILN_USER_CHECK(tt.has_shape()) << what << " has no declared shape (not even its rank): pass it, e.g. shapes={\"" << in.name()
                                    << "\": (\"batch\", 3, 224, 224)} with ints for static axes and names for symbolic ones";
    for (int i = 0; i < tt.shape().dim_size(); ++i) {
      const auto& d = tt.shape().dim(i);
      if (d.has_dim_value()) {
        KILN_USER_CHECK(d.dim_value() >= 0) << what << " declares axis " << i << " as " << d.dim_value() << " (shape " << declared_shape(tt) << ")";
        t.shape.push_back(d.dim_value());
      } else {
        // Symbolic: the model's name for it, so inputs sharing "batch" share one variable.
        t.shape.push_back(Dim::var(d.has_dim_param() && !d.dim_param().empty() ? d.dim_param() : in.name() + "_dim" + std::to_string(i)));
      }
    }
    return t;
  }

  // "[batch, 3, 224, 224]" / "[?, 3]": the shape as the model declares it.
  static std::string declared_shape(const onnx::TypeProto::Tensor& tt) {
    std::string s = "[";
    for (int i = 0; i < tt.shape().dim_size(); ++i) {
      const auto& d = tt.shape().dim(i);
      s += (i ? ", " : "") + (d.has_dim_value() ? std::to_string(d.dim_value()) : d.has_dim_param() ? d.dim_param() : std::string("?"));
    }
    return s + "]";
  }

  void add_node(const onnx::NodeProto& node, int index) {
    std::string name = node.name().empty() ? node.op_type() + "_" + std::to_string(index) : node.name();
    KILN_USER_CHECK(is_default_domain(node.domain()))
        << "ONNX node '" << name << "' (op type '" << node.op_type() << "') is in the domain '" << node.domain()
        << "'; kiln imports only the default ONNX domain ('' or 'ai.onnx')";
    if (node.op_type() == "Constant") return add_constant(node, name);
    OnnxNode n;
    n.name = name;
    n.op_type = node.op_type();
    n.opset = opset_;
    n.num_outputs = node.output_size();
    std::string reader = node.op_type() + " node '" + name + "'";
    for (const std::string& in : node.input()) n.inputs.push_back(in.empty() ? Value() : lookup(in, reader));
    n.attrs = attrs_from_onnx(node, name, opset_);
    std::optional<std::vector<Value>> symbolic = shape_values_.emit(n, emit_node);
    std::vector<Value> outs = symbolic ? *symbolic : emit_node(std::move(n));
    for (int i = 0; i < node.output_size(); ++i) {
      const std::string& out = node.output(i);
      if (out.empty()) continue;  // an optional output the model does not ask for
      if (i < static_cast<int>(outs.size())) {
        define(out, outs[i]);
      } else {
        // Unused extra outputs (Dropout's mask, BatchNormalization's training outputs) are fine until something reads them.
        absent_[out] = "output " + std::to_string(i) + " of " + reader + ", which kiln's " + node.op_type() + " does not produce (it gives " +
                       std::to_string(outs.size()) + " output" + (outs.size() == 1 ? "" : "s") + ")";
      }
    }
  }

  void add_constant(const onnx::NodeProto& node, const std::string& name) {
    KILN_USER_CHECK(node.output_size() == 1) << "Constant node '" << name << "' has " << node.output_size() << " outputs; it must have 1";
    KILN_USER_CHECK(node.attribute_size() == 1) << "Constant node '" << name << "' has " << node.attribute_size()
                                                << " attributes; it must have exactly one (value, value_float(s) or value_int(s))";
    const onnx::AttributeProto& a = node.attribute(0);
    const std::string what = "Constant node '" + name + "'";
    NDArray data;
    if (a.name() == "value") {
      data = tensor_from_onnx(a.t(), what);
    } else if (a.name() == "value_float" || a.name() == "value_int") {
      bool f = a.name() == "value_float";
      data = NDArray::empty({}, f ? DataType::Float(32) : DataType::Int(64));
      if (f) data.data_as<float>()[0] = a.f();
      else data.data_as<int64_t>()[0] = a.i();
    } else if (a.name() == "value_floats" || a.name() == "value_ints") {
      bool f = a.name() == "value_floats";
      int64_t count = f ? a.floats_size() : a.ints_size();
      data = NDArray::empty({count}, f ? DataType::Float(32) : DataType::Int(64));
      for (int64_t i = 0; i < count; ++i) {
        if (f) data.data_as<float>()[i] = a.floats(i);
        else data.data_as<int64_t>()[i] = a.ints(i);
      }
    } else {
      KILN_USER_ERROR() << what << " has the attribute '" << a.name()
                        << "'; kiln reads Constant's value, value_float, value_floats, value_int and value_ints (not sparse or string values)";
    }
    define(node.output(0), make_constant(node.output(0), data)->output());
  }

  const onnx::ModelProto& model_;
  const onnx::GraphProto& graph_;
  const InputShapes& shapes_;
  int64_t opset_ = 0;
  std::unordered_map<std::string, Value> values_;
  // Outputs ONNX nodes list but their kiln nodes lack, with why.
  std::unordered_map<std::string, std::string> absent_;
  std::vector<Ref<InputNode>> inputs_;
  ShapeValues shape_values_;
};

}  // namespace

Graph from_onnx_bytes(const std::string& bytes, const InputShapes& shapes) {
  onnx::ModelProto model;
  KILN_USER_CHECK(model.ParseFromString(bytes)) << "the " << bytes.size()
                                                << " bytes given are not an ONNX model (they do not parse as an ONNX ModelProto; truncated?)";
  KILN_USER_CHECK(model.has_graph()) << "the " << bytes.size() << " bytes given parse, but hold no ONNX graph: not an ONNX model";
  return Importer(model, shapes).run();
}

Graph from_onnx(const std::string& path, const InputShapes& shapes) {
  KILN_USER_CHECK(!std::filesystem::is_directory(path)) << "the ONNX file '" << path << "' is a directory";
  std::ifstream f(path, std::ios::binary);
  KILN_USER_CHECK(f.good()) << "cannot open the ONNX file '" << path << "' (no such file, or not readable)";
  std::ostringstream s;
  s << f.rdbuf();
  KILN_USER_CHECK(!f.bad()) << "cannot read the ONNX file '" << path << "'";
  try {
    return from_onnx_bytes(s.str(), shapes);
  } catch (const Error& e) {
    throw Error("ONNX file '" + path + "': " + e.what());
  }
}

}  // namespace kiln::graph
