// tune(): one tuning session of one task (best_record.cpp reads its result
// back from the tuning database).
//
// A session opens the DB, learns what earlier sessions measured (those traces
// are never measured again; their best is the reference to beat; all records
// with features pre-train the cost model), then runs rounds of search ->
// claim -> measure -> store -> learn until the budget is spent or the best has
// not improved for early_stop_rounds rounds. Claiming a batch's traces in the
// DB before measuring them lets sessions that tune the task at the same time
// divide the work: a trace another live session has claimed, or has stored
// meanwhile, is passed over; and each round takes in the records the others
// stored (their traces, their best, their features for the cost model). A
// candidate that would become the new best is checked against the unscheduled
// function before its batch is stored, so a wrong kernel is recorded as
// wrong_result and never reported.
#include "kiln/tuner/tune.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>

#include "kiln/codegen/cuda.h"
#include "kiln/runtime/cuda.h"
#include "kiln/support/error.h"
#include "kiln/tuner/feature_records.h"
#include "kiln/te/workload_key.h"
#include "tune_internal.h"

namespace kiln::tuner {

namespace {

using namespace detail;
constexpr double kInf = std::numeric_limits<double>::infinity();

std::string host_name() {
  char buf[256] = {};
  return gethostname(buf, sizeof(buf) - 1) == 0 ? std::string(buf) : "unknown";
}

double gflops(const Task& task, double seconds) { return seconds > 0 && std::isfinite(seconds) ? task.flop / seconds * 1e-9 : 0; }

/** The state of one session. */
struct Session {
  const Task& task;
  const TuneOptions& opt;
  Progress& progress;
  tuning_db::Database db;
  tuning_db::TargetInfo target;
  std::string run_uid;
  std::unique_ptr<CostModel> model;
  Measurer measurer;
  std::unordered_set<std::string> known;     ///< traces measured by earlier sessions (same hardware)
  std::unordered_set<std::string> measured;  ///< traces measured by this one
  std::unordered_set<std::string> verified;  ///< traces that passed check_correct in this session
  std::vector<std::pair<Entry, double>> valid;  ///< this session's valid candidates and median times
  double best = kInf;          ///< the best verified median time, earlier sessions included
  double session_best = kInf;  ///< the best median time of this session (for the curve)
  double db_best_before = 0;
  bool can_verify = true;
  std::string model_quality = "model untrained";  ///< for the debug log
  int64_t last_record_id = 0;  ///< the newest record of the task this session has taken in
  std::unordered_set<std::string> held_elsewhere;  ///< traces found claimed by another session (counted once)
  bool round_held = false;  ///< the last claim_batch found traces another session held
  /** Renews this session's claims, and releases them when the session ends; declared last, so it goes before the DB. */
  std::unique_ptr<ClaimKeeper> claims;

  Session(const Task& t, const TuneOptions& o, Progress& p, MeasureOptions mo)
      : task(t), opt(o), progress(p), db(tuning_db::Database::open(o.db_path)), measurer(t, mo) {}

