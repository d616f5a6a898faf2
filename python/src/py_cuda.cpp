// The CUDA backend: lowering for the GPU, CUDA C, NVRTC, the GPU simulator
// and the (dlopen'ed) driver. kiln.build(..., target="cuda ...") wraps
// CudaModule in kiln.gpu.CudaModule.
#include <deque>

#include "kiln/codegen/cuda.h"
#include "kiln/driver/build_cuda.h"
#include "kiln/interp/gpu_simulator.h"
#include "kiln/ir/printer.h"
#include "kiln/runtime/cuda.h"
#include "kiln_py.h"

namespace kiln::python {

namespace {

// Arrays and scalars of one call, with the storage borrowed DLTensors point into.
struct CallArgs {
  std::deque<DLTensor> tensors;
  std::deque<std::vector<int64_t>> dims;
  std::vector<Arg> args;
};

CallArgs to_args(const py::sequence& seq, const std::string& kernel) {
  CallArgs out;
  for (size_t i = 0; i < py::len(seq); ++i) {
    py::handle obj = seq[i];
    std::string where = kernel + ": argument " + std::to_string(i);
    if (py::isinstance<NDArray>(obj)) {
      out.args.emplace_back(obj.cast<NDArray>());
    } else if (py::isinstance<py::array>(obj)) {
      py::array arr = py::reinterpret_borrow<py::array>(obj);
      if (!(arr.flags() & py::detail::npy_api::NPY_ARRAY_C_CONTIGUOUS_)) throw_user_error(where + " is not C-contiguous; pass np.ascontiguousarray(a)");
      if (!arr.writeable()) throw_user_error(where + " is a read-only numpy array; pass a writeable array (the kernel may write it)");
      DLTensor t{};
      t.dtype = to_dlpack_dtype(to_dtype(arr.dtype()));
      std::vector<int64_t>& shape = out.dims.emplace_back(arr.ndim());
      for (int d = 0; d < arr.ndim(); ++d) shape[d] = arr.shape(d);
      t.data = arr.mutable_data();
      t.device = DLDevice{kDLCPU, 0};
      t.ndim = static_cast<int>(arr.ndim());
      t.shape = shape.data();
      out.args.emplace_back(&out.tensors.emplace_back(t));
    } else if (py::isinstance<py::float_>(obj)) {
      out.args.emplace_back(obj.cast<double>());
    } else if (PyIndex_Check(obj.ptr())) {
      out.args.emplace_back(obj.cast<long long>());
    } else {
      throw_user_error(where + " is a " + std::string(py::str(py::type::of(obj).attr("__name__"))) + "; pass a numpy array, a kiln NDArray, an int or a float");
    }
  }
  return out;
}

py::dict launch_dict(const pass::LaunchConfig& c) {
  py::dict d;
  d["grid"] = py::make_tuple(c.grid[0], c.grid[1], c.grid[2]);
  d["block"] = py::make_tuple(c.block[0], c.block[1], c.block[2]);
  d["shared_bytes"] = c.shared_bytes;
  return d;
}

Target cuda_target(const std::string& s) {
  Target t = Target::parse(s);
  if (t.kind != Target::Kind::CUDA) throw_user_error("target '" + s + "' is not a cuda target; use e.g. \"cuda -arch=sm_90\"");
  return t;
}

}  // namespace

void define_cuda(py::module_& m) {
  py::module_ g = m.def_submodule("cuda", "The CUDA backend (native part of kiln.gpu)");

  py::class_<GpuSimulation>(g, "GpuSimulation", "What a simulated kernel run did.")
      .def_readonly("blocks", &GpuSimulation::blocks)
      .def_readonly("thread_runs", &GpuSimulation::thread_runs)
      .def_readonly("barriers", &GpuSimulation::barriers)
      .def("__repr__", [](const GpuSimulation& s) {
        return "GpuSimulation(blocks=" + std::to_string(s.blocks) + ", thread_runs=" + std::to_string(s.thread_runs) + ", barriers=" + std::to_string(s.barriers) + ")";
      });

  py::class_<CudaModule>(g, "CudaModule", "A kernel built for a cuda target.")
      .def_property_readonly("name", &CudaModule::name)
      .def_property_readonly("func", [](const CudaModule& c) { return c.func; })
      .def_property_readonly("target", [](const CudaModule& c) { return c.target.str(); })
      .def_property_readonly("source", [](const CudaModule& c) { return c.source; })
      .def_property_readonly("cubin", [](const CudaModule& c) { return py::bytes(c.cubin); })
      .def_property_readonly("launch", [](const CudaModule& c) { return launch_dict(c.launch); })
      .def("ptx", [](const CudaModule& c) {
        py::gil_scoped_release release;
        return c.ptx();
      })
      .def("simulate", [](const CudaModule& c, const py::sequence& args) {
        CallArgs a = to_args(args, c.name());
        py::gil_scoped_release release;
        return c.simulate(a.args);
      })
      .def("run", [](const CudaModule& c, const py::sequence& args) {
        CallArgs a = to_args(args, c.name());
        py::gil_scoped_release release;
        c.run(a.args);
      })
      .def("time", [](const CudaModule& c, const py::sequence& args, int number, int repeat) {
        CallArgs a = to_args(args, c.name());
        py::gil_scoped_release release;
        return c.time(a.args, number, repeat);
      }, py::arg("args"), py::arg("number") = 10, py::arg("repeat") = 5);

  g.def("build", [](const te::Schedule& sch, py::handle args, const std::string& target, const std::string& name, bool barriers, bool compile) {
    std::vector<te::Tensor> tensors = to_tensor_list(args, "build args");
    Target t = cuda_target(target);
    GpuLowerOptions o;
    o.insert_barriers = barriers;
    py::gil_scoped_release release;
    return build_cuda(sch, tensors, t, name, o, compile);
  }, py::arg("schedule"), py::arg("args"), py::arg("target"), py::arg("name") = "main", py::arg("insert_barriers") = true, py::arg("compile") = true);

  g.def("lower", [](const te::Schedule& sch, py::handle args, const std::string& name, bool barriers) {
    std::vector<te::Tensor> tensors = to_tensor_list(args, "lower args");
    GpuLowerOptions o;
    o.insert_barriers = barriers;
    py::gil_scoped_release release;
    return lower_gpu(sch, tensors, name, o);
  }, py::arg("schedule"), py::arg("args"), py::arg("name") = "main", py::arg("insert_barriers") = true);

  g.def("compile", [](const std::string& source, const std::string& name, const std::string& target, bool ptx) {
    Target t = cuda_target(target);
    std::string out;
    {
      py::gil_scoped_release release;
      out = codegen::nvrtc_compile(source, name, t, ptx ? codegen::NvrtcOutput::Ptx : codegen::NvrtcOutput::Cubin);
    }
    return py::bytes(out);
  }, py::arg("source"), py::arg("name"), py::arg("target"), py::arg("ptx") = false);

  g.def("nvrtc_available", []() {
    std::string why;
    bool ok = codegen::nvrtc_available(&why);
    return py::make_tuple(ok, why);
  }, "(available, why not): whether NVRTC (libnvrtc) can be loaded.");
  g.def("driver_unavailable_reason", &cuda::driver_unavailable_reason, "Empty when a CUDA driver and a GPU are present; otherwise why not.");
}

}  // namespace kiln::python
