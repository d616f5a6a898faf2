// The auto-scheduler against the peer libraries, in one run: each workload is
// tuned from scratch (a fresh tuning database unless --db is given), its best
// schedule is timed here, and the peer is timed right after in a subprocess.
// Also reports the search's efficiency: the best found after 64, 200 and 1000
// trials (where the budget reaches them) and the wall time per trial. For the
// NCHWc convolutions, "+layout" is k/p again with kiln's time plus the input's
// NCHW -> NCHWc and the output's NCHWc -> NCHW changes (the fair figure for a
// lone layer between NCHW neighbours; inside a model they happen once).
//
//   tune_bench [--trials N] [--threads 1,2] [--workloads gemm,conv1,conv2,conv3,dense]
//              [--repeat R] [--db PATH] [--curve-dir DIR] [--timeout S]
//
// Workloads (fp32, batch 1 for convolutions):
//   gemm   1024 x 1024 x 1024 matmul               peer: numpy (OpenBLAS)
//   conv1  ResNet 3x3, C=K=64, 56x56, pad 1         peer: PyTorch (the faster of NCHW and channels_last)
//   conv2  ResNet 3x3, C=K=256, 14x14, pad 1        peer: PyTorch
//   conv3  ResNet 1x1, C=64, K=256, 56x56           peer: PyTorch
//   dense  gelu(A[128,768] B[768,3072] + bias)      peer: numpy matmul + bias + GELU
// The convolutions are tuned in the blocked NCHWc layout (conv2d_nchwc); see conv().
// With several thread counts each runs in its own process (the runtime reads
// KILN_NUM_THREADS once per process).
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <sstream>

#include "bench_util.h"
#include "kiln/driver/build.h"
#include "kiln/ir/op.h"
#include "kiln/ops/nn.h"
#include "kiln/tuner/openmp_policy.h"
#include "kiln/tuner/tune.h"

using namespace kiln;

