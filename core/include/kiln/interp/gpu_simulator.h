/** \file
 * A GPU simulator for correctness: runs a kernel lowered for a cuda target
 * (kiln/driver/build_cuda.h) on the CPU, over every block and thread, and
 * reports data races, so GPU schedules are checked without a GPU.
 *
 * Execution: the reference interpreter runs the kernel with every loop
 * serial. For the kernel shape of kiln/pass/gpu.h (checked first) that is
 * the GPU's semantics with barriers honoured: thread nests are the leaves of
 * block-level code and barriers stand only at block level, so each thread
 * nest runs to its end for all threads of the block before the next
 * statement, i.e. every thread reaches a barrier before any goes past it.
 * Shared and local allocations are made per block (their Allocate is inside
 * the block loop); a block-level statement without thread loops runs once,
 * as thread 0 (as codegen has it).
 *
 * Checks, each a kiln::Error naming the buffer, the element, the block and
 * the two threads:
 *  - a data race on shared memory: two threads of a block touch one element
 *    between two barriers and at least one writes (a missing barrier);
 *  - a local buffer element used by two threads: on the GPU each thread has
 *    its own copy, so they would not see each other's values;
 *  - a global element written by two threads (of one block between barriers,
 *    or of two blocks), or read by a thread other than its writer where no
 *    barrier orders them (another block, or the same epoch).
 * Loads and stores are bounds-checked as in the interpreter.
 */
#ifndef KILN_INTERP_GPU_SIMULATOR_H
#define KILN_INTERP_GPU_SIMULATOR_H

#include <cstdint>
#include <vector>

#include "kiln/ir/function.h"
#include "kiln/runtime/module.h"

namespace kiln {

/** What a simulation ran. */
struct GpuSimulation {
  int64_t blocks = 0;
  /** Distinct threads that ran (thread nests), summed over blocks. */
  int64_t thread_runs = 0;
  /** Barriers passed, summed over blocks. */
  int64_t barriers = 0;
};

/** Runs kernel f on args (the interpreter's calling convention); throws kiln::Error on a race or fault. */
GpuSimulation simulate_gpu(const PrimFunc& f, const std::vector<void*>& args);

/** simulate_gpu on arrays and scalars, checked and packed as Module::call does. */
GpuSimulation simulate_gpu_args(const PrimFunc& f, const std::vector<Arg>& args);

}  // namespace kiln

#endif  // KILN_INTERP_GPU_SIMULATOR_H
