// kiln-db: inspect and maintain a kiln tuning database from the shell.
//
//   kiln-db list   DB
//   kiln-db show   DB WORKLOAD_KEY [-k N] [--target STRING] [--metric median|min] [--trace]
//   kiln-db stats  DB
//   kiln-db export DB FILE|- [--workload KEY] [--target STRING] [--no-errors]
//   kiln-db import DB FILE|-
//   kiln-db prune  DB [--keep-best N] [--metric median|min] [--drop-errors]
//                     [--older-than-days D] [--vacuum]
//   kiln-db check  DB
//
// Exit status: 0 success, 1 error (message on stderr), 2 bad usage.
#include <algorithm>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "kiln/support/error.h"
#include "kiln/tuning_db/database.h"

namespace db = kiln::tuning_db;

namespace {

const char* const kUsage =
    "usage: kiln-db COMMAND DB [ARGS]\n"
    "  list   DB                              workloads with record and error counts\n"
    "  show   DB KEY [-k N] [--target T] [--metric median|min] [--trace]\n"
    "                                         best records of a workload, per target\n"
    "  stats  DB                              totals, errors by kind, best per workload\n"
    "  export DB FILE|- [--workload KEY] [--target T] [--no-errors]\n"
    "                                         write records as JSON Lines\n"
    "  import DB FILE|-                       read JSON Lines (known records are skipped)\n"
    "  prune  DB [--keep-best N] [--metric median|min] [--drop-errors]\n"
    "            [--older-than-days D] [--vacuum]\n"
    "                                         delete records selected by any given rule\n"
    "  check  DB                              run the integrity check\n";

struct UsageError {
  std::string message;
};

/** Command-line arguments after COMMAND DB: positionals and --options with values. */
struct Args {
  std::vector<std::string> positional;
  std::map<std::string, std::string> options;  // flag -> value ("" for switches)

