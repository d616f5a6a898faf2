// The auto-scheduler against the peer libraries, in one run: each workload is
// tuned (from scratch in a fresh database unless --db is given; with --reuse
// the database's best record is used as it is when the workload has one),
// its best schedule is built here, and it is timed interleaved with its peers
// (kiln, peers, kiln, ... through bench/peers/launcher.py): min and median
// of each and the median of the per-round ratios with its range. Also the
// search's efficiency: the best found after 64, 200 and 1000 trials (where
// the budget reaches them) and the wall time per trial. The NCHWc
// convolutions count the input's NCHW -> NCHWc and the output's NCHWc -> NCHW
// changes in kiln's time (the fair figure for a layer between NCHW
// neighbours; inside a model they happen once); the kernel alone is noted.
//
//   tune_bench [--trials N] [--threads 1,2] [--workloads gemm,conv1,...] [--rounds R]
//              [--db PATH] [--reuse] [--curve-dir DIR] [--timeout S] [--json FILE]
//              [--mcpu haswell] [--blas-coretype Haswell]
//   --mcpu tunes for another CPU of this host's family (AVX2 code runs on an
//   AVX-512 host); --blas-coretype forces OpenBLAS's core type to match it.
//
// Workloads (fp32, batch 1 for convolutions):
//   gemm       1024 x 1024 x 1024 matmul           peers: numpy (OpenBLAS), torch.matmul
//   conv1      ResNet 3x3, C=K=64, 56x56, pad 1     peers: PyTorch NCHW, channels_last, oneDNN blocked
//   conv2      ResNet 3x3, C=K=256, 14x14, pad 1    peers: as conv1
//   conv3      ResNet 1x1, C=64, K=256, 56x56       peers: as conv1
//   dwconv     MobileNet depthwise 3x3, C=144, 56x56, pad 1 (NCHW)   peers: as conv1, groups=C
//   dense      gelu(A[128,768] B[768,3072] + bias)  peers: numpy+scipy erf, PyTorch gelu(linear)
//   softmax    softmax over rows of X[128,768]      peers: numpy, torch.softmax
//   layernorm  layer norm over rows of X[128,768] (gamma, beta)   peers: numpy, F.layer_norm
// With several thread counts each runs in its own process (the runtime reads
// KILN_NUM_THREADS once per process).
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>

#include "bench_util.h"
#include "kiln/driver/build.h"
#include "kiln/ir/op.h"
#include "kiln/ops/nn.h"
#include "kiln/tuner/openmp_policy.h"
#include "kiln/tuner/tune.h"
#include "kiln/tuning_db/database.h"

using namespace kiln;

