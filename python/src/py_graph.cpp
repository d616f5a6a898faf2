// kiln.graph bindings: graph construction, passes, the operator registry and
// the executor. Values cross as handles; arrays as numpy (inputs are viewed,
// not copied, while a run lasts).
#include <pybind11/functional.h>

#include "kiln/graph/autocast.h"
#include "kiln/graph/autodiff.h"
#include "kiln/graph/executor.h"
#include "kiln/graph/gpu_executor.h"
#include "kiln/graph/kernel_builder.h"
#include "kiln/graph/op_registry.h"
#include "kiln/graph/passes.h"
#include "kiln/graph/rewrite.h"
#include "kiln/graph/to_te.h"
#include "kiln/support/error.h"
#include "kiln_py.h"

namespace kiln::python {

using namespace kiln::graph;

namespace {

AttrValue to_attr(py::handle v, const std::string& name) {
  if (py::isinstance<py::bool_>(v)) return static_cast<int64_t>(v.cast<bool>());
  if (py::isinstance<py::int_>(v)) return v.cast<int64_t>();
  if (py::isinstance<py::float_>(v)) return v.cast<double>();
  if (py::isinstance<py::str>(v)) return v.cast<std::string>();
  if (py::isinstance<py::sequence>(v)) {
    py::sequence s = v.cast<py::sequence>();
    bool all_int = true;
    for (py::handle x : s) all_int &= py::isinstance<py::int_>(x) || py::isinstance<py::bool_>(x);
    if (all_int) return s.cast<std::vector<int64_t>>();
    return s.cast<std::vector<double>>();
  }
  if (py::hasattr(v, "item")) return to_attr(v.attr("item")(), name);
  throw_user_error("attribute '" + name + "': cannot take a " + std::string(py::str(v.get_type().attr("__name__"))) +
                   " (use an int, a float, a string or a list of ints or floats)");
}

py::object from_attr(const AttrValue& v) {
  if (const Shape* s = std::get_if<Shape>(&v)) return shape_tuple(*s);
  return std::visit([](const auto& x) -> py::object {
    if constexpr (std::is_same_v<std::decay_t<decltype(x)>, Shape>) return py::none();  // handled above
    else return py::cast(x);
  }, v);
}

Attrs to_attrs(const py::dict& d) {
  Attrs a;
  for (auto [k, v] : d) a.set(k.cast<std::string>(), to_attr(v, k.cast<std::string>()));
  return a;
}

}  // namespace

// A shape as Python sees it: an int per static dim, the expression's text ("seq", "seq + 1") per symbolic one.
py::tuple shape_tuple(const Shape& shape) {
  py::tuple out(shape.size());
  for (size_t i = 0; i < shape.size(); ++i)
    out[i] = shape[i].is_static() ? py::object(py::int_(shape[i].value())) : py::object(py::str(shape[i].str()));
  return out;
}

// A shape from Python: ints, and names of shape variables ("batch") for symbolic dims.
Shape to_graph_shape(const py::sequence& dims) {
  Shape shape;
  for (py::handle d : dims) {
    if (py::isinstance<py::str>(d)) {
      shape.push_back(Dim::var(d.cast<std::string>()));
    } else if (py::isinstance<py::int_>(d)) {
      shape.push_back(Dim(d.cast<int64_t>()));
    } else {
      throw_user_error("a dimension must be an int or the name of a shape variable (a str such as \"batch\"), got a " +
                       std::string(py::str(d.get_type().attr("__name__"))));
    }
  }
  return shape;
}

namespace {

py::tuple type_tuple(const TensorType& t) { return py::make_tuple(shape_tuple(t.shape), t.dtype.str()); }

// Inputs as NDArray views of C-contiguous numpy arrays (or the kiln arrays
// given). keep[i] is the object whose memory input i views, kept alive by it.
std::vector<NDArray> view_inputs(const py::sequence& inputs, std::vector<py::object>* keep) {
  std::vector<NDArray> arrays;
  for (py::handle h : inputs) {
    if (py::isinstance<NDArray>(h)) {
      keep->push_back(py::reinterpret_borrow<py::object>(h));
      arrays.push_back(h.cast<NDArray>());
      continue;
    }
    py::array a = py::array::ensure(h, py::array::c_style);
    if (!a) {
      PyErr_Clear();
      throw_user_error("a model input must be an array (numpy, torch or kiln), got a " + std::string(py::str(h.get_type().attr("__name__"))));
    }
    keep->push_back(a);
    std::vector<int64_t> shape(a.shape(), a.shape() + a.ndim());
    DataType t = to_dtype(a.dtype());
    arrays.push_back(NDArray::wrap(const_cast<void*>(a.data()), shape, t));
  }
  return arrays;
}

py::list to_numpy_list(const std::vector<NDArray>& arrays) {
  py::list out;
  for (const NDArray& a : arrays) out.append(ndarray_to_numpy(a));
  return out;
}


// Executor.run / GpuExecutor.run / simulate: numpy views in, the call without the GIL, numpy out.
template <typename Run>
py::list run_with(py::sequence inputs, const Run& run) {
  std::vector<py::object> keep;
  std::vector<NDArray> in = view_inputs(inputs, &keep);
  std::vector<NDArray> out;
  {
    py::gil_scoped_release release;
    out = run(in);
  }
  return to_numpy_list(out);
}

// Executor.run(inputs, donate=[input positions]): outputs written into a
// donated input's array come back as that very input array (numpy keeps
// owning the memory), the others as fresh arrays.
py::list run_donating(const Executor& exe, py::sequence inputs, const std::vector<int>& donate) {
  std::vector<py::object> keep;
  std::vector<NDArray> in = view_inputs(inputs, &keep);
  std::vector<bool> flags(in.size(), false);
  for (int i : donate) {
    if (i < 0 || i >= static_cast<int>(in.size()))
      throw_user_error("donate names input " + std::to_string(i) + " of a model with " + std::to_string(in.size()) + " inputs");
    if (py::isinstance<py::array>(keep[i]) && !keep[i].cast<py::array>().writeable())
      throw_user_error("input " + std::to_string(i) + " is donated (written over in place) but its array is read-only; pass a writeable copy");
    flags[i] = true;
  }
  std::vector<NDArray> out;
  {
    py::gil_scoped_release release;
    out = exe.run(in, flags);
  }
  const std::vector<int>& reuses = exe.plan().output_reuses_input;
  py::list result;
  for (size_t k = 0; k < out.size(); ++k) {
    int j = k < reuses.size() ? reuses[k] : -1;
    result.append(j >= 0 && flags[j] ? keep[j] : ndarray_to_numpy(out[k]));
  }
  return result;
}

py::list group_dicts(const std::vector<GroupInfo>& groups) {
  py::list out;
  for (const GroupInfo& g : groups) {
    py::dict d;
    d["name"] = g.name;
    d["ops"] = g.ops;
    d["workload_key"] = g.workload_key;
    d["schedule"] = g.schedule;
    d["schedule_detail"] = g.schedule_detail;
    d["records_only_for"] = g.records_only_for;
    d["flop"] = g.flop;
    d["kernel"] = g.kernel;
    py::list variants;
    for (const GroupVariant& v : g.variants) {
      py::dict vd;
      vd["when"] = v.when;
      vd["kernel"] = v.kernel;
      vd["schedule_detail"] = v.schedule_detail;
      variants.append(vd);
    }
    d["variants"] = variants;
    out.append(d);
  }
  return out;
}

// The graph with each fused group's body spliced in its place (the operators
// it runs, rebuilt on the group's inputs): one DAG for to_te, as if unfused.
Graph inline_groups(const Graph& g) {
  return rewrite_graph(g, [](const Ref<OpNode>& n) -> std::vector<Value> {
    if (!n->body.defined()) return {};
    Graph body(n->body);
    std::unordered_map<const NodeObj*, Value> outer;  // a body input's or operator's value outside (by output 0; indices kept)
    for (size_t i = 0; i < body.inputs().size(); ++i) outer[body.inputs()[i].get()] = n->inputs[i];
    auto map = [&](const Value& v) {
      auto it = outer.find(v.node.get());
      return it == outer.end() ? v : Value{it->second.node, it->second.index + v.index};  // constants stay shared
    };
    for (const OpNode* op : body.op_nodes()) {
      std::vector<Value> ins;
      for (const Value& v : op->inputs) ins.push_back(v.defined() ? map(v) : Value());
      outer[op] = make_op(op->op, ins, op->attrs, op->name)->output(0);
    }
    std::vector<Value> outs;
    for (const Value& v : body.outputs()) outs.push_back(map(v));
    return outs;
  });
}

// Every node of g in topo order, graph inputs first, as plain dicts (for
// Python passes such as kiln.quantize that walk and rebuild a graph, and the
// ONNX writer): kind, name, op and attrs, inputs as (node id, output index)
// or None, the output types, and a constant's data.
py::dict graph_nodes_dict(const Graph& g) {
  std::unordered_map<const NodeObj*, int64_t> id;
  std::vector<Ref<NodeObj>> order;
  for (const auto& i : g.inputs()) order.push_back(i);
  for (const auto& n : g.topo_order())
    if (n->kind != NodeKind::Input) order.push_back(n);
  py::list nodes;
  for (const auto& n : order) {
    id[n.get()] = static_cast<int64_t>(nodes.size());
    py::dict d;
    d["id"] = id[n.get()];
    d["kind"] = n->kind == NodeKind::Input ? "input" : n->kind == NodeKind::Constant ? "constant" : "op";
    d["name"] = n->name;
    py::list types, inputs;
    for (const TensorType& t : n->types) types.append(type_tuple(t));
    d["types"] = types;
    if (n->kind == NodeKind::Constant) d["data"] = ndarray_to_numpy(static_cast<const ConstantNode&>(*n).data);
    if (n->kind == NodeKind::Op) {
      const auto& op = static_cast<const OpNode&>(*n);
      d["op"] = op.op->name;
      d["fused"] = op.body.defined();
      py::dict attrs;
      for (const auto& [k, v] : op.attrs.values()) attrs[py::str(k)] = from_attr(v);
      d["attrs"] = attrs;
      for (const Value& v : op.inputs) inputs.append(v.defined() ? py::object(py::make_tuple(id.at(v.node.get()), v.index)) : py::object(py::none()));
    }
    d["inputs"] = inputs;
    nodes.append(d);
  }
  py::list outputs;
  for (const Value& v : g.outputs()) outputs.append(py::make_tuple(id.at(v.node.get()), v.index));
  py::dict out;
  out["nodes"] = nodes;
  out["outputs"] = outputs;
  out["output_names"] = g.output_names();
  return out;
}

py::dict memory_dict(const MemoryReport& r) {
  py::dict d;
  d["arena_bytes"] = r.arena_bytes;
  d["naive_bytes"] = r.naive_bytes;
  d["peak_bytes"] = r.peak_bytes;
  d["weight_bytes"] = r.weight_bytes;
  d["inplace"] = r.inplace;
  return d;
}

}  // namespace

void define_graph(py::module_& root) {
  py::module_ m = root.def_submodule("graph", "The graph compiler: graph IR, operator registry, passes, executor.");

  py::class_<Value>(m, "Value", "An edge of a graph: one output of a node.")
      .def_property_readonly("shape", [](const Value& v) { return shape_tuple(v.type().shape); })
      .def_property_readonly("dtype", [](const Value& v) { return v.type().dtype.str(); })
      .def_property_readonly("name", [](const Value& v) { return v.node->name; })
      .def_property_readonly("is_constant", [](const Value& v) { return v.node->kind == NodeKind::Constant; })
      .def("__repr__", [](const Value& v) { return "<Value " + v.node->name + ": " + v.type().str() + ">"; });

  py::class_<Graph>(m, "Graph", "An immutable dataflow graph of operators.")
      .def("__str__", &Graph::str)
      .def("__repr__", [](const Graph& g) { return "<kiln.graph.Graph with " + std::to_string(g.op_nodes().size()) + " operators>"; })
      .def_property_readonly("input_names", [](const Graph& g) {
        std::vector<std::string> n;
        for (const auto& i : g.inputs()) n.push_back(i->name);
        return n;
      })
      .def_property_readonly("input_types", [](const Graph& g) {
        py::list l;
        for (const auto& i : g.inputs()) l.append(type_tuple(i->types[0]));
        return l;
      })
      .def_property_readonly("output_names", &Graph::output_names)
      .def_property_readonly("input_values", [](const Graph& g) {
        std::vector<Value> v;
        for (const auto& i : g.inputs()) v.push_back(i->output());
        return v;
      }, "The inputs as Values (to build on the graph).")
      .def_property_readonly("output_values", &Graph::outputs, "The outputs as Values.")
      .def_property_readonly("output_types", [](const Graph& g) {
        py::list l;
        for (const Value& v : g.outputs()) l.append(type_tuple(v.type()));
        return l;
      })
      .def("op_types", [](const Graph& g) {
        std::vector<std::string> ops;
        for (const OpNode* n : g.op_nodes()) ops.push_back(n->body.defined() ? n->attrs.get_string("ops") : n->op->name);
        return ops;
      }, "The operator of every node in topo order (a fused group as \"Conv+Relu\").")
      .def("structural_equal", [](const Graph& a, const Graph& b) { return structural_equal(a, b); })
      .def("structural_hash", [](const Graph& a) { return structural_hash(a); });

  m.def("make_input", [](const std::string& name, py::sequence shape, py::handle dtype) {
    return make_input(name, TensorType{to_graph_shape(shape), to_dtype(dtype)})->output();
  }, py::arg("name"), py::arg("shape"), py::arg("dtype") = "float32");
  m.def("make_constant", [](const std::string& name, py::handle array) { return make_constant(name, numpy_to_ndarray(array))->output(); },
        py::arg("name"), py::arg("array"), "A constant holding a copy of `array` (numpy or anything numpy converts).");
  m.def("make_op", [](const std::string& op, std::vector<std::optional<Value>> inputs, py::dict attrs, const std::string& name) {
    std::vector<Value> in;
    for (auto& v : inputs) in.push_back(v ? *v : Value());
    Ref<OpNode> n = make_op(op, std::move(in), to_attrs(attrs), name);
    std::vector<Value> outs;
    for (int i = 0; i < n->num_outputs(); ++i) outs.push_back(n->output(i));
    return outs;
  }, py::arg("op"), py::arg("inputs"), py::arg("attrs") = py::dict(), py::arg("name") = "");
  m.def("make_graph", [](const std::vector<Value>& inputs, const std::vector<Value>& outputs, std::vector<std::string> names) {
    std::vector<Ref<InputNode>> in;
    for (const Value& v : inputs) {
      if (v.node->kind != NodeKind::Input) throw_user_error("graph inputs must be made with make_input; '" + v.node->name + "' is not an input");
      in.push_back(Ref<InputNode>(static_cast<const InputNode*>(v.node.get())));
    }
    return Graph::make(std::move(in), outputs, std::move(names));
  }, py::arg("inputs"), py::arg("outputs"), py::arg("output_names") = std::vector<std::string>{});

  m.def("to_te", [](const Graph& g) {
    GraphDag d = to_te(inline_groups(g));
    std::vector<NDArray> constants;
    for (const auto& c : d.constants) constants.push_back(c->data);
    return py::make_tuple(d.inputs, d.constant_tensors, to_numpy_list(constants), d.outputs);
  }, py::arg("graph"),
        "The graph as one tensor-expression DAG (what its kernels compute, before fusion and schedules): (input placeholders, constant "
        "placeholders, the constants' values, output tensors); fused groups are inlined. Symbolic dims are te shape variables: a kernel built from it takes any size.");
  m.def("graph_nodes", &graph_nodes_dict, py::arg("graph"),
        "Every node in topo order (graph inputs first) as dicts: id, kind ('input', 'constant', 'op'), name, op, attrs, "
        "inputs ((id, output index) or None), types, a constant's data; with the graph's outputs as (id, index) and output_names.");
  m.def("registered_ops", &registered_ops);
  m.def("op_const_inputs", [](const std::string& name) { return get_op(name).const_inputs; });
  m.def("op_info", [](const std::string& name) {
    const OpDef& d = get_op(name);
    py::dict info;
    info["name"] = d.name;
    info["doc"] = d.doc;
    info["pattern"] = pattern_name(d.pattern);
    info["inputs"] = py::make_tuple(d.min_inputs, d.max_inputs);
    py::dict attrs;
    for (const AttrSpec& s : d.attrs) attrs[py::str(s.name)] = s.default_value ? from_attr(*s.default_value) : py::object(py::none());
    info["attrs"] = attrs;
    info["has_compute"] = static_cast<bool>(d.compute);
    info["has_gradient"] = static_cast<bool>(d.gradient);
    return info;
  });

  m.def("gradients", [](const Value& loss, const std::vector<Value>& wrt) {
    std::vector<std::optional<Value>> out;
    for (const Value& g : gradients(loss, wrt)) out.push_back(g.defined() ? std::optional<Value>(g) : std::nullopt);
    return out;
  }, py::arg("loss"), py::arg("wrt"), "d loss / d w for each w (None where the loss does not depend on it).");
  m.def("vjp", [](const std::vector<Value>& outputs, const std::vector<Value>& output_grads, const std::vector<Value>& wrt) {
    std::vector<std::optional<Value>> out;
    for (const Value& g : vjp(outputs, output_grads, wrt)) out.push_back(g.defined() ? std::optional<Value>(g) : std::nullopt);
    return out;
  }, py::arg("outputs"), py::arg("output_grads"), py::arg("wrt"),
     "The gradients of sum_k <outputs[k], output_grads[k]> with respect to each w (None where no output depends on it).");
  m.def("gradient_graph", &gradient_graph, py::arg("graph"), py::arg("wrt"), py::arg("loss_output") = 0);
  m.def("lift_parameters", [](const Graph& g, bool training) {
    LiftedParameters p = lift_parameters(g, training);
    return py::make_tuple(p.graph, p.names, to_numpy_list(p.values), p.buffer_names, to_numpy_list(p.buffer_values), p.seed_input);
  }, py::arg("graph"), py::arg("training") = false,
     "The graph with its trainable constants as inputs after the model's, then its buffers (training=True: batch norms on batch "
     "statistics, their running statistics as buffers whose updates are extra outputs; dropouts drawing masks from a last int64 seed "
     "input): (graph, names, arrays, buffer names, buffer arrays, seed input name or '').");

  m.def("remove_identity", &remove_identity);
  m.def("fold_transposes", &fold_transposes);
  m.def("holds_bfloat16_values", &holds_bfloat16_values, py::arg("value"),
        "Whether the value is float32 holding bfloat16 values as autocast leaves them (an operand use_bf16_dot takes).");
  m.def("fold_constants", [](const Graph& g) { return fold_constants(g); });
  m.def("fold_batch_norm", &fold_batch_norm);
  m.def("eliminate_common_subexpr", &eliminate_common_subexpr);
  m.def("fuse_ops", [](const Graph& g) { return fuse_ops(g); });
  m.def("wrap_ops", &wrap_ops);
  m.def("autocast", [](const Graph& g, const std::string& dtype, std::vector<std::string> ops, bool round_outputs) {
    AutocastOptions o;
    KILN_USER_CHECK(dtype == "bfloat16" || dtype == "float16") << "autocast: dtype must be 'bfloat16' or 'float16', got '" << dtype << "'";
    o.low = dtype == "bfloat16" ? DataType::BFloat16() : DataType::Float(16);
    if (!ops.empty()) o.ops = ops;
    o.round_outputs = round_outputs;
    return autocast(g, o);
  }, py::arg("graph"), py::arg("dtype") = "bfloat16", py::arg("ops") = std::vector<std::string>{}, py::arg("round_outputs") = true,
     "MatMul/Gemm/Conv (or `ops`) read and give values rounded to a 16-bit float (kiln/graph/autocast.h).");
  m.def("optimize", [](const Graph& g, const std::string& target, bool fuse) { return optimize(g, Target::parse(target), {fuse, true, false}); },
        py::arg("graph"), py::arg("target") = "llvm", py::arg("fuse") = true);

  py::class_<Executor>(m, "Executor", "A compiled graph: kernels and a plan over one arena.")
      .def("run", [](const Executor& exe, py::sequence inputs) { return run_with(inputs, [&](const std::vector<NDArray>& in) { return exe.run(in); }); }, py::arg("inputs"))
      .def("run", &run_donating, py::arg("inputs"), py::arg("donate"),
           "Runs with the inputs at the positions `donate` donated: outputs the plan lets reuse them are written into their arrays in place")
      .def_property_readonly("output_reuses_input", [](const Executor& exe) { return exe.plan().output_reuses_input; },
                             "per output, the input whose donated array it is written into, or -1")
      .def("profile", [](const Executor& exe, py::sequence inputs, int repeats) {
        std::vector<py::object> keep;
        std::vector<NDArray> in = view_inputs(inputs, &keep);
        std::vector<ProfileRow> rows;
        {
          py::gil_scoped_release release;
          rows = exe.profile(in, repeats);
        }
        py::list out;
        for (const ProfileRow& r : rows) {
          py::dict d;
          d["name"] = r.name;
          d["seconds"] = r.seconds;
          d["gflops"] = r.gflops;
          d["share"] = r.share;
          out.append(d);
        }
        return out;
      }, py::arg("inputs"), py::arg("repeats") = 10)
      .def("memory", [](const Executor& exe, std::optional<std::map<std::string, int64_t>> shapes) {
        return memory_dict(shapes ? exe.memory(*shapes) : exe.memory());
      }, py::arg("shapes") = std::nullopt, "The arena and weights in bytes; a model with shape variables needs their values (shapes={\"seq\": 128}).")
      .def("memory_bound", [](const Executor& exe) -> py::object {
        std::optional<MemoryReport> m = exe.memory_bound();
        return m ? py::object(memory_dict(*m)) : py::object(py::none());
      }, "The largest arena any run plans when every shape variable has a range (compile's dims=), else None.")
      .def_property_readonly("shape_vars", &Executor::shape_vars)
      .def_property_readonly("runner", &Executor::runner, "The kiln_runtime ModelRunner of the plan (layout per shape, kernels), for tests and tools.")
      .def("export_library", [](const Executor& exe, const std::string& path, const std::string& weights, bool static_runtime) {
        py::gil_scoped_release release;
        exe.export_library(path, weights, static_runtime);
      }, py::arg("path"), py::arg("weights") = "embed", py::arg("static_runtime") = false,
         "Writes the model as one .so (kernels, plan, weights embedded or beside it as <path>.weights) for kiln.runtime.load_model.")
      .def_property_readonly("graph", &Executor::graph)
      .def_property_readonly("compile_seconds", &Executor::compile_seconds)
      .def("groups", [](const Executor& exe) { return group_dicts(exe.groups()); })
      .def("layout_decisions", [](const Executor& exe) {
        py::list out;
        for (const LayoutDecision& l : exe.layout_decisions()) {
          py::dict d;
          d["conv"] = l.conv;
          d["cap"] = l.cap;
          d["conv_time"] = l.conv_time;
          d["transform_time"] = l.transform_time;
          d["why"] = l.why;
          out.append(d);
        }
        return out;
      })
      .def_property_readonly("num_kernels", [](const Executor& exe) { return exe.plan().kernel_names.size(); });

  py::class_<GpuExecutor>(m, "GpuExecutor", "A graph compiled for a cuda target: a CUDA kernel per fused group and the plan.")
      .def("run", [](const GpuExecutor& exe, py::sequence inputs) { return run_with(inputs, [&](const std::vector<NDArray>& in) { return exe.run(in); }); }, py::arg("inputs"))
      .def("simulate", [](const GpuExecutor& exe, py::sequence inputs) { return run_with(inputs, [&](const std::vector<NDArray>& in) { return exe.simulate(in); }); },
           py::arg("inputs"))
      .def("memory", [](const GpuExecutor& exe) { return memory_dict(exe.memory()); })
      .def("groups", [](const GpuExecutor& exe) { return group_dicts(exe.groups()); })
      .def("kernels", [](const GpuExecutor& exe) {
        py::list out;
        const ModelPlan& plan = exe.plan();
        for (size_t i = 0; i < plan.kernel_names.size(); ++i) {
          py::dict d;
          d["name"] = plan.kernel_names[i];
          d["source"] = exe.source(static_cast<int>(i));
          d["launch"] = exe.launch(static_cast<int>(i));
          out.append(d);
        }
        return out;
      })
      .def_property_readonly("graph", &GpuExecutor::graph)
      .def_property_readonly("num_kernels", [](const GpuExecutor& exe) { return exe.plan().kernel_names.size(); });

  m.def("compile_gpu", [](const Graph& g, const std::string& target, bool fuse, bool nvrtc, bool dump, const std::string& db) {
    py::gil_scoped_release release;
    return compile_gpu(g, GpuCompileOptions{target, fuse, nvrtc, db, dump});
  }, py::arg("graph"), py::arg("target") = "cuda -arch=sm_90", py::arg("fuse") = true, py::arg("nvrtc") = true, py::arg("dump") = false,
     py::arg("db") = "");

  m.def("compile", [](const Graph& g, const std::string& target, const std::string& db, bool fuse, bool plain, bool dump, bool layout, int bf16_dot, int winograd,
                      const std::map<std::string, std::pair<int64_t, int64_t>>& dims, const std::map<std::string, std::vector<int64_t>>& sizes, bool size_variants, bool int8) {
    CompileOptions o;
    o.int8 = int8;
    o.sizes = sizes;
    o.size_variants = size_variants;
    for (const auto& [name, range] : dims) o.dims[name] = ShapeRange{range.first, range.second};
    o.layout_plan.winograd = winograd;
    o.bf16_dot = bf16_dot;
    o.layout = layout;
    o.target = target;
    o.db = db;
    o.fuse = fuse;
    o.plain = plain;
    o.dump = dump;
    py::gil_scoped_release release;
    return compile(g, o);
  }, py::arg("graph"), py::arg("target") = "llvm", py::arg("db") = "", py::arg("fuse") = true, py::arg("plain") = false, py::arg("dump") = false, py::arg("layout") = true,
     py::arg("bf16_dot") = -1, py::arg("winograd") = 4, py::arg("dims") = std::map<std::string, std::pair<int64_t, int64_t>>{},
     py::arg("sizes") = std::map<std::string, std::vector<int64_t>>{}, py::arg("size_variants") = true, py::arg("int8") = true);
}

}  // namespace kiln::python
