/** \file
 * The C ABI between generated code (JIT or exported .so) and kiln_runtime.
 *
 * Kernel calling convention: every generated function has the signature
 *   int32_t name(void* const* args)
 * where args[i] is, for a buffer parameter, the pointer to its first element
 * (any byte offset already applied), and for a scalar parameter, a pointer to
 * a value of the parameter's dtype. It returns 0 on success; on failure it
 * calls kiln_set_last_error and returns non-zero. The interpreter takes the
 * same argument array, so every backend is called the same way.
 *
 * This header is plain C so that generated code and exported libraries need
 * nothing but kiln_runtime.
 */
#ifndef KILN_RUNTIME_C_RUNTIME_API_H
#define KILN_RUNTIME_C_RUNTIME_API_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef int32_t (*KilnKernel)(void* const* args);

/**
 * The body of a parallel loop, outlined by codegen: runs task `task_id` of
 * `num_tasks` (each task covers a contiguous chunk of the iterations) with
 * the captured values in `closure`. Returns 0 on success.
 */
typedef int32_t (*KilnParallelBody)(int32_t task_id, int32_t num_tasks, void* closure);

/**
 * Runs body(0..n-1, n, closure) on the runtime's persistent thread pool and
 * returns when all tasks are done. num_tasks <= 0 means one task per pool
 * thread. Nested calls run serially on the calling thread. Returns the
 * first non-zero result of any task, else 0.
 */
int32_t kiln_parallel_launch(KilnParallelBody body, void* closure, int32_t num_tasks);

/** Number of threads parallel loops use (KILN_NUM_THREADS, else the cores). */
int32_t kiln_num_threads(void);

/** 64-byte aligned scratch memory for large allocations in kernels. */
void* kiln_alloc_workspace(int64_t nbytes);
void kiln_free_workspace(void* ptr);

/** Error reporting from kernels (thread-local). */
void kiln_set_last_error(const char* msg);
const char* kiln_get_last_error(void);

#ifdef __cplusplus
}
#endif

#endif  // KILN_RUNTIME_C_RUNTIME_API_H
