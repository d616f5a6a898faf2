// Concurrent tuning sessions on one database (tuner/include/kiln/tuner/tune.h):
// each session runs in a forked child process, as two `kiln-tune` runs
// would, and the parent looks at what they left in the database. The parent
// never tunes itself, so every child forks from a process without OpenMP or
// XGBoost threads.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "kiln/ops/nn.h"
#include "kiln/support/error.h"
#include "kiln/tuner/tune.h"
#include "kiln/tuning_db/database.h"
#include "tuner_test_util.h"
#include "kiln/tuning_db/detail.h"

namespace kiln::tuner {
namespace {

namespace fs = std::filesystem;

using testing::gemm_task;
using testing::TempDb;

/** Small sessions that all start from the same seed, so they propose the same candidates first. */
TuneOptions tiny(const std::string& db, int trials) {
  TuneOptions o;
  o.trials = trials;
  o.batch_size = 8;
  o.early_stop_rounds = 100;  // the budget ends these sessions, not early stopping
  o.seed = 1;
  o.db_path = db;
  o.timeout_s = 10;
  o.measure.repeat = 2;
  o.measure.min_repeat_ms = 1;
  o.measure.build_threads = 1;
  o.progress = false;
  o.population = 16;
  o.generations = 2;
  return o;
}

/** What a child's session reported: trials measured, skipped (in the DB), claimed by another session, and records taken in from others. */
struct Outcome {
  int measured = -1, skipped = -1, claimed_elsewhere = -1, from_others = -1;
};

/**
 * Runs tune() in a child process; its exit status is 0 when the session ran
 * to its end. With `outcome`, the child writes its counts to that file.
 */
pid_t fork_session(const Task& task, const TuneOptions& o, const std::string& outcome = "") {
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid != 0) return pid;
  int code = 0;
  try {
    TuneResult r = tune(task, o);
    if (!outcome.empty()) std::ofstream(outcome) << r.trials_measured << " " << r.trials_skipped << " " << r.trials_claimed_elsewhere << " " << r.records_from_others << "\n";
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tuning session failed: %s\n", e.what());
    code = 2;
  }
  std::fflush(nullptr);
  _exit(code);
}

/** Waits for a child; returns its exit status, or -signal when a signal ended it. */
int wait_child(pid_t pid) {
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1000;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

Outcome read_outcome(const std::string& file) {
  Outcome o;
  std::ifstream(file) >> o.measured >> o.skipped >> o.claimed_elsewhere >> o.from_others;
  return o;
}

std::vector<tuning_db::Record> records_of(const std::string& db, const Task& t) {
  return tuning_db::Database::open(db).records(t.workload_key);
}

// Two sessions tuning one workload at once, from the same seed: between them
// they measure their whole budgets, and no trace twice (before claims: 80
// records of 63 distinct traces with 2 x 40 trials).
TEST(TunerSessions, ConcurrentSessionsNeverMeasureATraceTwice) {
  TempDb db;
  Task task = gemm_task(64);
  const int trials = 40;
  TuneOptions o = tiny(db.path(), trials);
  const std::string out_a = (db.dir / "a.txt").string(), out_b = (db.dir / "b.txt").string();
  pid_t a = fork_session(task, o, out_a);
  pid_t b = fork_session(task, o, out_b);
  ASSERT_GT(a, 0);
  ASSERT_GT(b, 0);
  EXPECT_EQ(wait_child(a), 0);
  EXPECT_EQ(wait_child(b), 0);
  Outcome ra = read_outcome(out_a), rb = read_outcome(out_b);
  EXPECT_EQ(ra.measured, trials);
  EXPECT_EQ(rb.measured, trials);
  // From one seed they propose the same candidates first: the later one to
  // claim finds them claimed (or already stored) by the other.
  EXPECT_GT(ra.skipped + ra.claimed_elsewhere + rb.skipped + rb.claimed_elsewhere, 0);
  // Five rounds each at the same time: between rounds, each learns from what the other stored.
  EXPECT_GT(ra.from_others + rb.from_others, 0);
  EXPECT_LE(ra.from_others, trials);
  EXPECT_LE(rb.from_others, trials);
  std::printf("sessions: measured %d + %d, skipped %d + %d, claimed elsewhere %d + %d, records from the other %d + %d\n", ra.measured, rb.measured,
              ra.skipped, rb.skipped, ra.claimed_elsewhere, rb.claimed_elsewhere, ra.from_others, rb.from_others);

  std::vector<tuning_db::Record> recs = records_of(db.path(), task);
  std::map<std::string, int> count;
  for (const auto& r : recs) ++count[r.trace];
  int duplicated = 0;
  for (const auto& [trace, n] : count) duplicated += n > 1;
  EXPECT_EQ(recs.size(), count.size()) << duplicated << " traces were measured more than once";
  EXPECT_EQ(static_cast<int>(recs.size()), 2 * trials) << "each session spends its whole budget on new traces";
  std::set<std::string> runs;
  for (const auto& r : recs) runs.insert(r.run_uid);
  EXPECT_EQ(runs.size(), 2u);
  EXPECT_TRUE(tuning_db::Database::open(db.path()).claims().empty()) << "sessions release their claims";
}

std::set<std::string> traces_of_run(const std::vector<tuning_db::Record>& recs, const std::string& run) {
  std::set<std::string> out;
  for (const auto& r : recs)
    if (r.run_uid == run) out.insert(r.trace);
  return out;
}

// A session killed in the middle of a batch leaves its claims behind. A
// session started meanwhile passes over those candidates; one started after
// the claims expired takes them over and measures them. Random search from
// one seed makes every session propose the same candidates in the same order.
TEST(TunerSessions, KilledSessionsClaimsAreTakenOverAfterTheyExpire) {
  TempDb db;
  Task task = gemm_task(64);
  TuneOptions o = tiny(db.path(), 8);
  o.random_search = true;
  TuneOptions dying = o;
  dying.claim_ttl_s = 3600;  // the expiry is simulated below, not waited for
  dying.measure.on_result = [](size_t, const MeasureResult&) { raise(SIGKILL); };
  ASSERT_EQ(wait_child(fork_session(task, dying)), -SIGKILL);

  std::vector<tuning_db::TuningRun> runs = tuning_db::Database::open(db.path()).runs();
  ASSERT_EQ(runs.size(), 1u);
  const std::string dead = runs[0].uid;
  EXPECT_FALSE(runs[0].ended_at.has_value());
  EXPECT_TRUE(records_of(db.path(), task).empty()) << "killed before its batch was stored";
  std::set<std::string> orphans;
  for (const tuning_db::Claim& c : tuning_db::Database::open(db.path()).claims()) {
    EXPECT_EQ(c.owner, dead);
    orphans.insert(c.trace);
  }
  ASSERT_EQ(orphans.size(), 8u) << "the dead session's batch stays claimed";

  // While the claims are live, another session measures other candidates.
  const std::string out_b = (db.dir / "b.txt").string();
  ASSERT_EQ(wait_child(fork_session(task, o, out_b)), 0);
  Outcome rb = read_outcome(out_b);
  EXPECT_EQ(rb.measured, 8);
  EXPECT_EQ(rb.claimed_elsewhere, 8) << "it proposed the dead session's batch first";
  runs = tuning_db::Database::open(db.path()).runs();
  ASSERT_EQ(runs.size(), 2u);
  std::vector<tuning_db::Record> recs = records_of(db.path(), task);
  std::set<std::string> by_b = traces_of_run(recs, runs[1].uid);
  EXPECT_EQ(by_b.size(), 8u);
  for (const std::string& t : by_b) EXPECT_EQ(orphans.count(t), 0u) << "measured a trace the dead session had claimed";
  EXPECT_EQ(tuning_db::Database::open(db.path()).claims().size(), 8u) << "B released its own claims only";

  // The claims' time runs out (as if an hour passed): a third session takes them over.
  {
    tuning_db::detail::Connection raw(db.path(), false, false, 10000);
    raw.exec("UPDATE claims SET expires_at = expires_at - 7200");
  }
  const std::string out_c = (db.dir / "c.txt").string();
  ASSERT_EQ(wait_child(fork_session(task, o, out_c)), 0);
  Outcome rc = read_outcome(out_c);
  EXPECT_EQ(rc.measured, 8);
  EXPECT_EQ(rc.claimed_elsewhere, 0);
  EXPECT_EQ(rb.from_others, 0) << "no session stored anything while B ran";
  runs = tuning_db::Database::open(db.path()).runs();
  ASSERT_EQ(runs.size(), 3u);
  recs = records_of(db.path(), task);
  EXPECT_EQ(traces_of_run(recs, runs[2].uid), orphans) << "the third session measured the dead one's batch";
  std::set<std::string> distinct;
  for (const auto& r : recs) distinct.insert(r.trace);
  EXPECT_EQ(distinct.size(), recs.size());
  EXPECT_EQ(recs.size(), 16u);
  EXPECT_TRUE(tuning_db::Database::open(db.path()).claims().empty());
}

// While a session measures, its claims are renewed: they outlive their
// lifetime (1 s here) for as long as the session runs.
TEST(TunerSessions, ClaimsOutliveTheirLifetimeWhileTheSessionRuns) {
  TempDb db;
  Task task = gemm_task(64);
  TuneOptions o = tiny(db.path(), 8);
  o.claim_ttl_s = 1;
  const std::string seen = (db.dir / "seen.txt").string();
  std::string path = db.path();
  // In the session's process, after its first candidate: wait 3 lifetimes, then look at the claims.
  o.measure.on_result = [path, seen](size_t i, const MeasureResult&) {
    if (i != 0) return;
    std::this_thread::sleep_for(std::chrono::seconds(3));
    int live = 0;
    for (const tuning_db::Claim& c : tuning_db::Database::open(path).claims()) live += c.expires_at > tuning_db::detail::now_seconds();
    std::ofstream(seen) << live << "\n";
  };
  ASSERT_EQ(wait_child(fork_session(task, o)), 0);
  int live = -1;
  std::ifstream(seen) >> live;
  EXPECT_EQ(live, 8) << "the batch's claims lapsed while it was measured";
  EXPECT_TRUE(tuning_db::Database::open(db.path()).claims().empty());
  EXPECT_EQ(records_of(db.path(), task).size(), 8u);
}

}  // namespace
}  // namespace kiln::tuner
