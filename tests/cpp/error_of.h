// error_of: the message of the kiln::Error a call raises, for tests of
// error messages. A call that raises none is a test failure, so a check on
// the message cannot pass by accident.
#ifndef KILN_TESTS_ERROR_OF_H
#define KILN_TESTS_ERROR_OF_H

#include <gtest/gtest.h>

#include <string>

#include "kiln/support/error.h"

namespace kiln::testing {

template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {  // a user error; an InternalError is not an Error and fails the test
    return e.what();
  }
  ADD_FAILURE() << "expected a kiln::Error, none was raised";
  return "(no error)";
}

}  // namespace kiln::testing

#endif  // KILN_TESTS_ERROR_OF_H
