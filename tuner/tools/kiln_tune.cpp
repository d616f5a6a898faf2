// kiln-tune: tunes one workload of the operator library on this machine,
// stores every measurement in the tuning database, and compares the best
// schedule with the peer libraries (OpenBLAS through numpy, PyTorch) in the
// same run, interleaved, through bench/peers/launcher.py (a clean
// environment: the passive OpenMP policy set here for XGBoost never reaches
// the peer).
//
//   kiln-tune matmul M N K                        [options]
//   kiln-tune conv2d N C H W K KH KW stride pad   [options]
//   kiln-tune dense_bias_gelu M N K               [options]
//   kiln-tune MODEL.onnx                          [options]   (kiln_tune_model.cpp)
//
// Exit status: 0 success, 1 error, 2 bad usage.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "kiln/driver/build.h"
#include "kiln/ops/nn.h"
#include "kiln/support/error.h"
#include "kiln/tuner/openmp_policy.h"
#include "kiln/tuner/peer.h"
#include "kiln/tuner/tune.h"

using namespace kiln;

// The model mode (kiln_tune_model.cpp).
namespace kiln::tools {
int run_model(int argc, char** argv);
}

namespace {

const char* kUsage = R"(usage: kiln-tune WORKLOAD SIZES... [options]

workloads (fp32, from the operator library):
  matmul M N K                         C[M,N] = A[M,K] B[K,N]
  conv2d N C H W K KH KW stride pad    conv2d; the layout is --layout's
  dense_bias_gelu M N K                gelu(A[M,K] B[K,N] + bias[N])
  MODEL.onnx                           a whole model (kiln-tune MODEL.onnx --help)

options:
  --trials N         candidates to measure (default 200)
  --layout L         conv2d: nchwc (default on the CPU; input [N,C/16,H,W,16], weights
                     [K/32,C/16,KH,KW,16,32], output [N,K/32,OH,OW,32]; smaller
                     blocks when 16/32 do not divide C/K) or nchw (OIHW weights;
                     the default for cuda targets)
  --db PATH          tuning database (default kiln_tuning.db)
  --threads N        threads of the kernels and the peers (default: all cores)
  --curve PNG        plot every trial, the best so far and the best peer
  --seed S           random seed of the search (default 0)
  --batch N          candidates measured per round (default 32)
  --early-stop R     stop after R rounds without improvement (default 8)
  --timeout S        time limit of one candidate run, seconds (default 10)
  --repeat R         timing repeats per candidate; rounds of the comparison (at least 5)
  --target T         target string (default "llvm" with -num-cores=THREADS)
  --model PATH       load/save the cost model here
  --no-peer          skip the comparison with the peer libraries
  --cold-inputs      evict every input but the first from the caches before each
                     timed call (records kept apart from warm ones)
  --gpu-simulate     cuda targets: run the candidates in the GPU simulator, not on a
                     GPU (checks a session anywhere; records kept apart, never used)
  --quiet            no progress line
  --inject-faults S  test hook: e.g. crash@3,hang@5 (see MeasureOptions)
)";

struct Workload {
  std::string kind, name;
  std::vector<int> sizes;
  std::vector<te::Tensor> args;
};

