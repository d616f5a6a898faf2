/** \file
 * Private to core/src/interp: what the interpreter tells the GPU simulator while
 * it runs a kernel. The interpreter runs every loop serially, so a lowered
 * GPU kernel (thread-bound loop nests as leaves of block-level code, barriers
 * only at block level; see kiln/pass/gpu.h) runs each thread nest to its end
 * for every thread before the next statement: exactly "all threads reach the
 * barrier before any passes it". The simulator only has to watch who touches
 * which address between barriers.
 */
#ifndef KILN_SRC_INTERP_GPU_HOOKS_H
#define KILN_SRC_INTERP_GPU_HOOKS_H

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/ir/function.h"

namespace kiln::interp {

class GpuHooks {
 public:
  virtual ~GpuHooks() = default;
  /** An iteration of a ThreadBinding loop starts with its variable at `value`. */
  virtual void enter_thread_loop(const std::string& tag, int64_t value) = 0;
  /** The ThreadBinding loop of `tag` has finished all its iterations. */
  virtual void exit_thread_loop(const std::string& tag) = 0;
  virtual void barrier() = 0;
  /** An Allocate gave `b` fresh storage [data, data + nbytes). */
  virtual void allocate(const BufferNode* b, const uint8_t* data, int64_t nbytes) = 0;
  /** One element of `b` at `element` is read or written (once per active lane). */
  virtual void access(const BufferNode* b, const uint8_t* element, bool write) = 0;
};

/** interpret() with `hooks` told of every loop, barrier, allocation and access. */
void interpret_with_hooks(const PrimFunc& f, const std::vector<void*>& args, GpuHooks* hooks);

}  // namespace kiln::interp

#endif  // KILN_SRC_INTERP_GPU_HOOKS_H
