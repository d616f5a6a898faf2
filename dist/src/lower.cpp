// SPMD lowering: the global sharded graph to the graph one rank runs. Inputs
// and values get local shapes, constants are sliced to the rank's block,
// collectives stay (with local=1: their types become the rank's blocks), and
// the free resharding ops become ordinary ops with the rank's offsets.
#include <cstring>

#include "kiln/dist/shard.h"
#include "kiln/graph/op_registry.h"
#include "kiln/support/error.h"

namespace kiln::dist {

using namespace graph;

namespace {

NDArray int64_array(const std::vector<int64_t>& v) {
  NDArray a = NDArray::empty({static_cast<int64_t>(v.size())}, DataType::Int(64));
  if (!v.empty()) a.copy_from(v.data(), static_cast<int64_t>(v.size() * sizeof(int64_t)));
  return a;
}

// Copies block [off, off+len) per dim of a compact array (row-major, recursive over dims).
void copy_block(const char* src, char* dst, const std::vector<int64_t>& shape, const std::vector<std::pair<int64_t, int64_t>>& block,
                int64_t elem, int d) {
  int64_t inner = elem;
  for (size_t k = d + 1; k < shape.size(); ++k) inner *= shape[k];
  int64_t local_inner = elem;
  for (size_t k = d + 1; k < shape.size(); ++k) local_inner *= block[k].second;
  for (int64_t i = 0; i < block[d].second; ++i) {
    const char* s = src + (block[d].first + i) * inner;
    char* t = dst + i * local_inner;
    if (d + 1 == static_cast<int>(shape.size())) std::memcpy(t, s, elem);
    else copy_block(s, t, shape, block, elem, d + 1);
  }
}

Value lower_constant(const ConstantNode& c, const ShardingSpec& spec, const Mesh& mesh, int rank) {
  if (spec.dims.empty() || std::all_of(spec.dims.begin(), spec.dims.end(), [](const auto& d) { return d.empty(); }))
    return Ref<NodeObj>(&c)->output();
  const auto& shape = c.types[0].shape;
  auto block = local_block(shape, spec, mesh, rank);
  std::vector<int64_t> ls;
  for (auto& b : block) ls.push_back(b.second);
  NDArray out = NDArray::empty(ls, c.types[0].dtype);
  NDArray src = c.data.is_contiguous() ? c.data : c.data;  // constants are compact
  copy_block(static_cast<const char*>(src.data()), static_cast<char*>(out.data()), shape, block, c.types[0].dtype.bytes(), 0);
  return make_constant(c.name, out)->output();
}

Value lower_shard(const OpNode& op, Value in, const Mesh& mesh, int rank) {
  int d = static_cast<int>(op.attrs.get_int("dim"));
  int a = mesh.axis(op.attrs.get_string("axis"));
  int64_t n = mesh.axis_size(a), len = in.type().shape[d] / n, idx = mesh.coords(rank)[a];
  Value s = make_constant(op.name + ".starts", int64_array({idx * len}))->output();
  Value e = make_constant(op.name + ".ends", int64_array({(idx + 1) * len}))->output();
  Value x = make_constant(op.name + ".axes", int64_array({d}))->output();
  return make_op("Slice", {in, s, e, x}, {}, op.name)->output();
}

Value lower_to_partial(const OpNode& op, Value in, const Mesh& mesh, int rank) {
  int a = mesh.axis(op.attrs.get_string("axis"));
  if (mesh.coords(rank)[a] == 0) return in;
  NDArray zero = NDArray::empty({}, in.type().dtype);
  std::memset(zero.data(), 0, zero.nbytes());
  return make_op("Mul", {in, make_constant(op.name + ".zero", zero)->output()}, {}, op.name)->output();
}

}  // namespace

Graph lower_to_rank(const ShardedGraph& sg, int rank) {
  const Mesh& mesh = sg.mesh;
  KILN_USER_CHECK(rank >= 0 && rank < mesh.size()) << "rank " << rank << " is outside " << mesh.str();
  std::unordered_map<const NodeObj*, std::vector<Value>> map;
  std::vector<Ref<InputNode>> inputs;
  auto spec_of = [&](const Value& v) { return sg.specs.at(v); };
  for (const auto& n : sg.graph.topo_order()) {
    Value v0 = n->output();
    if (n->kind == NodeKind::Input) {
      TensorType t{local_shape(n->types[0].shape, spec_of(v0), mesh, "input '" + n->name + "'"), n->types[0].dtype};
      auto in = make_input(n->name, t);
      inputs.push_back(in);
      map[n.get()] = {in->output()};
      continue;
    }
    if (n->kind == NodeKind::Constant) {
      auto it = sg.specs.find(v0);
      map[n.get()] = {it == sg.specs.end() ? v0 : lower_constant(static_cast<const ConstantNode&>(*n), it->second, mesh, rank)};
      continue;
    }
    const auto& op = static_cast<const OpNode&>(*n);
    std::vector<Value> ins;
    for (const Value& v : op.inputs) ins.push_back(v.defined() ? map.at(v.node.get())[v.index] : Value{});
    const std::string& name = op.op->name;
    std::vector<Value> outs;
    if (name == "kiln.Shard") {
      outs = {lower_shard(op, ins[0], mesh, rank)};
    } else if (name == "kiln.ToPartial") {
      outs = {lower_to_partial(op, ins[0], mesh, rank)};
    } else {
      Ref<OpNode> made;
      std::vector<ShardingSpec> out_specs;
      for (int o = 0; o < op.num_outputs(); ++o) out_specs.push_back(spec_of(op.output(o)));
      const LocalizeFn& localize = op.op->sharding.localize;
      if (is_collective(name)) {
        Attrs a = op.attrs;
        a.set("local", int64_t{1});
        made = make_op(op.op, ins, a, op.name);
      } else if (localize) {
        made = localize(op, ins, out_specs, mesh);
      } else {
        made = make_op(op.op, ins, op.attrs, op.name);
      }
      for (int o = 0; o < made->num_outputs(); ++o) {
        auto want = local_shape(op.types[o].shape, out_specs[o], mesh, "output of '" + op.name + "'");
        KILN_CHECK(made->types[o].shape == want) << "lowering '" << op.name << "' gave " << made->types[o].str() << ", its spec "
                                                 << out_specs[o].str(mesh) << " says " << TensorType{want, op.types[o].dtype}.str();
        outs.push_back(made->output(o));
      }
    }
    map[n.get()] = outs;
  }
  std::vector<Value> outs;
  for (const Value& v : sg.graph.outputs()) outs.push_back(map.at(v.node.get())[v.index]);
  return Graph::make(inputs, outs, sg.graph.output_names());
}

}  // namespace kiln::dist
