// The search space: sketches from the rules (sketch_rules.cpp), random
// annotation, mutation and crossover over decision slots, and
// materialization (search_space_apply.cpp).
#include "kiln/ops/search_space.h"

#include <algorithm>
#include <charconv>
#include <sstream>

#include "kiln/driver/build_cuda.h"
#include "kiln/ir/functor.h"
#include "kiln/support/error.h"
#include "search_space_internal.h"

namespace kiln::ops {

namespace detail {

std::vector<int64_t> prime_factors(int64_t n) {
  std::vector<int64_t> out;
  for (int64_t p = 2; p * p <= n; ++p)
    while (n % p == 0) {
      out.push_back(p);
      n /= p;
    }
  if (n > 1) out.push_back(n);
  return out;
}

std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> lo, hi;
  for (int64_t d = 1; d * d <= n; ++d)
    if (n % d == 0) {
      lo.push_back(d);
      if (d * d != n) hi.push_back(n / d);
    }
  lo.insert(lo.end(), hi.rbegin(), hi.rend());
  return lo;
}

int64_t divisor_at_most(int64_t extent, int64_t cap) {
  int64_t best = 1;
  for (int64_t d : divisors(extent))
    if (d <= cap) best = d;
  return best;
}

std::vector<int> panel_widths(int64_t extent, int lanes, int registers) {
  for (int w = lanes; w >= 2; w /= 2) {
    std::vector<int> out;
    for (int64_t d : divisors(extent)) {
      int vectors = static_cast<int>((d + lanes - 1) / lanes);
      if (d <= kMaxVectorExtent && d % w == 0 && tile_registers(1, vectors) <= registers) out.push_back(static_cast<int>(d));
    }
    if (!out.empty()) return out;
  }
  return {};
}

// Padded inputs above this many bytes stay inlined in the default (default_candidate).
constexpr int64_t kInlinePadBytes = 1 << 20;

namespace {

template <typename T>
const T& pick(const std::vector<T>& v, std::mt19937_64& rng) {
  return v[std::uniform_int_distribution<size_t>(0, v.size() - 1)(rng)];
}

// The innermost factor of a tile: for vector axes mostly a multiple of the
// lanes (or of half the lanes) that fits the vectorizer; otherwise any small
// divisor. Larger inner factors stay possible through mutation.
int64_t sample_inner(int64_t extent, bool vector_pref, int64_t max, int lanes, std::mt19937_64& rng) {
  std::vector<int64_t> small;
  for (int64_t d : divisors(extent))
    if (d <= max) small.push_back(d);
  if (vector_pref && std::uniform_real_distribution<double>(0, 1)(rng) < 0.85) {
    for (int w : {lanes, lanes / 2}) {
      if (w < 2) continue;
      std::vector<int64_t> pref;
      for (int64_t d : small)
        if (d % w == 0) pref.push_back(d);
      if (!pref.empty()) return pick(pref, rng);
    }
  }
  return pick(small, rng);
}

bool inner_ok(const Slot& slot, int64_t inner) {
  const std::vector<int>& a = slot.inner_allowed;
  return a.empty() || std::find(a.begin(), a.end(), inner) != a.end();
}

std::string join_ints(const std::vector<int>& v) {
  std::ostringstream os;
  for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
  return os.str();
}

}  // namespace

void sample_slot(const Slot& slot, int lanes, std::mt19937_64& rng, std::vector<int>* decisions) {
  int* out = decisions->data() + slot.offset;
  if (slot.kind == Slot::Kind::Choice) {
    *out = std::uniform_int_distribution<int>(0, slot.choices - 1)(rng);
    return;
  }
  // Innermost factor first, then every remaining prime to a random outer level.
  std::fill(out, out + slot.size, 1);
  int64_t inner = slot.size < 2                ? slot.extent
                  : slot.inner_allowed.empty() ? sample_inner(slot.extent, slot.vector_pref, slot.sample_max, lanes, rng)
                                               : pick(slot.inner_allowed, rng);
  out[slot.size - 1] = static_cast<int>(inner);
  std::uniform_int_distribution<int> level(0, std::max(0, slot.size - 2));
  for (int64_t p : prime_factors(slot.extent / inner)) out[level(rng)] *= static_cast<int>(p);
}

int64_t max_rows_loads_folded(const DagInfo& dag, int vectors) {
  if (!dag.fma_memory_operand) return max_tile_rows(dag.registers, vectors);
  return std::max(1, (dag.registers - 1) / std::max(1, vectors));
}

void fit_rows_to_registers(const DagInfo& dag, const Sketch& sk, std::mt19937_64& rng, std::vector<int>* decisions) {
  for (const StagePlan& p : sk.plans) {
    if (p.spatial_tiles.empty()) continue;
    const Slot& panel = sk.slots[p.spatial_tiles.back()];
    int width = (*decisions)[panel.offset + panel.size - 1];
    int vectors = (width + dag.lanes - 1) / dag.lanes;
    int64_t budget = max_rows_loads_folded(dag, vectors);
    for (size_t k = 0; k + 1 < p.spatial_tiles.size(); ++k) {
      const Slot& rows = sk.slots[p.spatial_tiles[k]];
      int64_t inner = (*decisions)[rows.offset + rows.size - 1];
      if (inner > budget) {
        Slot within = rows;
        within.sample_max = budget;
        sample_slot(within, dag.lanes, rng, decisions);
        inner = (*decisions)[rows.offset + rows.size - 1];
      }
      budget = std::max<int64_t>(1, budget / inner);
    }
  }
}

bool mutate_slot(const Slot& slot, std::mt19937_64& rng, std::vector<int>* decisions) {
  int* v = decisions->data() + slot.offset;
  if (slot.kind == Slot::Kind::Choice) {
    if (slot.choices < 2) return false;
    int next = std::uniform_int_distribution<int>(0, slot.choices - 2)(rng);
    *v = next >= *v ? next + 1 : next;
    return true;
  }
  // Move one prime factor from one level to another, drawn from all such
  // moves alike. A restricted innermost factor (a pack sketch's panel width)
  // must stay allowed, so the moves that would break it are left out.
  struct Move {
    int src, dst;
    int64_t prime;
  };
  std::vector<Move> moves;
  for (int src = 0; src < slot.size; ++src) {
    std::vector<int64_t> primes = prime_factors(v[src]);
    primes.erase(std::unique(primes.begin(), primes.end()), primes.end());
    for (int64_t p : primes)
      for (int dst = 0; dst < slot.size; ++dst) {
        if (dst == src) continue;
        int64_t last = v[slot.size - 1];
        if (src == slot.size - 1) last /= p;
        if (dst == slot.size - 1) last *= p;
        if (inner_ok(slot, last)) moves.push_back({src, dst, p});
      }
  }
  if (moves.empty()) return false;
  const Move& m = pick(moves, rng);
  v[m.src] = static_cast<int>(v[m.src] / m.prime);
  v[m.dst] = static_cast<int>(v[m.dst] * m.prime);
  return true;
}

void check_decisions(const Sketch& sketch, const std::vector<int>& decisions) {
  KILN_USER_CHECK(static_cast<int>(decisions.size()) == sketch.num_decisions)
      << "candidate has " << decisions.size() << " decisions but its sketch needs " << sketch.num_decisions << " (" << sketch.description << ")";
  for (const Slot& s : sketch.slots) {
    const int* v = decisions.data() + s.offset;
    if (s.kind == Slot::Kind::Choice) {
      KILN_USER_CHECK(v[0] >= 0 && v[0] < s.choices) << "candidate decision '" << s.label << "' is " << v[0] << "; it must be in [0, " << s.choices << ")";
      continue;
    }
    int64_t prod = 1;
    for (int l = 0; l < s.size; ++l) {
      KILN_USER_CHECK(v[l] >= 1) << "candidate tile '" << s.label << "' has factor " << v[l] << " at level " << l << "; factors must be positive";
      prod *= v[l];
    }
    KILN_USER_CHECK(prod == s.extent) << "candidate tile '" << s.label << "' has factors whose product is " << prod << ", not the extent " << s.extent;
    KILN_USER_CHECK(inner_ok(s, v[s.size - 1])) << "candidate tile '" << s.label << "' has innermost factor " << v[s.size - 1]
                                                << "; the sketch packs by it, so it must be one of " << join_ints(s.inner_allowed);
  }
}

}  // namespace detail

