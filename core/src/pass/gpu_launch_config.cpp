// launch_config: the grid and block of a kernel from its bound loops, checked
// against the device's limits.
#include <algorithm>
#include <sstream>

#include "kiln/ir/functor.h"
#include "kiln/ir/printer.h"
#include "kiln/pass/gpu.h"
#include "kiln/support/error.h"

namespace kiln::pass {

std::string LaunchConfig::str() const {
  std::ostringstream os;
  os << "grid=(" << grid[0] << "," << grid[1] << "," << grid[2] << ") block=(" << block[0] << "," << block[1] << "," << block[2] << ") shared=" << shared_bytes << "B";
  return os.str();
}

static const char* const kAxis[] = {"x", "y", "z"};

LaunchConfig launch_config(const PrimFunc& f, const GpuLimits& limits) {
  LaunchConfig cfg;
  bool allreduce = false;
  post_order_visit(f.body(), [&](const Expr& e) {
    // A collective: its threads, and the shared array of its warps' results (lower_thread_allreduce).
    const Call* c = e.as<Call>();
    if (!c || c->op != Intrinsic::ThreadAllreduce) return;
    int64_t n = *as_const_int(c->args[1]);
    allreduce = true;
    cfg.block[0] = std::max(cfg.block[0], n);
    if (n > 32) cfg.shared_bytes += ((n + 31) / 32 * c->dtype.bytes() + 15) / 16 * 16;
  }, [&](const Stmt& s) {
    if (const For* op = s.as<For>(); op && op->kind == ForKind::ThreadBinding) {
      const int64_t* extent = as_const_int(op->extent);
      KILN_USER_CHECK(extent) << "kernel '" << f.name() << "': loop '" << op->loop_var.name() << "' bound to " << op->thread_tag << " has extent " << to_string(op->extent)
                              << ", not a constant; GPU launch extents must be constants for now: split the loop by a constant factor and bind the inner (or outer) part";
      int b = block_dim_index(op->thread_tag), t = thread_dim_index(op->thread_tag);
      int64_t& slot = b >= 0 ? cfg.grid[b] : cfg.block[t];
      slot = std::max(slot, *extent);
    } else if (const Allocate* a = s.as<Allocate>(); a && a->buffer.scope() == "shared") {
      const int64_t* n = as_const_int(a->buffer.num_elements());
      KILN_USER_CHECK(n) << "kernel '" << f.name() << "': shared buffer '" << a->buffer.name() << "' has a size that is not a constant (" << to_string(a->buffer.num_elements())
                         << "); static shared memory needs constant sizes: give its stage constant tile sizes";
      // Each array rounded to 16 bytes: codegen aligns them for vector access.
      cfg.shared_bytes += (*n * a->buffer.dtype().bytes() + 15) / 16 * 16;
    }
  });
  // Warp shuffles need whole warps: the block grows to a multiple of 32 threads.
  if (allreduce) cfg.block[0] = (cfg.block[0] + 31) / 32 * 32;
  for (int d = 0; d < 3; ++d) {
    KILN_USER_CHECK(cfg.block[d] <= limits.max_block[d]) << "kernel '" << f.name() << "': threadIdx." << kAxis[d] << " extent " << cfg.block[d] << " exceeds the device limit " << limits.max_block[d]
                                                         << "; split the loop and bind a smaller part";
    KILN_USER_CHECK(cfg.grid[d] <= limits.max_grid[d]) << "kernel '" << f.name() << "': blockIdx." << kAxis[d] << " extent " << cfg.grid[d] << " exceeds the device limit " << limits.max_grid[d];
  }
  KILN_USER_CHECK(cfg.threads_per_block() <= limits.max_threads_per_block)
      << "kernel '" << f.name() << "': " << cfg.threads_per_block() << " threads per block (" << cfg.block[0] << "x" << cfg.block[1] << "x" << cfg.block[2] << ") exceed the device limit of "
      << limits.max_threads_per_block << "; bind smaller loops to threadIdx (split by a smaller factor)";
  KILN_USER_CHECK(cfg.shared_bytes <= limits.max_shared_bytes) << "kernel '" << f.name() << "': " << cfg.shared_bytes << " bytes of shared memory per block exceed the "
                                                               << limits.max_shared_bytes << " bytes of static shared memory; use smaller tiles for the shared stages";
  return cfg;
}

}  // namespace kiln::pass
