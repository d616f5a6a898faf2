// Shared pieces of the shape/transform operator entries (transform_*.cpp):
// reading compile-time inputs and normalising axis lists the ONNX way.
#ifndef KILN_GRAPH_OPS_TRANSFORM_COMMON_H
#define KILN_GRAPH_OPS_TRANSFORM_COMMON_H

#include <string>
#include <vector>

#include "kiln/graph/op_registry.h"
#include "kiln/ops/transform.h"

namespace kiln::graph::ops_detail {

/** Axes in [-rank, rank) normalised to [0, rank), sorted; fails on an out-of-range or repeated axis (`what` names the list). */
std::vector<int> normalize_axes(const OpCall& call, const std::vector<int64_t>& axes, int rank, const std::string& what = "axes");
/** A constant numeric input (float or integer dtype) as doubles. */
std::vector<double> constant_floats(const OpCall& call, int i, const char* what);
/** Element k of a numeric array as a double. */
double array_value(const NDArray& a, int64_t k);
/** The DataType of an ONNX TensorProto data type code (1 float, 7 int64, ...); fails on codes kiln does not hold. */
DataType onnx_dtype(const OpCall& call, int64_t code);
/** Product of the dimensions. */
int64_t numel_of(const std::vector<int64_t>& shape);
/** Whether optional input i is given with at least one element (exporters write an empty tensor for "absent", e.g. Resize's scales). */
bool input_given(const OpCall& call, int i);

}  // namespace kiln::graph::ops_detail

#endif  // KILN_GRAPH_OPS_TRANSFORM_COMMON_H