struct SearchSpace::Impl {
  Task task;  // a copy: the space must not depend on the caller's Task living on
  detail::DagInfo dag;
  std::vector<detail::Sketch> sketches;
  bool gpu = false;  // cuda: the GPU rules, and every candidate checked against the launch limits

  // A GPU candidate's threads per block and shared memory follow from bound
  // inference, so whether it fits the device is known only after lowering.
  bool fits(const te::Schedule& s, std::string* why = nullptr) const {
    if (!gpu) return true;
    try {
      pass::launch_config(lower_gpu(s, task.args, "fits"));
      return true;
    } catch (const Error& e) {
      if (why) *why = e.what();
      return false;
    }
  }

  // Sketch i with the pack rule applied wherever the copy pays
  // (detail::pack_pays), or i when no sketch is that. A sketch's structure
  // is its stages' kinds, consumers and packs.
  int packed_twin(int i) const {
    std::vector<detail::StagePlan> want = sketches[i].plans;
    bool changed = false;
    for (size_t k = 0; k < want.size(); ++k)
      if (want[k].pack < 0 && !want[k].spatial_tiles.empty() && detail::pack_pays(dag, dag.stages[k])) {
        want[k].pack = dag.stages[k].pack_operand;
        changed = true;
      }
    if (!changed) return i;
    for (size_t j = 0; j < sketches.size(); ++j) {
      const std::vector<detail::StagePlan>& p = sketches[j].plans;
      bool same = p.size() == want.size();
      for (size_t k = 0; same && k < p.size(); ++k)
        same = p[k].kind == want[k].kind && p[k].consumer == want[k].consumer && p[k].pack == want[k].pack;
      if (same) return static_cast<int>(j);
    }
    return i;
  }

