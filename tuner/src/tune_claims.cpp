// ClaimKeeper: the heartbeat of a session's claims on the candidates it is
// measuring (see tuning_db::Database::claim and tune.cpp).
#include <chrono>
#include <cstdio>

#include "kiln/support/error.h"
#include "tune_internal.h"

namespace kiln::tuner::detail {

namespace {
// Runs `f` where no exception may leave (a destructor, the keeper's thread).
// A user error (the file locked past the busy timeout) costs only a retry or
// the claims' expiry; anything else (a kiln bug) is said on stderr, never
// swallowed silently.
template <typename F>
void best_effort(const char* what, F&& f) noexcept {
  try {
    f();
  } catch (const Error&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln: %s failed: %s\n", what, e.what());
  } catch (...) {
    std::fprintf(stderr, "kiln: %s failed with an unknown exception\n", what);
  }
}
}  // namespace

ClaimKeeper::ClaimKeeper(tuning_db::Database& db, std::string owner, double ttl_s)
    : db_(db), owner_(std::move(owner)), ttl_s_(ttl_s), thread_([this] { loop(); }) {}

ClaimKeeper::~ClaimKeeper() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
  // What is left was not stored (an error or Ctrl-C ended the session):
  // others may measure it now. A failure here costs nothing but waiting for
  // the claims to expire, and a destructor must not throw.
  best_effort("releasing the tuning claims", [&] { db_.release_claims(owner_); });
}

void ClaimKeeper::loop() {
  const auto period = std::chrono::duration<double>(ttl_s_ / 3);
  std::unique_lock<std::mutex> lock(mutex_);
  while (!wake_.wait_for(lock, period, [this] { return stop_; })) {
    lock.unlock();
    // A failed renewal (the file locked past the busy timeout) is retried at
    // the next beat; an exception must not leave the thread.
    best_effort("renewing the tuning claims", [&] { db_.renew_claims(owner_, ttl_s_); });
    lock.lock();
  }
}

}  // namespace kiln::tuner::detail
