// Graph-level plans in the tuning database (schema v4): one plan per model
// and hardware with a checksum of its text, the candidates a search measured,
// and older files without the tables.
#include <gtest/gtest.h>

#include "kiln/support/error.h"
#include "kiln/tuning_db/database.h"
#include "kiln/tuning_db/detail.h"
#include "tuning_db_tools/test_util.h"

namespace kiln::tuning_db {
namespace {

using testing::error_of;
using testing::sample_target;
using testing::TempDir;

GraphPlan plan_of(const std::string& key, const std::string& text, double time) {
  GraphPlan p;
  p.model_key = key;
  p.target = sample_target();
  p.plan = text;
  p.time = time;
  return p;
}

TEST(TuningDbGraphPlans, OnePlanPerModelAndHardwareWithItsChecksum) {
  TempDir dir;
  Database db = Database::open(dir.file("g.db"));
  EXPECT_FALSE(db.graph_plan("model-a", sample_target()).has_value());
  db.put_graph_plan(plan_of("model-a", R"({"x":1})", 0.5));
  db.put_graph_plan(plan_of("model-a", R"({"x":2})", 0.4));  // replaces
  db.put_graph_plan(plan_of("model-b", R"({"x":3})", 0.3));
  auto a = db.graph_plan("model-a", sample_target());
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->plan, R"({"x":2})");
  EXPECT_EQ(a->checksum, graph_plan_checksum(a->plan));
  EXPECT_NE(a->checksum, graph_plan_checksum(R"({"x":1})"));
  EXPECT_DOUBLE_EQ(*a->time, 0.4);
  TargetInfo other = sample_target();
  other.cpu_model = "another CPU";
  EXPECT_FALSE(db.graph_plan("model-a", other).has_value()) << "a plan is this hardware's";
  EXPECT_EQ(db.delete_graph_plans("model-a"), 1);
  EXPECT_FALSE(db.graph_plan("model-a", sample_target()).has_value());
  EXPECT_TRUE(db.graph_plan("model-b", sample_target()).has_value());
}

TEST(TuningDbGraphPlans, CandidatesAreKeptPerRivalAndCheckedOnTheWayIn) {
  TempDir dir;
  Database db = Database::open(dir.file("g.db"));
  GraphCandidate c;
  c.model_key = "model-a";
  c.target = sample_target();
  c.plan = "P1";
  c.against = "P0";
  c.ratio = 0.9;
  c.time = 0.01;
  db.add_graph_candidate(c);
  c.against = "P2";
  c.ratio.reset();
  c.time.reset();
  c.error_msg = "compile failed";
  db.add_graph_candidate(c);
  auto all = db.graph_candidates("model-a", sample_target());
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].against, "P0");
  EXPECT_DOUBLE_EQ(*all[0].ratio, 0.9);
  EXPECT_EQ(all[1].error_msg, "compile failed");
  EXPECT_FALSE(all[1].ratio.has_value());
  c.error_msg.clear();  // neither a ratio nor an error
  EXPECT_NE(error_of([&] { db.add_graph_candidate(c); }).find("either a ratio"), std::string::npos);
  c.ratio = -1.0;
  EXPECT_NE(error_of([&] { db.add_graph_candidate(c); }).find("finite time"), std::string::npos);
}

TEST(TuningDbGraphPlans, ReadOnlyOpenOfVersion3HasNoPlanAndStaysUntouched) {
  ASSERT_GE(Database::latest_schema_version(), 4);
  TempDir dir;
  std::string path = dir.file("v3.db");
  {
    detail::Connection raw(path, false, true, 1000);
    detail::create_schema_at(raw, 3);
  }
  const std::string before = testing::read_bytes(path);
  OpenOptions ro;
  ro.read_only = true;
  Database db = Database::open(path, ro);
  EXPECT_EQ(db.schema_version(), 3);
  EXPECT_FALSE(db.graph_plan("model-a", sample_target()).has_value());
  EXPECT_TRUE(db.graph_candidates("model-a", sample_target()).empty());
  EXPECT_NE(error_of([&] { db.put_graph_plan(plan_of("model-a", "{}", 0.1)); }).find("read-only"), std::string::npos);
  EXPECT_EQ(testing::read_bytes(path), before);
}

}  // namespace
}  // namespace kiln::tuning_db
