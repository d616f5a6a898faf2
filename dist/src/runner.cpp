// The per-rank runner: segments compiled by the graph compiler, collectives
// between them (see runner.h). Levels: a value's level is the number of
// collectives on its longest path from the inputs; segment k holds the
// non-collective ops of level k and runs after the collectives of level k.
// With overlap (bucket_bytes > 0) a level is cut into parts: after each, a
// bucket of the next level's all-reduces is started, and the next level
// waits for each bucket just before the part that needs it.
#include "kiln/dist/runner.h"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <unordered_set>

#include "kiln/graph/op_registry.h"
#include "kiln/graph/rewrite.h"
#include "kiln/support/error.h"
#include "buckets.h"

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
  // A step: a compiled segment with its boundary values, a collective, or the start / the wait of a bucket
  // of all-reduces packed into one buffer and overlapped with the segments between the two.
  enum class Kind { Segment, Collective, StartBucket, WaitBucket };
  struct Step {
    Kind kind = Kind::Segment;
    const OpNode* collective = nullptr;
    int bucket = -1;
    Executor exe;
    std::vector<Value> ins, outs;
  };
  struct Bucket {
    std::vector<const OpNode*> all_reduces;
    std::vector<int64_t> offsets;  // of each in the buffer, in elements
    int64_t count = 0;
    DataType dtype;
    int axis = 0, level = 0, after_part = 0;  // started after part after_part of level `level`
    int wait_part = 0;                        // waited before part wait_part of level `level` + 1
    bool bf16 = false;                        // float32 sent as bfloat16 (Runner's bf16_gradients)
  };
  std::vector<Step> steps;
  std::vector<Bucket> buckets;
  mutable RunStats stats;  // collectives' entries in the order of their steps
  std::unordered_map<const OpNode*, int> stat_of;  // collective -> its entry in stats.collectives
  bool progress_thread = false;  // test overlapped buckets from a thread while segments run
  bool bf16_gradients = false;   // float32 buckets travel as bfloat16
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

// MPI moves a non-blocking collective on only inside MPI calls. While a segment computes, a thread tests
// the requests in flight every ~100 us (the segment makes no MPI call meanwhile); without one (MPI below
// MPI_THREAD_SERIALIZED, or KILN_DIST_PROGRESS=0) they are tested once the segment is done.
class Progress {
 public:
  Progress(std::vector<std::unique_ptr<Request>>& inflight, bool thread) : inflight_(inflight) {
    bool any = false;
    for (auto& r : inflight_) any = any || (r && !r->test());
    if (any && thread) poller_ = std::thread([this] {
        while (!stop_.load(std::memory_order_relaxed)) {
          bool pending = false;
          for (auto& r : inflight_) pending = (r && !r->test()) || pending;
          if (!pending) return;
          std::this_thread::sleep_for(std::chrono::microseconds(100));
        }
      });
  }
  ~Progress() {
    stop_ = true;
    if (poller_.joinable()) poller_.join();
    for (auto& r : inflight_)
      if (r) r->test();
  }

 private:
  std::vector<std::unique_ptr<Request>>& inflight_;
  std::atomic<bool> stop_{false};
  std::thread poller_;
};

bool default_progress_thread() {
  const char* s = std::getenv("KILN_DIST_PROGRESS");
  return !(s && std::string(s) == "0") && requests_testable_from_any_thread();
}

int64_t default_bucket_bytes() {
  const char* s = std::getenv("KILN_DIST_BUCKET_MB");
  return s && std::atof(s) > 0 ? static_cast<int64_t>(std::atof(s) * 1024 * 1024) : 0;
}

// Where each op runs: its level and its part of the level (segment = (level, part)).
struct Layout {
  std::unordered_map<const NodeObj*, int> level, part;
  std::vector<std::vector<const OpNode*>> ops, colls;  // per level, in topological order
  std::vector<int> parts;                              // per level
  std::unordered_set<const OpNode*> bucketed;          // all-reduces that run in buckets
  std::pair<int, int> segment_of(const NodeObj* n) const { return {level.at(n), part.count(n) ? part.at(n) : 0}; }
};

