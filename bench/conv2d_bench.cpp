// fp32 conv2d: kiln's hand-scheduled kernels (schedules/cpu_conv2d.cpp: the
// blocked NCHWc form, and the GEMM form for 1x1 layers) against PyTorch's CPU
// conv2d (oneDNN), in one run. The kiln time includes packing the NCHW input
// into channel blocks and writing NCHW output; it excludes packing the
// weights, which inference does once (reported apart as "wpack"). PyTorch is
// timed twice: on NCHW / OIHW tensors as most code calls it, and on
// channels_last tensors (converted before timing), where oneDNN uses its
// blocked kernels. Each kiln result is checked element by element against
// both PyTorch outputs and on a sample against a double-precision loop.
//
//   conv2d_bench [--threads N] [--repeat R] [--repeat-ms 50] [--shapes CxKxHxWxRxPxS,...] [--target "llvm -mcpu=haswell"]
//                [--layout nchw|nchwc] [--kb 32] [--owb 0] [--ohb 1] [--cu 4] [--cb 16] [--gemm 1]
//   (R = kernel size, P = padding, S = stride; batch 1). Each repeat of kiln
//   and of PyTorch lasts at least --repeat-ms. On a machine shared with other
//   work, many one-call repeats (--repeat 101 --repeat-ms 0) let the minimum
//   find stretches where the benchmark had its cores to itself; 50 ms repeats
//   are nearly always cut by other processes there.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>

#include "bench_util.h"
#include "kiln/driver/build.h"
#include "kiln/ops/cpu_conv2d.h"

using namespace kiln;

static std::vector<ops::Conv2dShape> parse_shapes(const std::string& s) {
  std::vector<ops::Conv2dShape> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    ops::Conv2dShape sh;
    int r = 0;
    if (std::sscanf(item.c_str(), "%dx%dx%dx%dx%dx%dx%d", &sh.C, &sh.K, &sh.H, &sh.W, &r, &sh.pad, &sh.stride) != 7)
      throw std::runtime_error("bad shape '" + item + "', expected CxKxHxWxRxPxS (R kernel, P pad, S stride)");
    sh.KH = sh.KW = r;
    out.push_back(sh);
  }
  return out;
}

static void write_floats(const std::string& path, const NDArray& a) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(a.data_as<float>()), a.numel() * sizeof(float));
  if (!f) throw std::runtime_error("cannot write " + path);
}

static std::vector<float> read_floats(const std::string& path, int64_t n) {
  std::vector<float> v(n);
  std::ifstream f(path, std::ios::binary);
  f.read(reinterpret_cast<char*>(v.data()), n * sizeof(float));
  if (!f) throw std::runtime_error("peer output " + path + " is missing or short");
  return v;
}

// Element (n, k, y, x) of kiln's output in either layout.
static float out_at(const float* Y, const ops::Conv2dShape& s, int KB, bool nchw, int n, int k, int y, int x) {
  if (nchw) return Y[((int64_t(n) * s.K + k) * s.OH() + y) * s.OW() + x];
  return Y[(((int64_t(n) * (s.K / KB) + k / KB) * s.OH() + y) * s.OW() + x) * KB + k % KB];
}

// Largest |kiln - ref| over all elements, relative to the largest |ref|.
static double error_vs_peer(const float* Y, const std::vector<float>& ref, const ops::Conv2dShape& s, int KB, bool nchw) {
  double worst = 0, scale = 1e-30;
  for (int k = 0; k < s.K; ++k)
    for (int y = 0; y < s.OH(); ++y)
      for (int x = 0; x < s.OW(); ++x) {
        double r = ref[(int64_t(k) * s.OH() + y) * s.OW() + x];
        worst = std::max(worst, std::fabs(out_at(Y, s, KB, nchw, 0, k, y, x) - r));
        scale = std::max(scale, std::fabs(r));
      }
  return worst / scale;
}

