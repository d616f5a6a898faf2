/** \file
 * Lowering: a schedule becomes a loop nest (a PrimFunc), then the pass
 * pipeline runs over it as a plain list of calls (see core/src/te/lower.cpp).
 * Set KILN_DUMP_IR=1 to print the IR after every pass (with its time), or
 * KILN_DUMP_IR=<pass name> for one pass (kiln/support/ir_log.h).
 */
#ifndef KILN_TE_LOWER_H
#define KILN_TE_LOWER_H

#include <string>
#include <vector>

#include "kiln/ir/function.h"
#include "kiln/te/schedule.h"

namespace kiln::te {

struct LowerOptions {
  /** Run the loop passes after building the loop nest (off: the raw nest, for tests). */
  bool run_passes = true;
  /** Print the IR after each pass to stderr (also KILN_DUMP_IR=1; a KILN_DUMP_IR pass name still filters). */
  bool dump_ir = false;
  /**
   * Expand the loops marked Unrolled and Vectorized (and run the passes after
   * that). Off: stop after loop partitioning, with the marks still on the
   * loops; the nest the cost model reads its features from (it is as
   * informative and 10x cheaper than the expanded one).
   */
  bool expand_loops = true;
};

/**
 * Lowers the schedule to a function taking `args` (placeholders and outputs,
 * in the order the caller will pass them; scalar shape variables follow as
 * int32 parameters). Raises kiln::Error when an input or output of the
 * DAG is missing from args or the schedule is inconsistent.
 */
PrimFunc lower(const Schedule& sch, const std::vector<Tensor>& args, const std::string& name = "main", const LowerOptions& options = {});

/** The schedule's loop nest before any pass: bound inference, realisation, guards. */
PrimFunc schedule_to_function(const Schedule& sch, const std::vector<Tensor>& args, const std::string& name);

}  // namespace kiln::te

#endif  // KILN_TE_LOWER_H
