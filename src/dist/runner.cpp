// The per-rank runner: segments compiled by the graph compiler, collectives
// between them (see runner.h). Levels: a value's level is the number of
// collectives on its longest path from the inputs; segment k holds the
// non-collective ops of level k and runs after the collectives of level k.
#include "kiln/dist/runner.h"

#include <chrono>
#include <cstring>
#include <unordered_set>

#include "kiln/graph/op_registry.h"
#include "kiln/graph/rewrite.h"
#include "kiln/support/error.h"

namespace kiln::dist {

using namespace graph;

namespace {

int64_t prod(const std::vector<int64_t>& s, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t i = from; i < to; ++i) p *= s[i];
  return p;
}

// dst[o][p] = src[p][o] and its inverse, on blocks of `blk` bytes: moves a
// mesh axis's pieces between the front of a buffer (how collectives lay
// them out) and dimension d (outer = the elements before d).
void pieces_to_dim(const char* src, char* dst, int64_t n, int64_t outer, int64_t blk) {
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t p = 0; p < n; ++p) std::memcpy(dst + (o * n + p) * blk, src + (p * outer + o) * blk, blk);
}
void dim_to_pieces(const char* src, char* dst, int64_t n, int64_t outer, int64_t blk) {
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t p = 0; p < n; ++p) std::memcpy(dst + (p * outer + o) * blk, src + (o * n + p) * blk, blk);
}

}  // namespace

NDArray run_collective(const OpNode& node, const NDArray& in, Communicator& c) {
  const std::string& op = node.op->name;
  const TensorType& out_t = node.types[0];
  DataType dt = out_t.dtype;
  int64_t n = c.size(), elem = dt.bytes();
  NDArray out = NDArray::empty(out_t.shape, dt);
  const auto& s = in.shape();
  const char* src = static_cast<const char*>(in.data());
  char* dst = static_cast<char*>(out.data());
  if (op == "kiln.AllReduce") {
    std::memcpy(dst, src, in.nbytes());
    c.all_reduce(dst, in.numel(), dt);
  } else if (op == "kiln.AllGather") {
    size_t d = static_cast<size_t>(node.attrs.get_int("dim"));
    std::vector<char> buf(out.nbytes());
    c.all_gather(src, buf.data(), in.numel(), dt);
    pieces_to_dim(buf.data(), dst, n, prod(s, 0, d), prod(s, d, s.size()) * elem);
  } else if (op == "kiln.ReduceScatter") {
    size_t d = static_cast<size_t>(node.attrs.get_int("dim"));
    std::vector<char> buf(in.nbytes());
    dim_to_pieces(src, buf.data(), n, prod(s, 0, d), prod(s, d, s.size()) / n * elem);
    c.reduce_scatter(buf.data(), dst, out.numel(), dt);
  } else if (op == "kiln.AllToAll") {
    size_t e = static_cast<size_t>(node.attrs.get_int("split_dim")), d = static_cast<size_t>(node.attrs.get_int("concat_dim"));
    std::vector<char> send(in.nbytes()), recv(in.nbytes());
    dim_to_pieces(src, send.data(), n, prod(s, 0, e), prod(s, e, s.size()) / n * elem);
    c.all_to_all(send.data(), recv.data(), in.numel() / n, dt);
    std::vector<int64_t> piece = s;  // each received piece: the input's shape with split_dim cut
    piece[e] /= n;
    pieces_to_dim(recv.data(), dst, n, prod(piece, 0, d), prod(piece, d, piece.size()) * elem);
  } else {
    KILN_UNREACHABLE() << "not a collective: " << op;
  }
  return out;
}

struct Runner::Impl {
  Mesh mesh;
  int rank = 0;
  Graph local;
  std::vector<std::shared_ptr<Communicator>> axis_comms;
  // A step: either a collective node or a compiled segment with its boundary values.
  struct Step {
    const OpNode* collective = nullptr;
    Executor exe;
    std::vector<Value> ins, outs;
  };
  std::vector<Step> steps;
  mutable RunStats stats;  // collectives' entries in the order of their steps
  std::vector<int> stat_of;  // step -> its entry in stats.collectives (-1 for segments)
};