  void open_run();
  void train_model_from_db();
  /** Checks the candidate; a failure to compute the reference disables checking (with a warning). */
  bool check(const Candidate& c, std::string* why);
  /** Verifies the batch's candidates that would beat the best; returns true when the best improved. */
  bool verify_improvements(const std::vector<Entry>& batch, std::vector<MeasureResult>& results);
  /**
   * Up to n candidates of the search that this session has claimed in the DB:
   * those the DB has a record of, or another live session has claimed, are
   * passed over (counted in res) and the search is asked again for others.
   */
  std::vector<Entry> claim_batch(EvolutionarySearch& search, int n, TuneResult* res);
  /**
   * Stores the batch, releases its claims, and trains the model on it and on
   * what other sessions stored meanwhile (counted in *from_others).
   */
  void store(const std::vector<Entry>& batch, const std::vector<MeasureResult>& results, const EvolutionarySearch& search, int* from_others);
  /** Takes in the task's records stored by other sessions since the last look; their feature samples go to *samples. Returns how many. */
  int learn_from_others(std::vector<Sample>* samples);
  std::vector<Entry> elite() const;
  /** The DB's best record for this task, verified (failures are re-stored as errors); nullopt if none. */
  std::optional<tuning_db::Record> verified_db_best();
  /** Books a measured (and stored) batch into the result and the session's state. */
  void account(const std::vector<Entry>& batch, const std::vector<MeasureResult>& results, TuneResult* res);
  /** Fills the best_* fields of res from the DB's verified best; returns its record id (0: none). */
  int64_t report_best(TuneResult* res);
};

void Session::open_run() {
  db.add_workload({task.workload_key, task.name.empty() ? task.workload_key : task.name, te::dag_json(task.outputs)});
  target = target_info(task.target, opt.measure.cold_inputs);
  if (opt.measure.gpu_simulate) target.target += kSimulatedSuffix;
  tuning_db::TuningRun run;
  run.budget = opt.trials;
  run.seed = static_cast<int64_t>(opt.seed);
  run.machine = host_name();
  run_uid = db.start_run(run);
  claims = std::make_unique<ClaimKeeper>(db, run_uid, opt.claim_ttl_s);
  // Records of this task with features of an earlier extractor: re-extracted
  // once, so the model trains on the features it will score candidates by.
  if (int64_t n = migrate_features(db, task)) progress.note("re-extracted the features of " + std::to_string(n) + " earlier records");
  for (const tuning_db::Record& r : db.records(task.workload_key)) {
    last_record_id = std::max(last_record_id, r.id);
    if (same_hardware(r.target, target)) known.insert(r.trace);
  }
  std::vector<tuning_db::Record> top = db.best(task.workload_key, target, 1);
  if (!top.empty() && top[0].median_time) {
    db_best_before = *top[0].median_time;
    best = db_best_before;
  }
}

void Session::train_model_from_db() {
  // A saved model trained on an earlier extractor's features would misjudge
  // this one's: retrain it from the DB (the save at the end replaces it).
  if (!opt.model_path.empty() && std::filesystem::exists(opt.model_path) && cost_model_file_extractor(opt.model_path) == feature_extractor_name()) {
    model->load(opt.model_path);
    progress.note("cost model loaded from " + opt.model_path);
    return;
  }
  // Every record of every task with our features: how a new task benefits from earlier sessions.
  std::vector<Sample> samples = training_samples(db);
  if (samples.empty()) return;
  model->update(samples);
  progress.note("cost model pre-trained on " + std::to_string(samples.size()) + " records of " + opt.db_path);
}

bool Session::check(const Candidate& c, std::string* why) {
  if (!can_verify) return true;
  try {
    return measurer.check_correct(c, why);
  } catch (const Error& e) {  // a kiln bug (InternalError) propagates: not an unverifiable task
    can_verify = false;
    progress.note(std::string("warning: results cannot be verified (") + e.what() + "); reporting unverified timings");
    return true;
  }
}

bool Session::verify_improvements(const std::vector<Entry>& batch, std::vector<MeasureResult>& results) {
  std::vector<size_t> order;
  for (size_t i = 0; i < results.size(); ++i)
    if (results[i].error == MeasureError::None) order.push_back(i);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return results[a].median_time() < results[b].median_time(); });
  for (size_t i : order) {
    double t = results[i].median_time();
    if (!(t < best)) return false;
    std::string why;
    if (check(batch[i].cand, &why)) {
      best = t;
      verified.insert(batch[i].key);
      return true;
    }
    // Wrong output: recorded as such, and the next fastest of the batch gets its chance.
    results[i].error = MeasureError::WrongResult;
    results[i].error_msg = why;
  }
  return false;
}

