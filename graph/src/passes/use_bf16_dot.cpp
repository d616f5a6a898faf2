// use_bf16_dot (passes.h): a MatMul, Gemm, Conv or Conv gradient whose
// operands both hold bfloat16 values (as autocast leaves them: float32 Casts
// of bfloat16 values) computes with bfloat16 dot products instead: each
// operand packed into bfloat16 pairs along the reduction (kiln.PackBF16Pairs,
// which also does the rounding, so the Cast pair goes), then the op's
// kiln.*BF16Pairs form, whose products the LLVM backend turns into vdpbf16ps
// on AVX-512 BF16 (kiln/ops/bf16_pairs.h).
// The packed operand is half the bytes of the float32 copy the Casts made,
// and each instruction does 32 products where an FMA does 16.
#include <algorithm>
#include <vector>

#include "kiln/graph/op_registry.h"
#include "kiln/graph/passes.h"
#include "kiln/graph/rewrite.h"
#include "kiln/ops/graph_nn.h"

namespace kiln::graph {

namespace {

const OpNode* op_of(const Value& v, const char* name) {
  if (!v.defined() || v.node->kind != NodeKind::Op) return nullptr;
  const auto* n = static_cast<const OpNode*>(v.node.get());
  return n->op->name == name ? n : nullptr;
}

// Operators that only move elements: rounding commutes with them.
bool moves_elements(const OpNode& n) {
  // kiln.LayoutTransform too (alter_conv_layout's; its padded channels are zeros, rounded as zeros).
  static const char* const names[] = {"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "kiln.LayoutTransform"};
  for (const char* name : names)
    if (n.op->name == name) return true;
  return false;
}

// What to pack for an operand that holds bfloat16 values: x for
// Cast(Cast(x, bfloat16), float32), the bfloat16 value v for Cast(v, float32),
// and the same moves over that for a Reshape/Transpose/... of such an operand
// (a gradient's rows folded, a batch's heads split); undefined otherwise.
Value bf16_source(const Value& operand) {
  if (!operand.defined() || operand.node->kind != NodeKind::Op || operand.type().dtype != DataType::Float(32)) return Value();
  const auto& n = static_cast<const OpNode&>(*operand.node);
  if (moves_elements(n) && n.num_outputs() == 1) {
    Value inner = bf16_source(n.inputs[0]);
    if (!inner.defined()) return Value();
    std::vector<Value> ins = n.inputs;
    ins[0] = inner;
    return with_inputs(n, ins)->output();
  }
  if (n.op->name != "Cast" || !n.inputs[0].defined()) return Value();
  const Value& narrow = n.inputs[0];
  if (narrow.type().dtype != DataType::BFloat16()) return Value();
  const OpNode* round = op_of(narrow, "Cast");
  if (round && round->inputs[0].defined() && round->inputs[0].type().dtype == DataType::Float(32)) return round->inputs[0];
  return narrow;
}

}  // namespace

bool holds_bfloat16_values(const Value& v) { return bf16_source(v).defined(); }
Value bfloat16_source(const Value& v) { return bf16_source(v); }

namespace {

// An operand as above; a 2-D Transpose of one (a weight gradient's A^T) is
// read through the matmul's transpose flag instead of being copied: then
// `transposed` is set and the source is the matrix before the Transpose.
struct Operand {
  Value source;
  bool transposed = false;
};

Operand bf16_operand(const Value& v) {
  const OpNode* t = op_of(v, "Transpose");
  if (t && v.type().ndim() == 2)  // a 2-D Transpose can only swap the two axes
    if (Value s = bf16_source(t->inputs[0]); s.defined()) return {s, true};
  return {bf16_source(v), false};
}

Value pack(const Value& x, int64_t axis, const std::string& name) {
  return make_op("kiln.PackBF16Pairs", {x}, Attrs({{"axis", axis}}), name)->output();
}

Value scalar_constant(const std::string& name, double v) {
  NDArray a = NDArray::empty({}, DataType::Float(32));
  *a.data_as<float>() = static_cast<float>(v);
  return make_constant(name, a)->output();
}

// A group-1 Conv whose X and W hold bfloat16 values, in the CPU's
// channels-last form: X and W packed along C, the bias (if any) added after.
std::vector<Value> rewrite_conv(const OpNode& n) {
  const TensorType& w = n.inputs[1].type();
  if (n.attrs.get_int("group") != 1 || !ops::prefer_channels_last(1, w.shape[0])) return {};
  Value x = bf16_source(n.inputs[0]), wt = bf16_source(n.inputs[1]);
  // Constant weights (inference) are left to alter_conv_layout's NCHWc form,
  // packed at compile time, which this channels-last form does not beat yet.
  if (!x.defined() || !wt.defined() || wt.node->kind == NodeKind::Constant) return {};
  Attrs a;
  for (const char* name : {"auto_pad", "dilations", "kernel_shape", "pads", "strides"})
    if (n.attrs.has(name)) a.set(name, n.attrs.values().at(name));
  Value y = make_op("kiln.ConvBF16Pairs", {pack(x, 1, n.name + ".x_pairs"), pack(wt, 1, n.name + ".w_pairs")}, a, n.name)->output();
  if (n.inputs.size() > 2 && n.inputs[2].defined()) {
    std::vector<int64_t> per_channel(static_cast<size_t>(w.ndim() - 1), 1);  // [K] as [K, 1, ...] broadcasts over the spatial dims
    per_channel[0] = w.shape[0];
    NDArray shape = NDArray::empty({static_cast<int64_t>(per_channel.size())}, DataType::Int(64));
    std::copy(per_channel.begin(), per_channel.end(), shape.data_as<int64_t>());
    Value bias = make_op("Reshape", {n.inputs[2], make_constant(n.name + ".bias_shape", shape)->output()}, {}, n.name + ".bias_per_channel")->output();
    y = make_op("Add", {y, bias}, {}, n.name + ".bias")->output();
  }
  return {y};
}

// A conv gradient's pair form: `op` over a and b packed along the given
// axes, with the gradient node n's attributes except its group (always 1).
Value grad_pairs_op(const OpNode& n, const char* op, const Value& a, int64_t a_axis, const Value& b, int64_t b_axis) {
  Attrs attrs;
  for (const auto& [name, v] : n.attrs.values())
    if (name != "group") attrs.set(name, v);
  return make_op(op, {pack(a, a_axis, n.name + ".a_pairs"), pack(b, b_axis, n.name + ".b_pairs")}, attrs, n.name)->output();
}

// A Conv's input gradient (group 1) from bfloat16 dY and W: dY packed along
// its channels (K), W along its first axis (K), the channels-last form over
// dX's channels.
std::vector<Value> rewrite_conv_grad_input(const OpNode& n) {
  const std::vector<int64_t>& xs = n.attrs.get_ints("input_shape");
  if (n.attrs.get_int("group") != 1 || xs.size() < 3 || !ops::prefer_channels_last(1, xs[1])) return {};
  Value dy = bf16_source(n.inputs[0]), w = bf16_source(n.inputs[1]);
  if (!dy.defined() || !w.defined()) return {};
  return {grad_pairs_op(n, "kiln.ConvGradInputBF16Pairs", dy, 1, w, 0)};
}

// A Conv's weight gradient (group 1) from bfloat16 X and dY: both packed
// along the batch, the one axis of its sum where pairs line up at every tap.
std::vector<Value> rewrite_conv_grad_weight(const OpNode& n) {
  if (n.attrs.get_int("group") != 1) return {};
  Value x = bf16_source(n.inputs[0]), dy = bf16_source(n.inputs[1]);
  if (!x.defined() || !dy.defined()) return {};
  return {grad_pairs_op(n, "kiln.ConvGradWeightBF16Pairs", x, 0, dy, 0)};
}

}  // namespace

Graph use_bf16_dot(const Graph& g) {
  return rewrite_graph(g, [](const Ref<OpNode>& n) -> std::vector<Value> {
    if (n->op->name == "Conv" && n->num_outputs() == 1) return rewrite_conv(*n);
    if (n->op->name == "kiln.ConvGradInput") return rewrite_conv_grad_input(*n);
    if (n->op->name == "kiln.ConvGradWeight") return rewrite_conv_grad_weight(*n);
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
