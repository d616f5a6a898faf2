// autocast: the allow-listed operators read and give values rounded to a
// 16-bit float (see autocast.h).
#include "kiln/graph/autocast.h"

#include <algorithm>

#include "kiln/graph/op_registry.h"
#include "kiln/graph/rewrite.h"
#include "kiln/support/error.h"

namespace kiln::graph {

namespace {

int64_t onnx_code(DataType t) { return t.is_bfloat() ? 16 : t == DataType::Float(16) ? 10 : 1; }

}  // namespace

Value round_through(const Value& x, DataType low) {
  Value narrow = make_op("Cast", {x}, Attrs({{"to", onnx_code(low)}}), x.node->name + ".to_" + low.str())->output();
  return make_op("Cast", {narrow}, Attrs({{"to", int64_t(1)}}), x.node->name + ".rounded")->output();
}

Graph autocast(const Graph& g, const AutocastOptions& o) {
  KILN_USER_CHECK(o.low.is_bfloat() || o.low == DataType::Float(16))
      << "autocast: the low precision must be bfloat16 or float16, got " << o.low.str();
  return rewrite_graph(g, [&](const Ref<OpNode>& n) -> std::vector<Value> {
    if (std::find(o.ops.begin(), o.ops.end(), n->op->name) == o.ops.end()) return {};
    std::vector<Value> ins = n->inputs;
    bool changed = false;
    for (Value& v : ins)
      if (v.defined() && v.type().dtype == DataType::Float(32)) v = round_through(v, o.low), changed = true;
    if (!changed) return {};
    Ref<OpNode> m = with_inputs(*n, ins);
    std::vector<Value> outs;
    for (int i = 0; i < m->num_outputs(); ++i) {
      Value y = m->output(i);
      outs.push_back(o.round_outputs && y.type().dtype == DataType::Float(32) ? round_through(y, o.low) : y);
    }
    return outs;
  });
}

}  // namespace kiln::graph
