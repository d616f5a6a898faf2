// Scalar arguments: how a C++ integer or float becomes the bytes of a
// kernel's scalar parameter (checked for kind and range), and the "kernel:
// argument i 'name'" prefix of every argument error. Internal to the runtime.
#ifndef KILN_RUNTIME_ARG_SCALARS_H
#define KILN_RUNTIME_ARG_SCALARS_H

#include <cstdint>
#include <ostream>
#include <string>

#include "kiln/runtime/module.h"

namespace kiln::detail {

/** "vadd: argument 2 'C'": names one parameter of one kernel in messages. */
struct Where {
  const KernelInfo& kernel;
  size_t index;
};

std::ostream& operator<<(std::ostream& os, const Where& w);

/** "an int32", "a float32": error messages read as English. */
std::string a_or_an(const std::string& word);

/** Checks `a` against scalar parameter w and stores it, in the parameter's dtype, into *slot. */
void pack_scalar(const Where& w, const Arg& a, uint64_t* slot);

/** pack_scalar for an integer argument and an integer or bool dtype `t`. */
void pack_int_scalar(const Where& w, const Arg& a, DataType t, uint64_t* slot);

}  // namespace kiln::detail

#endif  // KILN_RUNTIME_ARG_SCALARS_H