namespace {

bool node_is_collective(const NodeObj* n) { return n->kind == NodeKind::Op && is_collective(static_cast<const OpNode*>(n)->op->name); }

// Segment k as a graph of its own: values from elsewhere become its inputs; values used elsewhere its outputs.
Runner::Impl::Step build_segment(const std::vector<const OpNode*>& ops, const std::unordered_set<const NodeObj*>& in_seg,
                                 const std::unordered_set<Value, ValueHash>& used_outside, const CompileOptions& options, int k) {
  Runner::Impl::Step st;
  std::unordered_map<Value, Value, ValueHash> map;
  std::vector<Ref<InputNode>> inputs;
  std::vector<Value> outs;
  for (const OpNode* op : ops) {
    std::vector<Value> ins;
    for (const Value& v : op->inputs) {
      if (!v.defined() || v.node->kind == NodeKind::Constant || in_seg.count(v.node.get())) {
        ins.push_back(v.defined() && in_seg.count(v.node.get()) ? map.at(v) : v);
        continue;
      }
      auto it = map.find(v);
      if (it == map.end()) {
        auto in = make_input("seg" + std::to_string(k) + "_in" + std::to_string(inputs.size()), v.type());
        inputs.push_back(in);
        st.ins.push_back(v);
        it = map.emplace(v, in->output()).first;
      }
      ins.push_back(it->second);
    }
    Ref<OpNode> made = with_inputs(*op, ins);
    for (int o = 0; o < op->num_outputs(); ++o) {
      Value old = op->output(o);
      map[old] = made->output(o);
      if (used_outside.count(old)) {
        st.outs.push_back(old);
        outs.push_back(made->output(o));
      }
    }
  }
  if (!outs.empty()) st.exe = compile(Graph::make(inputs, outs), options);
  return st;
}

}  // namespace

Runner::Runner(const ShardedGraph& sg, std::shared_ptr<Communicator> world, const CompileOptions& options) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.mesh = sg.mesh;
  KILN_USER_CHECK(world->size() == sg.mesh.size()) << "kiln.dist: the mesh " << sg.mesh.str() << " has " << sg.mesh.size() << " ranks but "
                                                   << world->size() << " processes were started; run with mpirun -np " << sg.mesh.size();
  m.rank = world->rank();
  m.local = lower_to_rank(sg, m.rank);
  std::vector<int> c = sg.mesh.coords(m.rank);
  for (int a = 0; a < sg.mesh.ndim(); ++a) {
    std::vector<int> base = c;
    base[a] = 0;
    m.axis_comms.push_back(world->split(sg.mesh.rank_of(base), c[a]));
  }
  // Levels, and the values some other step (or the caller) reads.
  std::unordered_map<const NodeObj*, int> level;
  std::unordered_set<Value, ValueHash> used_outside(m.local.outputs().begin(), m.local.outputs().end());
  int levels = 1;
  auto order = m.local.topo_order();
  for (const auto& n : order) {
    int l = 0;
    if (n->kind == NodeKind::Op) {
      for (const Value& v : static_cast<const OpNode&>(*n).inputs)
        if (v.defined()) l = std::max(l, level.at(v.node.get()));
      if (node_is_collective(n.get())) ++l;
      for (const Value& v : static_cast<const OpNode&>(*n).inputs)
        if (v.defined() && v.node->kind == NodeKind::Op && (node_is_collective(n.get()) || node_is_collective(v.node.get()) || level.at(v.node.get()) != l))
          used_outside.insert(v);
    }
    level[n.get()] = l;
    levels = std::max(levels, l + 1);
  }
  for (int k = 0; k < levels; ++k) {
    std::vector<const OpNode*> ops;
    std::unordered_set<const NodeObj*> in_seg;
    for (const auto& n : order) {
      if (n->kind != NodeKind::Op || level.at(n.get()) != k) continue;
      const auto* op = static_cast<const OpNode*>(n.get());
      if (node_is_collective(op)) {
        Impl::Step st;
        st.collective = op;
        m.steps.push_back(st);
      } else {
        ops.push_back(op);
        in_seg.insert(op);
      }
    }
    if (!ops.empty()) {
      Impl::Step st = build_segment(ops, in_seg, used_outside, options, k);
      if (!st.outs.empty()) m.steps.push_back(std::move(st));
    }
  }

  for (const auto& st : m.steps) {
    m.stat_of.push_back(st.collective ? static_cast<int>(m.stats.collectives.size()) : -1);
    if (!st.collective) continue;
    CollectiveStats c;
    c.op = st.collective->op->name;
    c.axis = st.collective->attrs.get_string("axis");
    c.group_size = m.axis_comms[m.mesh.axis(c.axis)]->size();
    c.bytes = st.collective->inputs[0].type().bytes();
    m.stats.collectives.push_back(c);
  }
}

