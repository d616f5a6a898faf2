// The tuned graph plan of a model (tuned_plan.h): its key, its JSON text,
// and reading it back from the tuning database with the checks that keep a
// damaged or stale plan out of a compile.
#include "kiln/graph/tuned_plan.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "kiln/graph/op_registry.h"
#include "kiln/graph/passes.h"
#include "kiln/ops/best_record.h"
#include "kiln/support/error.h"
#include "kiln/tuning_db/database.h"

namespace kiln::graph {

namespace {

constexpr int kPlanVersion = 1;

bool valid_tile(int64_t m) { return m == 0 || m == 2 || m == 4; }

}  // namespace

std::string model_key(const Graph& g) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : g.str()) h = (h ^ c) * 0x100000001b3ULL;
  char buf[32];
  std::snprintf(buf, sizeof buf, "model-%016llx", static_cast<unsigned long long>(h));
  return buf;
}

std::string plan_to_json(const LayoutPlan& plan) {
  nlohmann::json j;  // an object: keys print sorted
  j["version"] = kPlanVersion;
  j["max_block"] = plan.max_block;
  j["winograd"] = plan.winograd;
  j["conv_max_block"] = nlohmann::json::object();
  for (const auto& [conv, cap] : plan.conv_max_block) j["conv_max_block"][conv] = cap;
  j["conv_winograd"] = nlohmann::json::object();
  for (const auto& [conv, m] : plan.conv_winograd) j["conv_winograd"][conv] = m;
  // Only where the plan decides a pair: a plan from before the field keeps its text, so its stored outcomes still match.
  for (const auto& [conv, fuse] : plan.dwpw_fuse) j["dwpw_fuse"][conv] = fuse;
  return j.dump();
}

LayoutPlan plan_from_json(const std::string& text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("graph plan: its text is not JSON (") + e.what() + ")");
  }
  auto int_field = [&](const nlohmann::json& o, const char* key) -> int64_t {
    KILN_USER_CHECK(o.is_object() && o.contains(key) && o[key].is_number_integer()) << "graph plan: '" << key << "' is missing or not an integer";
    return o[key].get<int64_t>();
  };
  KILN_USER_CHECK(j.is_object()) << "graph plan: its text is not a JSON object";
  int64_t version = int_field(j, "version");
  KILN_USER_CHECK(version == kPlanVersion) << "graph plan: version " << version << ", and this kiln reads version " << kPlanVersion;
  LayoutPlan plan;
  plan.max_block = int_field(j, "max_block");
  int64_t winograd = int_field(j, "winograd");
  KILN_USER_CHECK(plan.max_block >= 0) << "graph plan: max_block " << plan.max_block << " is negative";
  KILN_USER_CHECK(valid_tile(winograd)) << "graph plan: winograd " << winograd << " is not 0, 2 or 4";
  plan.winograd = static_cast<int>(winograd);
  for (const char* table : {"conv_max_block", "conv_winograd"}) {
    KILN_USER_CHECK(j.contains(table) && j[table].is_object()) << "graph plan: '" << table << "' is missing or not an object";
    for (const auto& [conv, v] : j[table].items()) {
      KILN_USER_CHECK(v.is_number_integer()) << "graph plan: " << table << "['" << conv << "'] is not an integer";
      int64_t x = v.get<int64_t>();
      if (std::string(table) == "conv_max_block") {
        KILN_USER_CHECK(x > 0) << "graph plan: convolution '" << conv << "' has cap " << x << "; a cap is positive";
        plan.conv_max_block[conv] = x;
      } else {
        KILN_USER_CHECK(valid_tile(x)) << "graph plan: convolution '" << conv << "' has Winograd tile " << x << ", not 0, 2 or 4";
        plan.conv_winograd[conv] = static_cast<int>(x);
      }
    }
  }
  if (j.contains("dwpw_fuse")) {  // optional: plans stored before it have none
    KILN_USER_CHECK(j["dwpw_fuse"].is_object()) << "graph plan: 'dwpw_fuse' is not an object";
    for (const auto& [conv, v] : j["dwpw_fuse"].items()) {
      KILN_USER_CHECK(v.is_boolean()) << "graph plan: dwpw_fuse['" << conv << "'] is not true or false";
      plan.dwpw_fuse[conv] = v.get<bool>();
    }
  }
  return plan;
}

