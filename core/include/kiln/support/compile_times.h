/**
 * \file compile_times.h
 * Process-wide totals of where compile time goes (lowering, LLVM IR
 * generation, the O3 pipeline, machine code, linking, variant probes), summed
 * over threads (CPU milliseconds, not wall). kiln.compile prints them per
 * compile with KILN_COMPILE_TIMES=1 (a diagnosis of slow compiles); =2 also
 * prints each kernel's LLVM times and code size as it is built.
 */
#pragma once

#include <string>

namespace kiln {

enum class CompilePhase { Schedule, Lower, Probe, IrGen, Optimize, Emit, Link, Count };

/** Adds `ms` to the phase's total. */
void add_compile_time(CompilePhase phase, double ms);
/** One line of the totals since the last reset ("lower 12.0 ms, ..."), and the number of kernels built. */
std::string compile_times_summary();
/** Zeroes the totals. */
void reset_compile_times();
/** Whether KILN_COMPILE_TIMES is set (to anything but 0). */
bool compile_times_enabled();

}  // namespace kiln