Workload make_workload(const std::string& kind, const std::vector<int>& v, const std::string& layout) {
  Workload w{kind, "", v, {}};
  auto need = [&](size_t n, const char* form) {
    KILN_USER_CHECK(v.size() == n) << kind << " takes " << n << " sizes (" << form << "), got " << v.size();
    for (int x : v) KILN_USER_CHECK(x >= 0) << kind << ": sizes must be non-negative";
  };
  auto f32 = DataType::Float(32);
  if (kind == "matmul") {
    need(3, "M N K");
    te::Tensor A = te::placeholder({v[0], v[2]}, f32, "A"), B = te::placeholder({v[2], v[1]}, f32, "B");
    w.args = {A, B, ops::matmul(A, B, "C")};
    w.name = "matmul_" + std::to_string(v[0]) + "x" + std::to_string(v[1]) + "x" + std::to_string(v[2]);
  } else if (kind == "conv2d") {
    need(9, "N C H W K KH KW stride pad");
    KILN_USER_CHECK(layout == "nchw" || layout == "nchwc") << "unknown conv2d layout '" << layout << "'; known: nchw, nchwc";
    if (layout == "nchw") {
      te::Tensor X = te::placeholder({v[0], v[1], v[2], v[3]}, f32, "X"), W = te::placeholder({v[4], v[1], v[5], v[6]}, f32, "W");
      w.args = {X, W, ops::conv2d_nchw(X, W, v[7], v[8], 1, "conv")};
    } else {
      auto [cb, kb] = ops::nchwc_blocks(v[1], v[4]);
      te::Tensor X = te::placeholder({v[0], v[1] / cb, v[2], v[3], cb}, f32, "X"), W = te::placeholder({v[4] / kb, v[1] / cb, v[5], v[6], cb, kb}, f32, "W");
      w.args = {X, W, ops::conv2d_nchwc(X, W, v[7], v[8], "conv")};
    }
    w.name = "conv2d_n" + std::to_string(v[0]) + "c" + std::to_string(v[1]) + "h" + std::to_string(v[2]) + "w" + std::to_string(v[3]) + "k" + std::to_string(v[4]) + "r" +
             std::to_string(v[5]) + "s" + std::to_string(v[7]) + "p" + std::to_string(v[8]) + (layout == "nchwc" ? "_nchwc" : "");
  } else if (kind == "dense_bias_gelu") {
    need(3, "M N K");
    te::Tensor A = te::placeholder({v[0], v[2]}, f32, "A"), B = te::placeholder({v[2], v[1]}, f32, "B"), bias = te::placeholder({v[1]}, f32, "bias");
    w.args = {A, B, bias, ops::gelu(ops::bias_add(ops::matmul(A, B, "dense"), bias, "bias_add"), "gelu")};
    w.name = "dense_bias_gelu_" + std::to_string(v[0]) + "x" + std::to_string(v[1]) + "x" + std::to_string(v[2]);
  } else {
    KILN_USER_ERROR() << "unknown workload '" << kind << "'; known: matmul, conv2d, dense_bias_gelu";
  }
  return w;
}

/** The peers of a workload (all of them; the comparison uses the fastest). */
std::vector<tuner::PeerSpec> peer_specs(const Workload& w, int threads) {
  std::vector<long> a(w.sizes.begin(), w.sizes.end());
  return tuner::peers_of(w.kind == "matmul" ? "gemm" : w.kind == "conv2d" ? "conv2d" : "dense_gelu", a, threads);
}

/** Times the best schedule and the peers interleaved (kiln, peers, kiln, ...); returns the best peer for the curve. */
std::optional<tuner::CurvePeer> compare_with_peer(const tuner::Task& task, const Workload& w, const std::string& db, int threads, int rounds) {
  std::optional<te::Schedule> s = tuner::best_schedule(task, db);
  if (!s) {
    std::printf("no valid record to compare with the peer\n");
    return std::nullopt;
  }
  Module mod = build(*s, task.args, task.target, "main");
  std::vector<Arg> args;
  for (const te::Tensor& t : task.args) {
    std::vector<int64_t> shape;
    for (const Expr& d : t.shape()) shape.push_back(*as_const_int(d));
    NDArray a = NDArray::empty(shape, t.dtype());
    for (int64_t i = 0; i < a.numel(); ++i) a.data_as<float>()[i] = static_cast<float>((i * 7919 % 2001) - 1000) * 1e-3f;
    args.emplace_back(a);
  }
  auto kiln_round = [&] { return mod.time_evaluator("main", args, 1, 1, 50).results[0]; };
  tuner::Comparison c = tuner::compare_interleaved(kiln_round, peer_specs(w, threads), rounds, 50);
  auto gf = [&](double sec) { return sec > 0 ? task.flop / sec * 1e-9 : 0.0; };
  std::printf("\n%s, %d thread(s), %zu interleaved rounds (kiln, peers, kiln, ...):\n", w.name.c_str(), threads, c.kiln.size());
  std::printf("  %-44s %10s %10s %9s\n", "", "min", "median", "GFLOP/s");
  std::printf("  %-44s %8.3fms %8.3fms %9.1f\n", "kiln (best record)", tuner::min_of(c.kiln) * 1e3, tuner::median_of(c.kiln) * 1e3, gf(tuner::median_of(c.kiln)));
  for (size_t i = 0; i < c.peers.size(); ++i) {
    const tuner::PeerTimes& p = c.peers[i];
    std::printf("  %-44s %8.3fms %8.3fms %9.1f%s\n", p.label.c_str(), tuner::min_of(p.times) * 1e3, tuner::median_of(p.times) * 1e3, gf(tuner::median_of(p.times)),
                static_cast<int>(i) == c.best ? "  <- best peer" : "");
  }
  for (const std::string& f : c.failed) std::printf("  peer did not run: %s\n", f.c_str());
  const tuner::PeerTimes* best = c.best_peer();
  if (!best) return std::nullopt;
  std::printf("  kiln / best peer per round: median %.2f (range %.2f..%.2f); below 1 means kiln is faster\n", tuner::median_of(c.ratios), tuner::min_of(c.ratios),
              *std::max_element(c.ratios.begin(), c.ratios.end()));
  return tuner::CurvePeer{best->label, gf(tuner::median_of(best->times))};
}

