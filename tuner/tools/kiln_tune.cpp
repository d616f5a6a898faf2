// kiln-tune: tunes one workload of the operator library on this machine,
// stores every measurement in the tuning database, and compares the best
// schedule with the peer library (numpy/OpenBLAS or PyTorch) in the same run.
//
//   kiln-tune matmul M N K                        [options]
//   kiln-tune conv2d N C H W K KH KW stride pad   [options]
//   kiln-tune dense_bias_gelu M N K               [options]
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
#include "kiln/tuner/tune.h"

using namespace kiln;

namespace {

const char* kUsage = R"(usage: kiln-tune WORKLOAD SIZES... [options]

workloads (fp32, from the operator library):
  matmul M N K                         C[M,N] = A[M,K] B[K,N]
  conv2d N C H W K KH KW stride pad    conv2d; the layout is --layout's
  dense_bias_gelu M N K                gelu(A[M,K] B[K,N] + bias[N])

options:
  --trials N         candidates to measure (default 200)
  --layout L         conv2d: nchwc (default; input [N,C/16,H,W,16], weights
                     [K/32,C/16,KH,KW,16,32], output [N,K/32,OH,OW,32]; smaller
                     blocks when 16/32 do not divide C/K) or nchw (OIHW weights)
  --db PATH          tuning database (default kiln_tuning.db)
  --threads N        threads of the kernels and the peer (default: all cores)
  --curve PNG        write best GFLOP/s against trials
  --seed S           random seed of the search (default 0)
  --batch N          candidates measured per round (default 32)
  --early-stop R     stop after R rounds without improvement (default 8)
  --timeout S        time limit of one candidate run, seconds (default 10)
  --repeat R         timing repeats per candidate and in the comparison (default 3)
  --target T         target string (default "llvm" with -num-cores=THREADS)
  --model PATH       load/save the cost model here
  --no-peer          skip the comparison with the peer library
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

std::string peer_dir() {
  if (const char* env = std::getenv("KILN_BENCH_DIR")) return std::string(env) + "/peers";
  // This file is tuner/tools/kiln_tune.cpp of the source tree; the peers are in bench/peers.
  return (std::filesystem::path(__FILE__).parent_path() / ".." / ".." / "bench" / "peers").lexically_normal().string();
}

std::string run_command(const std::string& cmd, int* rc) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof(buf), p)) out.append(buf, n);
  int st = pclose(p);
  *rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return out;
}

std::vector<double> parse_times(const std::string& json) {
  std::vector<double> v;
  size_t a = json.find("\"times\""), b = a == std::string::npos ? a : json.find('[', a), e = b == std::string::npos ? b : json.find(']', b);
  if (e == std::string::npos) return v;
  std::string body = json.substr(b + 1, e - b - 1);
  for (size_t pos = 0; pos < body.size();) {
    size_t end = body.find(',', pos);
    v.push_back(std::strtod(body.substr(pos, end - pos).c_str(), nullptr));
    if (end == std::string::npos) break;
    pos = end + 1;
  }
  return v;
}

/** The peers' command lines for a workload, with their names (PyTorch: both memory layouts). */
std::vector<std::pair<std::string, std::string>> peer_commands(const Workload& w, int threads, int repeat) {
  std::string dir = peer_dir(), t = std::to_string(threads), r = std::to_string(repeat);
  std::string env = "env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OPENBLAS_NUM_THREADS=" + t + " OMP_NUM_THREADS=" + t + " /usr/bin/python3 ";
  auto s = [&](int i) { return std::to_string(w.sizes[i]) + " "; };
  if (w.kind == "matmul") return {{env + dir + "/numpy_gemm.py " + s(0) + s(1) + s(2) + r, "numpy (OpenBLAS)"}};
  if (w.kind == "conv2d") {
    std::string base = env + dir + "/torch_conv2d.py " + s(0) + s(1) + s(2) + s(3) + s(4) + s(5) + s(6) + s(7) + s(8) + t + " " + r + " 50 ";
    return {{base + "nchw", "PyTorch (NCHW)"}, {base + "channels_last", "PyTorch (channels_last)"}};
  }
  return {{env + dir + "/dense_gelu.py " + s(0) + s(1) + s(2) + t + " " + r + " numpy", "numpy matmul+bias+GELU"}};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n == 0 ? 0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/** Times the best schedule in this process and the peer in a subprocess, one after the other. */
void compare_with_peer(const tuner::Task& task, const Workload& w, const std::string& db, int threads, int repeat) {
  std::optional<te::Schedule> s = tuner::best_schedule(task, db);
  if (!s) {
    std::printf("no valid record to compare with the peer\n");
    return;
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
  TimeResult kt = mod.time_evaluator("main", args, 1, repeat, 50);
  std::printf("\n%-34s %10s %10s %10s %10s %9s %9s %8s  %s\n", "workload (threads)", "kiln min", "kiln med", "peer min", "peer med", "kiln GF/s", "peer GF/s", "med k/p", "peer");
  double kmin = kt.min(), kmed = kt.median();
  std::string label = w.name + " (" + std::to_string(threads) + ")";
  for (const auto& [cmd, peer] : peer_commands(w, threads, repeat)) {
    int rc = 0;
    std::vector<double> pt = parse_times(run_command(cmd + " 2>&1", &rc));
    if (rc != 0 || pt.empty()) {
      std::printf("%-34s %8.3fms %8.3fms %10s %10s %9.1f %9s %8s  %s did not run (%s)\n", label.c_str(), kmin * 1e3, kmed * 1e3, "-", "-", task.flop / kmin * 1e-9, "-", "-",
                  peer.c_str(), cmd.c_str());
      continue;
    }
    double pmin = *std::min_element(pt.begin(), pt.end()), pmed = median(pt);
    std::printf("%-34s %8.3fms %8.3fms %8.3fms %8.3fms %9.1f %9.1f %8.2f  %s\n", label.c_str(), kmin * 1e3, kmed * 1e3, pmin * 1e3, pmed * 1e3, task.flop / kmin * 1e-9,
                task.flop / pmin * 1e-9, kmed / pmed, peer.c_str());
  }
  std::printf("med k/p below 1 means kiln is faster\n");
}

int run(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  std::string kind = argv[1];
  std::vector<int> sizes;
  int i = 2;
  for (; i < argc && argv[i][0] != '-'; ++i) sizes.push_back(std::atoi(argv[i]));
  tuner::TuneOptions o;
  int threads = 0;
  std::string target, layout = "nchwc";
  bool peer = true;
  for (; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--no-peer") { peer = false; continue; }
    if (a == "--quiet") { o.progress = false; continue; }
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
    else if (a == "--layout") layout = v;
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
  Workload w = make_workload(kind, sizes, layout);
  tuner::Task task = tuner::make_task(w.args, Target::parse(target), w.name);
  std::printf("kiln-tune: %s (%.3g GFLOP) on %s, %d thread(s), budget %d trials, db %s\n", task.name.c_str(), task.flop * 1e-9, task.target.str().c_str(), threads, o.trials,
              o.db_path.c_str());
  std::fflush(stdout);
  tuner::TuneResult r = tuner::tune(task, o);
  std::printf("best: %.4f ms, %.1f GFLOP/s; %d trials measured, %d errors, %d skipped, %.1f s\n", r.best_time * 1e3, r.best_gflops, r.trials_measured, r.errors,
              r.trials_skipped, r.elapsed_s);
  std::fflush(stdout);
  if (peer) compare_with_peer(task, w, o.db_path, threads, std::max(3, o.measure.repeat));
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