Runner::~Runner() = default;

std::vector<NDArray> Runner::run(const std::vector<NDArray>& inputs) const {
  const Impl& m = *impl_;
  const auto& gin = m.local.inputs();
  KILN_USER_CHECK(inputs.size() == gin.size()) << "kiln.dist runner: the graph takes " << gin.size() << " inputs, got " << inputs.size();
  std::unordered_map<Value, NDArray, ValueHash> env;
  for (size_t i = 0; i < gin.size(); ++i) {
    KILN_USER_CHECK(inputs[i].shape() == gin[i]->types[0].shape && inputs[i].dtype() == gin[i]->types[0].dtype)
        << "kiln.dist runner: input '" << gin[i]->name << "' of rank " << m.rank << " must be its block " << gin[i]->types[0].str();
    env[gin[i]->output()] = inputs[i];
  }
  auto get = [&](const Value& v) -> NDArray {
    if (v.node->kind == NodeKind::Constant) return static_cast<const ConstantNode&>(*v.node).data;
    return env.at(v);
  };
  using clock = std::chrono::steady_clock;
  auto seconds_since = [](clock::time_point t) { return std::chrono::duration<double>(clock::now() - t).count(); };
  auto run_start = clock::now();
  for (size_t i = 0; i < m.steps.size(); ++i) {
    const auto& st = m.steps[i];
    auto t = clock::now();
    if (st.collective) {
      CollectiveStats& cs = m.stats.collectives[static_cast<size_t>(m.stat_of[i])];
      int64_t wire = wire_bytes_sent();
      int a = m.mesh.axis(st.collective->attrs.get_string("axis"));
      env[st.collective->output()] = run_collective(*st.collective, get(st.collective->inputs[0]), *m.axis_comms[a]);
      double s = seconds_since(t);
      cs.seconds += s;
      m.stats.collective_seconds += s;
      ++cs.calls;
      if (wire >= 0) cs.wire_bytes = std::max<int64_t>(cs.wire_bytes, 0) + wire_bytes_sent() - wire;
      continue;
    }
    std::vector<NDArray> ins;
    for (const Value& v : st.ins) ins.push_back(get(v));
    std::vector<NDArray> outs = st.exe.run(ins);
    for (size_t i = 0; i < outs.size(); ++i) env[st.outs[i]] = outs[i];
    m.stats.segment_seconds += seconds_since(t);
  }
  std::vector<NDArray> result;
  for (const Value& v : m.local.outputs()) result.push_back(get(v));
  ++m.stats.runs;
  m.stats.seconds += seconds_since(run_start);
  return result;
}

RunStats Runner::stats() const { return impl_->stats; }

void Runner::reset_stats() const {
  RunStats& s = impl_->stats;
  s.runs = 0;
  s.seconds = s.segment_seconds = s.collective_seconds = 0;
  for (auto& c : s.collectives) {
    c.calls = 0;
    c.seconds = 0;
    c.wire_bytes = -1;
  }
}

int Runner::rank() const { return impl_->rank; }
const Graph& Runner::local_graph() const { return impl_->local; }
int Runner::num_segments() const {
  int n = 0;
  for (const auto& st : impl_->steps) n += st.collective == nullptr;
  return n;
}

}  // namespace kiln::dist
