// The C++ client of bench/peers/launcher.py: one peer per process, spoken
// to in JSON lines over pipes (no shell in between), with a time limit on
// every answer; and the interleaved comparison of kiln with its peers.
#include "kiln/tuner/peer.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>

extern char** environ;

namespace kiln::tuner {

namespace {

std::string spec_json(const PeerSpec& s) {
  nlohmann::json j = {{"kind", s.kind}, {"impl", s.impl}, {"args", s.args}, {"threads", s.threads}};
  if (!s.paths_json.empty()) j["paths"] = nlohmann::json::parse(s.paths_json);
  if (!s.blas_coretype.empty()) j["blas_coretype"] = s.blas_coretype;
  return j.dump();
}

std::string read_all(int fd) {
  std::string out;
  char buf[4096];
  ssize_t n;
  off_t off = 0;
  while ((n = pread(fd, buf, sizeof(buf), off)) > 0) out.append(buf, n), off += n;
  return out;
}

}  // namespace

PeerProcess::PeerProcess(const PeerSpec& spec, double timeout_s) : timeout_s_(timeout_s), what_(spec.kind + "/" + spec.impl) {
  // A peer that dies must not take the bench with it through SIGPIPE on its stdin.
  struct sigaction old {};
  if (sigaction(SIGPIPE, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) signal(SIGPIPE, SIG_IGN);
  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) != 0) throw PeerError("peer " + what_ + ": cannot create a pipe");
  if (pipe2(out, O_CLOEXEC) != 0) {
    close(in[0]), close(in[1]);
    throw PeerError("peer " + what_ + ": cannot create a pipe");
  }
  // The peer's stderr goes to an unlinked temporary file, read back when it fails.
  char tmpl[] = "/tmp/kiln_peer_err_XXXXXX";
  err_ = mkostemp(tmpl, O_CLOEXEC);
  if (err_ >= 0) unlink(tmpl);
  std::string launcher = peers_dir() + "/launcher.py", python = python_executable(), spec_text = spec_json(spec);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  if (err_ >= 0) posix_spawn_file_actions_adddup2(&fa, err_, 2);
  std::vector<char*> argv = {python.data(), launcher.data(), const_cast<char*>("serve"), spec_text.data(), nullptr};
  int rc = posix_spawnp(&pid_, python.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  close(in[0]), close(out[1]);
  to_ = in[1], from_ = out[0];
  if (rc != 0) {
    pid_ = -1;
    fail("cannot start " + python + " " + launcher + ": " + std::strerror(rc));
  }
  nlohmann::json hello;
  std::string line = read_line();
  try {
    hello = nlohmann::json::parse(line);
  } catch (const std::exception&) {
    fail("it printed '" + line + "' instead of its ready line");
  }
  if (!hello.value("ready", false)) fail(hello.value("error", std::string("not ready")));
  label_ = hello.value("label", what_);
  if (hello.contains("check_error") && hello["check_error"].is_number()) check_error_ = hello["check_error"].get<double>();
}

PeerProcess::~PeerProcess() {
  if (to_ >= 0) {
    const char quit[] = "{\"op\": \"quit\"}\n";
    [[maybe_unused]] ssize_t n = write(to_, quit, sizeof(quit) - 1);
  }
  stop(1.0);
  if (err_ >= 0) close(err_);
}

void PeerProcess::stop(double grace_s) {
  if (to_ >= 0) close(to_), to_ = -1;
  if (pid_ > 0) {
    // Time to leave on its own (it sees the end of its input), then it is killed.
    bool gone = false;
    for (int i = 0; i < grace_s * 100 && !(gone = waitpid(pid_, nullptr, WNOHANG) == pid_); ++i) usleep(10000);
    if (!gone) kill(pid_, SIGKILL), waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  if (from_ >= 0) close(from_), from_ = -1;
}

void PeerProcess::fail(const std::string& why) {
  stop(0.2);
  std::string err = err_ >= 0 ? read_all(err_) : "";
  if (err_ >= 0) close(err_), err_ = -1;
  if (err.size() > 800) err = "..." + err.substr(err.size() - 800);
  throw PeerError("peer " + what_ + ": " + why + (err.empty() ? "" : "\n  its stderr: " + err));
}

std::string PeerProcess::read_line() {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s_);
  for (;;) {
    size_t nl = buffer_.find('\n');
    if (nl != std::string::npos) {
      std::string line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      return line;
    }
    int left = static_cast<int>(std::chrono::duration<double, std::milli>(deadline - std::chrono::steady_clock::now()).count());
    pollfd p{from_, POLLIN, 0};
    if (left <= 0 || poll(&p, 1, left) == 0) {
      if (pid_ > 0) kill(pid_, SIGKILL);
      fail("no answer within " + std::to_string(static_cast<int>(timeout_s_)) + " s (killed)");
    }
    char buf[4096];
    ssize_t n = read(from_, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int status = 0;
      if (pid_ > 0) waitpid(pid_, &status, 0);
      pid_ = -1;
      fail(WIFSIGNALED(status) ? "it died of signal " + std::to_string(WTERMSIG(status)) : "it exited with status " + std::to_string(WEXITSTATUS(status)));
    }
    buffer_.append(buf, n);
  }
}

std::vector<double> PeerProcess::time(int repeats, double repeat_ms) {
  std::string req = nlohmann::json{{"op", "time"}, {"repeats", repeats}, {"repeat_ms", repeat_ms}}.dump() + "\n";
  if (to_ < 0) fail("it has stopped");
  if (write(to_, req.data(), req.size()) != static_cast<ssize_t>(req.size())) fail("cannot send it a request (it has gone)");
  std::string line = read_line();
  nlohmann::json reply;
  try {
    reply = nlohmann::json::parse(line);
  } catch (const std::exception&) {
    fail("unreadable answer '" + line + "'");
  }
  if (!reply.contains("times")) fail(reply.value("error", std::string("no times in its answer")));
  return reply["times"].get<std::vector<double>>();
}

std::vector<PeerSpec> peers_of(const std::string& kind, const std::vector<long>& args, int threads) {
  std::vector<std::string> impls = {"numpy", "torch"};
  if (kind == "conv2d") impls = {"torch_nchw", "torch_channels_last", "torch_mkldnn"};
  std::vector<PeerSpec> v;
  for (const std::string& impl : impls) v.push_back({kind, impl, args, threads, "", ""});
  return v;
}

double min_of(const std::vector<double>& v) { return v.empty() ? 0 : *std::min_element(v.begin(), v.end()); }

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

Comparison compare_interleaved(const std::function<double()>& kiln_round, const std::vector<PeerSpec>& specs, int rounds, double repeat_ms, double settle_s) {
  Comparison c;
  std::vector<std::unique_ptr<PeerProcess>> procs;
  for (const PeerSpec& s : specs) {
    try {
      procs.push_back(std::make_unique<PeerProcess>(s));
      c.peers.push_back({procs.back()->label(), {}, procs.back()->check_error()});
    } catch (const PeerError& e) {
      c.failed.push_back(s.kind + "/" + s.impl + ": " + e.what());
    }
  }
  for (int r = 0; r < std::max(5, rounds); ++r) {
    c.kiln.push_back(kiln_round());
    for (size_t i = 0; i < procs.size(); ++i) {
      if (!procs[i]) continue;
      try {
        std::vector<double> t = procs[i]->time(1, repeat_ms);
        c.peers[i].times.insert(c.peers[i].times.end(), t.begin(), t.end());
        // OpenBLAS's idle threads spin for about 2^28 cycles after a call:
        // let them go to sleep before the next side is timed.
        if (settle_s > 0) usleep(static_cast<useconds_t>(settle_s * 1e6));
      } catch (const PeerError& e) {
        c.failed.push_back(c.peers[i].label + ": " + e.what());
        procs[i].reset();
      }
    }
  }
  for (size_t i = procs.size(); i-- > 0;)
    if (!procs[i]) c.peers.erase(c.peers.begin() + i);
  for (size_t i = 0; i < c.peers.size(); ++i)
    if (c.best < 0 || median_of(c.peers[i].times) < median_of(c.peers[c.best].times)) c.best = static_cast<int>(i);
  if (const PeerTimes* b = c.best_peer())
    for (size_t r = 0; r < c.kiln.size(); ++r) c.ratios.push_back(c.kiln[r] / b->times[r]);
  return c;
}

}  // namespace kiln::tuner
