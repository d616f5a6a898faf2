// fp32 conv2d: kiln's hand-scheduled kernels (ops/src/cpu_conv2d.cpp: the
// blocked NCHWc form, and the GEMM form for 1x1 layers) against PyTorch's CPU
// conv2d in one run, interleaved round by round. The kiln time includes
// packing the NCHW input into channel blocks and writing NCHW output; it
// excludes packing the weights, which inference does once (reported apart as
// "wpack"). PyTorch runs in three layouts, each converted before timing:
// NCHW (as most code calls it), channels_last and oneDNN's blocked layout
// (torch.utils.mkldnn); the fastest counts and is named. Each kiln result is
// checked element by element against every PyTorch output and on a sample
// against a double-precision loop.
//
//   conv2d_bench [--threads N] [--rounds R] [--repeat-ms 50] [--shapes CxKxHxWxRxPxS,...]
//                [--layout nchw|nchwc] [--kb 32] [--owb 0] [--ohb 1] [--cu 4] [--cb 16] [--gemm 1] [--json FILE]
//                [--target "llvm -mcpu=haswell"]
//   (R = kernel size, P = padding, S = stride; batch 1).
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
  int threads = 1, rounds = 7, repeat_ms = 50;
  std::string json_path;
  ops::Conv2dTiling tiling;
  std::string target_str = "llvm";  // the tiles (0: from the target) and the code are for this target
  std::string shapes = "64x64x56x56x3x1x1,256x256x14x14x3x1x1,64x256x56x56x1x0x1";
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i], v = argv[i + 1];
    if (a == "--threads") threads = std::stoi(v);
    else if (a == "--rounds" || a == "--repeat") rounds = std::stoi(v);
    else if (a == "--json") json_path = v;
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
  std::printf("fp32 conv2d, batch 1, %d thread(s), %d interleaved rounds of >= %d ms; kiln: NCHW%s, CB=%d KB=%d OHB=%d CU=%d, input packing timed, weight packing not (wpack);\n"
              "peers: PyTorch conv2d on NCHW, channels_last and oneDNN-blocked tensors (converted untimed), the fastest counts; k/p below 1: kiln is faster\n",
              threads, rounds, repeat_ms, tiling.nchw_out ? " out" : "c out", tiling.CB, tiling.KB, tiling.OHB, tiling.CU);
  std::printf("%-24s %-10s %9s %9s %6s | %9s %9s %6s | %-19s %8s %7s  %s\n", "C x K x HxW, RxR/pad/str", "kiln tile", "kiln min", "kiln med", "GF/s", "peer min", "peer med",
              "GF/s", "k/p med (range)", "wpack", "max err", "best peer");
  bench::JsonRows json(json_path);
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

    write_floats(tmp + "_x.bin", X);
    write_floats(tmp + "_w.bin", W);
    // Each PyTorch layout writes its output; each is checked against kiln's.
    std::vector<tuner::PeerSpec> peers = tuner::peers_of("conv2d", {s.N, s.C, s.H, s.W, s.K, s.KH, s.KW, s.stride, s.pad}, threads);
    auto y_file = [&](const tuner::PeerSpec& p) { return tmp + "_y_" + p.impl + ".bin"; };
    for (tuner::PeerSpec& p : peers) p.paths_json = "{\"x\": \"" + tmp + "_x.bin\", \"w\": \"" + tmp + "_w.bin\", \"y\": \"" + y_file(p) + "\"}";
    auto kiln_round = [&] { return mod.time_evaluator("conv2d", {X, PW, Y}, 1, 1, repeat_ms).results[0]; };
    tuner::Comparison c = tuner::compare_interleaved(kiln_round, peers, rounds, repeat_ms);
    bench::report_failed_peers(c);
    double err = serr;
    for (const tuner::PeerSpec& p : peers) {
      std::string y = y_file(p);
      if (std::ifstream(y).good()) {
        double perr = error_vs_peer(Y.data_as<float>(), read_floats(y, int64_t(s.K) * s.OH() * s.OW()), s, KB, tiling.nchw_out);
        if (perr > 1e-4) {
          std::fprintf(stderr, "kiln conv2d %dx%dx%dx%d k%d differs from PyTorch (%s): error %g\n", s.C, s.K, s.H, s.W, s.KH, p.impl.c_str(), perr);
          return 1;
        }
        err = std::max(err, perr);
      }
      std::remove(y.c_str());
    }
    for (const char* f : {"_x.bin", "_w.bin"}) std::remove((tmp + f).c_str());
    if (serr > 1e-4) {
      std::fprintf(stderr, "kiln conv2d %dx%dx%dx%d k%d is wrong: error %g vs the double loop\n", s.C, s.K, s.H, s.W, s.KH, serr);
      return 1;
    }
    const tuner::PeerTimes* p = c.best_peer();
    double kmin = bench::min_of(c.kiln), kmed = bench::median_of(c.kiln), pmin = p ? bench::min_of(p->times) : 0, pmed = p ? bench::median_of(p->times) : 0;
    char name[48];
    std::snprintf(name, sizeof(name), "%dx%dx%dx%d %dx%d/%d/%d", s.C, s.K, s.H, s.W, s.KH, s.KW, s.pad, s.stride);
    char tile[32];
    if (cv.pointwise) std::snprintf(tile, sizeof(tile), "gemm %dx%d", cv.tiling.MR, cv.tiling.NR);
    else std::snprintf(tile, sizeof(tile), "%dx%dx%d", cv.tiling.OHB, cv.tiling.OWB, cv.tiling.KB);
    std::printf("%-24s %-10s %7.3fms %7.3fms %6.1f | %7.3fms %7.3fms %6.1f | %-19s %6.3fms %7.1e  %s\n", name, tile, kmin * 1e3, kmed * 1e3, s.flops() / kmin * 1e-9, pmin * 1e3,
                pmed * 1e3, p ? s.flops() / pmin * 1e-9 : 0.0, bench::ratio_cell(c).c_str(), wt.min() * 1e3, err, p ? p->label.c_str() : "(no peer ran)");
    json.add(bench::comparison_row(std::string("hand conv2d ") + name, threads, c, "", "ops/src/cpu_conv2d.cpp"));
    std::fflush(stdout);
  }
  json.write();
  return 0;
}
