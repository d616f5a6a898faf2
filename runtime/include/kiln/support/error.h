/** \file
 * kiln::Error, kiln::InternalError and the two families of checks.
 *
 * User errors (a bad schedule step, a shape mismatch, a corrupt record) are
 * raised with KILN_USER_CHECK / KILN_USER_ERROR and throw kiln::Error: the
 * message names the object and says what is allowed. Internal invariants use
 * KILN_CHECK / KILN_ICHECK / KILN_UNREACHABLE, which add the file, line and
 * failed condition and throw kiln::InternalError: a kiln bug, not misuse.
 * Python sees kiln.KilnError (a ValueError) for the first and
 * kiln.InternalError (a RuntimeError) for the second; nothing aborts the
 * process. The two are siblings under kiln::Exception (as Halide keeps its
 * user and internal errors): code that tolerates bad input (the tuner's
 * search skipping an invalid candidate) catches Error, and an internal error
 * goes through it untouched.
 */
#ifndef KILN_SUPPORT_ERROR_H
#define KILN_SUPPORT_ERROR_H

#include <sstream>
#include <stdexcept>
#include <string>

namespace kiln {

/**
 * The common base of kiln's two error kinds, for the few places that handle
 * both alike (the C API's status codes, adding context with rethrow_as). Code
 * that tolerates bad input catches Error, never this.
 */
class Exception : public std::runtime_error {
 public:
  explicit Exception(const std::string& msg) : std::runtime_error(msg) {}
};

/** A user error: bad input, named in the message with the fix. */
class Error : public Exception {
 public:
  explicit Error(const std::string& msg) : Exception(msg) {}
};

/**
 * A broken internal invariant: a bug in kiln, whatever the input was. A
 * sibling of Error, not a kind of it, so `catch (const Error&)` never
 * swallows a bug; the rare site that must survive one (the tuner recording a
 * candidate that hit a bug as a failed trial) catches InternalError by name.
 */
class InternalError : public Exception {
 public:
  explicit InternalError(const std::string& msg) : Exception(msg) {}
};

/**
 * Throws an error of the same kind as `e` with `msg`: InternalError for an
 * InternalError, else Error (any other exception carried into a user error
 * with the context, as before). For catch sites that add context to a
 * message without turning a kiln bug into a user error.
 */
[[noreturn]] inline void rethrow_as(const std::exception& e, const std::string& msg) {
  if (dynamic_cast<const InternalError*>(&e)) throw InternalError(msg);
  throw Error(msg);
}

namespace detail {
/** Collects a streamed message and throws it when the statement ends. */
class ErrorBuilder {
 public:
  /** A user error: throws kiln::Error. */
  ErrorBuilder() = default;
  /** An internal error: throws kiln::InternalError naming the place and condition. */
  ErrorBuilder(const char* file, int line, const char* cond);
  ErrorBuilder(const ErrorBuilder&) = delete;
  ~ErrorBuilder() noexcept(false);
  std::ostream& stream() { return os_; }

 private:
  std::ostringstream os_;
  std::string prefix_;
  bool internal_ = false;
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
/** Internal invariant: throws kiln::InternalError naming file, line and condition. */
#define KILN_CHECK(...) \
  if (__VA_ARGS__) {    \
  } else                \
    ::kiln::detail::ErrorBuilder(__FILE__, __LINE__, #__VA_ARGS__).stream()
#define KILN_ICHECK(...) KILN_CHECK(__VA_ARGS__)
/** Internal error (kiln::InternalError): a path that must not be reached. */
#define KILN_UNREACHABLE() ::kiln::detail::ErrorBuilder(__FILE__, __LINE__, "unreachable").stream()

#endif  // KILN_SUPPORT_ERROR_H
