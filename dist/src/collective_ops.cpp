// The resharding ops of the distribution pass, registered as graph ops so a
// sharded graph is an ordinary graph (printed, rewritten, lowered). They
// have no compute: the per-rank runner runs the collectives through its
// communicator, and the lowering turns kiln.Shard / kiln.ToPartial into
// ordinary ops. With local=0 (the global graph) the type is the input's;
// with local=1 (a rank's graph) it is the rank's block of the result.
#include "kiln/dist/shard.h"
#include "kiln/graph/op_registry.h"

namespace kiln::dist {

using namespace graph;

namespace {

// dim attribute -> the output's local shape, given the group size n.
using LocalShapeFn = std::function<void(const OpCall&, graph::Shape&, int64_t n)>;

int norm_dim(const OpCall& call, const char* attr, int ndim) {
  int64_t d = call.attrs.get_int(attr);
  if (d < 0 || d >= ndim) call.fail(std::string(attr) + "=" + std::to_string(d) + " is out of range for " + call.input_types[0].str());
  return static_cast<int>(d);
}

void divide(const OpCall& call, graph::Shape& shape, int d, int64_t n) {
  if (shape[d] % n != 0) call.fail("dimension " + std::to_string(d) + " (" + std::to_string(shape[d]) + ") does not split into " + std::to_string(n) + " pieces");
  shape[d] = shape[d] / n;
}

void register_collective(const std::string& name, const std::string& doc, std::vector<AttrSpec> extra, LocalShapeFn local_shape) {
  OpDef def;
  def.name = name;
  def.doc = doc;
  def.attrs = {{"axis", AttrKind::String, std::nullopt}, {"size", AttrKind::Int, std::nullopt},
               {"bytes", AttrKind::Int, AttrValue(int64_t{0})}, {"local", AttrKind::Int, AttrValue(int64_t{0})}};
  def.attrs.insert(def.attrs.end(), extra.begin(), extra.end());
  def.pattern = Pattern::Opaque;
  // A graph that already holds collectives (sharded again, or a mesh of one for op_times) keeps them whole.
  def.sharding = replicated_rule();
  def.infer = [local_shape](const OpCall& call) {
    TensorType t = call.input_types[0];
    if (call.attrs.get_int("local") != 0 && local_shape) local_shape(call, t.shape, call.attrs.get_int("size"));
    return std::vector<TensorType>{t};
  };
  register_op(def);
}

const bool registered = [] {
  AttrSpec dim{"dim", AttrKind::Int, AttrValue(int64_t{0})};
  register_collective("kiln.AllReduce", "Sums the value over the ranks of a mesh axis.", {}, nullptr);
  register_collective("kiln.AllGather", "Concatenates the ranks' blocks along `dim` over a mesh axis.", {dim},
                      [](const OpCall& c, graph::Shape& s, int64_t n) { s[norm_dim(c, "dim", static_cast<int>(s.size()))] *= n; });
  register_collective("kiln.ReduceScatter", "Sums over a mesh axis and leaves each rank its block along `dim`.", {dim},
                      [](const OpCall& c, graph::Shape& s, int64_t n) { divide(c, s, norm_dim(c, "dim", static_cast<int>(s.size())), n); });
  register_collective("kiln.AllToAll", "Moves a mesh axis's split from `concat_dim` to `split_dim`.",
                      {{"split_dim", AttrKind::Int, std::nullopt}, {"concat_dim", AttrKind::Int, std::nullopt}},
                      [](const OpCall& c, graph::Shape& s, int64_t n) {
                        int nd = static_cast<int>(s.size());
                        divide(c, s, norm_dim(c, "split_dim", nd), n);
                        s[norm_dim(c, "concat_dim", nd)] *= n;
                      });
  register_collective("kiln.Shard", "Keeps this rank's block along `dim` (no communication; global graphs only).", {dim}, nullptr);
  register_collective("kiln.ToPartial", "Makes a value one addend of a partial sum (rank 0 of the axis keeps it, others zero; global graphs only).", {}, nullptr);
  return true;
}();

}  // namespace

bool is_collective(const std::string& op_name) {
  return op_name == "kiln.AllReduce" || op_name == "kiln.AllGather" || op_name == "kiln.ReduceScatter" || op_name == "kiln.AllToAll";
}

}  // namespace kiln::dist
