// The _kiln extension module: each part of the API is defined in its own
// file (define_<thing>); this file only puts them together.
#include <dlfcn.h>
#include <malloc.h>

#include <cstdlib>

#include "kiln/runtime/c_runtime_api.h"
#include "kiln_py.h"

namespace {

// Python loads extension modules with RTLD_LOCAL, so libkiln_runtime (a
// dependency of _kiln) is not in the global symbol scope. The LLVM JIT looks
// runtime functions such as kiln_parallel_launch up in that scope (as it
// would in a C++ program linked against the runtime), so promote the already
// loaded library to RTLD_GLOBAL. RTLD_NOLOAD makes this a no-op if it is not
// loaded (it always is: _kiln links it).
void expose_runtime_symbols() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&kiln_parallel_launch), &info) == 0 || !info.dli_fname) return;
  // The handle is intentionally never closed: the library must stay global.
  dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_GLOBAL);
}

// Large arrays come and go every step: a step's outputs, their numpy
// copies, a collective's buffers. By default glibc maps an array of over
// 128 KB afresh and returns freed memory to the OS, and on the VMs kiln
// runs on every fresh page costs microseconds to fault in: a data-parallel
// MLP step took 72 ms so, 12 ms with freed memory kept for reuse (up to
// 32 MB arrays from the heap, 1 GB of it kept free before trimming). Left
// alone where the user tunes malloc through its own variables, or sets
// KILN_SYSTEM_MALLOC=1.
void keep_freed_memory() {
  for (const char* v : {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "KILN_SYSTEM_MALLOC"})
    if (std::getenv(v)) return;
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's largest
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

}  // namespace

PYBIND11_MODULE(_kiln, m) {
  using namespace kiln::python;
  m.doc() = "kiln: a tensor compiler (native part; use the `kiln` package)";
  expose_runtime_symbols();
  keep_freed_memory();
  define_error(m);
  define_expr(m);
  define_operation(m);
  define_schedule(m);
  define_lower(m);
  define_runtime(m);
  define_ops(m);
  define_tuning_db(m);
  define_cuda(m);
#ifdef KILN_PY_WITH_TUNER
  define_tuner(m);
#endif
#ifdef KILN_PY_WITH_GRAPH
  define_graph(m);
#ifdef KILN_PY_WITH_TUNER
  define_tune_model(m);  // on kiln.tuner; it needs the graph bindings first
#endif
  define_onnx(m);
#endif
#ifdef KILN_PY_WITH_DIST
  define_dist(m);
#endif
}