// Sampled elements against a double-precision direct convolution.
static double sampled_error(const float* X, const float* W, const float* Y, const ops::Conv2dShape& s, int KB, bool nchw) {
  std::mt19937 rng(7);
  double worst = 0;
  for (int t = 0; t < 64; ++t) {
    int k = rng() % s.K, y = rng() % s.OH(), x = rng() % s.OW();
    double acc = 0;
    for (int c = 0; c < s.C; ++c)
      for (int ky = 0; ky < s.KH; ++ky)
        for (int kx = 0; kx < s.KW; ++kx) {
          int h = y * s.stride + ky - s.pad, w = x * s.stride + kx - s.pad;
          if (h >= 0 && h < s.H && w >= 0 && w < s.W) acc += double(X[(int64_t(c) * s.H + h) * s.W + w]) * W[((int64_t(k) * s.C + c) * s.KH + ky) * s.KW + kx];
        }
    worst = std::max(worst, std::fabs(acc - out_at(Y, s, KB, nchw, 0, k, y, x)) / std::max(1.0, std::fabs(acc)));
  }
  return worst;
}

int main(int argc, char** argv) {
  int threads = 1, repeat = 7, repeat_ms = 50;
  ops::Conv2dTiling tiling;
  std::string target_str = "llvm";  // the tiles (0: from the target) and the code are for this target
  std::string shapes = "64x64x56x56x3x1x1,256x256x14x14x3x1x1,64x256x56x56x1x0x1";
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i], v = argv[i + 1];
    if (a == "--threads") threads = std::stoi(v);
    else if (a == "--repeat") repeat = std::stoi(v);
    else if (a == "--repeat-ms") repeat_ms = std::stoi(v);
    else if (a == "--shapes") shapes = v;
    else if (a == "--target") target_str = v;
    else if (a == "--layout") tiling.nchw_out = v == "nchw";
    else if (a == "--kb") tiling.KB = std::stoi(v);
    else if (a == "--owb") tiling.OWB = std::stoi(v);
    else if (a == "--ohb") tiling.OHB = std::stoi(v);
    else if (a == "--cu") tiling.CU = std::stoi(v);
    else if (a == "--cb") tiling.CB = std::stoi(v);
    else if (a == "--gemm") tiling.pointwise_as_gemm = v == "1";
    else {
      std::cerr << "unknown option " << a << "\n";
      return 2;
    }
  }
  // Before the runtime's thread pool starts: it reads KILN_NUM_THREADS once.
  setenv("KILN_NUM_THREADS", std::to_string(threads).c_str(), 1);
  tiling.parallel = threads > 1;
  const Target target = Target::parse(target_str);
  std::printf("target: %s (tile sizes of 0 come from it per shape)\n", target.str().c_str());
  std::printf("fp32 conv2d, batch 1, %d thread(s), %d repeats of >= %d ms; kiln: NCHW%s, CB=%d KB=%d OHB=%d CU=%d, input packing timed, weight packing not (wpack);\n"
              "peer: torch.nn.functional.conv2d (PyTorch CPU, oneDNN) on NCHW tensors (torch) and on channels_last ones (t-cl, converted untimed);\n"
              "ratios are kiln time / PyTorch time (below 1: kiln is faster)\n",
              threads, repeat, repeat_ms, tiling.nchw_out ? " out" : "c out", tiling.CB, tiling.KB, tiling.OHB, tiling.CU);
  std::printf("%-24s %-10s %9s %9s %6s | %9s %9s %5s %5s | %9s %9s %5s %5s | %8s %7s\n", "C x K x HxW, RxR/pad/str", "kiln tile", "kiln min", "kiln med", "GF/s",
              "torch min", "torch med", "min", "med", "t-cl min", "t-cl med", "min", "med", "wpack", "max err");
  std::printf("%-24s %-10s %9s %9s %6s | %9s %9s %5s %5s | %9s %9s %5s %5s |\n", "", "", "", "", "kiln", "NCHW", "", "k/t", "k/t", "chan-last", "", "k/cl", "k/cl");
  std::string tmp = "/tmp/kiln_conv2d_bench_" + std::to_string(getpid());
  for (const ops::Conv2dShape& s : parse_shapes(shapes)) {
    ops::CpuConv2d cv = ops::cpu_conv2d(s, tiling, target);
    Module wmod = build(cv.weight_schedule, {cv.W, cv.packed_W_out}, target, "pack_weights");
    Module mod = build(cv.schedule, {cv.X, cv.packed_W, cv.Y}, target, "conv2d");
    auto shape_of = [](const te::Tensor& t) {
      std::vector<int64_t> v;
      for (const Expr& e : t.shape()) v.push_back(*as_const_int(e));
      return v;
    };
    NDArray X = NDArray::empty(shape_of(cv.X), DataType::Float(32)), W = NDArray::empty(shape_of(cv.W), DataType::Float(32));
    NDArray PW = NDArray::empty(shape_of(cv.packed_W), DataType::Float(32)), Y = NDArray::empty(shape_of(cv.Y), DataType::Float(32));
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> d(-1, 1);
    for (int64_t i = 0; i < X.numel(); ++i) X.data_as<float>()[i] = d(rng);
    for (int64_t i = 0; i < W.numel(); ++i) W.data_as<float>()[i] = d(rng);
    wmod.call("pack_weights", {W, PW});
    mod.call("conv2d", {X, PW, Y});
    int KB = cv.tiling.KB;
    double serr = sampled_error(X.data_as<float>(), W.data_as<float>(), Y.data_as<float>(), s, KB, tiling.nchw_out);
    TimeResult wt = wmod.time_evaluator("pack_weights", {W, PW}, 1, 3, 20);
    TimeResult kt = mod.time_evaluator("conv2d", {X, PW, Y}, 1, repeat, repeat_ms);

    write_floats(tmp + "_x.bin", X);
    write_floats(tmp + "_w.bin", W);
    // PyTorch twice: on NCHW tensors (its default path) and on channels_last
    // ones (oneDNN's blocked kernels); each output is checked against kiln's.
    std::vector<double> peer_times[2];
    double err = serr;
    for (int layout = 0; layout < 2; ++layout) {
      std::ostringstream cmd;
      cmd << "/usr/bin/python3 " << bench::bench_dir() << "/peers/torch_conv2d.py " << s.N << " " << s.C << " " << s.H << " " << s.W << " " << s.K << " " << s.KH << " "
          << s.KW << " " << s.stride << " " << s.pad << " " << threads << " " << repeat << " " << repeat_ms << " " << (layout ? "channels_last" : "nchw") << " " << tmp
          << "_x.bin " << tmp << "_w.bin " << tmp << "_y.bin";
      peer_times[layout] = bench::parse_times(bench::run_command(cmd.str()));
      double perr = error_vs_peer(Y.data_as<float>(), read_floats(tmp + "_y.bin", int64_t(s.K) * s.OH() * s.OW()), s, KB, tiling.nchw_out);
      if (perr > 1e-4) {
        std::fprintf(stderr, "kiln conv2d %dx%dx%dx%d k%d differs from PyTorch (%s): error %g\n", s.C, s.K, s.H, s.W, s.KH, layout ? "channels_last" : "nchw", perr);
        return 1;
      }
      err = std::max(err, perr);
    }
    for (const char* f : {"_x.bin", "_w.bin", "_y.bin"}) std::remove((tmp + f).c_str());
    if (serr > 1e-4) {
      std::fprintf(stderr, "kiln conv2d %dx%dx%dx%d k%d is wrong: error %g vs the double loop\n", s.C, s.K, s.H, s.W, s.KH, serr);
      return 1;
    }
    double kmin = kt.min(), kmed = kt.median();
    double pmin = bench::min_of(peer_times[0]), pmed = bench::median_of(peer_times[0]);
    double cmin = bench::min_of(peer_times[1]), cmed = bench::median_of(peer_times[1]);
    char name[48];
    std::snprintf(name, sizeof(name), "%dx%dx%dx%d %dx%d/%d/%d", s.C, s.K, s.H, s.W, s.KH, s.KW, s.pad, s.stride);
    char tile[32];
    if (cv.pointwise) std::snprintf(tile, sizeof(tile), "gemm %dx%d", cv.tiling.MR, cv.tiling.NR);
    else std::snprintf(tile, sizeof(tile), "%dx%dx%d", cv.tiling.OHB, cv.tiling.OWB, cv.tiling.KB);
    std::printf("%-24s %-10s %7.3fms %7.3fms %6.1f | %7.3fms %7.3fms %5.2f %5.2f | %7.3fms %7.3fms %5.2f %5.2f | %6.3fms %7.1e\n", name, tile, kmin * 1e3, kmed * 1e3,
                s.flops() / kmin * 1e-9, pmin * 1e3, pmed * 1e3, kmin / pmin, kmed / pmed, cmin * 1e3, cmed * 1e3, kmin / cmin, kmed / cmed, wt.min() * 1e3, err);
    std::fflush(stdout);
  }
  return 0;
}