// A collective's level is one more than its inputs'; other ops take their inputs' highest.
Layout levels_of(const std::vector<Ref<NodeObj>>& order) {
  Layout lay;
  int levels = 1;
  for (const auto& n : order) {
    int l = 0;
    if (n->kind == NodeKind::Op) {
      for (const Value& v : static_cast<const OpNode&>(*n).inputs)
        if (v.defined()) l = std::max(l, lay.level.at(v.node.get()));
      if (node_is_collective(n.get())) ++l;
    }
    lay.level[n.get()] = l;
    levels = std::max(levels, l + 1);
  }
  lay.ops.resize(static_cast<size_t>(levels));
  lay.colls.resize(static_cast<size_t>(levels));
  lay.parts.assign(static_cast<size_t>(levels), 1);
  for (const auto& n : order)
    if (n->kind == NodeKind::Op)
      (node_is_collective(n.get()) ? lay.colls : lay.ops)[static_cast<size_t>(lay.level.at(n.get()))].push_back(static_cast<const OpNode*>(n.get()));
  return lay;
}

// The all-reduces of level k+1 fed by ops of level k go in buckets, level k's ops in parts (buckets.h).
// With bf16_gradients the all-reduces of the graph's outputs (the loss) stay out: they run whole, in float32.
void plan_overlap(Layout& lay, Runner::Impl& m, int64_t bucket_bytes) {
  std::unordered_set<const NodeObj*> outputs;
  for (const Value& v : m.local.outputs()) outputs.insert(v.node.get());
  for (size_t k = 0; k + 1 < lay.ops.size(); ++k) {
    std::vector<const OpNode*> cands;
    for (const OpNode* c : lay.colls[k + 1]) {
      const Value& in = c->inputs[0];
      if (m.bf16_gradients && outputs.count(c)) continue;
      if (c->op->name == "kiln.AllReduce" && in.node->kind == NodeKind::Op && !node_is_collective(in.node.get()) &&
          lay.level.at(in.node.get()) == static_cast<int>(k))
        cands.push_back(c);
    }
    if (cands.empty()) continue;
    BucketPlan bp = plan_buckets(lay.ops[k], cands, bucket_bytes);
    lay.part.insert(bp.part.begin(), bp.part.end());
    lay.parts[k] = bp.parts;
    for (const auto& b : bp.buckets) {
      Runner::Impl::Bucket B;
      B.all_reduces = b.all_reduces;
      B.level = static_cast<int>(k);
      B.after_part = b.after_part;
      B.dtype = b.all_reduces[0]->inputs[0].type().dtype;
      B.axis = m.mesh.axis(b.all_reduces[0]->attrs.get_string("axis"));
      B.bf16 = m.bf16_gradients && B.dtype == DataType::Float(32);
      for (const OpNode* ar : b.all_reduces) {
        B.offsets.push_back(B.count);
        B.count += ar->inputs[0].type().numel();
        lay.bucketed.insert(ar);
      }
      m.buckets.push_back(B);
    }
  }
}

// Level k waits for level k-1's buckets one at a time, each just before the first part of its ops that
// needs it: the optimizer updates the first bucket's parameters while the next bucket is in flight.
void plan_waits(Layout& lay, Runner::Impl& m) {
  for (size_t k = 1; k < lay.ops.size(); ++k) {
    std::vector<size_t> mine;
    for (size_t b = 0; b < m.buckets.size(); ++b)
      if (m.buckets[b].level + 1 == static_cast<int>(k)) mine.push_back(b);
    if (mine.size() < 2 || lay.parts[k] > 1) continue;  // a level cut for its own buckets keeps its parts
    std::unordered_map<const NodeObj*, int> wait_of;
    for (size_t j = 0; j < mine.size(); ++j) {
      m.buckets[mine[j]].wait_part = static_cast<int>(j);
      for (const OpNode* ar : m.buckets[mine[j]].all_reduces) wait_of[ar] = static_cast<int>(j);
    }
    for (const OpNode* op : lay.ops[k]) {
      int p = 0;
      for (const Value& v : op->inputs) {
        if (!v.defined()) continue;
        auto w = wait_of.find(v.node.get());
        if (w != wait_of.end()) p = std::max(p, w->second);
        else if (lay.part.count(v.node.get()) && lay.level.at(v.node.get()) == static_cast<int>(k)) p = std::max(p, lay.part.at(v.node.get()));
      }
      lay.part[op] = p;
    }
    lay.parts[k] = static_cast<int>(mine.size());
  }
}