void Session::store(const std::vector<Entry>& batch, const std::vector<MeasureResult>& results, const EvolutionarySearch& search, int* from_others) {
  std::vector<tuning_db::Record> records;
  std::vector<Sample> samples;
  for (size_t i = 0; i < batch.size(); ++i) {
    const MeasureResult& m = results[i];
    tuning_db::Record r;
    r.workload_key = task.workload_key;
    r.target = target;
    r.trace = batch[i].key;
    r.run_times = m.run_times;
    r.error_kind = to_error_kind(m.error);
    r.error_msg = m.error_msg;
    r.build_time = m.build_time;
    r.run_uid = run_uid;
    const Features* f = search.features(batch[i].key);
    // The DB refuses non-finite features; a candidate without them still gets its record.
    if (f && !std::all_of(f->values.begin(), f->values.end(), [](float v) { return std::isfinite(v); })) f = nullptr;
    if (f) {
      r.features = to_feature_set(*f);
      bool ok = m.error == MeasureError::None && m.median_time() > 0;
      // Absolute throughput (1 / time): one scale across batches and sessions; the model
      // normalises by each group's best itself. 0 marks a failure.
      samples.push_back({*f, ok ? 1.0 / m.median_time() : 0.0, task.workload_key + "|" + target.target + "|" + target.cpu_model});
    }
    records.push_back(std::move(r));
  }
  db.add_records(records);  // one transaction: the whole batch or nothing
  // The records are in: other sessions see the traces as measured from now on.
  db.release_claims(run_uid);
  if (debug_logging() && model->trained() && samples.size() > 2) {
    // How well the model ranked this batch before learning from it.
    std::vector<Features> f;
    std::vector<double> actual;
    for (const Sample& x : samples) f.push_back(x.features), actual.push_back(x.throughput);
    model_quality = "model rank correlation on the batch " + std::to_string(rank_correlation(model->predict(f), actual)).substr(0, 5);
  }
  *from_others += learn_from_others(&samples);  // one retraining for both
  if (!samples.empty()) model->update(samples);
}

int Session::learn_from_others(std::vector<Sample>* samples) {
  tuning_db::RecordFilter f;
  f.workload_key = task.workload_key;
  f.after_id = last_record_id;
  f.with_features = true;
  int taken = 0;
  for (tuning_db::Record& r : db.find(f)) {
    last_record_id = std::max(last_record_id, r.id);
    if (r.run_uid == run_uid) continue;
    ++taken;
    bool ok = r.error_kind == tuning_db::ErrorKind::none && r.median_time && *r.median_time > 0;
    if (same_hardware(r.target, target)) {
      known.insert(r.trace);
      // As an earlier session's best at the start: the reference to beat (verified before it is reported).
      if (ok) best = std::min(best, *r.median_time);
    }
    std::optional<Features> feats = r.features ? from_feature_set(*r.features) : std::nullopt;
    if (feats && feats->rows > 0)
      samples->push_back({std::move(*feats), ok ? 1.0 / *r.median_time : 0.0, r.workload_key + "|" + r.target.target + "|" + r.target.cpu_model});
  }
  if (taken > 0 && debug_logging()) progress.note("took in " + std::to_string(taken) + " records other sessions stored meanwhile");
  return taken;
}

std::vector<Entry> Session::claim_batch(EvolutionarySearch& search, int n, TuneResult* res) {
  std::vector<Entry> batch;
  std::unordered_set<std::string> busy;  // claimed this round, by us or by another session
  round_held = false;
  // A few asks suffice: what another session holds is a batch or two of its own.
  for (int ask = 0; ask < 4 && static_cast<int>(batch.size()) < n; ++ask) {
    std::vector<Entry> more = search.next_batch(n - static_cast<int>(batch.size()), elite(), measured, known, &res->trials_skipped, &busy);
    if (more.empty()) break;
    std::vector<std::string> keys;
    for (const Entry& e : more) keys.push_back(e.key);
    std::vector<tuning_db::ClaimStatus> got = db.claim(task.workload_key, target, keys, run_uid, opt.claim_ttl_s);
    for (size_t i = 0; i < more.size(); ++i) {
      busy.insert(more[i].key);
      if (got[i] == tuning_db::ClaimStatus::claimed) {
        batch.push_back(std::move(more[i]));
      } else if (got[i] == tuning_db::ClaimStatus::measured) {
        known.insert(more[i].key);  // stored by another session since this one last looked
        search.note_known(more[i].key, &res->trials_skipped);
      } else {
        round_held = true;
        if (held_elsewhere.insert(more[i].key).second) ++res->trials_claimed_elsewhere;
      }
    }
  }
  return batch;
}

std::vector<Entry> Session::elite() const {
  std::vector<std::pair<Entry, double>> v = valid;
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
  std::vector<Entry> out;
  for (auto& e : v) out.push_back(std::move(e.first));
  return out;
}

