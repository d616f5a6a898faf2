/** \file
 * XGBoost's OpenMP threads spin between the cost model's updates unless told
 * otherwise, and they share the cores with the measurements. The OpenMP
 * runtime reads OMP_WAIT_POLICY when it loads (before main), so a tuning
 * program calls this first thing: it starts the process again with
 * OMP_WAIT_POLICY=passive unless the variable is already set.
 */
#ifndef KILN_TUNER_OPENMP_POLICY_H
#define KILN_TUNER_OPENMP_POLICY_H

namespace kiln::tuner {

/** Re-executes the program with OMP_WAIT_POLICY=passive when unset; returns only if it is set or exec fails. */
void prefer_passive_openmp(char** argv);

}  // namespace kiln::tuner

#endif  // KILN_TUNER_OPENMP_POLICY_H
