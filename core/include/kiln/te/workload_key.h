/** \file
 * The workload key: a canonical, structural hash of a compute DAG (ops,
 * shapes, dtypes, the bodies' structure; not the names of tensors or
 * variables). Workload key + target is the tuning database's lookup.
 */
#ifndef KILN_TE_WORKLOAD_KEY_H
#define KILN_TE_WORKLOAD_KEY_H

#include <string>
#include <vector>

#include "kiln/te/operation.h"

namespace kiln::te {

/** The canonical text of the DAG computing outputs: one line per op, names replaced by positions. */
std::string canonical_dag(const std::vector<Tensor>& outputs);
/** 16 hex digits: a 64-bit hash of canonical_dag. */
std::string workload_key(const std::vector<Tensor>& outputs);
/** The DAG as JSON (for the tuning database): ops with names, shapes, dtypes and canonical bodies. */
std::string dag_json(const std::vector<Tensor>& outputs);

}  // namespace kiln::te

#endif  // KILN_TE_WORKLOAD_KEY_H
