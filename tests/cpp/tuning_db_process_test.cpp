// Several processes writing one database at once, and a writer killed with
// SIGKILL in the middle of a batch. The writers are the helper program
// tests/cpp/tuning_db_tools/tuning_db_writer.cpp (path: KILN_TUNING_DB_WRITER).
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <set>
#include <thread>
#include <tuple>

#include <nlohmann/json.hpp>

#include "kiln/support/error.h"
#include "kiln/tuning_db/database.h"
#include "kiln/tuning_db/detail.h"
#include "tuning_db_tools/test_util.h"

extern char** environ;

namespace kiln::tuning_db {
namespace {

using testing::TempDir;

/** A writer process whose stdout ("begin B" / "commit B" lines) we read. */
class Writer {
 public:
  Writer(const std::string& db, int id, int batches, int batch_size, int pad = 0) {
    int fds[2];
    if (::pipe(fds) != 0) return;
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
    posix_spawn_file_actions_addclose(&actions, fds[0]);
    std::vector<std::string> args = {KILN_TUNING_DB_WRITER, db, std::to_string(id),
                                     std::to_string(batches), std::to_string(batch_size),
                                     std::to_string(pad)};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&actions);
    ::close(fds[1]);
    out_ = ::fdopen(fds[0], "r");
  }
  ~Writer() {
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (out_) std::fclose(out_);
  }
  bool started() const { return pid_ > 0 && out_; }

  /** The next line of output without its newline; "" at end of output. */
  std::string next_line() {
    char buf[128];
    if (!std::fgets(buf, sizeof buf, out_)) return "";
    std::string line = buf;
    if (!line.empty() && line.back() == '\n') line.pop_back();
    return line;
  }
  /** Reads lines until `line` appears; false if the output ends first. */
  bool wait_for(const std::string& line) {
    for (std::string l = next_line(); !l.empty(); l = next_line())
      if (l == line) return true;
    return false;
  }
  /** True when output is waiting to be read (without blocking). */
  bool has_output() {
    pollfd p{::fileno(out_), POLLIN, 0};
    return ::poll(&p, 1, 0) > 0;
  }
  /** Waits for exit; returns the exit status, or -signal when killed. */
  int wait() {
    int status = 0;
    ::waitpid(pid_, &status, 0);
    reaped_ = true;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  }
  void kill9() { ::kill(pid_, SIGKILL); }

 private:
  pid_t pid_ = -1;
  FILE* out_ = nullptr;
  bool reaped_ = false;
};

/** (writer, batch, index) of every record, read back from the traces. */
std::multiset<std::tuple<int, int, int>> written(Database& db) {
  std::multiset<std::tuple<int, int, int>> out;
  for (const Record& r : db.records("00000000000000aa")) {
    auto step = nlohmann::json::parse(r.trace).at(0);
    out.emplace(step.at("writer").get<int>(), step.at("batch").get<int>(), step.at("i").get<int>());
  }
  return out;
}

int count_writer(const std::multiset<std::tuple<int, int, int>>& all, int writer) {
  int n = 0;
  for (const auto& t : all) n += std::get<0>(t) == writer;
  return n;
}

TEST(TuningDbProcesses, ConcurrentWritersLoseNothing) {
  TempDir dir;
  const std::string path = dir.file("shared.db");  // created by whichever writer is first
  constexpr int kWriters = 4, kBatches = 20, kBatchSize = 64;
  std::vector<std::unique_ptr<Writer>> writers;
  for (int w = 0; w < kWriters; ++w)
    writers.push_back(std::make_unique<Writer>(path, w, kBatches, kBatchSize));
  for (auto& w : writers) ASSERT_TRUE(w->started());
  // Drain output so no writer blocks on a full pipe, then check each exited cleanly.
  for (auto& w : writers) {
    while (!w->next_line().empty()) {
    }
    EXPECT_EQ(w->wait(), 0);
  }
  Database db = Database::open(path);
  auto all = written(db);
  EXPECT_EQ(all.size(), static_cast<size_t>(kWriters * kBatches * kBatchSize));
  for (int w = 0; w < kWriters; ++w)
    for (int b = 0; b < kBatches; ++b)
      for (int i = 0; i < kBatchSize; ++i)
        EXPECT_EQ(all.count({w, b, i}), 1u) << "writer " << w << " batch " << b << " record " << i;
  EXPECT_EQ(db.runs().size(), static_cast<size_t>(kWriters));
  EXPECT_TRUE(db.check_integrity().empty());
}

/** True while some connection holds the write lock (a write transaction is open). */
bool write_locked(detail::Connection& probe) {
  try {
    probe.exec("BEGIN IMMEDIATE");  // busy timeout 0: fails at once when locked
  } catch (const Error&) {
    return true;
  }
  probe.exec("ROLLBACK");
  return false;
}

TEST(TuningDbProcesses, WriterKilledMidBatchLosesOnlyThatBatch) {
  TempDir dir;
  const std::string path = dir.file("killed.db");
  constexpr int kBig = 4000, kPad = 1000;  // a batch of ~4 MB takes long enough to interrupt
  Database::open(path).add_workload({"00000000000000aa", "shared_matmul", R"({"ops":["matmul"]})"});
  Writer before(path, 2, 10, 64);
  while (!before.next_line().empty()) {
  }
  ASSERT_EQ(before.wait(), 0);

  Writer victim(path, 1, 1000, kBig, kPad);
  ASSERT_TRUE(victim.started());
  ASSERT_TRUE(victim.wait_for("commit 0"));
  // The victim is the only writer now, so a held write lock means it is inside
  // add_records()'s transaction, past validation: kill it there.
  detail::Connection probe(path, false, false, /*busy_timeout_ms=*/0);
  int killed_batch = 1;
  for (bool inside = false; !inside; ++killed_batch) {
    ASSERT_LT(killed_batch, 50) << "could not catch the writer inside a batch";
    ASSERT_TRUE(victim.wait_for("begin " + std::to_string(killed_batch)));
    while (!inside && !victim.has_output()) {
      inside = write_locked(probe);
      if (!inside) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (inside) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // let it write some rows
      victim.kill9();
      break;
    }
  }
  EXPECT_EQ(victim.wait(), -SIGKILL);

  // Another process recovers the file (WAL replay) and keeps writing.
  Writer after(path, 3, 10, 64);
  while (!after.next_line().empty()) {
  }
  EXPECT_EQ(after.wait(), 0);

  Database db = Database::open(path);
  EXPECT_TRUE(db.check_integrity().empty());
  auto all = written(db);
  int victim_records = count_writer(all, 1);
  std::printf("killed inside batch %d; %d records of the killed writer kept\n", killed_batch,
              victim_records);
  EXPECT_EQ(victim_records, killed_batch * kBig) << "only the interrupted batch may be lost";
  for (int b = 0; b < killed_batch; ++b)
    for (int i = 0; i < kBig; i += 97) EXPECT_EQ(all.count({1, b, i}), 1u);
  EXPECT_EQ(count_writer(all, 2), 10 * 64);
  EXPECT_EQ(count_writer(all, 3), 10 * 64);
  EXPECT_EQ(db.stats().records, victim_records + 2 * 10 * 64);
}

}  // namespace
}  // namespace kiln::tuning_db
