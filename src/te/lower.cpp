// The lowering pipeline: schedule -> loop nest, then the loop passes as a
// plain list of calls. KILN_DUMP_IR=1 prints the IR after each step.
#include "kiln/te/lower.h"

#include <chrono>
#include <cstdlib>
#include <iostream>

#include "kiln/ir/printer.h"
#include "kiln/pass/passes.h"

namespace kiln::te {

namespace {
class PassLogger {
 public:
  explicit PassLogger(bool enabled) : enabled_(enabled) {}
  PrimFunc run(const char* name, PrimFunc (*pass)(const PrimFunc&), const PrimFunc& f) {
    auto t0 = std::chrono::steady_clock::now();
    PrimFunc out = pass(f);
    if (enabled_) {
      double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      std::cerr << "// ---- after " << name << " (" << ms << " ms)" << (out.same_as(f) ? " (unchanged)\n" : "\n");
      if (!out.same_as(f)) std::cerr << out << "\n";
    }
    return out;
  }
  void log(const char* what, const PrimFunc& f) {
    if (enabled_) std::cerr << "// ---- " << what << "\n" << f << "\n";
  }

 private:
  bool enabled_;
};

bool dump_requested() {
  const char* v = std::getenv("KILN_DUMP_IR");
  return v && *v && std::string(v) != "0";
}
}  // namespace

PrimFunc lower(const Schedule& sch, const std::vector<Tensor>& args, const std::string& name, const LowerOptions& options) {
  PassLogger log(options.dump_ir || dump_requested());
  PrimFunc f = schedule_to_function(sch, args, name);
  log.log("schedule to loop nest", f);
  if (!options.run_passes) return f;
  f = log.run("storage_flatten", pass::storage_flatten, f);
  f = log.run("simplify", pass::simplify, f);
  // Partition before unrolling and vectorizing so the main loops are guard-free.
  f = log.run("loop_partition", pass::loop_partition, f);
  f = log.run("simplify", pass::simplify, f);
  if (!options.expand_loops) return f;
  f = log.run("unroll_loops", pass::unroll_loops, f);
  f = log.run("vectorize_loops", pass::vectorize_loops, f);
  f = log.run("simplify", pass::simplify, f);
  f = log.run("remove_no_op", pass::remove_no_op, f);
  f = log.run("storage_reuse", pass::storage_reuse, f);
  return f;
}

}  // namespace kiln::te