std::optional<tuning_db::Record> Session::verified_db_best() {
  for (int attempt = 0; attempt < 16; ++attempt) {
    std::vector<tuning_db::Record> top = db.best(task.workload_key, target, 1);
    if (top.empty()) return std::nullopt;
    const tuning_db::Record& rec = top[0];
    if (verified.count(rec.trace)) return rec;
    Candidate c;
    std::string why;
    try {
      c.trace = te::Trace::from_json(rec.trace);
      if (check(c, &why)) return rec;
    } catch (const Error& e) {
      why = std::string("the stored trace does not parse: ") + e.what();
    }
    // Re-store it as a failure under the same uid (delete first: uids are unique).
    std::optional<tuning_db::Record> full = db.record(rec.id, true);
    tuning_db::Record r = full ? *full : rec;
    r.id = 0;
    r.error_kind = why.rfind("the candidate does not build", 0) == 0 ? tuning_db::ErrorKind::build_error : tuning_db::ErrorKind::wrong_result;
    r.error_msg = why;
    db.delete_records({rec.id});
    db.add_records({r});
    progress.note("record " + std::to_string(rec.id) + " failed verification (" + why + "); stored as " + tuning_db::to_string(r.error_kind));
  }
  return std::nullopt;
}

void Session::account(const std::vector<Entry>& batch, const std::vector<MeasureResult>& results, TuneResult* res) {
  for (size_t i = 0; i < batch.size(); ++i) {
    measured.insert(batch[i].key);
    if (results[i].error != MeasureError::None) {
      ++res->errors;
      res->trial_gflops.push_back(0);
      continue;
    }
    double t = results[i].median_time();
    res->trial_gflops.push_back(gflops(task, t));
    if (res->first_valid_time == 0) res->first_valid_time = t;
    session_best = std::min(session_best, t);
    valid.emplace_back(batch[i], t);
  }
  res->trials_measured += static_cast<int>(batch.size());
  res->curve.emplace_back(res->trials_measured, gflops(task, session_best));
}

int64_t Session::report_best(TuneResult* res) {
  std::optional<tuning_db::Record> top = verified_db_best();
  if (!top) return 0;
  res->best_trace = top->trace;
  res->best_time = top->median_time.value_or(0);
  res->best_gflops = gflops(task, res->best_time);
  return top->id;
}

void check_options(const Task& task, const TuneOptions& options) {
  KILN_USER_CHECK(options.trials >= 0 && options.batch_size >= 1 && options.early_stop_rounds >= 1 && options.timeout_s > 0)
      << "tune '" << task.name << "': trials (" << options.trials << ") must be at least 0, batch_size (" << options.batch_size << ") and early_stop_rounds ("
      << options.early_stop_rounds << ") at least 1, timeout_s (" << options.timeout_s << ") positive";
  KILN_USER_CHECK(std::isfinite(options.claim_ttl_s) && options.claim_ttl_s > 0)
      << "tune '" << task.name << "': claim_ttl_s (" << options.claim_ttl_s << ") must be a positive number of seconds";
  KILN_USER_CHECK(options.population >= 1 && options.generations >= 1)
      << "tune '" << task.name << "': population (" << options.population << ") and generations (" << options.generations << ") must be at least 1";
  KILN_USER_CHECK(!task.outputs.empty() && !task.workload_key.empty()) << "tune: the task has no outputs or no workload key; build it with make_task";
  KILN_USER_CHECK(!options.db_path.empty()) << "tune '" << task.name << "': db_path is empty; name the tuning database file (e.g. kiln_tuning.db)";
  if (task.target.kind == Target::Kind::CUDA && !options.measure.gpu_simulate) {
    KILN_USER_CHECK(!cuda::driver_initialized()) << "tune '" << task.name << "' for " << task.target.str()
                                                 << ": this process has used the GPU already (a kernel run or timed, kiln.gpu.driver_available(), ...), and the "
                                                    "measurement workers fork from it, which CUDA does not survive; tune in a fresh process, before any other GPU call";
    std::string why = gpu_unavailable_reason();
    KILN_USER_CHECK(why.empty()) << "tune '" << task.name << "' for " << task.target.str() << ": candidates are measured on the GPU and this machine has none (" << why
                                 << "); run the session on a machine with an NVIDIA GPU, use the untuned GPU schedule (kiln.gpu.default_schedule), "
                                 << "or gpu_simulate=True to check a session in the simulator";
    KILN_USER_CHECK(codegen::nvrtc_available(&why)) << "tune '" << task.name << "' for " << task.target.str() << ": NVRTC cannot be loaded (" << why
                                                    << "), so no candidate can be compiled for the GPU";
  }
}

}  // namespace