  const detail::Sketch& sketch_of(const Candidate& c) const {
    KILN_USER_CHECK(c.sketch >= 0 && c.sketch < static_cast<int>(sketches.size()))
        << "candidate names sketch " << c.sketch << " but task '" << task.name << "' has " << sketches.size() << " sketches";
    return sketches[c.sketch];
  }
};

SearchSpace::SearchSpace(const Task& task) : impl_(std::make_unique<Impl>()) {
  KILN_USER_CHECK(!task.outputs.empty()) << "search space of task '" << task.name << "': it has no outputs (build it with make_task)";
  KILN_USER_CHECK(task.target.kind == Target::Kind::LLVM || task.target.kind == Target::Kind::CUDA)
      << "search space of task '" << task.name << "': there are sketch rules for llvm and cuda targets, not " << task.target.kind_name();
  impl_->task = task;
  impl_->gpu = task.target.kind == Target::Kind::CUDA;
  impl_->dag = detail::analyze_dag(task);
  for (const detail::StageInfo& st : impl_->dag.stages)
    KILN_USER_CHECK(!impl_->gpu || !st.any_var()) << "search space of task '" << task.name << "': stage '" << st.name
                                                  << "' has a symbolic extent; the GPU rules need constant shapes (compile a static shape for cuda)";
  impl_->sketches = impl_->gpu ? detail::generate_gpu_sketches(impl_->dag) : detail::generate_sketches(impl_->dag);
}

SearchSpace::~SearchSpace() = default;
SearchSpace::SearchSpace(SearchSpace&&) noexcept = default;

int SearchSpace::num_sketches() const { return static_cast<int>(impl_->sketches.size()); }

std::string SearchSpace::describe_sketch(int i) const {
  KILN_USER_CHECK(i >= 0 && i < num_sketches()) << "sketch " << i << " out of range; there are " << num_sketches();
  return impl_->sketches[i].description;
}

Candidate SearchSpace::sample_sketch(int sketch, std::mt19937_64& rng) const {
  KILN_USER_CHECK(sketch >= 0 && sketch < num_sketches()) << "sketch " << sketch << " out of range; there are " << num_sketches();
  const detail::Sketch& sk = impl_->sketches[sketch];
  Candidate c;
  c.sketch = sketch;
  c.decisions.assign(sk.num_decisions, 0);
  // A GPU draw that does not fit the device is drawn again; after a few
  // misses the sketch's default (which shrinks its tiles until it fits) stands in.
  for (int attempt = 0; attempt < (impl_->gpu ? kGpuDraws : 1); ++attempt) {
    for (const detail::Slot& s : sk.slots) detail::sample_slot(s, impl_->dag.lanes, rng, &c.decisions);
    if (!impl_->gpu) detail::fit_rows_to_registers(impl_->dag, sk, rng, &c.decisions);
    if (impl_->fits(materialize(&c))) return c;
  }
  c.decisions = gpu_default_for(sketch);
  materialize(&c);
  return c;
}