  bool has(const std::string& name) const { return options.count(name) > 0; }
  std::string get(const std::string& name, const std::string& fallback = "") const {
    auto it = options.find(name);
    return it == options.end() ? fallback : it->second;
  }
};

Args parse_args(int argc, char** argv, int start, const std::vector<std::string>& with_value,
                const std::vector<std::string>& switches) {
  Args args;
  for (int i = start; i < argc; ++i) {
    std::string a = argv[i];
    bool takes_value = std::find(with_value.begin(), with_value.end(), a) != with_value.end();
    bool is_switch = std::find(switches.begin(), switches.end(), a) != switches.end();
    if (takes_value) {
      if (i + 1 >= argc) throw UsageError{a + " needs a value"};
      args.options[a] = argv[++i];
    } else if (is_switch) {
      args.options[a] = "";
    } else if (a.size() > 1 && a[0] == '-') {
      throw UsageError{"unknown option " + a};
    } else {
      args.positional.push_back(a);
    }
  }
  return args;
}

int64_t parse_int(const std::string& text, const std::string& what) {
  try {
    size_t used = 0;
    int64_t v = std::stoll(text, &used);
    if (used == text.size()) return v;
  } catch (const std::exception&) {
  }
  throw UsageError{what + " must be an integer, not '" + text + "'"};
}

double parse_double(const std::string& text, const std::string& what) {
  try {
    size_t used = 0;
    double v = std::stod(text, &used);
    if (used == text.size()) return v;
  } catch (const std::exception&) {
  }
  throw UsageError{what + " must be a number, not '" + text + "'"};
}

db::Metric parse_metric(const std::string& text) {
  if (text == "median") return db::Metric::median;
  if (text == "min") return db::Metric::min;
  throw UsageError{"--metric must be median or min, not '" + text + "'"};
}

/** Seconds as a readable duration: 12.3 us, 4.56 ms, 1.23 s. */
std::string format_time(std::optional<double> seconds) {
  if (!seconds) return "-";
  char buf[32];
  double s = *seconds;
  if (s < 1e-3)
    std::snprintf(buf, sizeof buf, "%.3f us", s * 1e6);
  else if (s < 1)
    std::snprintf(buf, sizeof buf, "%.3f ms", s * 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.3f s", s);
  return buf;
}

std::string format_timestamp(double unix_seconds) {
  std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string describe(const db::TargetInfo& t) {
  std::string out = "'" + t.target + "'";
  if (!t.cpu_model.empty()) out += " cpu='" + t.cpu_model + "'";
  if (!t.gpu_arch.empty()) out += " gpu=" + t.gpu_arch;
  if (!t.kiln_version.empty()) out += " kiln=" + t.kiln_version;
  return out;
}

db::Database open_existing(const std::string& path, bool read_only) {
  db::OpenOptions o;
  o.read_only = read_only;
  o.create_if_missing = false;
  return db::Database::open(path, o);
}

int cmd_list(const std::string& path, const Args&) {
  auto d = open_existing(path, true);
  std::printf("%-18s %9s %8s  %s\n", "workload", "records", "errors", "name");
  for (const auto& w : d.workloads())
    std::printf("%-18s %9lld %8lld  %s\n", w.key.c_str(), static_cast<long long>(w.records),
                static_cast<long long>(w.errors), w.name.c_str());
  return 0;
}

void print_records(const std::vector<db::Record>& records, bool with_trace) {
  std::printf("  %8s %12s %12s %5s %12s  %s\n", "id", "median", "min", "runs", "build",
              "measured");
  for (const auto& r : records) {
    std::printf("  %8lld %12s %12s %5zu %12s  %s\n", static_cast<long long>(r.id),
                format_time(r.median_time).c_str(), format_time(r.min_time).c_str(),
                r.run_times.size(), format_time(r.build_time).c_str(),
                format_timestamp(r.timestamp).c_str());
    if (with_trace) std::printf("    trace: %s\n", r.trace.c_str());
  }
}

int cmd_show(const std::string& path, const Args& args) {
  if (args.positional.size() != 1) throw UsageError{"show needs one WORKLOAD_KEY"};
  const std::string& key = args.positional[0];
  int64_t k = parse_int(args.get("-k", "5"), "-k");
  db::Metric metric = parse_metric(args.get("--metric", "median"));
  auto d = open_existing(path, true);
  auto w = d.workload(key);
  KILN_USER_CHECK(w) << "workload " << key << " is not in '" << path
                     << "'; `kiln-db list " << path << "` shows the keys";
  std::printf("workload %s  %s\n", key.c_str(), w->name.c_str());
  bool shown = false;
  for (const auto& s : d.stats().per_workload) {
    if (s.workload_key != key) continue;
    if (args.has("--target") && s.target.target != args.get("--target")) continue;
    std::printf("target %s: %lld records, %lld errors\n", describe(s.target).c_str(),
                static_cast<long long>(s.records), static_cast<long long>(s.errors));
    print_records(d.best(key, s.target, k, db::TargetMatch::exact, metric), args.has("--trace"));
    shown = true;
  }
  if (!shown) std::printf("no records%s\n", args.has("--target") ? " on that target" : "");
  return 0;
}

int cmd_stats(const std::string& path, const Args&) {
  auto d = open_existing(path, true);
  db::Stats s = d.stats();
  std::printf("workloads %lld, targets %lld, tuning runs %lld, records %lld, errors %lld\n",
              static_cast<long long>(s.workloads), static_cast<long long>(s.targets),
              static_cast<long long>(s.tuning_runs), static_cast<long long>(s.records),
              static_cast<long long>(s.errors));
  for (const auto& [kind, n] : s.errors_by_kind)
    std::printf("  %-13s %lld\n", kind.c_str(), static_cast<long long>(n));
  std::printf("%-18s %9s %8s %12s %12s  %s\n", "workload", "records", "errors", "best median",
              "best min", "target");
  for (const auto& w : s.per_workload)
    std::printf("%-18s %9lld %8lld %12s %12s  %s\n", w.workload_key.c_str(),
                static_cast<long long>(w.records), static_cast<long long>(w.errors),
                format_time(w.best_median).c_str(), format_time(w.best_min).c_str(),
                describe(w.target).c_str());
  return 0;
}

int cmd_export(const std::string& path, const Args& args) {
  if (args.positional.size() != 1) throw UsageError{"export needs one FILE (or - for stdout)"};
  db::RecordFilter f;
  if (args.has("--workload")) f.workload_key = args.get("--workload");
  if (args.has("--target")) {
    f.target = db::TargetInfo{args.get("--target"), "", {}, "", ""};
    f.match = db::TargetMatch::string_only;
  }
  f.include_errors = !args.has("--no-errors");
  auto d = open_existing(path, true);
  const std::string& file = args.positional[0];
  int64_t n = file == "-" ? d.write_jsonl(std::cout, f) : d.export_jsonl(file, f);
  std::cout.flush();
  std::fprintf(stderr, "exported %lld records\n", static_cast<long long>(n));
  return 0;
}

int cmd_import(const std::string& path, const Args& args) {
  if (args.positional.size() != 1) throw UsageError{"import needs one FILE (or - for stdin)"};
  auto d = db::Database::open(path);
  const std::string& file = args.positional[0];
  db::ImportResult r = file == "-" ? d.read_jsonl(std::cin) : d.import_jsonl(file);
  std::printf("imported %lld records, skipped %lld already present\n",
              static_cast<long long>(r.added), static_cast<long long>(r.skipped));
  return 0;
}

int cmd_prune(const std::string& path, const Args& args) {
  db::PruneOptions o;
  if (args.has("--keep-best")) o.keep_best = parse_int(args.get("--keep-best"), "--keep-best");
  o.metric = parse_metric(args.get("--metric", "median"));
  o.drop_errors = args.has("--drop-errors");
  if (args.has("--older-than-days")) {
    double days = parse_double(args.get("--older-than-days"), "--older-than-days");
    o.older_than = static_cast<double>(std::time(nullptr)) - days * 86400.0;
  }
  o.vacuum = args.has("--vacuum");
  if (!o.keep_best && !o.drop_errors && !o.older_than && !o.vacuum)
    throw UsageError{"prune needs at least one of --keep-best, --drop-errors, "
                     "--older-than-days, --vacuum"};
  auto d = open_existing(path, false);
  std::printf("deleted %lld records\n", static_cast<long long>(d.prune(o)));
  return 0;
}

int cmd_check(const std::string& path, const Args&) {
  auto d = open_existing(path, true);
  auto problems = d.check_integrity();
  for (const auto& p : problems) std::printf("%s\n", p.c_str());
  std::printf("%s: %s\n", path.c_str(), problems.empty() ? "ok" : "PROBLEMS FOUND");
  return problems.empty() ? 0 : 1;
}

int dispatch(const std::string& cmd, const std::string& path, int argc, char** argv) {
  using Fn = int (*)(const std::string&, const Args&);
  struct Command {
    Fn fn;
    std::vector<std::string> with_value, switches;
  };
  static const std::map<std::string, Command> commands = {
      {"list", {cmd_list, {}, {}}},
      {"show", {cmd_show, {"-k", "--target", "--metric"}, {"--trace"}}},
      {"stats", {cmd_stats, {}, {}}},
      {"export", {cmd_export, {"--workload", "--target"}, {"--no-errors"}}},
      {"import", {cmd_import, {}, {}}},
      {"prune", {cmd_prune, {"--keep-best", "--metric", "--older-than-days"},
                 {"--drop-errors", "--vacuum"}}},
      {"check", {cmd_check, {}, {}}},
  };
  auto it = commands.find(cmd);
  if (it == commands.end()) throw UsageError{"unknown command '" + cmd + "'"};
  Args args = parse_args(argc, argv, 3, it->second.with_value, it->second.switches);
  if (cmd != "show" && cmd != "export" && cmd != "import" && !args.positional.empty())
    throw UsageError{cmd + " takes no argument '" + args.positional[0] + "'"};
  return it->second.fn(path, args);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && (std::string(argv[1]) == "-h" || std::string(argv[1]) == "--help")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  try {
    if (argc < 3) throw UsageError{"expected a COMMAND and a DB path"};
    return dispatch(argv[1], argv[2], argc, argv);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "kiln-db: %s\n%s", e.message.c_str(), kUsage);
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln-db: %s\n", e.what());
    return 1;
  }
}
