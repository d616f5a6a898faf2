/** \file
 * kiln::build: the one entry point from a schedule to callable code.
 * It lowers the schedule, runs the pass pipeline, generates code for the
 * target and returns a runtime Module whose kernel is named `name`.
 */
#ifndef KILN_DRIVER_BUILD_H
#define KILN_DRIVER_BUILD_H

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/codegen/target.h"
#include "kiln/runtime/module.h"
#include "kiln/te/schedule.h"

namespace kiln {

/** Lowers and compiles; target "llvm" (host) or "llvm -mcpu=... -num-cores=..."; throws kiln::Error. */
Module build(const te::Schedule& sch, const std::vector<te::Tensor>& args, const std::string& target = "llvm", const std::string& name = "main");
Module build(const te::Schedule& sch, const std::vector<te::Tensor>& args, const Target& target, const std::string& name = "main");

/** How many kernels build() has compiled in this process: a dynamic model's "no compilation after compile" is counted with it. */
uint64_t build_count();

}  // namespace kiln

#endif  // KILN_DRIVER_BUILD_H
