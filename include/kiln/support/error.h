/** \file
 * kiln::Error and the two families of checks.
 *
 * User errors (a bad schedule step, a shape mismatch, a corrupt record) are
 * raised with KILN_USER_CHECK / KILN_USER_ERROR: the message names the object
 * and says what is allowed. Internal invariants use KILN_CHECK / KILN_ICHECK,
 * which add the file, line and failed condition. Both throw kiln::Error; the
 * Python binding turns it into kiln.KilnError, so nothing aborts the process.
 */
#ifndef KILN_SUPPORT_ERROR_H
#define KILN_SUPPORT_ERROR_H

#include <sstream>
#include <stdexcept>
#include <string>

namespace kiln {

/** The one exception type kiln throws for bad input and broken invariants. */
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

namespace detail {
/** Collects a streamed message and throws it when the statement ends. */
class ErrorBuilder {
 public:
  ErrorBuilder() = default;
  ErrorBuilder(const char* file, int line, const char* cond);
  ErrorBuilder(const ErrorBuilder&) = delete;
  ~ErrorBuilder() noexcept(false);
  std::ostream& stream() { return os_; }

 private:
  std::ostringstream os_;
  std::string prefix_;
};
}  // namespace detail
}  // namespace kiln

/** Throws kiln::Error with the streamed message when `cond` is false (user error). */
#define KILN_USER_CHECK(...) \
  if (__VA_ARGS__) {          \
  } else                      \
    ::kiln::detail::ErrorBuilder().stream()
/** Throws kiln::Error with the streamed message (user error). */
#define KILN_USER_ERROR() ::kiln::detail::ErrorBuilder().stream()
/** Internal invariant: throws kiln::Error naming file, line and condition. */
#define KILN_CHECK(...) \
  if (__VA_ARGS__) {    \
  } else                \
    ::kiln::detail::ErrorBuilder(__FILE__, __LINE__, #__VA_ARGS__).stream()
#define KILN_ICHECK(...) KILN_CHECK(__VA_ARGS__)
/** Internal error: a path that must not be reached. */
#define KILN_UNREACHABLE() ::kiln::detail::ErrorBuilder(__FILE__, __LINE__, "unreachable").stream()

#endif  // KILN_SUPPORT_ERROR_H
