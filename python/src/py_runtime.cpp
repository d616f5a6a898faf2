// Runtime values: NDArray (with DLPack in and out), Module (call and
// time_evaluator) and TimeResult.
//
// Kernel arguments cross without copies: a numpy array becomes a borrowed
// DLTensor over its own memory (the kernel writes straight into the caller's
// output array), an object with __dlpack__ (a torch tensor) or a DLPack
// capsule is taken over through its DLManagedTensor, and a kiln NDArray is
// passed as is. Module::call checks every argument against the kernel's
// metadata (rank, shape, dtype, device, contiguity), binds shape variables
// from the arrays (arg_binder.h) and reports mismatches as kiln::Error; this
// file only adds the checks that need Python: numpy alignment and
// writability, and unsupported Python types.
#include <map>
#include <pybind11/numpy.h>

#include <cstring>
#include <deque>

#include "kiln/runtime/model.h"
#include "kiln/runtime/model_shapes.h"
#include "kiln/runtime/module.h"
#include "kiln/runtime/ndarray.h"
#include "kiln/support/error.h"
#include "kiln_py.h"

namespace kiln::python {

namespace {

constexpr const char* kCapsuleName = "dltensor";
constexpr const char* kUsedCapsuleName = "used_dltensor";

std::string type_name(py::handle obj) { return py::str(obj.get_type().attr("__name__")); }

// The DLPack dtype of a numpy dtype, or throws naming the argument.
DLDataType numpy_dl_dtype(const py::dtype& dt, const std::string& where) {
  char kind = dt.kind();
  int bits = static_cast<int>(dt.itemsize()) * 8;
  bool native = dt.attr("isnative").cast<bool>();
  DLDataType d{};
  d.lanes = 1;
  d.bits = static_cast<uint8_t>(bits);
  if (native && kind == 'f' && (bits == 16 || bits == 32 || bits == 64)) d.code = kDLFloat;
  else if (native && kind == 'i' && bits <= 64) d.code = kDLInt;
  else if (native && kind == 'u' && bits <= 64) d.code = kDLUInt;
  else if (kind == 'b') d.code = kDLBoolCode;
  else throw_user_error(where + " has numpy dtype " + std::string(py::str(static_cast<py::handle>(dt))) + ", which kiln cannot pass (use a native int, uint, float or bool dtype)");
  return d;
}

// A DLPack capsule taken over by an NDArray; the capsule is marked used only
// once the NDArray owns the tensor, so on error its producer still frees it.
NDArray take_capsule(py::handle capsule, const std::string& where) {
  if (!PyCapsule_IsValid(capsule.ptr(), kCapsuleName))
    throw_user_error(where + ": the DLPack capsule is invalid or was already consumed (a capsule can be used once)");
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), kCapsuleName));
  NDArray nd = NDArray::from_dlpack(managed);
  PyCapsule_SetName(capsule.ptr(), kUsedCapsuleName);
  return nd;
}

bool is_dlpack_provider(py::handle obj) { return py::hasattr(obj, "__dlpack__") && !py::isinstance<NDArray>(obj); }

NDArray from_dlpack_object(py::handle obj, const std::string& where) {
  if (PyCapsule_CheckExact(obj.ptr())) return take_capsule(obj, where);
  if (!py::hasattr(obj, "__dlpack__")) throw_user_error(where + ": a " + type_name(obj) + " does not support DLPack (no __dlpack__)");
  py::object capsule = obj.attr("__dlpack__")();
  return take_capsule(capsule, where);
}

// The arguments of one call, with the storage the borrowed DLTensors point into.
struct ArgPack {
  std::deque<DLTensor> tensors;  // deque: addresses stay valid as it grows
  std::deque<std::vector<int64_t>> dims;
  std::vector<Arg> args;
};

