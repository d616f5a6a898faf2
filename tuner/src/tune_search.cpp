// The evolutionary search policy (as in Ansor): a population of complete
// candidates (the session's best measured ones plus fresh samples) evolves
// for a few generations by mutation and crossover, selected by the cost
// model's scores; the batch to measure is the best-scored unmeasured
// candidates plus some random ones, so a wrong model cannot trap the search.
#include <algorithm>
#include <chrono>
#include <cmath>

#include "kiln/support/error.h"
#include "kiln/support/parallel_for.h"
#include "tune_internal.h"

namespace kiln::tuner::detail {

EvolutionarySearch::EvolutionarySearch(const Task& task, const SearchSpace& space, const CostModel& model, uint64_t seed, SearchParams params)
    : task_(task), space_(space), model_(model), rng_(seed), params_(params) {}

bool EvolutionarySearch::materialize(Candidate* c, std::string* key) {
  try {
    space_.materialize(c);
    *key = canonical_trace(c->trace);
    return true;
  } catch (const Error& e) {
    // An invalid point of the space (a user error: the schedule step does not
    // apply) is counted and skipped; a kiln::InternalError is a bug: it propagates.
    ++invalid_;
    last_invalid_ = e.what();
    return false;
  }
}

const Features* EvolutionarySearch::features(const std::string& key) const {
  auto it = features_.find(key);
  return it == features_.end() ? nullptr : it->second.get();
}

void EvolutionarySearch::featurize(const std::vector<Entry>& entries) {
  std::vector<const Entry*> todo;
  std::unordered_set<std::string> queued;
  for (const Entry& e : entries)
    if (!features_.count(e.key) && queued.insert(e.key).second) todo.push_back(&e);
  std::vector<std::shared_ptr<Features>> out(todo.size());
  // A failure that is not a user error (an internal error: a kiln bug), kept
  // to be rethrown here: an exception cannot leave a std::thread.
  std::vector<std::exception_ptr> failures(todo.size());
  std::vector<double> seconds(todo.size(), 0.0);
  // Replaying and lowering touch only the (immutable, atomically counted) DAG: safe on threads.
  parallel_for(todo.size(), params_.threads, [&](size_t i) {
    auto start = std::chrono::steady_clock::now();
    try {
      te::Schedule s = te::Schedule::from_trace(task_.outputs, todo[i]->cand.trace);
      out[i] = std::make_shared<Features>(candidate_features(s, task_.args));
      seconds[i] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    } catch (const Error&) {
      out[i] = nullptr;  // it will not build either; never pick it
    } catch (const InternalError& e) {
      // Caught on purpose, to carry it off the thread: the candidate's trace
      // goes with the bug report, since it is what reproduces it.
      out[i] = nullptr;
      failures[i] = std::make_exception_ptr(InternalError(std::string(e.what()) + "\n  while lowering the candidate of task " +
                                                          task_.name + ": " + todo[i]->key));
    } catch (...) {
      failures[i] = std::current_exception();
    }
  });
  for (const std::exception_ptr& f : failures)
    if (f) std::rethrow_exception(f);
  for (size_t i = 0; i < todo.size(); ++i) {
    features_[todo[i]->key] = out[i];
    if (out[i]) ++featurized_, feature_seconds_ += seconds[i];
  }
}

std::vector<double> EvolutionarySearch::score(const std::vector<Entry>& entries) {
  featurize(entries);
  std::vector<Features> feats;
  std::vector<size_t> where;
  for (size_t i = 0; i < entries.size(); ++i) {
    const Features* f = features(entries[i].key);
    if (!f) continue;
    feats.push_back(*f);
    where.push_back(i);
  }
  std::vector<double> scores(entries.size(), -INFINITY);
  if (feats.empty()) return scores;
  std::vector<double> pred = model_.predict(feats);
  for (size_t k = 0; k < where.size() && k < pred.size(); ++k) scores[where[k]] = std::isfinite(pred[k]) ? pred[k] : -INFINITY;
  return scores;
}

std::vector<Entry> EvolutionarySearch::evolve(const std::vector<Entry>& elite) {
  const int P = params_.population;
  std::vector<Entry> pop;
  std::unordered_set<std::string> in_pop;
  for (const Entry& e : elite) {
    if (static_cast<int>(pop.size()) >= params_.measured_seeds) break;
    if (in_pop.insert(e.key).second) pop.push_back(e);
  }
  for (int tries = 0; static_cast<int>(pop.size()) < P && tries < 2 * P; ++tries) {
    Entry e{space_.sample(rng_), ""};
    if (materialize(&e.cand, &e.key) && in_pop.insert(e.key).second) pop.push_back(std::move(e));
  }
  // Every scored candidate of every generation competes for the batch.
  std::unordered_map<std::string, std::pair<Entry, double>> pool;
  std::uniform_real_distribution<double> coin(0, 1);
  for (int g = 0; g < params_.generations && !pop.empty(); ++g) {
    std::vector<double> s = score(pop);
    for (size_t i = 0; i < pop.size(); ++i)
      if (std::isfinite(s[i])) pool.emplace(pop[i].key, std::make_pair(pop[i], s[i]));
    if (g + 1 == params_.generations) break;
    // Tournament selection of two: cheap, and robust to the scale of the scores.
    std::uniform_int_distribution<size_t> pick(0, pop.size() - 1);
    auto parent = [&]() -> const Entry& {
      size_t a = pick(rng_), b = pick(rng_);
      return s[a] >= s[b] ? pop[a] : pop[b];
    };
    std::vector<size_t> order(pop.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return s[a] > s[b]; });
    std::vector<Entry> next;
    std::unordered_set<std::string> in_next;
    for (size_t i = 0; i < order.size() && next.size() < pop.size() / 10; ++i)
      if (std::isfinite(s[order[i]]) && in_next.insert(pop[order[i]].key).second) next.push_back(pop[order[i]]);
    for (int tries = 0; static_cast<int>(next.size()) < P && tries < 4 * P; ++tries) {
      const Entry& a = parent();
      Entry child{coin(rng_) < params_.mutate_prob ? space_.mutate(a.cand, rng_) : space_.crossover(a.cand, parent().cand, rng_), ""};
      if (materialize(&child.cand, &child.key) && in_next.insert(child.key).second) next.push_back(std::move(child));
    }
    pop = std::move(next);
  }
  std::vector<std::pair<Entry, double>> ranked;
  for (auto& kv : pool) ranked.push_back(std::move(kv.second));
  // Ties (an untrained model) keep a deterministic order: by key.
  std::sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.second != b.second ? a.second > b.second : a.first.key < b.first.key; });
  std::vector<Entry> out;
  for (auto& r : ranked) out.push_back(std::move(r.first));
  return out;
}

