// Schedules, stages and traces. Every primitive is the C++ one; the
// bindings only accept Python spellings of the arguments (axes given as a
// list or as varargs, a stage given as its tensor) and map stale axes.
#include <limits>

#include "kiln/support/error.h"
#include "kiln/te/trace.h"
#include "kiln_py.h"

namespace kiln::python {

namespace {

const te::ComputeOpNode* as_compute(const te::Operation& op) {
  return op->kind == te::OpKind::Compute ? static_cast<const te::ComputeOpNode*>(op.get()) : nullptr;
}

bool contains(const std::vector<IterVar>& list, const IterVar& iv) {
  for (const IterVar& x : list)
    if (x.same_as(iv)) return true;
  return false;
}

/**
 * The axis of `stage` that a user means by `iv`. Users write T.op.axis[0]
 * with the tensor they declared; cache_write and rfactor give T's stage a new
 * op with new (positionally identical) data-parallel axes, so that IterVar is
 * stale. Follow the schedule's replaced-ops chain from the op that owns `iv`
 * and, when it ends at this stage's op, take the root axis at the same
 * position. Anything else is returned as is, for the C++ checks to report.
 */
IterVar resolve_axis(const PyStage& s, const IterVar& iv) {
  const te::Stage& st = *s.stage;
  if (!iv.defined() || contains(st.leaf_iter_vars(), iv) || contains(st.root_iter_vars(), iv)) return iv;
  const te::ScheduleState* state = s.sch.state();
  const te::ComputeOpNode* now = as_compute(st.op());
  if (!now) return iv;
  for (const auto& entry : state->replaced_ops) {
    const te::OperationNode* op = entry.first;
    if (op->kind != te::OpKind::Compute) continue;
    const auto& axes = static_cast<const te::ComputeOpNode*>(op)->axis;
    size_t d = 0;
    while (d < axes.size() && !axes[d].same_as(iv)) ++d;
    if (d == axes.size()) continue;
    // Follow the chain to the op that replaced it last.
    for (auto it = state->replaced_ops.find(op); it != state->replaced_ops.end(); it = state->replaced_ops.find(op)) op = it->second.get();
    if (op == now && d < now->axis.size()) return now->axis[d];
  }
  return iv;
}

IterVar to_axis(const PyStage& s, py::handle value, const char* primitive) {
  if (!py::isinstance<IterVar>(value))
    throw_user_error(std::string(primitive) + " on stage '" + s.stage->name() + "': expected an axis (an IterVar such as T.op.axis[0]), got " +
                     (value.is_none() ? std::string("None") : std::string(py::str(value.get_type().attr("__name__")))));
  return resolve_axis(s, value.cast<IterVar>());
}

// Axes given as varargs or as one list: fuse(a, b) or fuse([a, b]).
std::vector<IterVar> to_axes(const PyStage& s, py::args args, const char* primitive) {
  py::sequence seq = args;
  if (args.size() == 1 && (py::isinstance<py::list>(args[0]) || py::isinstance<py::tuple>(args[0]))) seq = args[0];
  std::vector<IterVar> out;
  for (py::handle a : seq) out.push_back(to_axis(s, a, primitive));
  return out;
}

// A Python int that must fit a C++ int (factors, nparts): out of range is a user error, not a cast failure.
int to_int(py::handle value, const PyStage& s, const char* what) {
  if (!py::isinstance<py::int_>(value) && !PyIndex_Check(value.ptr()))
    throw_user_error(std::string(what) + " on stage '" + s.stage->name() + "' must be an int, got " + std::string(py::str(value.get_type().attr("__name__"))));
  long long v = 0;
  try {
    v = py::reinterpret_steal<py::int_>(PyNumber_Index(value.ptr())).cast<long long>();
  } catch (py::cast_error&) {
    v = std::numeric_limits<long long>::max();
  }
  if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max())
    throw_user_error(std::string(what) + " on stage '" + s.stage->name() + "' is " + std::string(py::str(value)) + ", out of the int32 range");
  return static_cast<int>(v);
}

PyStage stage_of(const te::Schedule& sch, py::handle key) {
  if (py::isinstance<PyStage>(key)) return key.cast<PyStage>();
  return PyStage{sch, &sch[to_tensor(key, "schedule[...]")]};
}

te::Trace to_trace(py::handle trace) {
  if (py::isinstance<te::Trace>(trace)) return trace.cast<te::Trace>();
  if (py::isinstance<py::str>(trace)) return te::Trace::from_json(trace.cast<std::string>());
  throw_user_error("expected a trace (Schedule.trace()) or its JSON text");
}

// bind's thread: a tag, or anything with a thread_tag (te.thread_axis, as in TVM).
std::string thread_tag_of(const PyStage& s, py::handle thread) {
  if (py::isinstance<py::str>(thread)) return thread.cast<std::string>();
  if (py::hasattr(thread, "thread_tag")) return py::str(thread.attr("thread_tag")).cast<std::string>();
  throw_user_error("bind on stage '" + s.stage->name() + "': the thread must be a tag such as \"threadIdx.x\" or a te.thread_axis(\"threadIdx.x\"), not " +
                   py::repr(thread).cast<std::string>());
}

std::string attach_name(te::AttachType t) {
  switch (t) {
    case te::AttachType::Root: return "root";
    case te::AttachType::Inline: return "inline";
    case te::AttachType::Scope: return "scope";
  }
  return "?";
}

void define_stage(py::module_& m) {
  py::class_<PyStage>(m, "Stage", "The loops computing one operation. Get it with schedule[tensor].")
      .def_property_readonly("op", [](const PyStage& s) { return s.stage->op(); }, "The stage's current operation (it changes after cache_write / rfactor).")
      .def_property_readonly("name", [](const PyStage& s) { return s.stage->name(); })
      .def_property_readonly("scope", [](const PyStage& s) { return s.stage->scope(); })
      .def_property_readonly("is_output", [](const PyStage& s) { return s.stage->is_output(); })
      .def_property_readonly("attach_type", [](const PyStage& s) { return attach_name(s.stage->attach_type()); })
      .def_property_readonly("root_iter_vars", [](const PyStage& s) { return s.stage->root_iter_vars(); })
      .def_property_readonly("leaf_iter_vars", [](const PyStage& s) { return s.stage->leaf_iter_vars(); })
      .def("axis", [](const PyStage& s, const std::string& name) { return s.stage->axis(name); }, py::arg("name"), "The leaf axis called `name`.")
      .def("split", [](const PyStage& s, py::handle axis, py::object factor, py::object nparts) {
        IterVar iv = to_axis(s, axis, "split");
        if (factor.is_none() == nparts.is_none())
          throw_user_error("split on stage '" + s.stage->name() + "': give exactly one of factor= and nparts=");
        auto r = factor.is_none() ? s.stage->split_nparts(iv, to_int(nparts, s, "split nparts")) : s.stage->split(iv, to_int(factor, s, "split factor"));
        return py::make_tuple(r.first, r.second);
      }, py::arg("axis"), py::arg("factor") = py::none(), py::arg("nparts") = py::none(), "Splits an axis; returns (outer, inner).")
      .def("tile", [](const PyStage& s, py::handle x, py::handle y, py::handle x_factor, py::handle y_factor) {
        std::vector<IterVar> r = s.stage->tile(to_axis(s, x, "tile"), to_axis(s, y, "tile"), to_int(x_factor, s, "tile x_factor"), to_int(y_factor, s, "tile y_factor"));
        return py::make_tuple(r[0], r[1], r[2], r[3]);
      }, py::arg("x_parent"), py::arg("y_parent"), py::arg("x_factor"), py::arg("y_factor"), "Returns (x_outer, y_outer, x_inner, y_inner), in that loop order.")
      .def("fuse", [](const PyStage& s, py::args axes) { return s.stage->fuse(to_axes(s, axes, "fuse")); }, "Fuses adjacent leaf axes (outermost first).")
      .def("reorder", [](const PyStage& s, py::args axes) { s.stage->reorder(to_axes(s, axes, "reorder")); })
      .def("vectorize", [](const PyStage& s, py::handle axis) { s.stage->vectorize(to_axis(s, axis, "vectorize")); }, py::arg("axis"))
      .def("unroll", [](const PyStage& s, py::handle axis) { s.stage->unroll(to_axis(s, axis, "unroll")); }, py::arg("axis"))
      .def("parallel", [](const PyStage& s, py::handle axis) { s.stage->parallel(to_axis(s, axis, "parallel")); }, py::arg("axis"))
      .def("bind", [](const PyStage& s, py::handle axis, py::handle thread) { s.stage->bind(to_axis(s, axis, "bind"), thread_tag_of(s, thread)); },
           py::arg("axis"), py::arg("thread"), "Binds axis to a GPU index: a tag (\"blockIdx.x\", \"threadIdx.y\", \"vthread\") or a te.thread_axis.")
      .def("compute_at", [](const PyStage& s, py::handle parent, py::handle axis) {
        PyStage p = stage_of(s.sch, parent);
        if (p.sch.state() != s.sch.state()) throw_user_error("compute_at of stage '" + s.stage->name() + "': stage '" + p.stage->name() + "' belongs to another schedule");
        s.stage->compute_at(*p.stage, to_axis(p, axis, "compute_at"));
      }, py::arg("parent"), py::arg("axis"), "Computes this stage inside the loop `axis` of `parent` (a stage or its tensor).")
      .def("compute_inline", [](const PyStage& s) { s.stage->compute_inline(); })
      .def("compute_root", [](const PyStage& s) { s.stage->compute_root(); })
      .def("storage_align", [](const PyStage& s, py::handle axis, int factor, int offset) { s.stage->storage_align(to_axis(s, axis, "storage_align"), factor, offset); },
           py::arg("axis"), py::arg("factor"), py::arg("offset"))
      .def("pragma", [](const PyStage& s, py::handle axis, const std::string& key, int value) { s.stage->pragma(to_axis(s, axis, "pragma"), key, value); },
           py::arg("axis"), py::arg("key"), py::arg("value") = 1)
      .def("tensor_core", [](const PyStage& s, py::handle axis) { s.stage->tensor_core(to_axis(s, axis, "tensor_core")); }, py::arg("axis"),
           "Marks axis, the outermost of the three innermost loops (a 16x16x16 tile of a float32 sum of float16/bfloat16 products), for a warp "
           "matrix multiply-accumulate on a cuda target (tensor cores); the accumulator's init and write-back must be 16x16 nests too.")
      .def("__eq__", [](const PyStage& a, py::object b) { return py::isinstance<PyStage>(b) && a.stage == b.cast<PyStage>().stage; })
      .def("__hash__", [](const PyStage& s) { return std::hash<const void*>()(s.stage); })
      .def("__repr__", [](const PyStage& s) {
        std::string r = "Stage(" + s.stage->name() + ", leaf_iter_vars=[";
        const auto& leaves = s.stage->leaf_iter_vars();
        for (size_t i = 0; i < leaves.size(); ++i) r += (i ? ", " : "") + leaves[i].name();
        return r + "])";
      });
}

}  // namespace