namespace {

/** A kernel that is not tuned but timed with the tuned one (a layout change). */
struct Extra {
  te::Schedule schedule;
  std::vector<te::Tensor> args;
};

struct Workload {
  std::string id, name, goal;
  std::vector<te::Tensor> args;
  std::vector<tuner::PeerSpec> peers;  ///< threads filled in later
  std::vector<Extra> layout;           ///< conv: NCHW -> NCHWc of the input, NCHWc -> NCHW of the output
};

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

// The tuned conv2d is conv2d_nchwc (the blocked layouts of CPU inference,
// as TVM's x86 conv2d uses); the layout change belongs to the graph level.
Workload conv(const std::string& id, int C, int K, int HW, int R, int pad) {
  auto f32 = DataType::Float(32);
  auto [cb, kb] = ops::nchwc_blocks(C, K);
  te::Tensor X = te::placeholder({1, C / cb, HW, HW, cb}, f32, "X"), W = te::placeholder({K / kb, C / cb, R, R, cb, kb}, f32, "W");
  std::string name = "conv2d_c" + std::to_string(C) + "k" + std::to_string(K) + "_" + std::to_string(HW) + "x" + std::to_string(HW) + "_" + std::to_string(R) + "x" + std::to_string(R) + "_nchwc";
  Workload w{id, name, "<= 1.00 incl. layout", {X, W, ops::conv2d_nchwc(X, W, 1, pad, "conv")},
             tuner::peers_of("conv2d", {1, C, HW, HW, K, R, R, 1, pad}, 1), {}};
  w.layout = nchwc_layout_changes(C, K, HW, HW + 2 * pad - R + 1, cb, kb);
  return w;
}

Workload make(const std::string& id) {
  auto f32 = DataType::Float(32);
  if (id == "gemm") {
    te::Tensor A = te::placeholder({1024, 1024}, f32, "A"), B = te::placeholder({1024, 1024}, f32, "B");
    return {id, "matmul_1024x1024x1024", "<= 1.00 (1000 trials)", {A, B, ops::matmul(A, B, "C")}, tuner::peers_of("gemm", {1024, 1024, 1024}, 1), {}};
  }
  if (id == "conv1") return conv(id, 64, 64, 56, 3, 1);
  if (id == "conv2") return conv(id, 256, 256, 14, 3, 1);
  if (id == "conv3") return conv(id, 64, 256, 56, 1, 0);
  if (id == "dwconv") {
    te::Tensor X = te::placeholder({1, 144, 56, 56}, f32, "X"), W = te::placeholder({144, 1, 3, 3}, f32, "W");
    return {id, "depthwise_conv2d_c144_56x56_3x3", "-", {X, W, ops::depthwise_conv2d_nchw(X, W, 1, 1, "dwconv")},
            tuner::peers_of("conv2d", {1, 144, 56, 56, 144, 3, 3, 1, 1, 144}, 1), {}};
  }
  if (id == "dense") {
    te::Tensor A = te::placeholder({128, 768}, f32, "A"), B = te::placeholder({768, 3072}, f32, "B"), bias = te::placeholder({3072}, f32, "bias");
    te::Tensor Y = ops::gelu(ops::bias_add(ops::matmul(A, B, "dense"), bias, "bias_add"), "gelu");
    return {id, "dense_bias_gelu_128x3072x768", "<= 0.67 (1.5x)", {A, B, bias, Y}, tuner::peers_of("dense_gelu", {128, 3072, 768}, 1), {}};
  }
  if (id == "softmax") {
    te::Tensor X = te::placeholder({128, 768}, f32, "X");
    return {id, "softmax_128x768", "-", {X, ops::softmax(X, "softmax")}, tuner::peers_of("softmax", {128, 768}, 1), {}};
  }
  if (id == "layernorm") {
    te::Tensor X = te::placeholder({128, 768}, f32, "X"), g = te::placeholder({768}, f32, "gamma"), b = te::placeholder({768}, f32, "beta");
    return {id, "layer_norm_128x768", "-", {X, g, b, ops::layer_norm(X, g, b, 1e-5f, "layernorm")}, tuner::peers_of("layernorm", {128, 768}, 1), {}};
  }
  throw std::runtime_error("unknown workload '" + id + "'; known: gemm, conv1, conv2, conv3, dwconv, dense, softmax, layernorm");
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

/** Records of the task's workload on this target in the DB (valid or not). */
int64_t records_in_db(const tuner::Task& task, const std::string& db) {
  if (!std::filesystem::exists(db)) return 0;
  for (const auto& w : tuning_db::Database::open(db).stats().per_workload)
    if (w.workload_key == task.workload_key && w.target.target == task.target.str()) return w.records;
  return 0;
}

struct Options {
  int trials = 64, rounds = 7;
  double timeout = 10, repeat_ms = 50;
  bool reuse = false;
  std::string db, curve_dir, json;
  std::string mcpu;           ///< empty: the host CPU
  std::string blas_coretype;  ///< empty: OpenBLAS's fastest correct core type here
};

/** A built kernel and its random arguments, timed one measurement at a time. */
struct Timed {
  Module mod;
  std::vector<Arg> args;
  double once(double repeat_ms) const { return mod.time_evaluator("main", args, 1, 1, repeat_ms).results[0]; }
};

Timed build_timed(const te::Schedule& s, const std::vector<te::Tensor>& tensors, const Target& target) {
  Timed t{build(s, tensors, target, "main"), {}};
  for (size_t i = 0; i < tensors.size(); ++i) t.args.emplace_back(random_array(tensors[i], i + 1));
  return t;
}

void run_workload(const std::string& id, int threads, const Target& target, const Options& opt, const std::string& db, bench::JsonRows& json) {
  Workload w = make(id);
  tuner::Task task = tuner::make_task(w.args, target, w.name);
  int64_t before = records_in_db(task, db);
  tuner::TuneResult r;
  bool tuned_now = !(opt.reuse && before > 0 && tuner::best_schedule(task, db));
  if (tuned_now) {
    tuner::TuneOptions o;
    o.trials = opt.trials;
    o.db_path = db;
    o.timeout_s = opt.timeout;
    o.early_stop_rounds = 1000;  // a benchmark spends its budget
    r = tuner::tune(task, o);
    if (!opt.curve_dir.empty()) tuner::write_curve_png(r, opt.curve_dir + "/" + w.id + "_t" + std::to_string(threads) + ".png", task.name + " on " + task.target.str());
  }
  std::optional<te::Schedule> s = tuner::best_schedule(task, db);
  if (!s) {
    std::printf("%-32s no valid schedule found (%d trials)\n", w.name.c_str(), r.trials_measured);
    return;
  }
  Timed kernel = build_timed(*s, task.args, task.target);
  std::vector<Timed> layout;
  for (const Extra& e : w.layout) layout.push_back(build_timed(e.schedule, e.args, task.target));
  std::vector<double> kernel_only;
  auto kiln_round = [&] {
    double t = kernel.once(opt.repeat_ms);
    kernel_only.push_back(t);
    for (const Timed& l : layout) t += l.once(opt.repeat_ms / 4);
    return t;
  };
  for (tuner::PeerSpec& p : w.peers) p.threads = threads, p.blas_coretype = opt.blas_coretype;
  tuner::Comparison c = tuner::compare_interleaved(kiln_round, w.peers, opt.rounds, opt.repeat_ms);
  bench::report_failed_peers(c);
  int64_t records = records_in_db(task, db);
  const tuner::PeerTimes* p = c.best_peer();
  double kmed = bench::median_of(c.kiln);
  auto cell = [](double g) { return g < 0 ? std::string("-") : std::to_string(static_cast<long>(std::lround(g))); };
  std::printf("%-32s %7lld %7.3fms %7.3fms %9.3fms %9.3fms %8.1f %8.1f  %-19s %7s %8s %9s %7.2f  %s\n", w.name.c_str(), static_cast<long long>(records), bench::min_of(c.kiln) * 1e3,
              kmed * 1e3, p ? bench::min_of(p->times) * 1e3 : 0.0, p ? bench::median_of(p->times) * 1e3 : 0.0, task.flop / kmed * 1e-9,
              p ? task.flop / bench::median_of(p->times) * 1e-9 : 0.0, bench::ratio_cell(c).c_str(), cell(best_after(r, 64)).c_str(), cell(best_after(r, 200)).c_str(),
              cell(best_after(r, 1000)).c_str(), r.trials_measured ? r.elapsed_s / r.trials_measured : 0.0, p ? p->label.c_str() : "(no peer ran)");
  char note[160];
  std::snprintf(note, sizeof(note), "tuned record of %lld trials%s", static_cast<long long>(records), tuned_now ? "" : " (from the DB)");
  std::string n = note;
  if (!layout.empty()) {
    char k[96];
    std::snprintf(k, sizeof(k), "; kernel alone %.3f ms median, NCHW<->NCHWc layout changes counted", bench::median_of(kernel_only) * 1e3);
    n += k;
  }
  std::printf("    %s\n", n.c_str());
  std::fflush(stdout);
  nlohmann::json row = bench::comparison_row("tuned " + w.name, threads, c, w.goal, n);
  row["trials"] = records;
  row["gflops"] = task.flop / kmed * 1e-9;
  json.add(row);
}

int run_one_thread_count(int threads, const std::vector<std::string>& ids, const Options& opt, const std::string& json_path) {
  setenv("KILN_NUM_THREADS", std::to_string(threads).c_str(), 1);
  std::string tmpdir, db = opt.db;
  if (db.empty()) {
    char tmpl[] = "/tmp/kiln_tune_bench_XXXXXX";
    tmpdir = mkdtemp(tmpl);
    db = tmpdir + "/tune.db";
  }
  Target target = Target::parse("llvm" + (opt.mcpu.empty() ? "" : " -mcpu=" + opt.mcpu) + " -num-cores=" + std::to_string(threads));
  std::printf("auto-scheduler vs peers, %d thread(s), %d trials per workload%s, db %s, target %s, %d interleaved rounds\n", threads, opt.trials,
              opt.reuse ? " where the DB has no record" : "", db.c_str(), target.str().c_str(), opt.rounds);
  std::printf("%-32s %7s %9s %9s %11s %11s %8s %8s  %-19s %7s %8s %9s %7s  %s\n", "workload", "records", "kiln min", "kiln med", "peer min", "peer med", "kiln GF", "peer GF",
              "k/p med (range)", "best@64", "best@200", "best@1000", "s/trial", "best peer");
  std::fflush(stdout);
  bench::JsonRows json(json_path);
  for (const std::string& id : ids) run_workload(id, threads, target, opt, db, json);
  json.write();
  if (!tmpdir.empty()) std::filesystem::remove_all(tmpdir);
  return 0;
}

/** Merges the per-thread-count JSON files into one. */
void merge_json(const std::vector<std::string>& parts, const std::string& path) {
  nlohmann::json rows = nlohmann::json::array();
  for (const std::string& p : parts) {
    std::ifstream f(p);
    if (!f) continue;
    for (auto& r : nlohmann::json::parse(f)["rows"]) rows.push_back(r);
    std::remove(p.c_str());
  }
  std::ofstream(path) << nlohmann::json{{"rows", rows}}.dump(1) << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  // Passive OpenMP for XGBoost here; the peers never see it (the launcher drops it).
  tuner::prefer_passive_openmp(argv);
  Options opt;
  std::string threads = "2", workloads = "gemm,conv1,conv2,conv3,dwconv,dense,softmax,layernorm";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--reuse") {
      opt.reuse = true;
      continue;
    }
    if (i + 1 >= argc) {
      std::cerr << "option " << a << " needs a value\n";
      return 2;
    }
    std::string v = argv[++i];
    if (a == "--trials") opt.trials = std::stoi(v);
    else if (a == "--threads") threads = v;
    else if (a == "--workloads") workloads = v;
    else if (a == "--rounds" || a == "--repeat") opt.rounds = std::stoi(v);
    else if (a == "--repeat-ms") opt.repeat_ms = std::stod(v);
    else if (a == "--db") opt.db = v;
    else if (a == "--curve-dir") opt.curve_dir = v;
    else if (a == "--timeout") opt.timeout = std::stod(v);
    else if (a == "--json") opt.json = v;
    else if (a == "--mcpu") opt.mcpu = v;
    else if (a == "--blas-coretype") opt.blas_coretype = v;
    else {
      std::cerr << "unknown option " << a << "\n";
      return 2;
    }
  }
  std::vector<std::string> counts = split(threads);
  try {
    if (counts.size() == 1) return run_one_thread_count(std::stoi(counts[0]), split(workloads), opt, opt.json);
    // One process per thread count: the runtime sizes its pool once per process.
    std::vector<std::string> parts;
    for (const std::string& t : counts) {
      std::string part = opt.json.empty() ? "" : opt.json + ".t" + t;
      if (!part.empty()) parts.push_back(part);
      std::fflush(stdout);
      pid_t pid = fork();
      if (pid == 0) {
        int rc = 1;
        try {
          rc = run_one_thread_count(std::stoi(t), split(workloads), opt, part);
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
    if (!opt.json.empty()) merge_json(parts, opt.json);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tune_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
