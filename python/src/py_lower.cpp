// Lowering, targets and build: a schedule to a loop nest (PrimFunc) and to a
// runtime Module. Compilation releases the GIL: it touches no Python object.
#include "kiln/codegen/target.h"
#include "kiln/driver/build.h"
#include "kiln/ir/printer.h"
#include "kiln/te/lower.h"
#include "kiln_py.h"

namespace kiln::python {

namespace {

Target to_target(py::handle target) {
  if (py::isinstance<Target>(target)) return target.cast<Target>();
  if (py::isinstance<py::str>(target)) return Target::parse(target.cast<std::string>());
  throw_user_error("a target must be a string such as \"llvm\" or a kiln Target");
}

py::list param_list(const PrimFunc& f) {
  py::list out;
  for (const Param& p : f.params()) {
    py::dict d;
    d["name"] = p.is_buffer() ? p.buffer.name() : p.var.name();
    d["kind"] = p.is_buffer() ? "buffer" : "scalar";
    d["dtype"] = p.is_buffer() ? p.buffer.dtype().str() : p.var.dtype().str();
    if (p.is_buffer()) {
      py::list shape;
      for (const Expr& e : p.buffer.shape()) shape.append(e);
      d["shape"] = shape;
    }
    out.append(d);
  }
  return out;
}

}  // namespace

void define_lower(py::module_& m) {
  py::class_<PrimFunc>(m, "PrimFunc", "A lowered function: parameters and a loop nest. print() shows the loop nest.")
      .def_property_readonly("name", &PrimFunc::name)
      .def_property_readonly("params", &param_list, "The parameters in call order, as dicts (name, kind, dtype, shape).")
      .def("__str__", [](const PrimFunc& f) { return to_string(f); })
      .def("__repr__", [](const PrimFunc& f) { return to_string(f); });

  m.def("lower", [](const te::Schedule& sch, py::handle args, const std::string& name, bool run_passes, bool dump_ir) {
    te::LowerOptions opts;
    opts.run_passes = run_passes;
    opts.dump_ir = dump_ir;
    std::vector<te::Tensor> tensors = to_tensor_list(args, "lower args");
    py::gil_scoped_release release;
    return te::lower(sch, tensors, name, opts);
  }, py::arg("schedule"), py::arg("args"), py::arg("name") = "main", py::arg("run_passes") = true, py::arg("dump_ir") = false);

  py::class_<Target>(m, "Target", "Where code runs, e.g. \"llvm\", \"llvm -mcpu=znver3 -num-cores=2\".")
      .def(py::init([](const std::string& s) { return Target::parse(s); }), py::arg("target") = "llvm")
      .def_static("host", &Target::host)
      .def_property_readonly("kind", [](const Target& t) { return std::string(t.kind_name()); })
      .def_property_readonly("mcpu", [](const Target& t) { return t.mcpu; })
      .def_property_readonly("triple", [](const Target& t) { return t.triple; })
      .def_property_readonly("features", [](const Target& t) { return t.features; })
      .def_property_readonly("num_cores", [](const Target& t) { return t.num_cores; })
      .def_property_readonly("vector_bits", [](const Target& t) { return t.vector_bits; })
      .def_property_readonly("fast_math", [](const Target& t) { return t.fast_math; })
      .def_property_readonly("num_vector_registers", &Target::num_vector_registers,
                             "Architectural vector registers a register tile can use (32 on AArch64 and AVX-512, 16 on AVX2).")
      .def_property_readonly("is_cross", &Target::is_cross,
                             "Code for another machine (-mtriple of another architecture): compiled and exported, never run here.")
      .def("has_feature", &Target::has_feature, py::arg("feature"))
      .def("natural_lanes", [](const Target& t, py::handle dtype) { return t.natural_lanes(to_dtype(dtype)); }, py::arg("dtype") = "float32",
           "Lanes of `dtype` that fill one native vector register.")
      .def("__eq__", [](const Target& a, py::object b) { return py::isinstance<Target>(b) && a == b.cast<Target>(); })
      .def("__hash__", [](const Target& t) { return std::hash<std::string>()(t.str()); })
      .def("__str__", &Target::str)
      .def("__repr__", [](const Target& t) { return "Target(\"" + t.str() + "\")"; });

  m.def("build", [](const te::Schedule& sch, py::handle args, py::handle target, const std::string& name) {
    std::vector<te::Tensor> tensors = to_tensor_list(args, "build args");
    Target t = to_target(target);
    py::gil_scoped_release release;
    return build(sch, tensors, t, name);
  }, py::arg("schedule"), py::arg("args"), py::arg("target") = "llvm", py::arg("name") = "main");
  m.def("build_count", &build_count, "How many kernels kiln has compiled in this process (every path: kiln.build, kiln.compile, tuning).");
}

}  // namespace kiln::python
