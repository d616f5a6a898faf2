// The small parts of the C runtime ABI: thread-local last error and the
// kernels' workspace allocator. The thread pool is in thread_pool.cpp.
#include "kiln/runtime/c_runtime_api.h"

#include <cstdlib>
#include <string>

namespace {

// One per thread: a kernel reports its failure on the thread that runs it,
// and kiln_parallel_launch copies a worker's message to the caller.
thread_local std::string last_error;

constexpr int64_t kWorkspaceAlign = 64;

}  // namespace

extern "C" {

void kiln_set_last_error(const char* msg) { last_error = msg ? msg : ""; }

const char* kiln_get_last_error(void) { return last_error.c_str(); }

void* kiln_alloc_workspace(int64_t nbytes) {
  if (nbytes < 0) {
    kiln_set_last_error("kiln_alloc_workspace: negative size requested");
    return nullptr;
  }
  // aligned_alloc wants a multiple of the alignment; a zero-byte request still
  // returns a distinct, freeable pointer so kernels need no special case.
  int64_t size = (nbytes + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign;
  if (size == 0) size = kWorkspaceAlign;
  void* p = std::aligned_alloc(kWorkspaceAlign, static_cast<size_t>(size));
  if (!p) {
    kiln_set_last_error(("kiln_alloc_workspace: out of memory allocating " + std::to_string(nbytes) + " bytes").c_str());
  }
  return p;
}

void kiln_free_workspace(void* ptr) { std::free(ptr); }

}  // extern "C"
