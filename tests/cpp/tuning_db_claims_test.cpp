// Claims of concurrent tuning sessions (Database::claim and friends), the
// schema migration that adds them, and RecordFilter::after_id, with which a
// session picks up what others stored since it last looked.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "kiln/support/error.h"
#include "kiln/tuning_db/database.h"
#include "kiln/tuning_db/detail.h"
#include "tuning_db_tools/test_util.h"

namespace kiln::tuning_db {
namespace {

using testing::error_of;
using testing::sample_record;
using testing::sample_target;
using testing::sample_workload;
using testing::TempDir;

const std::string kKey = "0123456789abcdef";

/** The trace of sample_record(kKey, t, step), as a session would claim it (keys in another order, spaces). */
std::string trace(int step) { return R"([ {"factor": )" + std::to_string(step + 1) + R"(, "axis": 0, "kind": "split"} ])"; }

std::vector<std::string> traces(int first, int count) {
  std::vector<std::string> out;
  for (int i = first; i < first + count; ++i) out.push_back(trace(i));
  return out;
}

std::string statuses(const std::vector<ClaimStatus>& v) {
  std::string out;
  for (ClaimStatus s : v) out += (out.empty() ? "" : " ") + to_string(s);
  return out;
}

class TuningDbClaims : public ::testing::Test {
 protected:
  TempDir dir;
  std::string path = dir.file("tune.db");
  Database a = Database::open(path);  // two connections: two sessions
  Database b = Database::open(path);
  void SetUp() override { a.add_workload(sample_workload(kKey)); }
};

TEST_F(TuningDbClaims, OneOwnerPerTraceUntilReleasedAndRecordedTracesAreMeasured) {
  a.add_records({sample_record(kKey, 1.0, 0)});
  EXPECT_EQ(statuses(a.claim(kKey, sample_target(), traces(0, 3), "A", 60)), "measured claimed claimed");
  EXPECT_EQ(statuses(b.claim(kKey, sample_target(), traces(0, 4), "B", 60)), "measured held held claimed");
  // Renewing one's own claim is a claim; the other owner's stays held.
  EXPECT_EQ(statuses(a.claim(kKey, sample_target(), traces(1, 3), "A", 60)), "claimed claimed held");
  std::vector<Claim> all = b.claims();
  ASSERT_EQ(all.size(), 3u);
  std::map<std::string, std::string> owner;
  for (const Claim& c : all) owner[c.trace] = c.owner;
  EXPECT_EQ(owner.at(R"([{"axis":0,"factor":2,"kind":"split"}])"), "A") << "traces are stored canonical";
  EXPECT_EQ(all[0].workload_key, kKey);
  EXPECT_EQ(all[0].target.cpu_features, (std::vector<std::string>{"avx2", "fma"}));
  EXPECT_TRUE(all[0].target.kiln_version.empty()) << "a claim is per hardware, any kiln version";

  // A measures trace 1 and releases: B sees it measured, and may claim trace 2 now.
  Record r = sample_record(kKey, 2.0, 1);
  a.add_records({r});
  EXPECT_EQ(a.release_claims("A"), 2);
  EXPECT_EQ(statuses(b.claim(kKey, sample_target(), traces(1, 2), "B", 60)), "measured claimed");
  // Another kiln version on the same hardware has the same records and claims.
  TargetInfo newer = sample_target();
  newer.kiln_version = "9.9.9";
  EXPECT_EQ(statuses(a.claim(kKey, newer, traces(1, 3), "A", 60)), "measured held held");
  // Other hardware, or another workload, is another trace key.
  EXPECT_EQ(statuses(a.claim(kKey, sample_target("llvm -num-cores=4"), traces(1, 1), "A", 60)), "claimed");
  EXPECT_EQ(statuses(a.claim("fedcba9876543210", sample_target(), traces(1, 1), "A", 60)), "claimed");
  EXPECT_EQ(a.release_claims("B"), 2);
  EXPECT_EQ(a.release_claims("B"), 0);
  // Imported records count as measured too.
  std::stringstream line;
  Database other = Database::open(dir.file("other.db"));
  other.add_workload(sample_workload(kKey));
  other.add_records({sample_record(kKey, 4.0, 7)});
  other.write_jsonl(line);
  EXPECT_EQ(b.read_jsonl(line).added, 1);
  EXPECT_EQ(statuses(b.claim(kKey, sample_target(), traces(7, 1), "B", 60)), "measured");
  // Failed measurements count as measured too: they are never repeated.
  a.add_records({testing::failed_record(kKey, ErrorKind::timeout, "slow")});
  EXPECT_EQ(statuses(b.claim(kKey, sample_target(), {R"([{"kind":"vectorize","axis":1}])"}, "B", 60)), "measured");
}

TEST_F(TuningDbClaims, ExpiredClaimsAreTakenOverAndRenewingKeepsThem) {
  EXPECT_EQ(statuses(a.claim(kKey, sample_target(), traces(0, 2), "A", 0.3)), "claimed claimed");
  EXPECT_EQ(statuses(b.claim(kKey, sample_target(), traces(0, 2), "B", 60)), "held held");
  auto wait_past = [&](double t) {
    while (detail::now_seconds() <= t) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  };
  // A heartbeat keeps A's claims alive past their first expiry.
  double first_expiry = a.claims().front().expires_at;
  EXPECT_EQ(a.renew_claims("A", 60), 2);
  wait_past(first_expiry);
  EXPECT_EQ(statuses(b.claim(kKey, sample_target(), traces(0, 2), "B", 60)), "held held");
  // Without one (a crashed session), they lapse and B takes them over.
  EXPECT_EQ(a.renew_claims("A", 0.2), 2);
  wait_past(a.claims().back().expires_at);
  EXPECT_EQ(statuses(b.claim(kKey, sample_target(), traces(0, 2), "B", 60)), "claimed claimed");
  for (const Claim& c : a.claims()) EXPECT_EQ(c.owner, "B");
  EXPECT_EQ(a.renew_claims("A", 60), 0) << "A holds nothing any more";
}

TEST_F(TuningDbClaims, ConcurrentClaimersGetEachTraceOnce) {
  // Four connections claim traces 0-42 in overlapping batches at once.
  constexpr int kOwners = 4;
  std::vector<std::vector<std::string>> won(kOwners);
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (int o = 0; o < kOwners; ++o) {
    threads.emplace_back([&, o] {
      Database d = Database::open(path);
      while (!go) std::this_thread::yield();
      for (int first = 0; first < 40; first += 5) {
        std::vector<std::string> batch = traces(first, 8);
        std::vector<ClaimStatus> got = d.claim(kKey, sample_target(), batch, "owner" + std::to_string(o), 60);
        for (size_t i = 0; i < got.size(); ++i)
          if (got[i] == ClaimStatus::claimed) won[o].push_back(batch[i]);
      }
    });
  }
  go = true;
  for (auto& t : threads) t.join();
  std::set<std::string> all;
  size_t total = 0;
  for (const auto& w : won) {
    std::set<std::string> mine(w.begin(), w.end());  // an owner may renew its own claim
    total += mine.size();
    all.insert(mine.begin(), mine.end());
  }
  EXPECT_EQ(all.size(), 43u) << "traces 0-42 were offered";
  EXPECT_EQ(total, all.size()) << "a trace was claimed by two owners";
  EXPECT_EQ(a.claims().size(), 43u);
}

TEST_F(TuningDbClaims, BadArgumentsAndReadOnlyHandlesAreUserErrors) {
  EXPECT_NE(error_of([&] { a.claim(kKey, sample_target(), traces(0, 1), "", 60); }).find("owner"), std::string::npos);
  EXPECT_NE(error_of([&] { a.claim(kKey, sample_target(), traces(0, 1), "A", 0); }).find("positive"), std::string::npos);
  EXPECT_NE(error_of([&] { a.claim(kKey, sample_target(), {"[1,"}, "A", 60); }).find("trace"), std::string::npos);
  EXPECT_NE(error_of([&] { a.renew_claims("A", -1); }).find("positive"), std::string::npos);
  OpenOptions ro;
  ro.read_only = true;
  Database r = Database::open(path, ro);
  EXPECT_NE(error_of([&] { r.claim(kKey, sample_target(), traces(0, 1), "A", 60); }).find("read-only"), std::string::npos);
  EXPECT_NE(error_of([&] { r.release_claims("A"); }).find("read-only"), std::string::npos);
  a.claim(kKey, sample_target(), traces(0, 1), "A", 60);
  EXPECT_EQ(r.claims().size(), 1u) << "reading claims needs no write access";
}

TEST_F(TuningDbClaims, AfterIdSelectsTheRecordsAddedSince) {
  std::vector<int64_t> first = a.add_records({sample_record(kKey, 1.0, 0), sample_record(kKey, 2.0, 1)});
  std::vector<int64_t> later = b.add_records({sample_record(kKey, 3.0, 2)});
  RecordFilter f;
  f.workload_key = kKey;
  f.after_id = first.back();
  std::vector<Record> since = a.find(f);
  ASSERT_EQ(since.size(), 1u);
  EXPECT_EQ(since[0].id, later[0]);
  f.after_id = later.back();
  EXPECT_TRUE(a.find(f).empty());
}

/** A database at schema version 2 (before claims) with one record, written with raw SQL. */
std::string make_v2_database(const TempDir& dir) {
  std::string path = dir.file("v2.db");
  detail::Connection raw(path, false, true, 1000);
  raw.exec("PRAGMA journal_mode = WAL");
  detail::create_schema_at(raw, 2);
  raw.exec("INSERT INTO workloads VALUES(1, '0123456789abcdef', 'mm', '{}', 1.0)");
  raw.exec("INSERT INTO targets VALUES(1, 'llvm', '', '', '', '0.1.0')");
  raw.exec("INSERT INTO records VALUES(1, 'uid-1', 1, 1, NULL, '[{\"kind\":\"split\"}]', '[0.5]', 0.5, 0.5, "
           "'none', '', NULL, 2.0)");
  return path;
}

TEST(TuningDbClaimsMigration, ReadOnlyOpenOfVersion2ReadsItUntouched) {
  ASSERT_GE(Database::latest_schema_version(), 3);
  TempDir dir;
  std::string path = make_v2_database(dir);
  const std::string before = testing::read_bytes(path);
  OpenOptions ro;
  ro.read_only = true;
  Database db = Database::open(path, ro);
  EXPECT_EQ(db.schema_version(), 2);
  ASSERT_EQ(db.records(kKey).size(), 1u);
  EXPECT_EQ(db.best(kKey, {"llvm", "", {}, "", ""}, 1).size(), 1u);
  EXPECT_TRUE(db.claims().empty());
  EXPECT_NE(error_of([&] { db.claim(kKey, {"llvm", "", {}, "", ""}, {"[]"}, "A", 60); }).find("read-only"),
            std::string::npos);
  EXPECT_EQ(testing::read_bytes(path), before);
}

TEST(TuningDbClaimsMigration, WritableOpenOfVersion2AddsTheClaimsTable) {
  TempDir dir;
  std::string path = make_v2_database(dir);
  Database db = Database::open(path);
  EXPECT_EQ(db.schema_version(), Database::latest_schema_version());
  ASSERT_EQ(db.records(kKey).size(), 1u);
  TargetInfo llvm{"llvm", "", {}, "", "0.1.0"};
  EXPECT_EQ(statuses(db.claim(kKey, llvm, {R"([{"kind":"split"}])", "[]"}, "A", 60)), "measured claimed");
  EXPECT_TRUE(db.check_integrity().empty());
  detail::Connection raw(path, true, false, 1000);
  EXPECT_EQ(raw.scalar("PRAGMA user_version"), Database::latest_schema_version());
  EXPECT_EQ(raw.scalar("SELECT COUNT(*) FROM claims"), 1);
  EXPECT_EQ(raw.scalar("SELECT COUNT(*) FROM records WHERE trace_hash IS NULL"), 0) << "the migration hashes the old records' traces";
}

}  // namespace
}  // namespace kiln::tuning_db