Runner::Impl::Step bucket_step(Runner::Impl::Kind kind, size_t b) {
  Runner::Impl::Step st;
  st.kind = kind;
  st.bucket = static_cast<int>(b);
  return st;
}

// The steps in order: per level, its collectives that run alone, then per part: the buckets it waits for,
// its segment, the buckets it starts.
void emit_steps(const Layout& lay, const std::vector<Ref<NodeObj>>& order, Runner::Impl& m, const CompileOptions& options) {
  using Kind = Runner::Impl::Kind;
  // The values some other step (or the caller) reads.
  std::unordered_set<Value, ValueHash> used_outside(m.local.outputs().begin(), m.local.outputs().end());
  for (const auto& n : order) {
    if (n->kind != NodeKind::Op) continue;
    for (const Value& v : static_cast<const OpNode&>(*n).inputs)
      if (v.defined() && v.node->kind == NodeKind::Op &&
          (node_is_collective(n.get()) || node_is_collective(v.node.get()) || lay.segment_of(v.node.get()) != lay.segment_of(n.get())))
        used_outside.insert(v);
  }
  for (size_t k = 0; k < lay.ops.size(); ++k) {
    int level = static_cast<int>(k);
    for (const OpNode* op : lay.colls[k])
      if (!lay.bucketed.count(op)) {
        Runner::Impl::Step st;
        st.kind = Kind::Collective;
        st.collective = op;
        m.steps.push_back(std::move(st));
      }
    for (int p = 0; p < lay.parts[k]; ++p) {
      for (size_t b = 0; b < m.buckets.size(); ++b)
        if (m.buckets[b].level + 1 == level && m.buckets[b].wait_part == p) m.steps.push_back(bucket_step(Kind::WaitBucket, b));
      std::vector<const OpNode*> seg;
      std::unordered_set<const NodeObj*> in_seg;
      for (const OpNode* op : lay.ops[k])
        if (lay.segment_of(op).second == p) seg.push_back(op), in_seg.insert(op);
      if (!seg.empty()) {
        Runner::Impl::Step st = build_segment(seg, in_seg, used_outside, options, level);
        if (!st.outs.empty()) m.steps.push_back(std::move(st));
      }
      for (size_t b = 0; b < m.buckets.size(); ++b)
        if (m.buckets[b].level == level && m.buckets[b].after_part == p) m.steps.push_back(bucket_step(Kind::StartBucket, b));
    }
  }
}

// Stats entries in the order the collectives complete.
void init_stats(Runner::Impl& m) {
  auto add = [&](const OpNode* op) {
    m.stat_of[op] = static_cast<int>(m.stats.collectives.size());
    CollectiveStats c;
    c.op = op->op->name;
    c.axis = op->attrs.get_string("axis");
    c.group_size = m.axis_comms[static_cast<size_t>(m.mesh.axis(c.axis))]->size();
    c.bytes = op->inputs[0].type().bytes();
    m.stats.collectives.push_back(c);
  };
  for (const auto& st : m.steps) {
    if (st.kind == Runner::Impl::Kind::Collective) add(st.collective);
    if (st.kind == Runner::Impl::Kind::WaitBucket)
      for (const OpNode* ar : m.buckets[static_cast<size_t>(st.bucket)].all_reduces) add(ar);
  }
  m.stats.buckets = static_cast<int>(m.buckets.size());
}

}  // namespace

