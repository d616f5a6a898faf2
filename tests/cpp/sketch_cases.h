// Cases and checks shared by the search-space tests (tuner_search_space_test.cpp,
// tuner_default_seeds_test.cpp): the rules' target fixture, small DAGs with
// their references, and the check that a candidate computes the right result.
#ifndef KILN_TESTS_SKETCH_CASES_H
#define KILN_TESTS_SKETCH_CASES_H

#include <gtest/gtest.h>
#include <cmath>
#include <functional>
#include <iostream>
#include <regex>
#include <set>
#include <sstream>
#include <thread>
#include "kiln/codegen/llvm.h"
#include "kiln/ir/op.h"
#include "kiln/ir/printer.h"
#include "kiln/ir/structural.h"
#include "kiln/ops/cpu_gemm.h"
#include "kiln/ops/layout.h"
#include "kiln/ops/nn.h"
#include "kiln/ops/winograd.h"
#include "kiln/te/lower.h"
#include "kiln/te/workload_key.h"
#include "kiln/tuner/schedule_rules.h"
#include "reference_ops.h"
#include "target_params.h"
#include "test_util.h"

namespace kiln::tuner {
namespace {

using testing::ref::Vec;

// The target of the rules (cores, vector lanes, registers), fixed so that
// they do not depend on the host: AVX-512 for the plain tests, each of
// rule_targets() for the parameterised ones (set by the fixture).
inline Target& current_rules_target() {
  static Target t = Target::parse("llvm -mcpu=skylake-avx512 -num-cores=2");
  return t;
}
inline const Target& rules_target() { return current_rules_target(); }
inline int rules_lanes() { return rules_target().natural_lanes(DataType::Float(32)); }

inline std::vector<std::string> rule_targets() { return {"llvm -mcpu=haswell -num-cores=2", "llvm -mcpu=skylake-avx512 -num-cores=2"}; }

class RulesTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { current_rules_target() = Target::parse(GetParam()); }
  void TearDown() override { current_rules_target() = Target::parse(rule_targets().back()); }
};
class TunerSketch : public RulesTest {};
class TunerSearchSpace : public RulesTest {};

/** A DAG with its reference: ref maps the inputs' data to the outputs' data (args order). */
struct Case {
  std::string name;
  std::vector<te::Tensor> args;
  std::function<std::vector<Vec>(const std::vector<Vec>&)> ref;
};

inline size_t numel(const te::Tensor& t) {
  size_t n = 1;
  for (const Expr& e : t.shape()) n *= static_cast<size_t>(*as_const_int(e));
  return n;
}

inline Case matmul_case(int M, int N, int K) {
  te::Tensor A = te::placeholder({M, K}, DataType::Float(32), "A"), B = te::placeholder({K, N}, DataType::Float(32), "B");
  return {"matmul", {A, B, ops::matmul(A, B)}, [=](const std::vector<Vec>& in) { return std::vector<Vec>{testing::ref::matmul(in[0], in[1], M, N, K)}; }};
}

inline Case dense_bias_relu_case(int M, int N, int K) {
  te::Tensor A = te::placeholder({M, K}, DataType::Float(32), "A"), B = te::placeholder({K, N}, DataType::Float(32), "B");
  te::Tensor bias = te::placeholder({N}, DataType::Float(32), "bias");
  te::Tensor out = ops::relu(ops::bias_add(ops::matmul(A, B), bias));
  return {"dense_bias_relu", {A, B, bias, out}, [=](const std::vector<Vec>& in) {
            Vec c = testing::ref::matmul(in[0], in[1], M, N, K);
            for (int i = 0; i < M; ++i)
              for (int j = 0; j < N; ++j) c[i * N + j] = std::max(0.f, c[i * N + j] + in[2][j]);
            return std::vector<Vec>{c};
          }};
}

inline Case conv_case() {
  testing::ref::ConvShape cs{1, 4, 8, 8, 8, 3, 3, 1, 1, 1};
  te::Tensor X = te::placeholder({cs.N, cs.C, cs.H, cs.W}, DataType::Float(32), "X");
  te::Tensor W = te::placeholder({cs.K, cs.C, cs.KH, cs.KW}, DataType::Float(32), "W");
  te::Tensor O = ops::conv2d_nchw(X, W, cs.stride, cs.pad, cs.dilation);
  return {"conv2d_pad", {X, W, O}, [=](const std::vector<Vec>& in) { return std::vector<Vec>{testing::ref::conv2d(in[0], in[1], cs)}; }};
}

// conv2d_nchwc against the NCHW reference: the blocked layouts are unpacked
// to NCHW / OIHW here, and the reference's output packed back.
// A blocked conv: cb input channels and kb output channels a block.
inline Case conv_nchwc_case(const testing::ref::ConvShape& cs, int cb, int kb) {
  te::Tensor X = te::placeholder({cs.N, cs.C / cb, cs.H, cs.W, cb}, DataType::Float(32), "X");
  te::Tensor W = te::placeholder({cs.K / kb, cs.C / cb, cs.KH, cs.KW, cb, kb}, DataType::Float(32), "W");
  te::Tensor O = ops::conv2d_nchwc(X, W, cs.stride, cs.pad);
  return {"conv2d_nchwc", {X, W, O}, [=](const std::vector<Vec>& in) {
            Vec x(in[0].size()), w(in[1].size());
            for (int c = 0; c < cs.C; ++c)
              for (int hw = 0; hw < cs.H * cs.W; ++hw) x[c * cs.H * cs.W + hw] = in[0][((c / cb) * cs.H * cs.W + hw) * cb + c % cb];
            const int taps = cs.KH * cs.KW;
            for (int k = 0; k < cs.K; ++k)
              for (int c = 0; c < cs.C; ++c)
                for (int t = 0; t < taps; ++t) w[(k * cs.C + c) * taps + t] = in[1][((((k / kb) * (cs.C / cb) + c / cb) * taps + t) * cb + c % cb) * kb + k % kb];
            Vec o = testing::ref::conv2d(x, w, cs), blocked(o.size());
            const int pixels = cs.OH() * cs.OW();
            for (int k = 0; k < cs.K; ++k)
              for (int p = 0; p < pixels; ++p) blocked[((k / kb) * pixels + p) * kb + k % kb] = o[k * pixels + p];
            return std::vector<Vec>{blocked};
          }};
}

inline Case conv_nchwc_case(int stride, int kb = 8) { return conv_nchwc_case({1, 8, 7, 7, 2 * kb, 3, 3, stride, 1, 1}, 4, kb); }

inline Case softmax_case(int M, int N) {
  te::Tensor X = te::placeholder({M, N}, DataType::Float(32), "X");
  return {"softmax", {X, ops::softmax(X)}, [=](const std::vector<Vec>& in) { return std::vector<Vec>{testing::ref::softmax(in[0], M, N)}; }};
}

// add -> relu -> gelu: two inlined stages and an elementwise output.
inline Case chain_case(int M, int N) {
  te::Tensor X = te::placeholder({M, N}, DataType::Float(32), "X"), Y = te::placeholder({M, N}, DataType::Float(32), "Y");
  te::Tensor out = ops::gelu(ops::relu(ops::add(X, Y)));
  return {"elementwise_chain", {X, Y, out}, [=](const std::vector<Vec>& in) {
            Vec o(M * N);
            for (int i = 0; i < M * N; ++i) {
              double x = std::max(0.f, in[0][i] + in[1][i]);
              o[i] = float(x * 0.5 * (1.0 + std::erf(x * 0.70710678)));
            }
            return std::vector<Vec>{o};
          }};
}

// A transpose: its vectors gather across the input's rows.
inline Case transpose_case(int M, int N) {
  te::Tensor X = te::placeholder({M, N}, DataType::Float(32), "X");
  return {"transpose", {X, ops::transpose(X)}, [=](const std::vector<Vec>& in) {
            Vec o(size_t(M) * N);
            for (int i = 0; i < M; ++i)
              for (int j = 0; j < N; ++j) o[size_t(j) * M + i] = in[0][size_t(i) * N + j];
            return std::vector<Vec>{o};
          }};
}

// Row sums of a wide matrix: few outputs, a long reduction (the rfactor rule).
inline Case row_sum_case(int M, int N) {
  te::Tensor X = te::placeholder({M, N}, DataType::Float(32), "X");
  IterVar k = te::reduce_axis(Range(0, N), "k");
  te::Tensor S = te::compute({M}, [&](const std::vector<Var>& i) { return te::sum(X(i[0], k.var()), {k}); }, "rowsum");
  return {"row_sum", {X, S}, [=](const std::vector<Vec>& in) {
            Vec o(M);
            for (int i = 0; i < M; ++i) {
              double s = 0;
              for (int j = 0; j < N; ++j) s += in[0][i * N + j];
              o[i] = float(s);
            }
            return std::vector<Vec>{o};
          }};
}

inline Case layer_norm_case(int M, int N) {
  te::Tensor X = te::placeholder({M, N}, DataType::Float(32), "X");
  te::Tensor G = te::placeholder({N}, DataType::Float(32), "gamma"), Bt = te::placeholder({N}, DataType::Float(32), "beta");
  return {"layer_norm", {X, G, Bt, ops::layer_norm(X, G, Bt)}, [=](const std::vector<Vec>& in) { return std::vector<Vec>{testing::ref::layer_norm(in[0], in[1], in[2], M, N, 1e-5f)}; }};
}

inline Case batch_matmul_case(int Bn, int M, int N, int K) {
  te::Tensor A = te::placeholder({Bn, M, K}, DataType::Float(32), "A"), B = te::placeholder({Bn, K, N}, DataType::Float(32), "B");
  return {"batch_matmul", {A, B, ops::batch_matmul(A, B)}, [=](const std::vector<Vec>& in) { return std::vector<Vec>{testing::ref::batch_matmul(in[0], in[1], Bn, M, N, K)}; }};
}

inline Case max_pool_case() {
  te::Tensor X = te::placeholder({1, 3, 9, 9}, DataType::Float(32), "X");
  return {"max_pool", {X, ops::max_pool2d(X, 3, 2, 1)}, [=](const std::vector<Vec>& in) { return std::vector<Vec>{testing::ref::max_pool2d(in[0], 1, 3, 9, 9, 3, 2, 1)}; }};
}

// Two outputs, one reading the other: the matmul cannot be fused (it is stored).
inline Case two_outputs_case(int M, int N, int K) {
  te::Tensor A = te::placeholder({M, K}, DataType::Float(32), "A"), B = te::placeholder({K, N}, DataType::Float(32), "B");
  te::Tensor C = ops::matmul(A, B), R = ops::relu(C);
  return {"two_outputs", {A, B, C, R}, [=](const std::vector<Vec>& in) {
            Vec c = testing::ref::matmul(in[0], in[1], M, N, K), r = c;
            for (float& x : r) x = std::max(0.f, x);
            return std::vector<Vec>{c, r};
          }};
}

inline Task task_of(const Case& c) { return make_task(c.args, rules_target(), c.name); }

// Lowers the candidate, runs it (interpreter and LLVM) and compares with the reference.
inline void check_computes(const Case& c, const SearchSpace& space, Candidate cand, uint32_t seed) {
  te::Schedule s = space.materialize(&cand);
  SCOPED_TRACE(space.describe_candidate(cand));
  PrimFunc f = te::lower(s, c.args, c.name);
  std::vector<Vec> bufs;
  std::vector<Vec> inputs;
  for (size_t i = 0; i < c.args.size(); ++i) {
    bool input = c.args[i].op()->kind == te::OpKind::Placeholder;
    bufs.push_back(input ? testing::random_vector(numel(c.args[i]), seed + static_cast<uint32_t>(i)) : Vec(numel(c.args[i]), 0.f));
    if (input) inputs.push_back(bufs.back());
  }
  std::vector<std::vector<float>*> ptrs;
  for (Vec& b : bufs) ptrs.push_back(&b);
  testing::run_backends(f, ptrs);
  std::vector<Vec> want = c.ref(inputs);
  size_t o = 0;
  for (size_t i = 0; i < c.args.size(); ++i)
    if (c.args[i].op()->kind != te::OpKind::Placeholder) {
      EXPECT_TRUE(testing::all_close(bufs[i], want[o++], 2e-4f)) << c.name << " output " << c.args[i].name();
    }
}

// Every sketch of the case: a few samples each compute the right result.
inline void check_all_sketches(const Case& c, int samples) {
  Task task = task_of(c);
  SearchSpace space(task);
  std::cout << "[ sketches ] " << c.name << ": " << space.num_sketches() << " sketch(es)\n";
  for (int i = 0; i < space.num_sketches(); ++i) std::cout << "             " << i << ": " << space.describe_sketch(i) << "\n";
  std::mt19937_64 rng(7);
  for (int i = 0; i < space.num_sketches(); ++i)
    for (int k = 0; k < samples; ++k) {
      SCOPED_TRACE(c.name + " sketch " + std::to_string(i) + ": " + space.describe_sketch(i));
      check_computes(c, space, space.sample_sketch(i, rng), 100 + k);
      if (::testing::Test::HasFailure()) return;
    }
}

inline bool describes(const SearchSpace& space, const std::string& needle) {
  for (int i = 0; i < space.num_sketches(); ++i)
    if (space.describe_sketch(i).find(needle) != std::string::npos) return true;
  return false;
}

inline int sketch_index(const SearchSpace& space, const std::string& needle) {
  for (int i = 0; i < space.num_sketches(); ++i)
    if (space.describe_sketch(i).find(needle) != std::string::npos) return i;
  return -1;
}

// The factors of a tile as describe_candidate prints them ("C.j=2x1x1x32").
inline std::vector<int> tile_of(const SearchSpace& space, const Candidate& c, const std::string& label) {
  std::string d = space.describe_candidate(c) + " ";
  size_t at = d.find(" " + label + "=");
  if (at == std::string::npos) return {};
  std::vector<int> out;
  std::istringstream is(d.substr(at + label.size() + 2, d.find(' ', at + 1) - at - label.size() - 2));
  for (std::string f; std::getline(is, f, 'x');) out.push_back(std::stoi(f));
  return out;
}

}  // namespace
}  // namespace kiln::tuner

#endif  // KILN_TESTS_SKETCH_CASES_H