void add_numpy(ArgPack& pack, const py::array& arr, const std::string& where, bool written) {
  DLTensor t{};
  t.dtype = numpy_dl_dtype(arr.dtype(), where);
  if (!(arr.flags() & py::detail::npy_api::NPY_ARRAY_ALIGNED_))
    throw_user_error(where + " is a numpy array whose data is not aligned to its element size; pass an aligned copy (np.array(a))");
  if (written && !arr.writeable()) throw_user_error(where + " is a read-only numpy array, but the kernel writes it; pass a writeable array");
  int nd = static_cast<int>(arr.ndim());
  std::vector<int64_t>& shape = pack.dims.emplace_back(nd);
  std::vector<int64_t>& strides = pack.dims.emplace_back(nd);
  int64_t item = arr.itemsize();
  for (int d = 0; d < nd; ++d) {
    shape[d] = arr.shape(d);
    if (item == 0 || arr.strides(d) % item != 0) throw_user_error(where + " has byte strides that are not a multiple of its element size; pass a contiguous copy");
    strides[d] = arr.strides(d) / item;
  }
  t.data = const_cast<void*>(arr.data());
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = nd;
  t.shape = shape.data();
  t.strides = strides.data();
  pack.args.emplace_back(&pack.tensors.emplace_back(t));
}

void add_arg(ArgPack& pack, py::handle obj, const std::string& where, bool written) {
  py::module_ np = py::module_::import("numpy");
  if (obj.is_none()) {
    // A null tensor: Module::call reports it with the parameter's expected dtype and shape.
    pack.args.emplace_back(static_cast<const DLTensor*>(nullptr));
  } else if (py::isinstance<NDArray>(obj)) {
    pack.args.emplace_back(obj.cast<NDArray>());
  } else if (py::isinstance<py::array>(obj)) {
    add_numpy(pack, py::reinterpret_borrow<py::array>(obj), where, written);
  } else if (is_dlpack_provider(obj) || PyCapsule_CheckExact(obj.ptr())) {
    pack.args.emplace_back(from_dlpack_object(obj, where));
  } else if (py::isinstance<py::bool_>(obj) || py::isinstance(obj, np.attr("bool_"))) {
    pack.args.emplace_back(int64_t(obj.cast<bool>() ? 1 : 0));
  } else if (PyIndex_Check(obj.ptr())) {
    py::int_ v = py::reinterpret_steal<py::int_>(PyNumber_Index(obj.ptr()));
    try {
      pack.args.emplace_back(v.cast<long long>());
    } catch (py::cast_error&) {
      try {
        pack.args.emplace_back(v.cast<unsigned long long>());  // Module::call reports the range
      } catch (py::cast_error&) {
        throw_user_error(where + " = " + std::string(py::str(obj)) + " does not fit in 64 bits");
      }
    }
  } else if (py::isinstance<py::float_>(obj) || py::isinstance(obj, np.attr("floating"))) {
    pack.args.emplace_back(obj.cast<double>());
  } else {
    throw_user_error(where + " is a " + type_name(obj) + "; pass a numpy array, a kiln NDArray, a DLPack tensor (e.g. torch), an int or a float");
  }
}

ArgPack pack_args(const Module& mod, const std::string& name, const py::sequence& args, const std::vector<int>& written) {
  const KernelInfo& k = mod.info(name);
  ArgPack pack;
  size_t n = py::len(args);
  pack.args.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    std::string where = name + ": argument " + std::to_string(i);
    if (i < k.params.size()) where += " (" + k.params[i].name + ")";
    bool w = std::find(written.begin(), written.end(), static_cast<int>(i)) != written.end();
    add_arg(pack, args[i], where, w);
  }
  return pack;
}

py::list kernel_params(const KernelInfo& k) {
  std::vector<std::string> names;
  for (const ParamInfo& p : k.params) names.push_back(p.name);
  py::list out;
  for (const ParamInfo& p : k.params) {
    py::dict d;
    d["name"] = p.name;
    d["kind"] = p.is_buffer ? "buffer" : "scalar";
    d["dtype"] = p.dtype.str();
    d["shape"] = p.shape;
    if (p.is_buffer) {
      // Each dimension as declared: an int, or the expression text ("n", "n + 1").
      py::list dims;
      for (const ShapeExpr& e : p.dims) {
        if (e.is_const()) dims.append(e.value);
        else dims.append(e.str(names));
      }
      d["dims"] = dims;
    }
    out.append(d);
  }
  return out;
}