std::vector<std::string> plan_conv_names(const Graph& g) {
  // The passes before alter_conv_layout that keep or drop convolutions (choose_layout_plan's view).
  Graph pre = eliminate_common_subexpr(fold_batch_norm(fold_constants(fold_transposes(remove_identity(g)))));
  std::vector<std::string> names;
  for (const OpNode* n : pre.op_nodes())
    if (n->op->name == "Conv" && !n->types.empty() && n->types[0].ndim() == 4) names.push_back(n->name);
  return names;
}

void check_plan_fits(const LayoutPlan& plan, const Graph& g, const Target& target) {
  const std::vector<int64_t> caps = layout_block_choices(target);
  auto offered = [&](int64_t cap) { return std::find(caps.begin(), caps.end(), cap) != caps.end(); };
  KILN_USER_CHECK(plan.max_block == 0 || offered(plan.max_block)) << "graph plan: cap " << plan.max_block << " is not one this target offers";
  const std::vector<std::string> convs = plan_conv_names(g);
  auto known = [&](const std::string& c) { return std::find(convs.begin(), convs.end(), c) != convs.end(); };
  for (const auto& [conv, cap] : plan.conv_max_block) {
    KILN_USER_CHECK(known(conv)) << "graph plan: the model has no convolution '" << conv << "'";
    KILN_USER_CHECK(offered(cap)) << "graph plan: convolution '" << conv << "' has cap " << cap << ", not one this target offers";
  }
  for (const auto& [conv, m] : plan.conv_winograd) KILN_USER_CHECK(known(conv)) << "graph plan: the model has no convolution '" << conv << "'";
  for (const auto& [conv, fuse] : plan.dwpw_fuse) KILN_USER_CHECK(known(conv)) << "graph plan: the model has no convolution '" << conv << "'";
}

std::optional<LayoutPlan> tuned_graph_plan(const Graph& g, const Target& target, const std::string& db, std::vector<LayoutDecision>* decisions) {
  if (db.empty() || !std::filesystem::exists(db) || target.kind != Target::Kind::LLVM) return std::nullopt;
  const std::string key = model_key(g);
  std::optional<tuning_db::GraphPlan> row;
  {
    tuning_db::OpenOptions oo;
    oo.read_only = true;
    oo.create_if_missing = false;
    row = tuning_db::Database::open(db, oo).graph_plan(key, ops::detail::target_info(target));
  }
  if (!row) return std::nullopt;
  LayoutPlan plan;
  try {
    KILN_USER_CHECK(row->checksum == tuning_db::graph_plan_checksum(row->plan)) << "graph plan: its checksum does not match its text (damaged or edited)";
    plan = plan_from_json(row->plan);
    check_plan_fits(plan, g, target);
  } catch (const Error& e) {
    std::fprintf(stderr,
                 "kiln: warning: the tuned graph plan of model %s in '%s' is not used: %s. Compiling with the plan the records suggest instead; "
                 "tune the model again (kiln.tune_model) to replace it, or delete it (kiln.tuning_db.open(db).delete_graph_plans(\"%s\")).\n",
                 key.c_str(), db.c_str(), e.what(), key.c_str());
    return std::nullopt;
  }
  if (decisions) {
    char why[160];
    std::snprintf(why, sizeof why, "tuned graph plan (measured %.3f ms, the plan before it %.3f ms)", row->time.value_or(0) * 1e3,
                  row->baseline_time.value_or(0) * 1e3);
    for (const std::string& conv : plan_conv_names(g)) {
      LayoutDecision d;
      d.conv = conv;
      d.cap = plan.cap_of(conv, 0);  // 0: the convolution's default cap
      d.why = why;
      decisions->push_back(d);
    }
  }
  return plan;
}

}  // namespace kiln::graph
