/** \file
 * Argument binding at the call boundary: every call of a kernel, by any path
 * (Module::call, time_evaluator, Python, the interpreter's Arg overload),
 * goes through PackedArgs, so no call can make a kernel read or write past
 * the arrays it was given.
 *
 * A kernel built from `n = te.var("n")` takes n as a scalar parameter and
 * computes its loop bounds and addresses from it, so n must agree with the
 * arrays. The metadata gives every buffer dimension as a ShapeExpr; binding
 *  - checks each buffer (kind, rank, dtype, device, data, contiguity),
 *  - binds a shape variable from the first array that has it as a plain
 *    dimension (in parameter order), or from its scalar argument when given,
 *  - checks every other use of it (other arrays' dimensions, strides, and
 *    expressions such as n + 1 or 2 * n, evaluated once all are bound),
 *  - fills in trailing shape scalars the caller left out.
 * A disagreement names the argument, the dimension and both values.
 *
 * Why here and not in generated code: the metadata already travels with
 * JIT and exported kernels alike, the checks need the arrays' shapes (which
 * the calling convention's bare pointers do not carry), and the runtime can
 * infer omitted scalars, which an entry check in the kernel cannot.
 */
#ifndef KILN_RUNTIME_ARG_BINDER_H
#define KILN_RUNTIME_ARG_BINDER_H

#include <cstdint>
#include <vector>

#include "kiln/runtime/module.h"

namespace kiln {

/**
 * Checks a kernel's shape metadata: each dims/strides entry has one
 * expression per dimension, constants agree with `shape`, and every
 * parameter an expression reads is an integer scalar parameter. Throws
 * kiln::Error naming the kernel and parameter. Module's constructor calls it.
 */
void check_shape_metadata(const KernelInfo& kernel);

/**
 * The arguments of one call, checked and bound against the kernel's
 * metadata (see the file comment) and packed per the calling convention of
 * c_runtime_api.h: data() has one pointer per parameter, including the
 * scalars that were inferred. Throws kiln::Error on any mismatch. The
 * pointer and scalar slots are inline for up to 16 parameters.
 */
class PackedArgs {
 public:
  PackedArgs(const KernelInfo& kernel, const std::vector<Arg>& args);
  PackedArgs(const PackedArgs&) = delete;
  PackedArgs& operator=(const PackedArgs&) = delete;

  void* const* data() const { return ptrs_; }
  size_t size() const { return size_; }

 private:
  static constexpr size_t kInline = 16;
  void* ptr_inline_[kInline];
  uint64_t val_inline_[kInline];
  std::vector<void*> ptr_heap_;
  std::vector<uint64_t> val_heap_;
  void** ptrs_ = ptr_inline_;
  uint64_t* vals_ = val_inline_;
  size_t size_ = 0;
};

}  // namespace kiln

#endif  // KILN_RUNTIME_ARG_BINDER_H