void EvolutionarySearch::note_known(const std::string& key, int* skipped) {
  if (skipped_keys_.insert(key).second) ++*skipped;
}

std::vector<Entry> EvolutionarySearch::next_batch(int n, const std::vector<Entry>& elite, const std::unordered_set<std::string>& measured,
                                                  const std::unordered_set<std::string>& known, int* skipped,
                                                  const std::unordered_set<std::string>* busy) {
  std::vector<Entry> out;
  std::unordered_set<std::string> taken;
  auto consider = [&](Entry e) {
    if (measured.count(e.key) || taken.count(e.key) || (busy && busy->count(e.key))) return;
    if (known.count(e.key)) {
      // Measured in an earlier session: never again.
      if (skipped_keys_.insert(e.key).second) ++*skipped;
      return;
    }
    taken.insert(e.key);
    out.push_back(std::move(e));
  };
  auto add_random = [&](int want, int max_tries) {
    for (int tries = 0; static_cast<int>(out.size()) < want && tries < max_tries; ++tries) {
      Entry e{space_.sample(rng_), ""};
      if (materialize(&e.cand, &e.key)) consider(std::move(e));
    }
  };
  if (params_.seeds && !seeded_) {
    // The target-derived seeds first (once per session); the search evolves from them.
    seeded_ = true;
    for (Candidate& c : space_.seeds()) {
      Entry e{std::move(c), ""};
      if (static_cast<int>(out.size()) < n && materialize(&e.cand, &e.key)) consider(std::move(e));
    }
  }
  bool guided = model_.trained() && !params_.random_only;
  // Exploration first, so a session draws its random samples in the same
  // order as an earlier one with the same seed (and skips what that measured).
  int n_random = guided ? static_cast<int>(std::lround(n * params_.eps_random)) : n;
  add_random(n_random, 20 * n + 100);
  if (guided) {
    for (Entry& e : evolve(elite)) {
      if (static_cast<int>(out.size()) >= n) break;
      consider(std::move(e));
    }
  }
  add_random(n, 40 * n + 200);  // a small or exhausted space: whatever new points remain
  featurize(out);
  return out;
}

}  // namespace kiln::tuner::detail
