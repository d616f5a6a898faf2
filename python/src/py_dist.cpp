// kiln.dist's native part: meshes, the distribution pass, per-rank runners and the world communicator.
#include <pybind11/functional.h>

#include <algorithm>

#include "kiln/dist/auto_shard.h"
#include "kiln/dist/communicator.h"
#include "kiln/dist/pipeline.h"
#include "kiln/dist/runner.h"
#include "kiln/dist/shard.h"
#include "kiln/graph/executor.h"
#include "kiln/graph/op_registry.h"
#include "kiln_py.h"

namespace kiln::python {

using namespace kiln::dist;

namespace {

std::vector<NDArray> to_arrays(const py::sequence& xs) {
  std::vector<NDArray> out;
  for (auto x : xs) out.push_back(numpy_to_ndarray(py::array::ensure(x, py::array::c_style)));
  return out;
}

py::dict estimate_dict(const PlanEstimate& e) {
  py::dict d;
  d["total_s"] = e.total_s();
  d["compute_s"] = e.compute_s;
  d["comm_s"] = e.comm_s;
  d["memory_bytes"] = e.memory_bytes;
  d["comm_bytes"] = e.comm_bytes;
  d["collectives"] = e.collectives;
  d["text"] = e.str();
  return d;
}

CostParams cost_of(const py::dict& d) {
  // Each key and the field it sets, in the order the error lists them.
  static const std::pair<const char*, double CostParams::*> fields[] = {
      {"flops_per_s", &CostParams::flops_per_s},
      {"few_rows_flops_per_s", &CostParams::few_rows_flops_per_s},
      {"few_rows", &CostParams::few_rows},
      {"many_rows", &CostParams::many_rows},
      {"memory_bytes_per_s", &CostParams::memory_bytes_per_s},
      {"link_bytes_per_s", &CostParams::link_bytes_per_s},
      {"latency_s", &CostParams::latency_s},
      {"kernel_s", &CostParams::kernel_s},
      {"run_s", &CostParams::run_s},
      {"collective_s", &CostParams::collective_s},
      {"peer_wait_s", &CostParams::peer_wait_s},
      {"large_message_bytes", &CostParams::large_message_bytes},
      {"large_link_bytes_per_s", &CostParams::large_link_bytes_per_s},
  };
  CostParams c;
  for (auto [k, v] : d) {
    std::string key = py::str(k);
    // "link_bytes_per_s:<axis>" / "latency_s:<axis>": that mesh axis's own link (CostParams::axis_links).
    if (size_t colon = key.find(':'); colon != std::string::npos) {
      std::string field = key.substr(0, colon), axis = key.substr(colon + 1);
      auto& link = c.axis_links.try_emplace(axis, -1.0, -1.0).first->second;
      if (field == "link_bytes_per_s") link.first = v.cast<double>();
      else if (field == "latency_s") link.second = v.cast<double>();
      else throw_user_error("cost: unknown key '" + key + "'; per mesh axis: link_bytes_per_s:<axis>, latency_s:<axis>");
      continue;
    }
    auto f = std::find_if(std::begin(fields), std::end(fields), [&](const auto& e) { return key == e.first; });
    if (f == std::end(fields)) {
      std::string known;
      for (const auto& e : fields) known += (known.empty() ? "" : ", ") + std::string(e.first);
      throw_user_error("cost: unknown key '" + key + "'; known: " + known);
    }
    c.*(f->second) = v.cast<double>();
  }
  for (auto& [axis, link] : c.axis_links) {  // an axis given one of the two takes the default for the other
    if (link.first < 0) link.first = c.link_bytes_per_s;
    if (link.second < 0) link.second = c.latency_s;
  }
  return c;
}

py::array all_reduce_in_place(Communicator& c, py::array a) {
  if (!(a.flags() & py::array::c_style) || !a.writeable())
    throw_user_error("all_reduce_in_place: the array must be C-contiguous and writeable; np.ascontiguousarray(a) or a.copy() gives one");
  char kind = a.dtype().kind();
  int bits = static_cast<int>(a.itemsize()) * 8;
  if (!((kind == 'f' || kind == 'i') && (bits == 32 || bits == 64)))
    throw_user_error("all_reduce_in_place: the array must be float32, float64, int32 or int64, got " + std::string(py::str(a.dtype())));
  c.all_reduce(a.mutable_data(), a.size(), kind == 'f' ? DataType::Float(bits) : DataType::Int(bits));
  return a;
}

py::list to_list(const std::vector<NDArray>& xs) {
  py::list l;
  for (const auto& x : xs) l.append(ndarray_to_numpy(x));
  return l;
}

}  // namespace

void define_dist(py::module_& root) {
  py::module_ m = root.def_submodule("dist", "The distribution pass and its runner (kiln.dist).");
  py::class_<Mesh>(m, "Mesh")
      .def(py::init<std::vector<std::pair<std::string, int>>>())
      .def_property_readonly("size", &Mesh::size)
      .def_property_readonly("axes", [](const Mesh& me) {
        std::vector<std::pair<std::string, int>> a;
        for (int i = 0; i < me.ndim(); ++i) a.push_back({me.axis_name(i), me.axis_size(i)});
        return a;
      })
      .def("coords", &Mesh::coords)
      .def("__str__", &Mesh::str)
      .def("__repr__", &Mesh::str);

  py::class_<ShardedGraph>(m, "ShardedGraph")
      .def("__str__", &ShardedGraph::str)
      .def_property_readonly("graph", [](const ShardedGraph& s) { return s.graph; })
      .def_property_readonly("mesh", [](const ShardedGraph& s) { return s.mesh; })
      .def("lower", &lower_to_rank, py::arg("rank"))
      .def("input_specs", [](const ShardedGraph& s) {
        std::vector<std::string> out;
        for (const auto& in : s.graph.inputs()) out.push_back(s.specs.at(in->output()).str(s.mesh));
        return out;
      })
      .def("output_specs", [](const ShardedGraph& s) {
        std::vector<std::string> out;
        for (const auto& v : s.graph.outputs()) out.push_back(s.specs.at(v).str(s.mesh));
        return out;
      })
      .def("input_blocks", [](const ShardedGraph& s, int rank) {
        std::vector<std::vector<std::pair<int64_t, int64_t>>> out;
        for (const auto& in : s.graph.inputs()) out.push_back(local_block(in->types[0].shape, s.specs.at(in->output()), s.mesh, rank));
        return out;
      })
      .def("output_blocks", [](const ShardedGraph& s, int rank) {
        std::vector<std::vector<std::pair<int64_t, int64_t>>> out;
        for (const auto& v : s.graph.outputs()) out.push_back(local_block(v.type().shape, s.specs.at(v), s.mesh, rank));
        return out;
      })
      .def("collectives", [](const ShardedGraph& s) {
        py::list out;
        for (const auto* op : s.graph.op_nodes())
          if (is_collective(op->op->name))
            out.append(py::make_tuple(op->op->name, op->attrs.get_string("axis"), op->attrs.get_int("bytes")));
        return out;
      });

  m.def("shard_graph", [](const graph::Graph& g, const Mesh& mesh, std::map<std::string, std::string> specs, bool keep) {
    return shard_graph(g, mesh, specs, ShardOptions{keep});
  }, py::arg("graph"), py::arg("mesh"), py::arg("specs"), py::arg("keep_outputs_sharded") = false);

  py::class_<Runner, std::shared_ptr<Runner>>(m, "Runner")
      .def(py::init([](const ShardedGraph& s, const std::string& target, int64_t bucket_bytes, bool bf16_gradients) {
        graph::CompileOptions options;
        options.target = target;
        return std::make_shared<Runner>(s, world(), options, bucket_bytes, bf16_gradients);
      }), py::arg("sharded"), py::arg("target") = "llvm", py::arg("bucket_bytes") = -1, py::arg("bf16_gradients") = false)
      .def("run", [](const Runner& r, py::sequence inputs) {
        std::vector<NDArray> in = to_arrays(inputs), out;
        {
          py::gil_scoped_release release;
          out = r.run(in);
        }
        return to_list(out);
      })
      .def_property_readonly("rank", &Runner::rank)
      .def_property_readonly("local_graph", &Runner::local_graph)
      .def_property_readonly("num_segments", &Runner::num_segments)
      .def("stats", [](const Runner& r) {
        RunStats s = r.stats();
        py::list cs;
        for (const auto& c : s.collectives) {
          py::dict d;
          d["op"] = c.op;
          d["axis"] = c.axis;
          d["group_size"] = c.group_size;
          d["bytes"] = c.bytes;
          d["calls"] = c.calls;
          d["seconds"] = c.seconds;
          cs.append(d);
        }
        py::dict d;
        d["runs"] = s.runs;
        d["seconds"] = s.seconds;
        d["segment_seconds"] = s.segment_seconds;
        d["collective_seconds"] = s.collective_seconds;
        d["bucket_wait_seconds"] = s.bucket_wait_seconds;
        d["buckets"] = s.buckets;
        d["collectives"] = cs;
        return d;
      }, "Counters since the last reset_stats(): runs, seconds (in run), segment_seconds, collective_seconds, "
         "bucket_wait_seconds (blocked on overlapped buckets), buckets (per run), and per "
         "collective (in the order they complete) op, axis, group_size, bytes (input per call), calls, seconds.")
      .def("reset_stats", &Runner::reset_stats);

  m.def("reshard_graph", [](std::vector<int64_t> shape, py::handle dtype, const Mesh& mesh, const std::string& from, const std::string& to) {
    return reshard_graph(graph::TensorType{shape, to_dtype(dtype)}, mesh, from, to);
  });
  m.def("estimate_plan", [](const ShardedGraph& s, const py::dict& cost) { return estimate_dict(estimate_plan(s, cost_of(cost))); },
        py::arg("sharded"), py::arg("cost") = py::dict());
  // (specs, sharded graph, estimate, {strategy: estimate}, report) of the searched plan.
  m.def("auto_shard", [](const graph::Graph& g, const Mesh& mesh, int64_t memory_limit, const py::dict& cost, int max_plans, bool keep,
                         bool tie_repeated, bool weights_over_all_axes) {
    AutoShardOptions o;
    o.tie_repeated = tie_repeated;
    o.weights_over_all_axes = weights_over_all_axes;
    o.memory_limit = memory_limit;
    o.cost = cost_of(cost);
    o.max_plans = max_plans;
    o.keep_outputs_sharded = keep;
    AutoShardResult r;
    {
      py::gil_scoped_release release;
      r = auto_shard(g, mesh, o);
    }
    py::dict baselines;
    for (const auto& [name, e] : r.baselines) baselines[py::str(name)] = estimate_dict(e);
    return py::make_tuple(r.specs, r.sharded, estimate_dict(r.estimate), baselines, r.report(memory_limit));
  }, py::arg("graph"), py::arg("mesh"), py::arg("memory_limit") = 0, py::arg("cost") = py::dict(), py::arg("max_plans") = 4096,
     py::arg("keep_outputs_sharded") = false, py::arg("tie_repeated") = false,
     py::arg("weights_over_all_axes") = false);
  // (stage dicts, printed cut) of a balanced pipeline cut.
  m.def("cut_pipeline", [](const graph::Graph& g, int stages, const py::dict& cost) {
    PipelineCut cut = cut_pipeline(g, stages, cost_of(cost));
    py::list out;
    for (const PipelineStage& s : cut.stages) {
      py::dict d;
      d["graph"] = s.graph;
      d["recv"] = s.recv;
      d["model_inputs"] = s.model_inputs;
      d["send"] = s.send;
      d["num_ops"] = s.num_ops;
      d["estimated_s"] = s.estimated_s;
      out.append(d);
    }
    return py::make_tuple(out, cut.str());
  }, py::arg("graph"), py::arg("num_stages"), py::arg("cost") = py::dict());
  m.def("megatron_specs", &megatron_specs, py::arg("graph"), py::arg("mesh"), py::arg("axis"));
  m.def("rank", [] { return world()->rank(); });
  m.def("size", [] { return world()->size(); });
  m.def("backend", [] { return world()->backend(); });
  m.def("mpi_built", &mpi_built);
  m.def("set_timeout", &set_timeout);
  m.def("timeout", &timeout);
  m.def("finalize", &finalize);
  m.def("barrier", [] { world()->barrier(); });
  m.def("all_reduce", [](py::array a) {
    NDArray x = numpy_to_ndarray(py::array::ensure(a, py::array::c_style));
    world()->all_reduce(x.data(), x.numel(), x.dtype());
    return ndarray_to_numpy(x);
  }, "The elementwise sum of an array over every rank.");
  m.def("all_reduce_in_place", [](py::array a) { return all_reduce_in_place(*world(), a); }, py::arg("a"),
        "Sums the array over every rank into the array itself (no copy in or out: what a step's planned buffers pay).");
  m.def("all_reduce_many_in_place", [](py::list arrays) {
    std::vector<std::unique_ptr<Request>> reqs;  // every one started before any is waited for, as the runner's buckets
    for (auto h : arrays) {
      if (!py::isinstance<py::array>(h)) throw_user_error("all_reduce_many_in_place: takes a list of numpy arrays");
      py::array a = py::reinterpret_borrow<py::array>(h);
      if (!(a.flags() & py::array::c_style) || !a.writeable() || !a.dtype().is(py::dtype::of<float>()))
        throw_user_error("all_reduce_many_in_place: each array must be a C-contiguous, writeable float32 array");
      reqs.push_back(world()->start_all_reduce(a.mutable_data(), a.size(), DataType::Float(32)));
    }
    for (auto& r : reqs) r->wait();
  }, py::arg("arrays"), "Sums each float32 array over every rank in place, all started at once (overlapped).");
  // Groups of ranks (a host's, or one per host): calibrate() times each level of the mesh in its own group.
  py::class_<Communicator, std::shared_ptr<Communicator>>(m, "Communicator")
      .def_property_readonly("rank", &Communicator::rank)
      .def_property_readonly("size", &Communicator::size)
      .def("barrier", &Communicator::barrier)
      .def("all_reduce_in_place", [](Communicator& c, py::array a) { return all_reduce_in_place(c, a); }, py::arg("a"))
      .def("split", &Communicator::split, py::arg("color"), py::arg("key"),
           "The ranks passing the same color, ordered by key (every rank of this group must call it).");
  m.def("world", &world, "The communicator over every rank.");
  m.def("set_ring", [](int64_t min_bytes, int64_t segment_bytes, int window, bool pair_exchange) {
    if (min_bytes < 0 || segment_bytes < 1 || window < 1)
      throw_user_error("set_ring: min_bytes >= 0 (0: MPI_Iallreduce for every size), segment_bytes >= 1 and window >= 1");
    ring_options() = RingOptions{min_bytes, segment_bytes, window, pair_exchange};
  }, py::arg("min_bytes"), py::arg("segment_bytes"), py::arg("window"), py::arg("pair_exchange") = true,
        "How MPI all-reduces of large buffers run: kiln's segmented ring from min_bytes on (every rank alike).");
  m.def("ring", [] {
    const RingOptions& o = ring_options();
    return py::make_tuple(o.min_bytes, o.segment_bytes, o.window, o.pair_exchange);
  }, "(min_bytes, segment_bytes, window, pair_exchange) of the segmented ring all-reduce.");
  m.def("all_reduce_bf16_in_place", [](py::array a) {
    if (!(a.flags() & py::array::c_style) || !a.writeable() || !a.dtype().is(py::dtype::of<float>()))
      throw_user_error("all_reduce_bf16_in_place: the array must be a C-contiguous, writeable float32 array, got " + std::string(py::str(a.dtype())));
    world()->start_all_reduce_bf16(static_cast<float*>(a.mutable_data()), a.size())->wait();
    return a;
  }, py::arg("a"), "all_reduce_in_place of float32 values sent (and summed) as bfloat16: half the bytes, 8 bits of mantissa.");
  m.def("broadcast", [](py::array a, int root) {
    NDArray x = numpy_to_ndarray(py::array::ensure(a, py::array::c_style));
    world()->broadcast(x.data(), x.numel(), x.dtype(), root);
    return ndarray_to_numpy(x);
  }, py::arg("array"), py::arg("root") = 0, "Rank root's array on every rank (same shape and dtype everywhere).");
  m.def("send", [](py::array a, int peer, int tag) {
    NDArray x = numpy_to_ndarray(py::array::ensure(a, py::array::c_style));
    world()->send(x.data(), x.numel(), x.dtype(), peer, tag);
  }, py::arg("array"), py::arg("peer"), py::arg("tag") = 0);
  // Sends ((array, peer, tag), ...) and receives ((shape, dtype, peer, tag), ...) posted together; returns the received arrays.
  m.def("exchange", [](py::list sends, py::list recvs) {
    std::vector<NDArray> keep, got;
    std::vector<Communicator::SendOp> ss;
    std::vector<Communicator::RecvOp> rs;
    for (py::handle h : sends) {
      auto t = h.cast<py::tuple>();
      keep.push_back(numpy_to_ndarray(py::array::ensure(t[0], py::array::c_style)));
      ss.push_back({keep.back().data(), keep.back().numel(), keep.back().dtype(), t[1].cast<int>(), t[2].cast<int>()});
    }
    for (py::handle h : recvs) {
      auto t = h.cast<py::tuple>();
      got.push_back(NDArray::empty(t[0].cast<std::vector<int64_t>>(), to_dtype(t[1])));
      rs.push_back({got.back().data(), got.back().numel(), got.back().dtype(), t[2].cast<int>(), t[3].cast<int>()});
    }
    {
      py::gil_scoped_release release;
      world()->exchange(ss, rs);
    }
    return to_list(got);
  }, py::arg("sends"), py::arg("recvs"));
  m.def("recv", [](std::vector<int64_t> shape, py::handle dtype, int peer, int tag) {
    NDArray x = NDArray::empty(shape, to_dtype(dtype));
    world()->recv(x.data(), x.numel(), x.dtype(), peer, tag);
    return ndarray_to_numpy(x);
  }, py::arg("shape"), py::arg("dtype"), py::arg("peer"), py::arg("tag") = 0, "An array of that shape and dtype sent by rank `peer`.");
  m.def("all_gather", [](py::array a) {
    NDArray x = numpy_to_ndarray(py::array::ensure(a, py::array::c_style));
    std::vector<int64_t> shape = x.shape();
    shape.insert(shape.begin(), world()->size());
    NDArray out = NDArray::empty(shape, x.dtype());
    world()->all_gather(x.data(), out.data(), x.numel(), x.dtype());
    return ndarray_to_numpy(out);
  }, "Every rank's array, stacked on a new first axis in rank order.");
  m.def("nccl_all_reduce", [](py::array a, int device) {
    NDArray x = numpy_to_ndarray(py::array::ensure(a, py::array::c_style));
    auto comm = make_nccl(world(), device);
    comm->all_reduce(x.data(), x.numel(), x.dtype());
    return ndarray_to_numpy(x);
  }, py::arg("array"), py::arg("device") = 0, "An all-reduce through NCCL (a smoke test of the NCCL backend).");
}

}  // namespace kiln::python
