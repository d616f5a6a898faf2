// The lowering pipeline: schedule -> loop nest, then the loop passes as a
// plain list of calls. KILN_DUMP_IR (kiln/support/ir_log.h) prints the IR after each step.
#include "kiln/te/lower.h"

#include <sstream>

#include "kiln/ir/printer.h"
#include "kiln/pass/passes.h"
#include "kiln/support/ir_log.h"

namespace kiln::te {

namespace {
// The loop nest as text for the IR log, or "" when a pass left it unchanged.
std::string loop_text(const PrimFunc& in, const PrimFunc& out) {
  if (out.same_as(in)) return "";
  std::ostringstream os;
  os << out;
  return os.str();
}
}  // namespace

PrimFunc lower(const Schedule& sch, const std::vector<Tensor>& args, const std::string& name, const LowerOptions& options) {
  IrLog log(options.dump_ir);
  PrimFunc f = schedule_to_function(sch, args, name);
  log.heading("schedule to loop nest", [&] { return loop_text(PrimFunc(), f); });
  auto run = [&](const char* pass_name, PrimFunc (*pass)(const PrimFunc&), const PrimFunc& in) {
    return log.run(pass_name, [&] { return pass(in); }, [&](const PrimFunc& out) { return loop_text(in, out); });
  };
  if (!options.run_passes) return f;
  f = run("storage_flatten", pass::storage_flatten, f);
  f = run("simplify", pass::simplify, f);
  // Partition before unrolling and vectorizing so the main loops are guard-free.
  f = run("loop_partition", pass::loop_partition, f);
  f = run("simplify", pass::simplify, f);
  if (!options.expand_loops) return f;
  f = run("unroll_loops", pass::unroll_loops, f);
  f = run("vectorize_loops", pass::vectorize_loops, f);
  f = run("simplify", pass::simplify, f);
  f = run("remove_no_op", pass::remove_no_op, f);
  f = run("storage_reuse", pass::storage_reuse, f);
  f = run("fold_into_parallel", pass::fold_into_parallel, f);
  return f;
}

}  // namespace kiln::te
