/**
 * \file parallel_for.h
 * f(0) .. f(n - 1) on a few plain threads (the calling one among them), each
 * taking the next index: for compile-time work such as building or lowering
 * independent kernels. Not the runtime's thread pool, which runs kernels.
 */
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kiln {

/** Runs f over [0, n) on up to `threads` threads (at least one: the caller's);
 * an exception cannot leave a std::thread, so the first one thrown is carried
 * out and rethrown here once every index has run. */
inline void parallel_for(size_t n, int threads, const std::function<void(size_t)>& f) {
  std::atomic<size_t> next{0};
  std::exception_ptr error;
  std::mutex mu;
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < n;) {
      try {
        f(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!error) error = std::current_exception();
      }
    }
  };
  const size_t workers = std::min<size_t>(n, static_cast<size_t>(std::max(1, threads)));
  std::vector<std::thread> pool;
  for (size_t w = 1; w < workers; ++w) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace kiln