int run(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  std::string kind = argv[1];
  if (kind.size() > 5 && kind.substr(kind.size() - 5) == ".onnx") return kiln::tools::run_model(argc, argv);
  std::vector<int> sizes;
  int i = 2;
  for (; i < argc && argv[i][0] != '-'; ++i) sizes.push_back(std::atoi(argv[i]));
  tuner::TuneOptions o;
  int threads = 0;
  std::string target, layout = "nchwc";
  bool peer = true, layout_given = false;
  for (; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--no-peer") { peer = false; continue; }
    if (a == "--quiet") { o.progress = false; continue; }
    if (a == "--cold-inputs") { o.measure.cold_inputs = true; continue; }
    if (a == "--gpu-simulate") { o.measure.gpu_simulate = true; continue; }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "kiln-tune: %s needs a value\n%s", a.c_str(), kUsage);
      return 2;
    }
    std::string v = argv[++i];
    if (a == "--trials") o.trials = std::stoi(v);
    else if (a == "--db") o.db_path = v;
    else if (a == "--threads") threads = std::stoi(v);
    else if (a == "--curve") o.curve_png = v;
    else if (a == "--seed") o.seed = std::stoull(v);
    else if (a == "--batch") o.batch_size = std::stoi(v);
    else if (a == "--early-stop") o.early_stop_rounds = std::stoi(v);
    else if (a == "--timeout") o.timeout_s = std::stod(v);
    else if (a == "--repeat") o.measure.repeat = std::stoi(v);
    else if (a == "--target") target = v;
    else if (a == "--layout") layout = v, layout_given = true;
    else if (a == "--model") o.model_path = v;
    else if (a == "--inject-faults") o.measure.inject_faults = v;
    else {
      std::fprintf(stderr, "kiln-tune: unknown option %s\n%s", a.c_str(), kUsage);
      return 2;
    }
  }
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // Before any kernel runs: the runtime's thread pool reads KILN_NUM_THREADS once.
  setenv("KILN_NUM_THREADS", std::to_string(threads).c_str(), 1);
  if (target.empty()) target = "llvm -num-cores=" + std::to_string(threads);
  Target parsed = Target::parse(target);
  bool gpu = parsed.kind == Target::Kind::CUDA;
  // The blocked layout is a CPU vector layout; the peers are CPU libraries.
  if (gpu && !layout_given) layout = "nchw";
  if (gpu && peer) {
    std::printf("kiln-tune: no peer for a cuda target here (bench/gpu_bench.py times cuBLAS and cuDNN on a GPU)\n");
    peer = false;
  }
  Workload w = make_workload(kind, sizes, layout);
  tuner::Task task = tuner::make_task(w.args, parsed, w.name);
  std::printf("kiln-tune: %s (%.3g GFLOP) on %s, %d thread(s), budget %d trials, db %s\n", task.name.c_str(), task.flop * 1e-9, task.target.str().c_str(), threads, o.trials,
              o.db_path.c_str());
  std::fflush(stdout);
  // The curve is drawn after the comparison, with the best peer's figure on it.
  std::string curve_png = o.curve_png;
  o.curve_png.clear();
  tuner::TuneResult r = tuner::tune(task, o);
  std::printf("best: %.4f ms, %.1f GFLOP/s; %d trials measured, %d errors, %d skipped, %.1f s\n", r.best_time * 1e3, r.best_gflops, r.trials_measured, r.errors,
              r.trials_skipped, r.elapsed_s);
  std::fflush(stdout);
  std::optional<tuner::CurvePeer> best_peer;
  if (peer) best_peer = compare_with_peer(task, w, o.db_path, threads, std::max(5, o.measure.repeat));
  if (!curve_png.empty()) {
    std::string title = task.name + " on " + task.target.str() + " (" + std::to_string(r.trials_measured) + " trials)";
    std::string why = tuner::write_curve_png(r, curve_png, title, best_peer ? &*best_peer : nullptr);
    if (!why.empty()) std::fprintf(stderr, "kiln-tune: warning: no curve written to %s: %s\n", curve_png.c_str(), why.c_str());
    else std::printf("curve: %s\n", curve_png.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  tuner::prefer_passive_openmp(argv);
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln-tune: error: %s\n", e.what());
    return 1;
  }
}