py::capsule export_dlpack(const NDArray& nd) {
  DLManagedTensor* managed = nd.to_dlpack();
  // A capsule nobody consumed still owns the tensor: free it when the capsule dies.
  return py::capsule(managed, kCapsuleName, [](PyObject* cap) {
    if (PyCapsule_IsValid(cap, kCapsuleName)) {
      auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, kCapsuleName));
      if (m && m->deleter) m->deleter(m);
    }
  });
}

py::array to_numpy(const NDArray& nd) {
  if (nd.dtype().is_bfloat() || nd.dtype().is_vector() || nd.dtype().is_handle())
    throw_user_error("an NDArray of dtype " + nd.dtype().str() + " has no numpy equivalent; export it with DLPack (e.g. to torch) instead");
  py::dtype dt(nd.dtype().str());
  py::array out(dt, nd.shape());
  nd.copy_to(out.mutable_data(), nd.nbytes());
  return out;
}

NDArray from_numpy(py::handle obj) {
  // A C-contiguous version (a copy only when needed); the data is copied once more into the NDArray.
  py::array arr = py::array::ensure(obj, py::array::c_style);
  if (!arr) {
    PyErr_Clear();
    throw_user_error("kiln.nd.array: cannot convert a " + type_name(obj) + " to an array");
  }
  DLDataType dl = numpy_dl_dtype(arr.dtype(), "kiln.nd.array: the array");
  std::vector<int64_t> shape(arr.shape(), arr.shape() + arr.ndim());
  NDArray nd = NDArray::empty(shape, from_dlpack_dtype(dl));
  nd.copy_from(arr.data(), nd.nbytes());
  return nd;
}

// The plan a run at `shapes` (name -> value; none for a static plan) lays
// out: every buffer's kind, shape, dtype, arena offset and lifetime, and each
// step's kernel and buffers. For tests and tools that check a plan's memory
// (no two live buffers share bytes) or run its kernels one by one.
py::dict plan_layout(const ModelRunner& r, const std::map<std::string, int64_t>& shapes) {
  const ModelPlan& p = r.plan();
  std::vector<int64_t> values = shape_values_by_name(p, shapes, "layout");
  BoundShapes bound;
  if (p.is_dynamic()) {
    bound = bind_plan_shapes(p, values);
  } else {
    for (const ModelBuffer& b : p.buffers) {
      bound.shapes.push_back(b.shape);
      bound.offsets.push_back(b.kind == ModelBuffer::Kind::Arena ? b.offset : -1);
    }
    bound.memory.arena_bytes = p.arena_bytes;
  }
  static const char* kinds[] = {"input", "constant", "arena", "output"};
  py::list buffers;
  for (size_t b = 0; b < p.buffers.size(); ++b) {
    const ModelBuffer& pb = p.buffers[b];
    py::dict d;
    d["kind"] = kinds[static_cast<int>(pb.kind)];
    d["index"] = pb.index;
    d["shape"] = py::tuple(py::cast(bound.shapes[b]));
    d["dtype"] = pb.dtype.str();
    d["offset"] = bound.offsets[b];
    d["first_step"] = pb.first_step;
    d["last_step"] = pb.last_step;
    d["inplace_of"] = pb.inplace_of;
    d["view_of"] = pb.view_of;
    buffers.append(d);
  }
  py::list steps;
  for (const ModelStep& s : p.steps) {
    py::dict d;
    d["name"] = s.name;
    d["kernel"] = p.kernel_names[s.kernel];
    d["args"] = s.args;
    steps.append(d);
  }
  py::dict out;
  out["dynamic"] = p.is_dynamic();
  out["values"] = py::cast(std::map<std::string, int64_t>(shapes.begin(), shapes.end()));
  out["arena_bytes"] = bound.memory.arena_bytes;
  out["buffers"] = buffers;
  out["steps"] = steps;
  out["shape_vars"] = p.shape_vars;
  return out;
}

}  // namespace

