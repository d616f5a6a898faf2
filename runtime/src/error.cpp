#include "kiln/support/error.h"

namespace kiln::detail {

ErrorBuilder::ErrorBuilder(const char* file, int line, const char* cond) : internal_(true) {
  std::ostringstream os;
  os << "internal error at " << file << ":" << line << ": check failed: " << cond << ": ";
  prefix_ = os.str();
}

ErrorBuilder::~ErrorBuilder() noexcept(false) {
  // Only throw when not already unwinding: a second exception would terminate.
  if (std::uncaught_exceptions() != 0) return;
  if (internal_) throw InternalError(prefix_ + os_.str());
  throw Error(prefix_ + os_.str());
}

}  // namespace kiln::detail
