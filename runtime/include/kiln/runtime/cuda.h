/** \file
 * The CUDA driver, loaded with dlopen (libcuda.so.1) so that kiln_runtime
 * builds, loads and runs its CPU parts on machines without a GPU. A kernel
 * call on such a machine raises kiln::Error: "no CUDA driver (libcuda.so.1)
 * / no GPU on this machine", never a crash.
 *
 * The launch path is deliberately small: host arrays are copied to fresh
 * device buffers, the kernel runs, written buffers are copied back, all
 * device memory is freed. Device arrays, streams and events come later.
 */
#ifndef KILN_RUNTIME_CUDA_H
#define KILN_RUNTIME_CUDA_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace kiln::cuda {

/** Empty when libcuda.so.1 loads and reports a GPU; otherwise why not (for messages and test skips). */
std::string driver_unavailable_reason();

/** Whether this process has initialised the CUDA driver (CUDA does not survive a fork after that); asks nothing of the driver itself. */
bool driver_initialized();

/** One kernel argument, in the kernel's parameter order. */
struct KernelArg {
  enum class Kind { Buffer, Int32, Int64, Float32, Float64 };
  Kind kind = Kind::Buffer;
  /** Buffer: host memory of nbytes, copied in, and back after the kernel when copy_back. */
  void* host = nullptr;
  size_t nbytes = 0;
  bool copy_back = false;
  int64_t int_value = 0;
  double float_value = 0;
};

/**
 * Loads `image` (a cubin or PTX text) on device 0, launches `kernel` with the
 * given grid and block on `args`, waits for it and copies written buffers
 * back. Throws kiln::Error (driver missing, no GPU, or a CUDA error, named).
 */
void launch(const std::string& image, const std::string& kernel, const int64_t grid[3], const int64_t block[3], const std::vector<KernelArg>& args);

/**
 * Times `kernel` on the device: the buffers are copied in once, one warm-up
 * launch, then `repeat` rounds of `number` back-to-back launches between two
 * CUDA events (no copies inside); seconds per launch, one per round. The
 * buffers marked copy_back hold the last launch's results afterwards.
 */
std::vector<double> time_launch(const std::string& image, const std::string& kernel, const int64_t grid[3], const int64_t block[3], const std::vector<KernelArg>& args,
                                int number, int repeat);

}  // namespace kiln::cuda

#endif  // KILN_RUNTIME_CUDA_H
