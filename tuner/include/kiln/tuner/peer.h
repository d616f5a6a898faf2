/** \file
 * The peer libraries (OpenBLAS through numpy, PyTorch) timed beside kiln in
 * the same run: the C++ side of bench/peers/launcher.py, used by the
 * benchmarks and kiln-tune.
 *
 * A peer runs in its own Python process started through the launcher (a
 * clean environment: no KILN_* settings, no OMP_WAIT_POLICY, the thread
 * count asked for, OpenBLAS with its fastest correct core type), warmed up
 * once, then timed on request. compare_interleaved() alternates kiln and
 * the peers round by round (kiln, peer, kiln, peer, ...), so a machine whose
 * speed drifts slows both alike, and reports the per-round ratios.
 */
#ifndef KILN_TUNER_PEER_H
#define KILN_TUNER_PEER_H

#include <sys/types.h>

#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace kiln::tuner {

/** bench/peers (launcher.py and the peer scripts): $KILN_PEERS_DIR, else next to libkiln_tuner (installed, or copied there in a build tree), else the source tree. */
std::string peers_dir();
/** python/kiln/plot_curve.py: $KILN_PLOT_CURVE_SCRIPT, else next to libkiln_tuner, else the source tree. */
std::string plot_curve_script();
/** The interpreter for the peers and the plot: $KILN_PYTHON, else /usr/bin/python3, else python3 on the PATH. */
std::string python_executable();

/** A peer failed to start, answer, or answered nonsense. */
struct PeerError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/** Which peer to run; kinds and impls are listed in bench/peers/peer_kernels.py. */
struct PeerSpec {
  std::string kind;           ///< "gemm", "conv2d", "dense_gelu", "softmax", "layernorm"
  std::string impl;           ///< "numpy", "torch", "torch_nchw", "torch_channels_last", "torch_mkldnn"
  std::vector<long> args;     ///< sizes, e.g. M N K
  int threads = 1;
  std::string paths_json;     ///< conv2d: {"x": ..., "w": ..., "y": ...} raw float32 files, or empty
  /** OpenBLAS core type to force (e.g. "Haswell" to compare AVX2 code with AVX2 kernels); empty: the fastest correct one. */
  std::string blas_coretype;
};

/**
 * Every peer of a workload kind, for `threads` threads (the comparison counts
 * the fastest): gemm: numpy and torch.matmul; conv2d: PyTorch NCHW,
 * channels_last and oneDNN blocked; dense_gelu, softmax, layernorm: numpy
 * and PyTorch. The one place that says which peers a workload has.
 */
std::vector<PeerSpec> peers_of(const std::string& kind, const std::vector<long>& args, int threads);

/** One running peer worker. Not copyable; the process ends with the object. */
class PeerProcess {
 public:
  /** Starts and warms up the peer; throws PeerError (with the peer's own message) when it cannot. */
  explicit PeerProcess(const PeerSpec& spec, double timeout_s = 300);
  ~PeerProcess();
  PeerProcess(const PeerProcess&) = delete;
  PeerProcess& operator=(const PeerProcess&) = delete;

  /** Seconds per call of `repeats` measurements, each lasting about repeat_ms; throws PeerError. */
  std::vector<double> time(int repeats, double repeat_ms);
  /** The library and its setup, e.g. "numpy OpenBLAS 0.3.21 SkylakeX 2T". */
  const std::string& label() const { return label_; }
  /** Relative error of the peer's result against a float64 reference (-1: not checked). */
  double check_error() const { return check_error_; }

 private:
  std::string read_line();
  /** Ends the process (killed after grace_s) and closes the pipes. */
  void stop(double grace_s);
  /** Stops the peer and throws a PeerError with `why` and the tail of its stderr. */
  [[noreturn]] void fail(const std::string& why);
  pid_t pid_ = -1;
  int to_ = -1, from_ = -1, err_ = -1;
  double timeout_s_;
  std::string buffer_, label_, what_;
  double check_error_ = -1;
};

/** The times of one peer over the rounds. */
struct PeerTimes {
  std::string label;
  std::vector<double> times;
  double check_error = -1;
};

/** The result of compare_interleaved(); times in seconds per call, one per round. */
struct Comparison {
  std::vector<double> kiln;
  std::vector<PeerTimes> peers;      ///< the peers that answered every round
  std::vector<std::string> failed;   ///< "kind/impl: why" of the others
  int best = -1;                     ///< index of the peer with the lowest median (-1: none ran)
  std::vector<double> ratios;        ///< kiln / best peer, per round (below 1: kiln is faster)

  const PeerTimes* best_peer() const { return best < 0 ? nullptr : &peers[best]; }
};

/** Min and median of timings (0 when empty); the measurer, the comparison and the benches share them. */
double min_of(const std::vector<double>& v);
double median_of(std::vector<double> v);

/**
 * Starts the peers, then `rounds` rounds (at least 5) of kiln_round() (one
 * measurement of kiln, seconds per call) followed by one measurement of each
 * peer of about repeat_ms, each followed by a pause of settle_s (the peer's
 * idle threads may spin a while after a call). A peer that fails is dropped and named in
 * `failed`; the comparison never throws for a peer's failure.
 */
Comparison compare_interleaved(const std::function<double()>& kiln_round, const std::vector<PeerSpec>& peers, int rounds = 7, double repeat_ms = 50,
                               double settle_s = 0.15);

}  // namespace kiln::tuner

#endif  // KILN_TUNER_PEER_H
