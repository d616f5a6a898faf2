// fp32 GEMM: kiln's hand-scheduled kernel (schedules/cpu_gemm.cpp) against
// OpenBLAS through numpy, in one run. Prints min and median of each and the
// ratio kiln/peer in time (below 1 means kiln is faster) and in GFLOP/s.
//
//   gemm_bench [--threads N] [--repeat R] [--shapes MxNxK,...] [--mr 6 --nr 16 --ku 4] [--target "llvm -mcpu=haswell"]
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
  int threads = 1, repeat = 7;
  ops::GemmTiling tiling;
  std::string target_str = "llvm";  // the tile (unless --mr/--nr) and the code are for this target
  std::string shapes = "256x256x256,512x512x512,1024x1024x1024,2048x2048x2048,128x768x3072,1x4096x4096";
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i], v = argv[i + 1];
    if (a == "--threads") threads = std::stoi(v);
    else if (a == "--repeat") repeat = std::stoi(v);
    else if (a == "--shapes") shapes = v;
    else if (a == "--target") target_str = v;
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
  std::printf("fp32 GEMM, %d thread(s), %d repeats; kiln: hand schedule for %s, MR=%d NR=%d (0: from the target per shape) KU=%d; peer: numpy (OpenBLAS)\n", threads, repeat,
              target.str().c_str(), tiling.MR, tiling.NR, tiling.KU);
  std::printf("%-18s %10s %10s %10s %10s %9s %9s %8s %8s\n", "M x N x K", "kiln min", "kiln med", "blas min", "blas med", "kiln GF/s", "blas GF/s", "min k/b", "med k/b");
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
    TimeResult kt = mod.time_evaluator("gemm", {A, B, C}, 1, repeat, 50);
    std::string cmd = "env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OPENBLAS_NUM_THREADS=" + std::to_string(threads) + " /usr/bin/python3 " + bench::bench_dir() + "/peers/numpy_gemm.py " +
                      std::to_string(s.M) + " " + std::to_string(s.N) + " " + std::to_string(s.K) + " " + std::to_string(repeat);
    std::vector<double> pt = bench::parse_times(bench::run_command(cmd));
    double flop = 2.0 * s.M * s.N * s.K;
    double kmin = kt.min(), kmed = kt.median(), pmin = bench::min_of(pt), pmed = bench::median_of(pt);
    char name[32];
    std::snprintf(name, sizeof(name), "%dx%dx%d", s.M, s.N, s.K);
    std::printf("%-18s %8.3fms %8.3fms %8.3fms %8.3fms %9.1f %9.1f %8.2f %8.2f\n", name, kmin * 1e3, kmed * 1e3, pmin * 1e3, pmed * 1e3, flop / kmin * 1e-9, flop / pmin * 1e-9, kmin / pmin, kmed / pmed);
    std::fflush(stdout);
  }
  std::printf("build (schedule + lower + LLVM codegen + JIT) per kernel: min %.0f ms, median %.0f ms\n", bench::min_of(build_ms), bench::median_of(build_ms));
  return 0;
}
