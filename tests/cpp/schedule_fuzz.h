// The schedule fuzzer: random sequences of schedule primitives on small
// DAGs, valid or not, each built and run and checked against a naive
// reference. A user error (kiln::Error) from a primitive, from lowering or
// from compiling is a refused schedule and fine; an InternalError anywhere,
// any error while running what was built, or a wrong result is a kiln bug.
#ifndef KILN_TESTS_SCHEDULE_FUZZ_H
#define KILN_TESTS_SCHEDULE_FUZZ_H

#include <algorithm>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kiln/interp/interpreter.h"
#include "kiln/ir/op.h"
#include "kiln/ops/nn.h"
#include "kiln/support/error.h"
#include "kiln/te/lower.h"
#include "kiln/te/schedule.h"
#include "reference_ops.h"
#include "test_util.h"
#ifdef KILN_WITH_LLVM
#include "kiln/codegen/llvm.h"
#endif

namespace kiln::testing::fuzz {

/** One DAG to schedule: its arguments (inputs, then the output), their data and the output's naive reference. */
struct FuzzCase {
  std::string name;
  std::vector<te::Tensor> args;
  std::vector<std::vector<float>> inputs;
  std::vector<float> want;
  const te::Tensor& output() const { return args.back(); }
};

inline Expr f32(double v) { return FloatImm::make(DataType::Float(32), v); }

/** The DAGs the fuzzer schedules: small, odd sizes so that splits leave tails. */
inline std::vector<FuzzCase> fuzz_cases() {
  using te::Tensor;
  using V = std::vector<Var>;
  std::vector<FuzzCase> cases;
  {  // Two elementwise stages (issue 47's shape, smaller).
    const int h = 12, w = 20;
    Tensor A = te::placeholder({h, w}, DataType::Float(32), "A");
    Tensor B = te::compute({h, w}, [&](const V& i) { return A(i[0], i[1]) + f32(1); }, "B");
    Tensor C = te::compute({h, w}, [&](const V& i) { return B(i[0], i[1]) * f32(2); }, "C");
    auto a = random_vector(h * w, 11);
    std::vector<float> c(a.size());
    for (size_t i = 0; i < a.size(); ++i) c[i] = (a[i] + 1.f) * 2.f;
    cases.push_back({"chain", {A, C}, {a}, c});
  }
  {  // A separable blur: producers read by their consumers with overlap.
    const int h = 10, w = 14;
    Tensor A = te::placeholder({h + 2, w + 2}, DataType::Float(32), "A");
    Tensor B = te::compute({h + 2, w}, [&](const V& i) { return A(i[0], i[1]) + A(i[0], i[1] + 1) + A(i[0], i[1] + 2); }, "B");
    Tensor C = te::compute({h, w}, [&](const V& i) { return B(i[0], i[1]) + B(i[0] + 1, i[1]) + B(i[0] + 2, i[1]); }, "C");
    auto a = random_vector((h + 2) * (w + 2), 12);
    std::vector<float> c(h * w);
    auto at = [&](int y, int x) { return a[y * (w + 2) + x]; };
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) {
        float sum = 0;
        for (int dy = 0; dy < 3; ++dy) sum += at(y + dy, x) + at(y + dy, x + 1) + at(y + dy, x + 2);
        c[y * w + x] = sum;
      }
    cases.push_back({"blur", {A, C}, {a}, c});
  }
  {  // Matmul between an elementwise producer and an epilogue.
    const int m = 11, n = 13, k = 7;
    Tensor A = te::placeholder({m, k}, DataType::Float(32), "A"), B = te::placeholder({k, n}, DataType::Float(32), "B");
    Tensor P = te::compute({m, k}, [&](const V& i) { return A(i[0], i[1]) * f32(2) + f32(1); }, "P");
    Tensor M = ops::matmul(P, B, "M");
    Tensor C = te::compute({m, n}, [&](const V& i) { return M(i[0], i[1]) * f32(0.5) + f32(1); }, "C");
    auto a = random_vector(m * k, 13), b = random_vector(k * n, 14);
    std::vector<float> p(a.size());
    for (size_t i = 0; i < a.size(); ++i) p[i] = a[i] * 2.f + 1.f;
    auto c = ref::matmul(p, b, m, n, k);
    for (float& x : c) x = x * 0.5f + 1.f;
    cases.push_back({"matmul", {A, B, C}, {a, b}, c});
  }
  {  // A padded conv2d.
    ref::ConvShape cs{1, 2, 7, 6, 3, 3, 3, 1, 1, 1};
    Tensor X = te::placeholder({cs.N, cs.C, cs.H, cs.W}, DataType::Float(32), "X");
    Tensor W = te::placeholder({cs.K, cs.C, cs.KH, cs.KW}, DataType::Float(32), "W");
    Tensor O = ops::conv2d_nchw(X, W, 1, 1, 1, "conv");
    auto x = random_vector(cs.N * cs.C * cs.H * cs.W, 15), w = random_vector(cs.K * cs.C * 9, 16);
    cases.push_back({"conv2d", {X, W, O}, {x, w}, ref::conv2d(x, w, cs)});
  }
  return cases;
}