std::vector<int> SearchSpace::gpu_default_for(int sketch) const {
  const detail::Sketch& sk = impl_->sketches[sketch];
  std::vector<int> d = detail::gpu_default_decisions(impl_->dag, sk);
  // Too many threads or too much shared memory: halve the largest inner
  // reduce step, else the largest thread factor, until the kernel fits.
  std::string why;
  for (int attempt = 0; attempt < 64; ++attempt) {
    Candidate c{sketch, d, {}};
    if (impl_->fits(materialize(&c), &why)) return d;
    if (!detail::shrink_gpu_tiles(sk, &d)) break;
  }
  KILN_USER_CHECK(false) << "GPU schedule of task '" << impl_->task.name << "' (" << sk.description << "): no tiling fits the device: " << why;
  return d;
}

std::vector<Candidate> SearchSpace::seeds() const {
  std::vector<Candidate> out;
  if (impl_->gpu) {
    out.push_back(default_candidate());
    return out;
  }
  for (int i = 0; i < num_sketches(); ++i)
    for (std::vector<int>& d : detail::seed_decisions(impl_->dag, impl_->sketches[i])) {
      Candidate c;
      c.sketch = i;
      c.decisions = std::move(d);
      materialize(&c);
      out.push_back(std::move(c));
    }
  return out;
}

