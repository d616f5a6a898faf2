// What a tuning session shows: a live status line on stderr, the summary at
// the end, and the curve of the session (every trial, the best so far, the
// peer) as a PNG.
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "kiln/tuner/peer.h"
#include "tune_internal.h"

namespace kiln::tuner::detail {

namespace {

std::string clock_text(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--:--";
  long s = std::lround(seconds);
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof(buf), "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  else std::snprintf(buf, sizeof(buf), "%ld:%02ld", s / 60, s % 60);
  return buf;
}

}  // namespace

Progress::Progress(bool enabled, std::string name, int budget)
    : enabled_(enabled), tty_(isatty(STDERR_FILENO) == 1), name_(std::move(name)), budget_(budget), start_(std::chrono::steady_clock::now()), last_print_(start_) {}

double Progress::elapsed() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }

void Progress::update(int done, int skipped, int errors, double best_gflops) {
  if (!enabled_) return;
  double t = elapsed();
  // Remaining time from the pace so far; the budget may end early (early stop).
  double eta = done > 0 ? t / done * std::max(0, budget_ - done) : NAN;
  char buf[256];
  std::snprintf(buf, sizeof(buf), "[%s] trials %d/%d  best %.1f GFLOP/s  errors %d  skipped %d  elapsed %s  remaining ~%s", name_.c_str(), done, budget_, best_gflops,
                errors, skipped, clock_text(t).c_str(), clock_text(eta).c_str());
  std::string line = buf;
  if (tty_) {
    // Pad to erase a longer previous line; \r returns to its start.
    std::string pad(last_line_.size() > line.size() ? last_line_.size() - line.size() : 0, ' ');
    std::fprintf(stderr, "\r%s%s", line.c_str(), pad.c_str());
    line_open_ = true;
  } else {
    // Logs and CI: a plain line, at most every 5 s (and always at the end of the budget).
    auto now = std::chrono::steady_clock::now();
    if (done < budget_ && done > 0 && std::chrono::duration<double>(now - last_print_).count() < 5) return;
    last_print_ = now;
    std::fprintf(stderr, "%s\n", line.c_str());
  }
  last_line_ = line;
  std::fflush(stderr);
}

void Progress::note(const std::string& line) {
  if (!enabled_) return;
  if (line_open_) std::fprintf(stderr, "\n");
  line_open_ = false;
  last_line_.clear();
  std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
}

void Progress::finish() {
  if (!enabled_) return;
  if (line_open_) std::fprintf(stderr, "\n");
  line_open_ = false;
  std::fflush(stderr);
}

std::string format_summary(const Task& task, const TuneResult& r, int64_t record_id, double db_best_before) {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(1);
  os << "tuned " << task.name << " on " << task.target.str() << ": " << r.trials_measured << " trials measured (" << r.errors << " errors, " << r.trials_skipped
     << " skipped as already in the DB) in " << r.elapsed_s << " s";
  if (r.featurized > 0) {
    os.precision(2);
    os << "; cost-model features of " << r.featurized << " candidates, " << r.feature_ms_per_candidate << " ms each";
    os.precision(1);
  }
  os << "\n";
  if (r.best_time <= 0) {
    os << "  no valid schedule was found; the records (errors included) are in " << r.db_path;
    return os.str();
  }
  os.precision(4);
  os << "  best: " << r.best_time * 1e3 << " ms (median), ";
  os.precision(1);
  os << r.best_gflops << " GFLOP/s";
  if (r.first_valid_time > 0) {
    os.precision(2);
    os << ", " << r.first_valid_time / r.best_time << "x faster than the first valid candidate (";
    os.precision(4);
    os << r.first_valid_time * 1e3 << " ms)";
  }
  if (db_best_before > 0 && db_best_before <= r.best_time * (1 + 1e-12)) os << "; from an earlier session";
  os << "\n  record: " << r.db_path << " (workload " << task.workload_key;
  if (record_id > 0) os << ", record id " << record_id;
  os << ")";
  return os.str();
}

// ---------------------------------------------------------------- the curve

}  // namespace kiln::tuner::detail

namespace kiln::tuner {

namespace {

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\', out += c;
    else if (static_cast<unsigned char>(c) < 0x20) out += ' ';
    else out += c;
  }
  return out + "\"";
}

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

/** The plot's input: {"title", "output", "trials": [GFLOP/s or null for a failure, ...], "peer": {"name", "gflops"}}. */
std::string curve_json(const TuneResult& r, const std::string& path, const std::string& title, const CurvePeer* peer) {
  std::ostringstream json;
  json.precision(17);
  json << "{\"title\": " << json_string(title) << ", \"output\": " << json_string(path) << ", \"trials\": [";
  for (size_t i = 0; i < r.trial_gflops.size(); ++i) {
    json << (i ? ", " : "");
    if (r.trial_gflops[i] > 0) json << r.trial_gflops[i];
    else json << "null";
  }
  json << "]";
  if (peer && peer->gflops > 0) json << ", \"peer\": {\"name\": " << json_string(peer->name) << ", \"gflops\": " << peer->gflops << "}";
  json << "}";
  return json.str();
}

}  // namespace

std::string write_curve_png(const TuneResult& result, const std::string& path, const std::string& title, const CurvePeer* peer) {
  std::string script = plot_curve_script(), python = python_executable();
  if (!std::filesystem::exists(script))
    return "the plot script " + script + " is missing (set KILN_PLOT_CURVE_SCRIPT to python/kiln/plot_curve.py of the kiln sources)";
  // The curve goes through a temporary file; the script's messages come back on its stdout.
  char tmp[] = "/tmp/kiln_curve_XXXXXX";
  int fd = mkstemp(tmp);
  if (fd < 0) return "cannot create a temporary file for the curve";
  std::string text = curve_json(result, path, title, peer);
  bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  std::string cmd = shell_quote(python) + " " + shell_quote(script) + " " + shell_quote(tmp) + " 2>&1";
  FILE* p = written ? popen(cmd.c_str(), "r") : nullptr;
  if (!p) {
    std::remove(tmp);
    return "cannot run " + cmd;
  }
  std::string out;
  char buf[1024];
  while (size_t n = std::fread(buf, 1, sizeof(buf), p)) out.append(buf, n);
  int status = pclose(p);
  std::remove(tmp);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  if (status == -1 || !WIFEXITED(status)) return "the plot script did not finish (" + cmd + ")";
  int code = WEXITSTATUS(status);
  if (code == 3) return "matplotlib is not installed for " + python + " (apt-get install python3-matplotlib); no curve was written";
  if (code != 0) return "the plot script failed with status " + std::to_string(code) + ": " + out;
  return "";
}

}  // namespace kiln::tuner