/**
 * Applies up to 12 random primitives to random stages of `s`, with random
 * (possibly invalid) arguments. A primitive that refuses its arguments
 * leaves the trace as it was; the schedule is then rebuilt from the trace so
 * that a half-applied primitive cannot leave a state no user could reach.
 * Returns the number of refused steps.
 */
inline int random_primitives(te::Schedule& s, uint32_t seed) {
  std::mt19937 rng(seed);
  auto pick = [&](size_t n) { return n == 0 ? 0 : static_cast<int>(rng() % n); };
  int refused = 0, steps = 1 + pick(12);
  for (int step = 0; step < steps; ++step) {
    std::vector<te::Stage*> computes;
    for (const auto& st : s.stages())
      if (!st->is_placeholder()) computes.push_back(st.get());
    te::Stage& st = *computes[pick(computes.size())];
    std::vector<IterVar> leaves = st.leaf_iter_vars();
    if (leaves.empty()) continue;
    IterVar leaf = leaves[pick(leaves.size())];
    te::Tensor t = st.op().output();
    try {
      switch (pick(18)) {
        case 0: case 1: case 2: st.split(leaf, 1 + pick(9)); break;
        case 3: st.split_nparts(leaf, 1 + pick(5)); break;
        case 4: {
          size_t p = pick(leaves.size());
          st.fuse(leaves[p], leaves[std::min(p + 1, leaves.size() - 1)]);
          break;
        }
        case 5: std::shuffle(leaves.begin(), leaves.end(), rng), st.reorder(leaves); break;
        case 6: st.tile(leaf, leaves[pick(leaves.size())], 1 + pick(8), 1 + pick(8)); break;
        case 7: case 8: case 9: {
          te::Stage& parent = *computes[pick(computes.size())];
          const auto& pl = parent.leaf_iter_vars();
          if (!pl.empty()) st.compute_at(parent, pl[pick(pl.size())]);
          break;
        }
        case 10: st.compute_inline(); break;
        case 11: st.compute_root(); break;
        case 12: st.unroll(leaf); break;
        case 13: st.vectorize(leaf); break;
        case 14: st.parallel(leaf); break;
        case 15: st.pragma(leaf, "auto_unroll_max_step", 1 << pick(8)); break;
        case 16: {
          auto inputs = st.op()->input_tensors();
          if (!inputs.empty()) s.cache_read(inputs[pick(inputs.size())], "global", {t});
          break;
        }
        case 17:
          if (pick(2)) s.cache_write(t, "global");
          else s.rfactor(t, leaf);
          break;
      }
    } catch (const Error&) {  // a user error only: a kiln bug (InternalError) goes through
      ++refused;
      s = te::Schedule::from_trace(s.outputs(), s.trace());
    }
  }
  return refused;
}

enum class Outcome { Ok, Refused, Internal, RunFailed, Wrong };

