/** \file
 * The schedule rules the tuner searches over: tasks, sketches, candidates and
 * their default and seeds. They belong to the operator library
 * (kiln/ops/task.h, kiln/ops/search_space.h), which the graph compiler uses
 * for its default schedules without the tuner; the tuner adds the cost
 * model and the search on top and names them as its own here.
 */
#ifndef KILN_TUNER_SCHEDULE_RULES_H
#define KILN_TUNER_SCHEDULE_RULES_H

#include "kiln/ops/search_space.h"
#include "kiln/ops/task.h"

namespace kiln::tuner {

using ops::Candidate;
using ops::count_flop;
using ops::make_task;
using ops::SearchSpace;
using ops::Task;
using ops::tensor_core_schedule;
using ops::TensorCoreTiles;

}  // namespace kiln::tuner

#endif  // KILN_TUNER_SCHEDULE_RULES_H
