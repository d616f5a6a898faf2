/** \file
 * The trace of a schedule: the list of primitive steps that made it.
 *
 * Steps are typed records (step.h). The JSON form is an array of step
 * objects, e.g.
 *   [{"kind":"split","stage":2,"stage_name":"C","axes":[0],"axis_names":["i"],"ints":[8]}, ...]
 * (the format of every trace written so far: the tuning DB stores traces in
 * it, and they replay). `to_python` prints the Python that redoes the
 * schedule on the same DAG, e.g.
 *   i_outer, i_inner = s[C].split(s[C].axis("i"), factor=8)
 */
#ifndef KILN_TE_TRACE_H
#define KILN_TE_TRACE_H

#include <string>
#include <vector>

#include "kiln/te/step.h"

namespace kiln::te {

struct Trace {
  std::vector<Step> steps;
  /** JSON text (an array of step objects). */
  std::string to_json() const;
  /** Parses JSON text; throws kiln::Error on malformed input or an unknown kind, naming the step. */
  static Trace from_json(const std::string& text);
  /** One line per step, readable. */
  std::string str() const;
  /**
   * Python that rebuilds the schedule: run it with `s` bound to a fresh
   * schedule of the same DAG and each tensor bound to a variable named
   * after it ("." becomes "_"). Stages and axes the trace cannot name are
   * written by position (s.stages[i], s[T].axis("name")).
   */
  std::string to_python() const;
  bool operator==(const Trace&) const = default;
};

}  // namespace kiln::te

#endif  // KILN_TE_TRACE_H