struct FuzzResult {
  Outcome outcome = Outcome::Ok;
  std::string message;
  /** Primitives the schedule refused while it was made (they left no step). */
  int refused_steps = 0;
};

/**
 * Replays `trace` on case `c` (through its JSON, so the trace's round trip
 * is checked too), lowers, runs the interpreter and (with LLVM) the
 * compiled function, and compares both with the reference.
 */
inline FuzzResult check_trace(const FuzzCase& c, const te::Trace& trace) {
  PrimFunc f;
  try {
    te::Schedule r = te::Schedule::from_trace({c.output()}, te::Trace::from_json(trace.to_json()));
    f = te::lower(r, c.args, "fuzz");
  } catch (const std::exception& e) {
    if (!dynamic_cast<const Error*>(&e)) return {Outcome::Internal, e.what()};  // InternalError or anything else
    return {Outcome::Refused, e.what()};
  }
  auto fresh_args = [&](std::vector<std::vector<float>>* bufs) {
    *bufs = c.inputs;
    bufs->emplace_back(c.want.size(), 99.f);
    std::vector<void*> args;
    for (auto& b : *bufs) args.push_back(b.data());
    return args;
  };
  std::vector<std::vector<float>> bufs;
  try {
    interpret(f, fresh_args(&bufs));
  } catch (const std::exception& e) {
    bool bug = dynamic_cast<const InternalError*>(&e) != nullptr;
    return {bug ? Outcome::Internal : Outcome::RunFailed, std::string("interpreter: ") + e.what()};
  }
  if (auto ok = all_close(bufs.back(), c.want); !ok) return {Outcome::Wrong, std::string("interpreter: ") + ok.message()};
#ifdef KILN_WITH_LLVM
  static const Target host = Target::host();
  codegen::JitModule jit;
  try {
    jit = codegen::jit_compile({f}, host);
  } catch (const std::exception& e) {
    if (!dynamic_cast<const Error*>(&e)) return {Outcome::Internal, std::string("llvm: ") + e.what()};
    return {Outcome::Refused, std::string("llvm: ") + e.what()};
  }
  std::vector<void*> args = fresh_args(&bufs);
  if (int rc = jit.get_function(f.name())(args.data()); rc != 0) return {Outcome::RunFailed, "llvm: the compiled function returned " + std::to_string(rc)};
  if (auto ok = all_close(bufs.back(), c.want); !ok) return {Outcome::Wrong, std::string("llvm: ") + ok.message()};
#endif
  return {};
}

/** The schedule of `seed` on case `c`, checked; `trace` gets its trace. */
inline FuzzResult fuzz_one(const FuzzCase& c, uint32_t seed, te::Trace* trace) {
  int refused = 0;
  try {
    te::Schedule s = te::create_schedule({c.output()});
    refused = random_primitives(s, seed);
    *trace = s.trace();
  } catch (const std::exception& e) {
    return {Outcome::Internal, e.what()};  // random_primitives lets only internal errors through
  }
  FuzzResult r = check_trace(c, *trace);
  r.refused_steps = refused;
  return r;
}

/**
 * A shorter trace that fails the same way (same outcome, same first line):
 * steps are dropped one at a time while the failure stays. For reports and
 * regression tests.
 */
inline te::Trace minimize(const FuzzCase& c, te::Trace trace, const FuzzResult& failure) {
  auto first_line = [](const std::string& m) { return m.substr(0, m.find('\n')); };
  for (size_t i = trace.steps.size(); i-- > 0;) {
    te::Trace shorter = trace;
    shorter.steps.erase(shorter.steps.begin() + static_cast<std::ptrdiff_t>(i));
    FuzzResult r = check_trace(c, shorter);
    if (r.outcome == failure.outcome && first_line(r.message) == first_line(failure.message)) trace = std::move(shorter);
  }
  return trace;
}

}  // namespace kiln::testing::fuzz

#endif  // KILN_TESTS_SCHEDULE_FUZZ_H
