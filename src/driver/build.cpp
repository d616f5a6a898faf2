#include "kiln/driver/build.h"

#include "kiln/support/error.h"
#include "kiln/te/lower.h"
#ifdef KILN_WITH_LLVM
#include "kiln/codegen/llvm.h"
#endif

namespace kiln {

Module build(const te::Schedule& sch, const std::vector<te::Tensor>& args, const std::string& target, const std::string& name) {
  return build(sch, args, Target::parse(target), name);
}

Module build(const te::Schedule& sch, const std::vector<te::Tensor>& args, const Target& target, const std::string& name) {
  PrimFunc f = te::lower(sch, args, name);
#ifdef KILN_WITH_LLVM
  KILN_USER_CHECK(target.kind == Target::Kind::LLVM) << "build for target '" << target.str() << "': only llvm targets can be built into a runnable module (CUDA code generation is a separate backend)";
  Module mod = codegen::build_llvm({f}, target);
  // The lowered parameters are flattened to 1-D buffers; the caller passes
  // arrays of the tensors' own shapes, so the metadata that Module::call checks
  // against takes the shapes of `args` (-1 for a symbolic dimension).
  std::vector<KernelInfo> kernels = mod.kernels();
  for (size_t i = 0; i < args.size() && i < kernels[0].params.size(); ++i) {
    ParamInfo& p = kernels[0].params[i];
    if (!p.is_buffer) continue;
    p.shape.clear();
    for (const Expr& d : args[i].shape()) {
      const int64_t* v = as_const_int(d);
      p.shape.push_back(v ? *v : -1);
    }
  }
  return Module(mod.backing(), std::move(kernels));
#else
  KILN_USER_ERROR() << "build for target '" << target.str() << "': kiln was built without the LLVM backend (configure with -DKILN_WITH_LLVM=ON)";
  return Module();
#endif
}

}  // namespace kiln