Runner::Runner(const ShardedGraph& sg, std::shared_ptr<Communicator> world, const CompileOptions& options, int64_t bucket_bytes,
               bool bf16_gradients)
    : impl_(std::make_unique<Impl>()) {
  if (bucket_bytes < 0) bucket_bytes = default_bucket_bytes();
  KILN_USER_CHECK(!bf16_gradients || bucket_bytes > 0) << "kiln.dist: bfloat16 gradients travel in the overlapped buckets; "
                                                       << "give a bucket size (bucket_mb > 0, e.g. 25)";
  Impl& m = *impl_;
  m.bf16_gradients = bf16_gradients;
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
  auto order = m.local.topo_order();
  Layout lay = levels_of(order);
  if (bucket_bytes > 0) {
    plan_overlap(lay, m, bucket_bytes);
    plan_waits(lay, m);
    m.progress_thread = default_progress_thread();
  }
  emit_steps(lay, order, m, options);
  init_stats(m);
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
  std::vector<std::unique_ptr<Request>> inflight(m.buckets.size());
  std::vector<NDArray> buffers(m.buckets.size());
  for (const auto& st : m.steps) {
    auto t = clock::now();
    switch (st.kind) {
      case Impl::Kind::Collective: {
        CollectiveStats& cs = m.stats.collectives[static_cast<size_t>(m.stat_of.at(st.collective))];
        int a = m.mesh.axis(st.collective->attrs.get_string("axis"));
        env[st.collective->output()] = run_collective(*st.collective, get(st.collective->inputs[0]), *m.axis_comms[a]);
        double s = seconds_since(t);
        cs.seconds += s;
        m.stats.collective_seconds += s;
        ++cs.calls;
        break;
      }
      case Impl::Kind::Segment: {
        std::vector<NDArray> ins;
        for (const Value& v : st.ins) ins.push_back(get(v));
        std::vector<NDArray> outs;
        {
          Progress progress(inflight, m.progress_thread);
          outs = st.exe.run(ins);
        }
        for (size_t i = 0; i < outs.size(); ++i) env[st.outs[i]] = outs[i];
        m.stats.segment_seconds += seconds_since(t);
        break;
      }
      case Impl::Kind::StartBucket: {
        const Impl::Bucket& b = m.buckets[static_cast<size_t>(st.bucket)];
        NDArray& buf = buffers[static_cast<size_t>(st.bucket)];
        buf = NDArray::empty({b.count}, b.dtype);
        char* dst = static_cast<char*>(buf.data());
        for (size_t i = 0; i < b.all_reduces.size(); ++i) {
          NDArray in = get(b.all_reduces[i]->inputs[0]);
          std::memcpy(dst + b.offsets[i] * b.dtype.bytes(), in.data(), static_cast<size_t>(in.nbytes()));
        }
        Communicator& comm = *m.axis_comms[static_cast<size_t>(b.axis)];
        inflight[static_cast<size_t>(st.bucket)] = b.bf16 ? comm.start_all_reduce_bf16(static_cast<float*>(buf.data()), b.count)
                                                          : comm.start_all_reduce(buf.data(), b.count, b.dtype);
        m.stats.collective_seconds += seconds_since(t);
        break;
      }
      case Impl::Kind::WaitBucket: {
        const Impl::Bucket& b = m.buckets[static_cast<size_t>(st.bucket)];
        inflight[static_cast<size_t>(st.bucket)]->wait();
        double waited = seconds_since(t);
        inflight[static_cast<size_t>(st.bucket)].reset();
        const char* src = static_cast<const char*>(buffers[static_cast<size_t>(st.bucket)].data());
        for (size_t i = 0; i < b.all_reduces.size(); ++i) {
          const OpNode* ar = b.all_reduces[i];
          NDArray out = NDArray::empty(ar->types[0].shape, b.dtype);
          std::memcpy(out.data(), src + b.offsets[i] * b.dtype.bytes(), static_cast<size_t>(out.nbytes()));
          env[ar->output()] = out;
          CollectiveStats& cs = m.stats.collectives[static_cast<size_t>(m.stat_of.at(ar))];
          ++cs.calls;
          cs.seconds += waited * static_cast<double>(out.numel()) / static_cast<double>(b.count);  // the bucket's wait, shared by size
        }
        buffers[static_cast<size_t>(st.bucket)] = NDArray();
        m.stats.bucket_wait_seconds += waited;
        m.stats.collective_seconds += seconds_since(t);
        break;
      }
    }
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
  s.seconds = s.segment_seconds = s.collective_seconds = s.bucket_wait_seconds = 0;
  for (auto& c : s.collectives) {
    c.calls = 0;
    c.seconds = 0;
  }
}

int Runner::rank() const { return impl_->rank; }
const Graph& Runner::local_graph() const { return impl_->local; }
int Runner::num_segments() const {
  int n = 0;
  for (const auto& st : impl_->steps) n += st.kind == Impl::Kind::Segment;
  return n;
}

}  // namespace kiln::dist