void define_schedule(py::module_& m) {
  define_stage(m);

  py::class_<te::Trace>(m, "Trace", "The list of primitive steps that made a schedule. Prints as JSON.")
      .def("to_json", &te::Trace::to_json)
      .def_static("from_json", &te::Trace::from_json, py::arg("text"))
      .def("pretty", &te::Trace::str, "One readable line per step.")
      .def("to_python", &te::Trace::to_python,
           "The Python that rebuilds the schedule: run it with `s` a fresh schedule of the same DAG and each tensor in a variable named after it.")
      .def_property_readonly("steps", [](const te::Trace& t) { return py::module_::import("json").attr("loads")(t.to_json()); },
                             "The steps as dicts in their JSON form (a copy).")
      .def("__len__", [](const te::Trace& t) { return t.steps.size(); })
      .def("__eq__", [](const te::Trace& a, py::object b) { return py::isinstance<te::Trace>(b) && a.to_json() == b.cast<te::Trace>().to_json(); })
      .def("__hash__", [](const te::Trace& t) { return std::hash<std::string>()(t.to_json()); })
      .def("__str__", &te::Trace::to_json)
      .def("__repr__", &te::Trace::to_json);

  py::class_<te::Schedule>(m, "Schedule", "How a compute DAG becomes loops: one stage per operation, and the trace of the primitives applied.")
      .def_static("create", [](py::handle outputs) { return te::Schedule::create(to_tensor_list(outputs, "create_schedule")); }, py::arg("outputs"))
      .def_static("from_trace", [](py::handle outputs, py::handle trace) { return te::Schedule::from_trace(to_tensor_list(outputs, "from_trace"), to_trace(trace)); },
                  py::arg("outputs"), py::arg("trace"), "Replays a trace (a Trace or its JSON text) on a fresh schedule of the same outputs.")
      .def("__getitem__", [](const te::Schedule& s, py::handle key) { return stage_of(s, key); }, py::arg("tensor"))
      .def("__len__", &te::Schedule::num_stages)
      .def_property_readonly("stages", [](const te::Schedule& s) {
        std::vector<PyStage> out;
        for (const auto& st : s.stages()) out.push_back(PyStage{s, st.get()});
        return out;
      })
      .def_property_readonly("outputs", &te::Schedule::outputs)
      .def("trace", &te::Schedule::trace, "A copy of the schedule's trace.")
      .def("current_tensor", &te::Schedule::current_tensor, py::arg("tensor"), "The tensor that now holds the data of `tensor` (changes after cache_write / rfactor).")
      .def("cache_read", [](te::Schedule& s, py::handle tensor, const std::string& scope, py::handle readers) {
        return s.cache_read(to_tensor(tensor, "cache_read"), scope, to_tensor_list(readers, "cache_read readers"));
      }, py::arg("tensor"), py::arg("scope"), py::arg("readers"))
      .def("pack", [](te::Schedule& s, py::handle tensor, py::handle readers, int dim, int factor) {
        return s.pack(to_tensor(tensor, "pack"), to_tensor_list(readers, "pack readers"), dim, factor);
      }, py::arg("tensor"), py::arg("readers"), py::arg("dim"), py::arg("factor"),
         "Copies tensor into panels: dimension dim is split by factor into an outermost panel index and an innermost lane index; readers read the copy.")
      .def("cache_write", [](te::Schedule& s, py::handle tensor, const std::string& scope) { return s.cache_write(to_tensor(tensor, "cache_write"), scope); },
           py::arg("tensor"), py::arg("scope"))
      .def("rfactor", [](te::Schedule& s, py::handle tensor, py::handle axis, int factor_axis) {
        te::Tensor t = to_tensor(tensor, "rfactor");
        PyStage st{s, &s[t]};
        return s.rfactor(t, to_axis(st, axis, "rfactor"), factor_axis);
      }, py::arg("tensor"), py::arg("axis"), py::arg("factor_axis") = 0)
      .def("__repr__", [](const te::Schedule& s) {
        std::string r = "Schedule(stages=[";
        for (int i = 0; i < s.num_stages(); ++i) r += (i ? ", " : "") + s.stage(i).name();
        return r + "], steps=" + std::to_string(s.trace().steps.size()) + ")";
      });
}

}  // namespace kiln::python