py::array ndarray_to_numpy(const NDArray& nd) { return to_numpy(nd); }
NDArray numpy_to_ndarray(py::handle obj) { return from_numpy(obj); }

void define_runtime(py::module_& m) {
  py::class_<NDArray>(m, "NDArray", "An n-dimensional CPU array laid out as a DLPack tensor.")
      .def_static("empty", [](std::vector<int64_t> shape, py::handle dtype) {
        for (int64_t d : shape)
          if (d < 0) throw_user_error("kiln.nd.empty: negative dimension in shape " + shape_to_string(shape));
        return NDArray::empty(shape, to_dtype(dtype));
      }, py::arg("shape"), py::arg("dtype") = "float32")
      .def_static("from_numpy", &from_numpy, py::arg("array"), "A new array holding a copy of a numpy array (or anything numpy.asarray accepts).")
      .def_static("from_dlpack", [](py::handle obj) { return from_dlpack_object(obj, "kiln.nd.from_dlpack"); }, py::arg("tensor"),
                  "A zero-copy view of a DLPack tensor (an object with __dlpack__, e.g. a torch tensor, or a capsule).")
      .def_property_readonly("shape", [](const NDArray& a) { return py::tuple(py::cast(a.shape())); })
      .def_property_readonly("dtype", [](const NDArray& a) { return a.dtype().str(); })
      .def_property_readonly("ndim", &NDArray::ndim)
      .def_property_readonly("size", &NDArray::numel)
      .def_property_readonly("nbytes", &NDArray::nbytes)
      .def_property_readonly("device", [](const NDArray& a) { return device_to_string(a.device()); })
      .def("is_contiguous", &NDArray::is_contiguous)
      .def("numpy", &to_numpy, "A numpy copy of the array.")
      .def("asnumpy", &to_numpy, "Same as numpy().")
      .def("__array__", [](const NDArray& a, py::object dtype) -> py::object {
        py::array arr = to_numpy(a);
        return dtype.is_none() ? py::object(arr) : arr.attr("astype")(dtype);
      }, py::arg("dtype") = py::none())
      .def("copyfrom", [](const NDArray& a, py::handle src) {
        if (py::isinstance<NDArray>(src)) {
          a.copy_from(src.cast<NDArray>());
          return a;
        }
        NDArray tmp = from_numpy(src);
        if (tmp.shape() != a.shape() || tmp.dtype() != a.dtype())
          throw_user_error("copyfrom: the source has shape " + shape_to_string(tmp.shape()) + " and dtype " + tmp.dtype().str() + ", the array has shape " +
                           shape_to_string(a.shape()) + " and dtype " + a.dtype().str());
        a.copy_from(tmp);
        return a;
      }, py::arg("source"), "Copies a numpy array or NDArray of the same shape and dtype in; returns self.")
      .def("__dlpack__", [](const NDArray& a, py::object stream) { return export_dlpack(a); }, py::arg("stream") = py::none())
      .def("__dlpack_device__", [](const NDArray& a) { return py::make_tuple(static_cast<int>(a.device().device_type), a.device().device_id); })
      .def("to_dlpack", &export_dlpack, "A DLPack capsule sharing the memory (torch.utils.dlpack.from_dlpack accepts it).")
      .def("same_memory", [](const NDArray& a, const NDArray& b) { return a.data() == b.data(); })
      .def_property_readonly("data_ptr", [](const NDArray& a) { return reinterpret_cast<uintptr_t>(a.data()); })
      .def("__repr__", [](const NDArray& a) {
        return "kiln.nd.NDArray(shape=" + shape_to_string(a.shape()) + ", dtype=" + a.dtype().str() + ", device=" + device_to_string(a.device()) + ")";
      });

  py::class_<TimeResult>(m, "TimeResult", "Timings in seconds per call: one result per repeat.")
      .def_readonly("results", &TimeResult::results)
      .def_readonly("number", &TimeResult::number)
      .def_property_readonly("mean", &TimeResult::mean)
      .def_property_readonly("median", &TimeResult::median)
      .def_property_readonly("min", &TimeResult::min)
      .def_property_readonly("max", &TimeResult::max)
      .def("__repr__", [](const TimeResult& r) {
        return "TimeResult(mean=" + std::to_string(r.mean() * 1e3) + " ms, median=" + std::to_string(r.median() * 1e3) + " ms, min=" +
               std::to_string(r.min() * 1e3) + " ms, results=" + std::to_string(r.results.size()) + ", number=" + std::to_string(r.number) + ")";
      });

  py::class_<Module>(m, "Module", "Compiled kernels, callable by name. Use kiln.build, which wraps it.")
      .def_static("load", &Module::load, py::arg("path"), "Loads an exported kernel library (.so).")
      .def_property_readonly("is_model_library", &Module::is_model_library,
                             "Whether the library is a model (Executor.export_library), for kiln.runtime.load_model")
      .def("export_library", &Module::export_library, py::arg("path"),
           "Writes the kernels as a shared library that Module.load reads (linked by $CC, default cc).")
      .def("names", &Module::names)
      .def("has", &Module::has, py::arg("name"))
      .def("params", [](const Module& mod, const std::string& name) { return kernel_params(mod.info(name)); }, py::arg("name"))
      .def("call", [](const Module& mod, const std::string& name, py::sequence args, std::vector<int> written) {
        ArgPack pack = pack_args(mod, name, args, written);
        // The kernel touches no Python object; the arguments stay referenced by `args`.
        py::gil_scoped_release release;
        mod.call(name, pack.args);
      }, py::arg("name"), py::arg("args"), py::arg("written") = std::vector<int>{},
         "Calls kernel `name`; `written` lists the argument positions the kernel writes (numpy arrays there must be writeable).")
      .def("time_evaluator", [](const Module& mod, const std::string& name, py::sequence args, int number, int repeat, double min_repeat_ms, std::vector<int> written) {
        ArgPack pack = pack_args(mod, name, args, written);
        py::gil_scoped_release release;
        return mod.time_evaluator(name, pack.args, number, repeat, min_repeat_ms);
      }, py::arg("name"), py::arg("args"), py::arg("number") = 1, py::arg("repeat") = 1, py::arg("min_repeat_ms") = 0.0, py::arg("written") = std::vector<int>{})
      .def("__repr__", [](const Module& mod) {
        std::string r = "Module(kernels=[";
        std::vector<std::string> names = mod.names();
        for (size_t i = 0; i < names.size(); ++i) r += (i ? ", " : "") + names[i];
        return r + "])";
      });

  // An exported model (Executor::export_library) run by kiln_runtime alone.
  // A dynamic model's symbolic dims read as their expressions ("seq", "seq + 1").
  auto tensors = [](const ModelPlan& plan, const std::vector<ModelTensor>& ts) {
    py::list out;
    for (const ModelTensor& t : ts) {
      py::dict d;
      d["name"] = t.name;
      py::tuple shape(t.shape.size());
      for (size_t i = 0; i < t.shape.size(); ++i)
        shape[i] = t.dims.empty() || t.dims[i].is_const() ? py::object(py::int_(t.shape[i])) : py::object(py::str(t.dims[i].str(plan.shape_vars)));
      d["shape"] = shape;
      d["dtype"] = t.dtype.str();
      out.append(d);
    }
    return out;
  };
  py::class_<ModelRunner>(m, "ModelRunner", "An exported model loaded by kiln_runtime. Use kiln.runtime.load_model.")
      .def_static("load", &ModelRunner::load, py::arg("path"), "Loads a model library written by Executor.export_library.")
      .def("run", [](const ModelRunner& r, py::sequence inputs) {
        std::vector<py::array> keep;  // numpy conversions, alive until the run ends
        std::vector<NDArray> in;
        for (py::handle h : inputs) {
          if (py::isinstance<NDArray>(h)) {
            in.push_back(h.cast<NDArray>());
            continue;
          }
          py::array a = py::array::ensure(h, py::array::c_style);
          if (!a) {
            PyErr_Clear();
            throw_user_error("a model input must be an array (numpy, torch or kiln), got a " + std::string(py::str(h.get_type().attr("__name__"))));
          }
          keep.push_back(a);
          in.push_back(from_numpy(a));
        }
        std::vector<NDArray> out;
        {
          py::gil_scoped_release release;
          out = r.run(in);
        }
        py::list result;
        for (const NDArray& a : out) result.append(to_numpy(a));
        return result;
      }, py::arg("inputs"))
      .def_property_readonly("inputs", [tensors](const ModelRunner& r) { return tensors(r.plan(), r.inputs()); })
      .def_property_readonly("outputs", [tensors](const ModelRunner& r) { return tensors(r.plan(), r.outputs()); })
      .def_property_readonly("shape_vars", [](const ModelRunner& r) {
        py::dict out;  // name -> (lo, hi) or None, in the plan's order
        const ModelPlan& p = r.plan();
        for (size_t i = 0; i < p.shape_vars.size(); ++i) {
          const auto& range = i < p.shape_ranges.size() ? p.shape_ranges[i] : std::nullopt;
          out[py::str(p.shape_vars[i])] = range ? py::object(py::make_tuple(range->lo, range->hi)) : py::object(py::none());
        }
        return out;
      }, "A dynamic model's shape variables: name -> its (lo, hi) range, or None without one.")
      .def("arena_bytes", [](const ModelRunner& r, const std::map<std::string, int64_t>& shapes) {
        return r.memory(shape_values_by_name(r.plan(), shapes, "arena_bytes")).arena_bytes;
      }, py::arg("shapes") = std::map<std::string, int64_t>{}, "The arena a run at these shape values plans, in bytes.")
      .def("run_stats", [](const ModelRunner& r) {
        ModelRunStats st = r.run_stats();
        py::dict d;
        d["runs"] = st.runs;
        d["plans"] = st.plans;
        d["arena_allocations"] = st.arena_allocations;
        d["arena_bytes"] = st.arena_bytes;
        d["plan_seconds"] = st.plan_seconds;
        d["arena_seconds"] = st.arena_seconds;
        d["last_plan_seconds"] = st.last_plan_seconds;
        return d;
      }, "Counts since the runner was made: runs, plans (new shapes planned), arena_allocations, arena_bytes, and the seconds "
         "spent planning (plan_seconds, last_plan_seconds) and allocating the arena (arena_seconds).")
      .def_property_readonly("num_kernels", [](const ModelRunner& r) { return r.plan().kernel_names.size(); })
      .def_property_readonly("num_steps", [](const ModelRunner& r) { return r.plan().steps.size(); })
      .def("layout", &plan_layout, py::arg("shapes") = std::map<std::string, int64_t>{},
           "The plan at these shape values: buffers (kind, index, shape, dtype, arena offset, first_step, last_step, inplace_of, "
           "view_of), steps (name, kernel, args: buffer ids) and arena_bytes; for tests and tools that check the memory plan.")
      .def_property_readonly("module", &ModelRunner::module, "The plan's kernels as one Module (their shape scalars follow their buffers).")
      .def("constant", [](const ModelRunner& r, int i) {
        const ModelPlan& p = r.plan();
        if (i < 0 || i >= static_cast<int>(p.constants.size())) throw_user_error("constant " + std::to_string(i) + " of " + std::to_string(p.constants.size()));
        return to_numpy(p.constants[i]);
      }, py::arg("index"), "Constant `index` of the plan (a buffer of kind 'constant' names it), as numpy.");
}

}  // namespace kiln::python
