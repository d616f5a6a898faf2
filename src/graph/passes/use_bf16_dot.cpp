// use_bf16_dot (passes.h): a MatMul or Gemm whose operands both hold
// bfloat16 values (as autocast leaves them: float32 Casts of bfloat16
// values) computes with bfloat16 dot products instead: each operand packed
// into bfloat16 pairs along K (kiln.PackBF16Pairs, which also does the
// rounding, so the Cast pair goes), then kiln.MatMulBF16Pairs, which the
// LLVM backend turns into vdpbf16ps on AVX-512 BF16 (kiln/ops/bf16_pairs.h).
// The packed operand is half the bytes of the float32 copy the Casts made,
// and each instruction does 32 products where an FMA does 16.
#include <vector>

#include "kiln/graph/op_registry.h"
#include "kiln/graph/passes.h"
#include "kiln/graph/rewrite.h"

namespace kiln::graph {

namespace {

const OpNode* op_of(const Value& v, const char* name) {
  if (!v.defined() || v.node->kind != NodeKind::Op) return nullptr;
  const auto* n = static_cast<const OpNode*>(v.node.get());
  return n->op->name == name ? n : nullptr;
}

// What to pack for an operand that holds bfloat16 values: x for
// Cast(Cast(x, bfloat16), float32), the bfloat16 value v for Cast(v, float32);
// undefined when the operand is not of that form.
Value bf16_source(const Value& operand) {
  const OpNode* widen = op_of(operand, "Cast");
  if (!widen || operand.type().dtype != DataType::Float(32) || !widen->inputs[0].defined()) return Value();
  const Value& narrow = widen->inputs[0];
  if (narrow.type().dtype != DataType::BFloat16()) return Value();
  const OpNode* round = op_of(narrow, "Cast");
  if (round && round->inputs[0].defined() && round->inputs[0].type().dtype == DataType::Float(32)) return round->inputs[0];
  return narrow;
}

// An operand as above, or a 2-D Transpose of one (a weight gradient's A^T):
// then `transposed` is set and the source is the matrix before the Transpose.
struct Operand {
  Value source;
  bool transposed = false;
};

Operand bf16_operand(const Value& v) {
  if (Value s = bf16_source(v); s.defined()) return {s, false};
  const OpNode* t = op_of(v, "Transpose");
  if (!t || v.type().ndim() != 2) return {};
  return {bf16_source(t->inputs[0]), true};  // a 2-D Transpose can only swap the two axes
}

Value pack(const Value& x, int64_t axis, const std::string& name) {
  return make_op("kiln.PackBF16Pairs", {x}, Attrs({{"axis", axis}}), name)->output();
}

Value scalar_constant(const std::string& name, double v) {
  NDArray a = NDArray::empty({}, DataType::Float(32));
  *a.data_as<float>() = static_cast<float>(v);
  return make_constant(name, a)->output();
}

}  // namespace

Graph use_bf16_dot(const Graph& g) {
  return rewrite_graph(g, [](const Ref<OpNode>& n) -> std::vector<Value> {
    bool gemm = n->op->name == "Gemm";
    if ((!gemm && n->op->name != "MatMul") || n->num_outputs() != 1) return {};
    Operand oa = bf16_operand(n->inputs[0]), ob = bf16_operand(n->inputs[1]);
    const Value &a = oa.source, &b = ob.source;
    if (!a.defined() || !b.defined()) return {};
    if (!gemm && (a.type().ndim() < 2 || b.type().ndim() < 2)) return {};  // numpy's 1-D promotions stay as they are
    // Transposed operands take the 2-D form (batched pairs have no transposes).
    if ((oa.transposed || ob.transposed) && (a.type().ndim() != 2 || b.type().ndim() != 2)) return {};
    bool ta = (gemm && n->attrs.get_int("transA") != 0) != oa.transposed, tb = (gemm && n->attrs.get_int("transB") != 0) != ob.transposed;
    bool two_d = gemm || ta || tb;
    Value pa = pack(a, two_d ? (ta ? 0 : 1) : -1, n->name + ".a_pairs");
    Value pb = pack(b, two_d ? (tb ? 1 : 0) : -2, n->name + ".b_pairs");
    Value y = make_op("kiln.MatMulBF16Pairs", {pa, pb}, Attrs({{"transA", int64_t(ta)}, {"transB", int64_t(tb)}}), n->name)->output();
    if (!gemm) return {y};
    double alpha = n->attrs.get_float("alpha"), beta = n->attrs.get_float("beta");
    if (alpha != 1.0) y = make_op("Mul", {y, scalar_constant(n->name + ".alpha", alpha)}, {}, n->name + ".scaled")->output();
    if (n->inputs.size() > 2 && n->inputs[2].defined() && beta != 0.0) {
      Value c = n->inputs[2];
      if (beta != 1.0) c = make_op("Mul", {c, scalar_constant(n->name + ".beta", beta)}, {}, n->name + ".c_scaled")->output();
      y = make_op("Add", {y, c}, {}, n->name + ".bias")->output();
    }
    return {y};
  });
}

}  // namespace kiln::graph