Candidate SearchSpace::default_candidate() const {
  Candidate c;
  c.sketch = 0;
  if (impl_->gpu) {
    // Sketch 0 is the structured one; the last (a thread per element) always fits.
    for (int i = 0; i < num_sketches(); ++i) {
      try {
        c.sketch = i;
        c.decisions = gpu_default_for(i);
        materialize(&c);
        return c;
      } catch (const Error&) {
        if (i + 1 == num_sketches()) throw;
      }
    }
  }
  // Padding read by a tiled reduction is stored once rather than inlined
  // (rule 1's exception): inlined, its bounds test runs at every load of the
  // register tile, and on the ResNet layers the stored form wins. Not where
  // its readers reduce over a window only (a depthwise conv): each input is
  // read for one channel, so the copy doubles the traffic of a kernel that is
  // all traffic (MobileNetV2's stride-2 depthwise layers: 0.30 to 0.46 ms
  // stored, 0.07 to 0.09 inlined, 1 thread).
  auto window_only = [&](const detail::StageInfo& pad) {
    for (int r : pad.pad_readers)
      if (impl_->dag.stages[r].reduce.size() > 2) return false;
    return !pad.pad_readers.empty();
  };
  // Nor where strided readers (a stride-2 conv) read a large padded input
  // (kInlinePadBytes): each input is read about twice, so the copy is a
  // large share of the traffic, and the copy and its source together
  // outgrow L2, so the conv reads the copy back from L3. Sapphire
  // Rapids-class Xeon (2 MiB L2), in the model, 1 thread unless said, min
  // of 12-40 runs on a loaded machine: ResNet-50's 128 -> 128 3 x 3
  // stride-2 conv at 56 x 56 (1.7 MiB padded) 1.10-1.21 ms against
  // 1.35-1.38 (2 threads: 0.66 against 0.81; AVX2 code 2.25 against 2.50);
  // ResNeXt-50's grouped stride-2 ones 0.65 against 1.18 (56 x 56 x 256)
  // and 0.42 against 0.62 (28 x 28 x 512). 256 -> 256 at 28 x 28 (0.9 MiB)
  // gained nothing, 512 -> 512 at 14 x 14 lost. Stride 1 keeps the copy:
  // ResNeXt-50's 56 x 56 x 128 grouped convs ran 1.13-1.32x slower inlined.
  // Strided: a reader indexes the padding's source at an image row or column
  // (dimensions 2 and 3 of NCHW and NCHWc) by an output axis times 2 or
  // more. Only those indices count: a blocked channel index (an output
  // channel block times the block width) is not a stride, and the
  // gradient of a stride-1 conv (dY read at oh + kh) must keep its copy
  // (ResNet-18's training step on AVX2 code took 494 ms against 292 when
  // any multiple in the body counted).
  auto strided = [&](const detail::StageInfo& pad) {
    std::vector<const Object*> sources{pad.tensor.get()};  // the padding itself, or (inlined) what it reads
    if (!pad.body.defined()) return false;
    post_order_visit(pad.body, [&](const Expr& e) {
      if (const TensorLoad* t = e.as<TensorLoad>()) sources.push_back(t->producer.get());
    });
    bool found = false;
    auto stride_of_output_axis = [&](const detail::StageInfo& rd, const Expr& index) {
      post_order_visit(index, [&](const Expr& e) {
        const Mul* m = e.as<Mul>();
        if (!m) return;
        for (auto [c, v] : {std::pair{m->a, m->b}, std::pair{m->b, m->a}}) {
          const int64_t* k = as_const_int(c);
          const Variable* var = v.as<Variable>();
          if (!k || *k < 2 || !var) continue;
          for (const auto& ax : rd.op->axis) found = found || ax->var.get() == var;
        }
      });
    };
    for (int r : pad.pad_readers) {
      const detail::StageInfo& rd = impl_->dag.stages[r];
      if (!rd.op || !rd.body.defined()) continue;
      post_order_visit(rd.body, [&](const Expr& e) {
        const TensorLoad* t = e.as<TensorLoad>();
        if (!t || t->indices.size() < 4 || std::find(sources.begin(), sources.end(), t->producer.get()) == sources.end()) return;
        for (size_t d = 2; d < 4; ++d) stride_of_output_axis(rd, t->indices[d]);
      });
    }
    return found;
  };
  auto large = [&](const detail::StageInfo& pad) {
    if (!strided(pad)) return false;
    int64_t bytes = pad.tensor.dtype().bytes();
    for (const Expr& d : pad.tensor.shape()) {
      const int64_t* e = as_const_int(d);
      if (!e) return false;
      bytes *= *e;
    }
    return bytes > detail::kInlinePadBytes;
  };
  // Row reductions (softmax's, a layer norm's mean) run row-wise where rule 7
  // gives them that sketch: vectorized along the row, at the row loop of
  // their output. The simple sketch runs them one element at a time, across
  // the rows: a layer norm's mean over BERT's 128 x 768 took 59 us on one
  // Zen 5 core that way, 9.5 us row-wise.
  std::vector<int> row_stages;  // the stages rule 7 could run row-wise (a fact of the DAG, not of a sketch)
  for (size_t k = 0; k < impl_->dag.stages.size(); ++k)
    if (detail::rowwise_target(impl_->dag, static_cast<int>(k)) >= 0) row_stages.push_back(static_cast<int>(k));
  auto row_wise = [&](const detail::Sketch& sk) {
    for (int k : row_stages)
      if (sk.plans[k].kind != detail::PlanKind::RowReduce) return false;
    return true;
  };
  // The paddings the default stores (a fact of the DAG: decided once, not per sketch; `strided` walks the readers' bodies).
  std::vector<bool> store_pad(impl_->dag.stages.size());
  for (size_t k = 0; k < store_pad.size(); ++k) {
    const detail::StageInfo& st = impl_->dag.stages[k];
    store_pad[k] = st.may_materialize && !window_only(st) && !large(st);
  }
  int first_stored = -1, first_row_wise = -1;
  for (int i = 0; i < num_sketches() && first_row_wise < 0; ++i) {
    const detail::Sketch& sk = impl_->sketches[i];
    bool stored = true;
    for (size_t k = 0; k < sk.plans.size(); ++k)
      if (store_pad[k] && sk.plans[k].kind != detail::PlanKind::Simple) stored = false;
    if (!stored) continue;
    if (first_stored < 0) first_stored = i;
    if (row_wise(sk)) first_row_wise = i;
  }
  c.sketch = first_row_wise >= 0 ? first_row_wise : std::max(first_stored, 0);
  c.sketch = impl_->packed_twin(c.sketch);
  c.decisions = detail::default_decisions(impl_->dag, impl_->sketches[c.sketch]);
  materialize(&c);
  return c;
}

Candidate SearchSpace::sample(std::mt19937_64& rng) const {
  return sample_sketch(std::uniform_int_distribution<int>(0, num_sketches() - 1)(rng), rng);
}

Candidate SearchSpace::mutate(const Candidate& c, std::mt19937_64& rng) const {
  const detail::Sketch& sk = impl_->sketch_of(c);
  detail::check_decisions(sk, c.decisions);
  Candidate out = c;
  // Try slots in random order until one can change (a tile of extent 1 cannot).
  std::vector<size_t> order(sk.slots.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), rng);
  for (int attempt = 0; attempt < (impl_->gpu ? kGpuDraws : 1); ++attempt) {
    out.decisions = c.decisions;
    if (attempt > 0) std::shuffle(order.begin(), order.end(), rng);
    for (size_t i : order)
      if (detail::mutate_slot(sk.slots[i], rng, &out.decisions)) break;
    if (impl_->fits(materialize(&out))) return out;
  }
  out.decisions = c.decisions;
  materialize(&out);
  return out;
}