namespace {

/** A kernel that is not tuned but timed beside the tuned one (a layout change). */
struct Extra {
  te::Schedule schedule;
  std::vector<te::Tensor> args;
};

struct Workload {
  std::string id, name, peer_name, peer_args;
  std::vector<te::Tensor> args;
  /** conv: NCHW -> NCHWc of the input and NCHWc -> NCHW of the output, for the "with layout" column. */
  std::vector<Extra> layout;
};

std::string join(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += std::to_string(x) + " ";
  return s;
}

// The tuned conv2d is conv2d_nchwc (input [1, C/16, H, W, 16], weights
// [K/32, C/16, KH, KW, 16, 32]): the blocked layouts of CPU inference, as
// TVM's x86 conv2d uses. The layout change is left to the graph level (once
// per model for the weights), as PyTorch's channels_last leaves its own.
// The layout changes a model would pay at its NCHW boundaries (the weights'
// change is once per model and not counted): each pixel's cb channels are
// gathered (unrolled, one contiguous run of writes) and scattered back.
std::vector<Extra> nchwc_layout_changes(int C, int K, int HW, int OHW, int cb, int kb) {
  auto f32 = DataType::Float(32);
  te::Tensor X = te::placeholder({1, C, HW, HW}, f32, "X");
  te::Tensor Xb = te::compute({1, C / cb, HW, HW, cb}, [&](const std::vector<Var>& i) { return X(i[0], i[1] * cb + i[4], i[2], i[3]); }, "to_nchwc", {"n", "co", "h", "w", "ci"});
  te::Schedule in = te::create_schedule({Xb});
  in[Xb].parallel(in[Xb].fuse({in[Xb].axis("n"), in[Xb].axis("co"), in[Xb].axis("h")}));
  in[Xb].unroll(in[Xb].axis("ci"));
  te::Tensor Yb = te::placeholder({1, K / kb, OHW, OHW, kb}, f32, "Yb");
  te::Tensor Y = te::compute({1, K, OHW, OHW}, [&](const std::vector<Var>& i) { return Yb(i[0], floordiv(i[1], kb), i[2], i[3], floormod(i[1], kb)); }, "to_nchw", {"n", "k", "h", "w"});
  te::Schedule out = te::create_schedule({Y});
  te::Stage& o = out[Y];
  auto [ko, ki] = o.split(o.axis("k"), kb);
  o.reorder({o.axis("n"), ko, o.axis("h"), o.axis("w"), ki});
  o.parallel(o.fuse({o.axis("n"), ko, o.axis("h")}));
  o.unroll(ki);
  return {{in, {X, Xb}}, {out, {Yb, Y}}};
}

// The tuned conv2d is conv2d_nchwc (input [1, C/16, H, W, 16], weights
// [K/32, C/16, KH, KW, 16, 32]): the blocked layouts of CPU inference, as
// TVM's x86 conv2d uses. The layout change belongs to the graph level (once
// per model for the weights, at NCHW boundaries for activations), as
// PyTorch's channels_last leaves its own; the table shows it separately.
Workload conv(const std::string& id, int C, int K, int HW, int R, int pad) {
  auto f32 = DataType::Float(32);
  auto [cb, kb] = ops::nchwc_blocks(C, K);
  te::Tensor X = te::placeholder({1, C / cb, HW, HW, cb}, f32, "X"), W = te::placeholder({K / kb, C / cb, R, R, cb, kb}, f32, "W");
  std::string name = "conv2d_c" + std::to_string(C) + "k" + std::to_string(K) + "_" + std::to_string(HW) + "x" + std::to_string(HW) + "_" + std::to_string(R) + "x" + std::to_string(R) + "_nchwc";
  Workload w{id, name, "PyTorch", "torch_conv2d.py " + join({1, C, HW, HW, K, R, R, 1, pad}), {X, W, ops::conv2d_nchwc(X, W, 1, pad, "conv")}, {}};
  w.layout = nchwc_layout_changes(C, K, HW, HW + 2 * pad - R + 1, cb, kb);
  return w;
}

Workload make(const std::string& id) {
  auto f32 = DataType::Float(32);
  if (id == "gemm") {
    te::Tensor A = te::placeholder({1024, 1024}, f32, "A"), B = te::placeholder({1024, 1024}, f32, "B");
    return {id, "matmul_1024x1024x1024", "numpy (OpenBLAS)", "numpy_gemm.py 1024 1024 1024 ", {A, B, ops::matmul(A, B, "C")}, {}};
  }
  if (id == "conv1") return conv(id, 64, 64, 56, 3, 1);
  if (id == "conv2") return conv(id, 256, 256, 14, 3, 1);
  if (id == "conv3") return conv(id, 64, 256, 56, 1, 0);
  if (id == "dense") {
    te::Tensor A = te::placeholder({128, 768}, f32, "A"), B = te::placeholder({768, 3072}, f32, "B"), bias = te::placeholder({3072}, f32, "bias");
    te::Tensor Y = ops::gelu(ops::bias_add(ops::matmul(A, B, "dense"), bias, "bias_add"), "gelu");
    return {id, "dense_bias_gelu_128x3072x768", "numpy matmul+bias+GELU", "dense_gelu.py 128 3072 768 ", {A, B, bias, Y}, {}};
  }
  throw std::runtime_error("unknown workload '" + id + "'; known: gemm, conv1, conv2, conv3, dense");
}

// The peer scripts take the threads (torch, dense) and repeats at the end.
// The peer scripts take the threads (torch, dense) and repeats at the end;
// PyTorch runs in the given memory layout ("nchw" or "channels_last").
std::string peer_command(const Workload& w, int threads, int repeat, const std::string& layout = "nchw") {
  std::string t = std::to_string(threads);
  std::string r = std::to_string(repeat);
  // numpy_gemm.py: repeats; dense_gelu.py: threads repeats impl; torch_conv2d.py: threads repeats repeat_ms layout.
  std::string tail = w.id == "gemm" ? r : w.id == "dense" ? t + " " + r + " numpy" : t + " " + r + " 50 " + layout;
  return "env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OPENBLAS_NUM_THREADS=" + t + " OMP_NUM_THREADS=" + t + " /usr/bin/python3 " + bench::bench_dir() + "/peers/" +
         w.peer_args + tail;
}

/** The peer's times per call (its faster layout by median for PyTorch, named in *name); empty when it fails. */
std::vector<double> peer_times(const Workload& w, int threads, int repeat, std::string* name) {
  std::vector<std::string> layouts = w.peer_name == "PyTorch" ? std::vector<std::string>{"nchw", "channels_last"} : std::vector<std::string>{""};
  std::vector<double> best;
  for (const std::string& layout : layouts) {
    try {
      std::vector<double> t = bench::parse_times(bench::run_command(peer_command(w, threads, repeat, layout) + " 2>/dev/null"));
      if (!t.empty() && (best.empty() || bench::median_of(t) < bench::median_of(best))) best = t, *name = layout.empty() ? w.peer_name : w.peer_name + " (" + layout + ")";
    } catch (const std::exception& e) {
      std::fprintf(stderr, "peer %s failed: %s\n", w.peer_name.c_str(), e.what());
    }
  }
  return best;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(item);
  return out;
}

/** Best GFLOP/s of the curve once at least `trials` were measured; -1 when the session did not get there. */
double best_after(const tuner::TuneResult& r, int trials) {
  for (const auto& [n, g] : r.curve)
    if (n >= trials) return g;
  return -1;
}

NDArray random_array(const te::Tensor& t, uint64_t seed) {
  std::vector<int64_t> shape;
  for (const Expr& d : t.shape()) shape.push_back(*as_const_int(d));
  NDArray a = NDArray::empty(shape, t.dtype());
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(-1, 1);
  for (int64_t i = 0; i < a.numel(); ++i) a.data_as<float>()[i] = d(rng);
  return a;
}

int run_one_thread_count(int threads, const std::vector<std::string>& ids, int trials, int repeat, double timeout, std::string db, const std::string& curve_dir) {
  setenv("KILN_NUM_THREADS", std::to_string(threads).c_str(), 1);
  std::string tmpdir;
  if (db.empty()) {
    char tmpl[] = "/tmp/kiln_tune_bench_XXXXXX";
    tmpdir = mkdtemp(tmpl);
    db = tmpdir + "/tune.db";
  }
  Target target = Target::parse("llvm -num-cores=" + std::to_string(threads));
  std::printf("auto-scheduler vs peers, %d thread(s), %d trials per workload, db %s, target %s\n", threads, trials, db.c_str(), target.str().c_str());
  std::printf("%-32s %6s %9s %9s %9s %9s %8s %8s %6s %8s %8s %9s %7s %9s\n", "workload", "trials", "kiln min", "kiln med", "peer min", "peer med", "kiln GF/s",
              "peer GF/s", "k/p", "best@64", "best@200", "best@1000", "s/trial", "+layout");
  std::fflush(stdout);
  for (const std::string& id : ids) {
    Workload w = make(id);
    tuner::Task task = tuner::make_task(w.args, target, w.name);
    tuner::TuneOptions o;
    o.trials = trials;
    o.db_path = db;
    o.timeout_s = timeout;
    o.early_stop_rounds = 1000;  // a benchmark spends its budget
    if (!curve_dir.empty()) o.curve_png = curve_dir + "/" + w.id + "_t" + std::to_string(threads) + ".png";
    tuner::TuneResult r = tuner::tune(task, o);
    std::optional<te::Schedule> s = tuner::best_schedule(task, db);
    if (!s) {
      std::printf("%-30s %7d  no valid schedule found\n", w.name.c_str(), r.trials_measured);
      continue;
    }
    Module mod = build(*s, task.args, task.target, "main");
    std::vector<Arg> args;
    for (size_t i = 0; i < task.args.size(); ++i) args.emplace_back(random_array(task.args[i], i + 1));
    TimeResult kt = mod.time_evaluator("main", args, 1, repeat, 50);
    std::string peer_name = w.peer_name;
    std::vector<double> pt = peer_times(w, threads, repeat, &peer_name);
    double kmed = kt.median(), layout_med = 0;
    for (const Extra& e : w.layout) {
      Module lm = build(e.schedule, e.args, task.target, "main");
      std::vector<Arg> largs;
      for (size_t i = 0; i < e.args.size(); ++i) largs.emplace_back(random_array(e.args[i], i + 1));
      layout_med += lm.time_evaluator("main", largs, 1, repeat, 50).median();
    }
    auto cell = [](double g) { return g < 0 ? std::string("-") : std::to_string(static_cast<long>(std::lround(g))); };
    char peer_min[32] = "-", peer_med[32] = "-", peer_gf[32] = "-", ratio[32] = "-", with_layout[32] = "-";
    if (!pt.empty()) {
      double pmed = bench::median_of(pt);
      std::snprintf(peer_min, sizeof(peer_min), "%.3fms", bench::min_of(pt) * 1e3);
      std::snprintf(peer_med, sizeof(peer_med), "%.3fms", pmed * 1e3);
      std::snprintf(peer_gf, sizeof(peer_gf), "%.1f", task.flop / pmed * 1e-9);
      std::snprintf(ratio, sizeof(ratio), "%.2f", kmed / pmed);
      if (!w.layout.empty()) std::snprintf(with_layout, sizeof(with_layout), "%.2f", (kmed + layout_med) / pmed);
    }
    std::printf("%-32s %6d %7.3fms %7.3fms %9s %9s %8.1f %8s %6s %8s %8s %9s %7.2f %9s\n", w.name.c_str(), r.trials_measured, kt.min() * 1e3, kmed * 1e3, peer_min, peer_med,
                task.flop / kmed * 1e-9, peer_gf, ratio, cell(best_after(r, 64)).c_str(), cell(best_after(r, 200)).c_str(), cell(best_after(r, 1000)).c_str(),
                r.trials_measured ? r.elapsed_s / r.trials_measured : 0.0, with_layout);
    std::printf("    peer: %s; tuning: %d errors, %.0f s, first valid %.3f ms -> best %.3f ms during tuning\n", peer_name.c_str(), r.errors, r.elapsed_s, r.first_valid_time * 1e3,
                r.best_time * 1e3);
    std::fflush(stdout);
  }
  if (!tmpdir.empty()) std::filesystem::remove_all(tmpdir);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  tuner::prefer_passive_openmp(argv);
  int trials = 64, repeat = 5;
  double timeout = 10;
  std::string threads = "2", workloads = "gemm,conv1,conv2,conv3,dense", db, curve_dir;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i], v = argv[i + 1];
    if (a == "--trials") trials = std::stoi(v);
    else if (a == "--threads") threads = v;
    else if (a == "--workloads") workloads = v;
    else if (a == "--repeat") repeat = std::stoi(v);
    else if (a == "--db") db = v;
    else if (a == "--curve-dir") curve_dir = v;
    else if (a == "--timeout") timeout = std::stod(v);
    else {
      std::cerr << "unknown option " << a << "\n";
      return 2;
    }
  }
  std::vector<std::string> counts = split(threads);
  try {
    if (counts.size() == 1) return run_one_thread_count(std::stoi(counts[0]), split(workloads), trials, repeat, timeout, db, curve_dir);
    // One process per thread count: the runtime sizes its pool once per process.
    for (const std::string& t : counts) {
      std::fflush(stdout);
      pid_t pid = fork();
      if (pid == 0) {
        int rc = 1;
        try {
          rc = run_one_thread_count(std::stoi(t), split(workloads), trials, repeat, timeout, db, curve_dir);
        } catch (const std::exception& e) {
          std::fprintf(stderr, "tune_bench: %s\n", e.what());
        }
        std::fflush(stdout);
        _exit(rc);
      }
      int status = 0;
      waitpid(pid, &status, 0);
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return 1;
      std::printf("\n");
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tune_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
