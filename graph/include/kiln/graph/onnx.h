/** \file
 * The ONNX importer: an ONNX model (opsets 11 to 17 of the default domain)
 * to a kiln graph.
 *
 *   initializers        constants (graph inputs that are initializers are not
 *                       model inputs)
 *   Constant nodes      constants
 *   graph inputs        model inputs, with the static shapes of their
 *                       ValueInfo; `shapes` overrides them by input name and
 *                       must be given for every symbolic or unknown dimension
 *   nodes               registry operators by op type; forms older than
 *                       opset 13 (Split's `split`, Squeeze / Unsqueeze /
 *                       ReduceSum `axes` attributes, Softmax's flattening)
 *                       are translated to the forms the registry takes
 *   graph outputs       the graph's outputs, under their ONNX names
 *
 * Every problem with the model (unreadable bytes, an unsupported op or
 * domain, a value nothing defines, external data ...) throws kiln::Error
 * with a message naming it.
 */
#ifndef KILN_GRAPH_ONNX_H
#define KILN_GRAPH_ONNX_H

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kiln/graph/graph.h"

namespace kiln::graph {

/**
 * Input shapes by input name, overriding (or completing) those the model
 * declares: a static extent, or a shape variable (Dim::var("batch")) to make
 * that axis symbolic. A dimension the model leaves symbolic (an ONNX
 * dim_param) and the caller does not set becomes the shape variable of that
 * name; an unknown one (neither value nor name) becomes "<input>_dim<axis>".
 */
using InputShapes = std::map<std::string, Shape>;

/** Imports the ONNX model in the file at `path`. */
Graph from_onnx(const std::string& path, const InputShapes& shapes = {});
/** Imports a serialised ONNX ModelProto. */
Graph from_onnx_bytes(const std::string& bytes, const InputShapes& shapes = {});

}  // namespace kiln::graph

#endif  // KILN_GRAPH_ONNX_H
