// fp32 GEMM: kiln's hand-scheduled kernel (ops/src/cpu_gemm.cpp) against
// its peers in one run, interleaved round by round: OpenBLAS through numpy
// (with the core type that is fastest and correct on this machine, see
// bench/peers/blas_choice.py) and PyTorch's torch.matmul; the faster counts.
// Prints min and median of kiln and of the best peer, their GFLOP/s and the
// median of the per-round ratios kiln/peer in time with its range (below 1
// means kiln is faster).
//
//   gemm_bench [--threads N] [--rounds R] [--repeat-ms 50] [--shapes MxNxK,...]
//              [--mr 6 --nr 16 --ku 4] [--json FILE]
//              [--target "llvm -mcpu=haswell"] [--blas-coretype Haswell]
#include <chrono>
#include <cmath>
#include <cstring>
#include <iostream>
#include <random>
#include <sstream>

#include "bench_util.h"
#include "kiln/driver/build.h"
#include "kiln/ops/cpu_gemm.h"

using namespace kiln;

struct Shape {
  int M, N, K;
};

static std::vector<Shape> parse_shapes(const std::string& s) {
  std::vector<Shape> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    Shape sh{};
    if (std::sscanf(item.c_str(), "%dx%dx%d", &sh.M, &sh.N, &sh.K) != 3) throw std::runtime_error("bad shape '" + item + "', expected MxNxK");
    out.push_back(sh);
  }
  return out;
}

// Checks sampled elements of C against double-precision dot products.
static double max_sampled_error(const float* A, const float* B, const float* C, const Shape& s) {
  std::mt19937 rng(7);
  double worst = 0;
  for (int t = 0; t < 64; ++t) {
    int i = rng() % s.M, j = rng() % s.N;
    double acc = 0;
    for (int k = 0; k < s.K; ++k) acc += double(A[i * s.K + k]) * B[k * s.N + j];
    worst = std::max(worst, std::fabs(acc - C[i * s.N + j]) / std::max(1.0, std::fabs(acc)));
  }
  return worst;
}

int main(int argc, char** argv) {
  int threads = 1, rounds = 7;
  double repeat_ms = 50;
  std::string json_path;
  ops::GemmTiling tiling;
  std::string blas_coretype;  // empty: OpenBLAS's fastest correct core type here
  std::string target_str = "llvm";  // the tile (unless --mr/--nr) and the code are for this target
  std::string shapes = "256x256x256,512x512x512,1024x1024x1024,2048x2048x2048,128x768x3072,1x4096x4096";
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i], v = argv[i + 1];
    if (a == "--threads") threads = std::stoi(v);
    else if (a == "--rounds" || a == "--repeat") rounds = std::stoi(v);
    else if (a == "--repeat-ms") repeat_ms = std::stod(v);
    else if (a == "--json") json_path = v;
    else if (a == "--shapes") shapes = v;
    else if (a == "--target") target_str = v;
    else if (a == "--blas-coretype") blas_coretype = v;
    else if (a == "--mr") tiling.MR = std::stoi(v);
    else if (a == "--nr") tiling.NR = std::stoi(v);
    else if (a == "--ku") tiling.KU = std::stoi(v);
    else if (a == "--panel-outer") tiling.panel_outer = v == "1";
    else {
      std::cerr << "unknown option " << a << "\n";
      return 2;
    }
  }
  // Before the runtime's thread pool starts: it reads KILN_NUM_THREADS once.
  setenv("KILN_NUM_THREADS", std::to_string(threads).c_str(), 1);
  tiling.parallel = threads > 1;
  const Target target = Target::parse(target_str);
  std::printf("fp32 GEMM, %d thread(s), %d interleaved rounds of >= %.0f ms; kiln: hand schedule for %s, MR=%d NR=%d (0: from the target per shape) KU=%d; peers: numpy (OpenBLAS), torch.matmul\n", threads,
              rounds, repeat_ms, target.str().c_str(), tiling.MR, tiling.NR, tiling.KU);
  std::printf("%-16s %10s %10s %10s %10s %9s %9s  %-19s %s\n", "M x N x K", "kiln min", "kiln med", "peer min", "peer med", "kiln GF/s", "peer GF/s", "k/p med (range)",
              "best peer");
  bench::JsonRows json(json_path);
  std::vector<double> build_ms;  // schedule + lower + codegen + JIT, per shape
  for (const Shape& s : parse_shapes(shapes)) {
    auto t0 = std::chrono::steady_clock::now();
    ops::CpuGemm g = ops::cpu_matmul(s.M, s.N, s.K, tiling, target);
    Module mod = build(g.schedule, {g.A, g.B, g.C}, target, "gemm");
    build_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    NDArray A = NDArray::empty({s.M, s.K}, DataType::Float(32)), B = NDArray::empty({s.K, s.N}, DataType::Float(32)), C = NDArray::empty({s.M, s.N}, DataType::Float(32));
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> d(-1, 1);
    for (int64_t i = 0; i < A.numel(); ++i) A.data_as<float>()[i] = d(rng);
    for (int64_t i = 0; i < B.numel(); ++i) B.data_as<float>()[i] = d(rng);
    mod.call("gemm", {A, B, C});
    double err = max_sampled_error(A.data_as<float>(), B.data_as<float>(), C.data_as<float>(), s);
    if (err > 1e-3) {
      std::fprintf(stderr, "kiln GEMM %dx%dx%d is wrong: relative error %g\n", s.M, s.N, s.K, err);
      return 1;
    }
    std::vector<long> sz = {s.M, s.N, s.K};
    auto kiln_round = [&] { return mod.time_evaluator("gemm", {A, B, C}, 1, 1, repeat_ms).results[0]; };
    std::vector<tuner::PeerSpec> peers = tuner::peers_of("gemm", sz, threads);
    for (tuner::PeerSpec& p : peers) p.blas_coretype = blas_coretype;
    tuner::Comparison c = tuner::compare_interleaved(kiln_round, peers, rounds, repeat_ms);
    bench::report_failed_peers(c);
    double flop = 2.0 * s.M * s.N * s.K;
    char name[32];
    std::snprintf(name, sizeof(name), "%dx%dx%d", s.M, s.N, s.K);
    const tuner::PeerTimes* p = c.best_peer();
    double kmin = bench::min_of(c.kiln), kmed = bench::median_of(c.kiln), pmin = p ? bench::min_of(p->times) : 0, pmed = p ? bench::median_of(p->times) : 0;
    std::printf("%-16s %8.3fms %8.3fms %8.3fms %8.3fms %9.1f %9.1f  %-19s %s\n", name, kmin * 1e3, kmed * 1e3, pmin * 1e3, pmed * 1e3, flop / kmin * 1e-9,
                p ? flop / pmin * 1e-9 : 0.0, bench::ratio_cell(c).c_str(), p ? p->label.c_str() : "(no peer ran)");
    json.add(bench::comparison_row(std::string("hand GEMM ") + name, threads, c, "", "ops/src/cpu_gemm.cpp"));
    std::fflush(stdout);
  }
  json.write();
  std::printf("build (schedule + lower + LLVM codegen + JIT) per kernel: min %.0f ms, median %.0f ms\n", bench::min_of(build_ms), bench::median_of(build_ms));
  return 0;
}