Candidate SearchSpace::crossover(const Candidate& a, const Candidate& b, std::mt19937_64& rng) const {
  const detail::Sketch& sk = impl_->sketch_of(a);
  detail::check_decisions(sk, a.decisions);
  Candidate out = a;
  if (a.sketch == b.sketch && b.decisions.size() == a.decisions.size()) {
    detail::check_decisions(sk, b.decisions);
    // Each slot (one axis's tile, one annotation) whole from one parent.
    std::bernoulli_distribution from_b(0.5);
    for (const detail::Slot& s : sk.slots)
      if (from_b(rng)) std::copy_n(b.decisions.begin() + s.offset, s.size, out.decisions.begin() + s.offset);
  }
  if (!impl_->fits(materialize(&out))) {  // a GPU child over the device's limits
    out.decisions = a.decisions;
    materialize(&out);
  }
  return out;
}

te::Schedule SearchSpace::materialize(Candidate* c) const {
  KILN_USER_CHECK(c) << "materialize of a null candidate";
  const detail::Sketch& sk = impl_->sketch_of(*c);
  te::Schedule s = impl_->task.fresh_schedule();
  if (impl_->gpu) detail::apply_gpu_sketch(impl_->dag, sk, c->decisions, s);
  else detail::apply_sketch(impl_->dag, sk, c->decisions, s);
  c->trace = s.trace();
  return s;
}

std::string SearchSpace::describe_candidate(const Candidate& c) const {
  const detail::Sketch& sk = impl_->sketch_of(c);
  detail::check_decisions(sk, c.decisions);
  std::ostringstream os;
  os << "sketch " << c.sketch << ":";
  for (const detail::Slot& s : sk.slots) {
    os << " " << s.label << "=";
    for (int l = 0; l < s.size; ++l) os << (l ? "x" : "") << c.decisions[s.offset + l];
  }
  return os.str();
}

Candidate SearchSpace::parse_candidate(const std::string& description) const {
  std::istringstream in(description);
  std::string word;
  int sketch = -1;
  KILN_USER_CHECK((in >> word) && word == "sketch" && (in >> sketch))
      << "parse_candidate: '" << description << "' does not start with 'sketch N:' (describe_candidate's form)";
  KILN_USER_CHECK(sketch >= 0 && sketch < num_sketches())
      << "parse_candidate: sketch " << sketch << " does not exist; this task has " << num_sketches() << " (0.." << num_sketches() - 1 << ")";
  if (in.peek() == ':') in.get();
  Candidate c = default_candidate();
  if (c.sketch != sketch) {
    std::mt19937_64 rng(0);  // a valid start for the slots the text leaves out
    c = sample_sketch(sketch, rng);
  }
  const detail::Sketch& sk = impl_->sketch_of(c);
  while (in >> word) {
    size_t eq = word.find('=');
    KILN_USER_CHECK(eq != std::string::npos && eq > 0) << "parse_candidate: '" << word << "' is not LABEL=VALUE";
    std::string label = word.substr(0, eq);
    auto slot = std::find_if(sk.slots.begin(), sk.slots.end(), [&](const detail::Slot& s) { return s.label == label; });
    KILN_USER_CHECK(slot != sk.slots.end()) << "parse_candidate: sketch " << sketch << " has no decision '" << label << "' ("
                                            << describe_sketch(sketch) << ")";
    std::vector<int> values;
    std::istringstream vs(word.substr(eq + 1));
    for (std::string part; std::getline(vs, part, 'x');) {
      int v = 0;
      auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), v);
      KILN_USER_CHECK(!part.empty() && ec == std::errc() && end == part.data() + part.size())
          << "parse_candidate: '" << word << "': '" << part << "' is not an integer";
      values.push_back(v);
    }
    KILN_USER_CHECK(static_cast<int>(values.size()) == slot->size)
        << "parse_candidate: '" << label << "' takes " << slot->size << " value(s) joined by 'x', not " << values.size();
    std::copy(values.begin(), values.end(), c.decisions.begin() + slot->offset);
  }
  detail::check_decisions(sk, c.decisions);
  materialize(&c);
  return c;
}

}  // namespace kiln::ops