TuneResult tune(const Task& task, const TuneOptions& options) {
  check_options(task, options);
  Progress progress(options.progress, task.name, options.trials);
  MeasureOptions mo = options.measure;
  mo.timeout_s = options.timeout_s;
  // The status line moves with every candidate, not only with every batch.
  TuneResult res;
  double live_best = kInf;
  int live_errors = 0;
  auto user_callback = mo.on_result;
  mo.on_result = [&](size_t i, const MeasureResult& r) {
    if (r.error == MeasureError::None) live_best = std::min(live_best, r.median_time());
    else ++live_errors;
    progress.update(res.trials_measured + static_cast<int>(i) + 1, res.trials_skipped, res.errors + live_errors, gflops(task, live_best));
    if (user_callback) user_callback(i, r);
  };
  Session s(task, options, progress, mo);
  s.model = make_xgboost_model(options.seed);
  s.open_run();
  s.train_model_from_db();
  SearchSpace space(task);
  SearchParams params;
  params.threads = std::max(1, mo.build_threads);
  params.population = options.population;
  params.generations = options.generations;
  params.random_only = options.random_search;
  EvolutionarySearch search(task, space, *s.model, options.seed, params);

  res.db_path = options.db_path;
  live_best = s.best;
  int stale_rounds = 0;
  progress.update(0, 0, 0, gflops(task, s.best));
  while (res.trials_measured < options.trials) {
    int n = std::min(options.batch_size, options.trials - res.trials_measured);
    auto t0 = std::chrono::steady_clock::now();
    std::vector<Entry> batch = s.claim_batch(search, n, &res);
    auto t1 = std::chrono::steady_clock::now();
    if (batch.empty()) {
      progress.note(s.round_held ? "the search space has no candidates left that another session is not measuring"
                                 : "the search space has no unmeasured candidates left");
      break;
    }
    std::vector<Candidate> cands;
    for (const Entry& e : batch) cands.push_back(e.cand);
    live_errors = 0;
    std::vector<MeasureResult> results = s.measurer.measure(cands);
    auto t2 = std::chrono::steady_clock::now();
    bool improved = s.verify_improvements(batch, results);
    auto t3 = std::chrono::steady_clock::now();
    s.store(batch, results, search, &res.records_from_others);
    if (debug_logging()) {
      auto sec = [](auto a, auto b) { return std::to_string(std::chrono::duration<double>(b - a).count()).substr(0, 5); };
      progress.note("round: search " + sec(t0, t1) + " s, build+measure " + sec(t1, t2) + " s, verify " + sec(t2, t3) + " s, store+learn " +
                    sec(t3, std::chrono::steady_clock::now()) + " s; " + s.model_quality);
    }
    s.account(batch, results, &res);
    live_best = std::min(s.best, s.session_best);
    progress.update(res.trials_measured, res.trials_skipped, res.errors, gflops(task, live_best));
    stale_rounds = improved ? 0 : stale_rounds + 1;
    if (stale_rounds >= options.early_stop_rounds && res.trials_measured < options.trials) {
      progress.note("early stop: no improvement in " + std::to_string(stale_rounds) + " rounds");
      break;
    }
  }
  s.db.end_run(s.run_uid);
  s.claims.reset();  // nothing is claimed between rounds; this stops the heartbeat
  progress.finish();
  res.invalid_candidates = search.invalid_count();
  res.featurized = search.featurized_count();
  res.feature_ms_per_candidate = res.featurized ? 1e3 * search.feature_seconds() / res.featurized : 0;
  if (debug_logging() && res.invalid_candidates > 0)
    progress.note(std::to_string(res.invalid_candidates) + " invalid candidates skipped by the search; the last: " + search.last_invalid());

  int64_t record_id = s.report_best(&res);
  res.elapsed_s = progress.elapsed();
  if (!options.model_path.empty()) s.model->save(options.model_path);
  if (options.progress) std::fprintf(stderr, "%s\n", format_summary(task, res, record_id, s.db_best_before).c_str());
  if (!options.curve_png.empty()) {
    std::string why = write_curve_png(res, options.curve_png, task.name + " on " + task.target.str());
    if (!why.empty()) std::fprintf(stderr, "kiln tune: warning: cannot write %s: %s\n", options.curve_png.c_str(), why.c_str());
    else if (options.progress) std::fprintf(stderr, "  curve: %s\n", options.curve_png.c_str());
  }
  return res;
}

}  // namespace kiln::tuner
