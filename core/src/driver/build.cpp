#include "kiln/driver/build.h"

#include <atomic>
#include <chrono>

#include "kiln/support/compile_times.h"
#include "kiln/support/error.h"
#include "kiln/te/lower.h"
#ifdef KILN_WITH_LLVM
#include "kiln/codegen/llvm.h"
#endif

namespace kiln {

namespace {
std::atomic<uint64_t> builds{0};
}  // namespace

uint64_t build_count() { return builds.load(); }

Module build(const te::Schedule& sch, const std::vector<te::Tensor>& args, const std::string& target, const std::string& name) {
  return build(sch, args, Target::parse(target), name);
}

Module build(const te::Schedule& sch, const std::vector<te::Tensor>& args, const Target& target, const std::string& name) {
  builds.fetch_add(1);
  auto t0 = std::chrono::steady_clock::now();
  PrimFunc f = te::lower(sch, args, name);
  add_compile_time(CompilePhase::Lower, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
#ifdef KILN_WITH_LLVM
  KILN_USER_CHECK(target.kind == Target::Kind::LLVM) << "build for target '" << target.str() << "': only llvm targets build into a Module; for cuda use kiln::build_cuda (kiln/driver/build_cuda.h), or kiln.build in Python";
  return codegen::build_llvm({f}, target);
#else
  KILN_USER_ERROR() << "build for target '" << target.str() << "': kiln was built without the LLVM backend (configure with -DKILN_WITH_LLVM=ON)";
  return Module();
#endif
}

}  // namespace kiln
