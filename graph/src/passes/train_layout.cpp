// The training rules of alter_conv_layout (train_layout.h).
//
// In a training step (kiln.train) the convolutions' weights are graph inputs,
// so the inference rules, which pack constant weights at compile time, leave
// the step in NCHW. Here a 2-D group-1 Conv of such weights becomes
//   LayoutTransform(NCHW -> cb) -> ConvNCHWc(kiln.PackConvWeights(W)) -> LayoutTransform(kb -> NCHW)
// with the plain weights packed by a small kernel once per step (the
// optimizer keeps updating the plain ones), and a depthwise one
// kiln.DepthwiseConvNCHWc of W as [C/b, KH, KW, b] (a Reshape and Transpose),
// its gradients the depthwise forms of the blocked gradient ops. The inference rules then move
// the transforms out of the way through the elementwise operators and the
// pools, and the rules here take the rest of a training step through:
//  - batch norm's statistics and their gradients, per-channel ReduceMean /
//    ReduceSum over (N, H, W) with kept dims, the same reduction of the
//    blocked tensor ([1, C/b, 1, 1, b] is [1, C, 1, 1] blocked);
//  - the convolutions' gradients as kiln.ConvGradInputNCHWc (dY blocked ->
//    dX blocked) and kiln.ConvGradWeightNCHWc (X, dY blocked -> dW plain, for
//    the optimizer), and a conv bias's gradient as a blocked channel sum;
//  - MaxPool's gradient (kiln.MaxPoolArgmax, kiln.MaxPoolGrad with blocked=1);
//  - elementwise operators that broadcast a per-channel tensor ([1, C, 1, 1]:
//    the batch's mean, the scale, their gradients), which is blocked too
//    (a transform of C values), and a per-channel tensor Expanded to the
//    full shape, which the blocked operator broadcasts instead.
// The blocks divide the channels (no padded lanes: batch norm divides by
// its statistics), and every convolution takes the same cap (two vectors),
// so between convolutions nothing is re-blocked.
#include "train_layout.h"

#include <algorithm>
#include <optional>
#include <string>

#include "kiln/graph/layout_plan.h"
#include "kiln/graph/op_registry.h"
#include "kiln/ops/nn.h"
#include "layout_helpers.h"

namespace kiln::graph::layout_detail {
namespace {

bool is_constant(const Value& v) { return v.defined() && v.node->kind == NodeKind::Constant; }

const OpNode* producer(const Value& v) { return v.defined() && v.node->kind == NodeKind::Op ? static_cast<const OpNode*>(v.node.get()) : nullptr; }

Value ints(const std::vector<int64_t>& v, const std::string& name) {
  NDArray a = NDArray::empty({static_cast<int64_t>(v.size())}, DataType::Int(64));
  std::copy(v.begin(), v.end(), a.data_as<int64_t>());
  return make_constant(name, a)->output();
}

// The group of a 2-D float32 Conv of static weights the graph computes (a training step's
// parameters) and explicit pads, or 0 where the conv is not such a one.
int64_t trainable_conv_group(const OpNode& n) {
  if (n.op->name != "Conv" || n.inputs.size() < 2 || n.num_outputs() != 1 || is_constant(n.inputs[1])) return 0;
  const TensorType &x = n.inputs[0].type(), &w = n.inputs[1].type();
  if (x.ndim() != 4 || w.ndim() != 4 || x.dtype != DataType::Float(32) || w.dtype != DataType::Float(32) || !w.is_static() || !x.shape[1].is_static()) return 0;
  if (n.attrs.has("auto_pad") && n.attrs.get_string("auto_pad") != "NOTSET") return 0;
  return n.attrs.get_int_or("group", 1);
}

// A group-1 one.
bool trainable_conv(const OpNode& n) { return trainable_conv_group(n) == 1; }

// A depthwise one (group = C = K, weights [C, 1, KH, KW]).
bool trainable_depthwise(const OpNode& n) {
  const int64_t g = trainable_conv_group(n);
  if (g <= 1) return false;
  const int64_t C = n.inputs[0].type().shape[1].value();
  const auto& ws = n.inputs[1].type().shape;
  return g == C && ws[0].value() == C && ws[1].value() == 1;
}

// [1, C, 1, 1] or [N, C, 1, 1]: one value per channel (and image), broadcast over the pixels.
bool per_channel(const TensorType& t, int64_t C) {
  return t.ndim() == 4 && t.shape[1].is_static() && t.shape[1] == C && t.shape[2] == 1 && t.shape[3] == 1;
}

// A tensor of one element of rank <= 4: it broadcasts over the blocked form as it is.
bool single(const TensorType& t) {
  if (t.ndim() > 4) return false;
  return std::all_of(t.shape.begin(), t.shape.end(), [](const Dim& d) { return d.is_static() && d.value() == 1; });
}

// Axes {0, 2, 3} of a 4-D tensor: all but the channels.
bool all_but_channels(std::vector<int64_t> axes) {
  for (int64_t& a : axes) a = a < 0 ? a + 4 : a;
  std::sort(axes.begin(), axes.end());
  return axes == std::vector<int64_t>{0, 2, 3};
}

}  // namespace

TrainLayoutRules::TrainLayoutRules(const Graph& g, int64_t max_block, int64_t lanes, Relayout relayout)
    : max_block_(max_block), lanes_(lanes), relayout_(std::move(relayout)) {
  // A step cut into segments (kiln.dist's runner, recomputation) may hold a
  // convolution's gradients without the convolution: they take the blocked
  // kernels there too, so the sums do not depend on where the step was cut.
  for (const OpNode* n : g.op_nodes())
    active_ = active_ || trainable_conv(*n) || trainable_depthwise(*n) || n->op->name == "kiln.ConvGradInput" || n->op->name == "kiln.ConvGradWeight";
}

std::vector<Value> TrainLayoutRules::operator()(const Ref<OpNode>& n) {
  if (trainable_conv(*n)) return conv(*n);
  if (trainable_depthwise(*n)) return depthwise_conv(*n);
  if (n->op->name == "kiln.ConvGradInput") return conv_grad_input(*n);
  if (n->op->name == "kiln.ConvGradWeight") return conv_grad_weight(*n);
  if (n->op->name == "ReduceMean" || n->op->name == "ReduceSum") return channel_reduce(*n);
  if (n->op->name == "kiln.MaxPoolArgmax" || n->op->name == "kiln.MaxPoolGrad") return max_pool_grad(*n);
  return elementwise(*n);
}

// The block of C channels: the inference choice where it divides C, else the largest divisor up to a vector.
int64_t TrainLayoutRules::block(int64_t C) const {
  const int64_t b = channel_block_for(C, max_block_, lanes_);
  return C % b == 0 ? b : ops::channel_block(static_cast<int>(C), static_cast<int>(lanes_));
}

std::vector<Value> TrainLayoutRules::conv(const OpNode& n) {
  const auto& ws = n.inputs[1].type().shape;
  const int64_t C = n.inputs[0].type().shape[1], K = ws[0];
  const int64_t cb = block(C), kb = block(K);
  Attrs pack;
  pack.set("in_block", cb);
  pack.set("out_block", kb);
  Value w = make_op("kiln.PackConvWeights", {n.inputs[1]}, pack, n.inputs[1].node->name + ".nchwc")->output();
  Attrs a;
  a.set("strides", ints_or(n.attrs, "strides", {1, 1}));
  a.set("pads", ints_or(n.attrs, "pads", {0, 0, 0, 0}));
  a.set("dilations", ints_or(n.attrs, "dilations", {1, 1}));
  Value y = make_op("kiln.ConvNCHWc", {relayout_(n.inputs[0], 0, cb, C), w}, a, n.name)->output();
  if (n.inputs.size() > 2 && n.inputs[2].defined()) {
    // The bias [K] as [1, K, 1, 1], blocked.
    Value b = make_op("Reshape", {n.inputs[2], ints({1, K, 1, 1}, n.name + ".bias_shape")}, {}, n.name + ".bias_4d")->output();
    y = make_op("Add", {y, relayout_(b, 0, kb, K)}, {}, n.name + ".bias")->output();
  }
  return {relayout_(y, kb, 0, K)};
}

// A depthwise conv: kiln.DepthwiseConvNCHWc in the block of its channels (the
// convs around it take the same), its weights [C, 1, KH, KW] packed to
// [C/b, KH, KW, b] by a Reshape and a Transpose each step.
std::vector<Value> TrainLayoutRules::depthwise_conv(const OpNode& n) {
  const auto& ws = n.inputs[1].type().shape;
  const int64_t C = ws[0], KH = ws[2], KW = ws[3], b = block(C);
  if (C % b != 0) return {};
  const std::string& wn = n.inputs[1].node->name;
  Value w = make_op("Reshape", {n.inputs[1], ints({C / b, b, KH, KW}, wn + ".dw_shape")}, {}, wn + ".dw_blocks")->output();
  Attrs perm;
  perm.set("perm", std::vector<int64_t>{0, 2, 3, 1});
  w = make_op("Transpose", {w}, perm, wn + ".nchwc")->output();
  Attrs a;
  a.set("strides", ints_or(n.attrs, "strides", {1, 1}));
  a.set("pads", ints_or(n.attrs, "pads", {0, 0, 0, 0}));
  a.set("dilations", ints_or(n.attrs, "dilations", {1, 1}));
  Value y = make_op("kiln.DepthwiseConvNCHWc", {relayout_(n.inputs[0], 0, b, C), w}, a, n.name)->output();
  if (n.inputs.size() > 2 && n.inputs[2].defined()) {
    Value bias = make_op("Reshape", {n.inputs[2], ints({1, C, 1, 1}, n.name + ".bias_shape")}, {}, n.name + ".bias_4d")->output();
    y = make_op("Add", {y, relayout_(bias, 0, b, C)}, {}, n.name + ".bias")->output();
  }
  return {relayout_(y, b, 0, C)};
}

// C where weights w are a depthwise conv's [C, 1, KH, KW] in whole blocks, else 0.
int64_t TrainLayoutRules::depthwise_channels(const TensorType& w) const {
  if (w.ndim() != 4 || !w.is_static() || w.shape[1].value() != 1) return 0;
  const int64_t C = w.shape[0].value();
  return C % block(C) == 0 ? C : 0;
}

// The window attributes a blocked gradient takes from an NCHW one (2-D, float32, group 1 or a
// depthwise conv's: group = `depthwise_channels`, weights [C, 1, KH, KW]), or none.
static std::optional<Attrs> blocked_grad_attrs(const OpNode& n, const char* blocked_op, int64_t depthwise_channels) {
  const int64_t g = n.attrs.get_int_or("group", 1);
  if (!find_op(blocked_op) || (g != 1 && g != depthwise_channels) || n.num_outputs() != 1 || n.types[0].dtype != DataType::Float(32)) return std::nullopt;
  const auto& pads = n.attrs.get_ints("pads");
  if (n.attrs.get_ints("strides").size() != 2 || n.attrs.get_ints("dilations").size() != 2 || pads.size() != 4) return std::nullopt;
  Attrs a;
  for (const char* name : {"strides", "pads", "dilations"}) a.set(name, n.attrs.get_ints(name));
  a.set("group", g);
  return a;
}

// dX = kiln.ConvGradInputNCHWc(dY blocked, W plain), in the block of X's channels the forward conv read.
std::vector<Value> TrainLayoutRules::conv_grad_input(const OpNode& n) {
  auto a = blocked_grad_attrs(n, "kiln.ConvGradInputNCHWc", depthwise_channels(n.inputs[1].type()));
  if (!a || n.types[0].ndim() != 4 || !n.types[0].is_static() || is_constant(n.inputs[1])) return {};
  const auto& in = n.attrs.get_ints("input_shape");
  const int64_t C = in[1], K = n.inputs[1].type().shape[0], cb = block(C);
  const int64_t kb = block(K);  // dY's block wherever it comes from (in NCHW when a segment's input)
  a->set("input_shape", in);
  a->set("block", cb);
  Value dx = make_op("kiln.ConvGradInputNCHWc", {relayout_(n.inputs[0], 0, kb, K), n.inputs[1]}, *a, n.name)->output();
  return {relayout_(dx, cb, 0, C)};
}

// dW (plain, for the optimizer) = kiln.ConvGradWeightNCHWc(X blocked, dY blocked).
std::vector<Value> TrainLayoutRules::conv_grad_weight(const OpNode& n) {
  auto a = blocked_grad_attrs(n, "kiln.ConvGradWeightNCHWc", depthwise_channels(n.types[0]));
  if (!a || n.types[0].ndim() != 4 || !n.types[0].is_static() || n.inputs[0].type().ndim() != 4) return {};
  std::vector<int64_t> ws;
  for (const Dim& d : n.types[0].shape) ws.push_back(d.value());
  const int64_t K = ws[0], C = a->get_int("group") == 1 ? ws[1] : K;  // depthwise: X's channels are dY's
  const int64_t kb = block(K);  // dY's block wherever it comes from (in NCHW when a segment's input)
  a->set("weight_shape", ws);
  return {make_op("kiln.ConvGradWeightNCHWc", {relayout_(n.inputs[0], 0, block(C), C), relayout_(n.inputs[1], 0, kb, K)}, *a, n.name)->output()};
}

std::vector<Value> TrainLayoutRules::channel_reduce(const OpNode& n) {
  const int64_t b = n.inputs.empty() ? 0 : block_behind(n.inputs[0]);
  if (b == 0 || n.num_outputs() != 1 || n.inputs[0].type().ndim() != 4) return {};
  const bool keep = n.attrs.get_int_or("keepdims", 1) != 0;  // without: a conv bias's gradient, [C]
  const int64_t C = n.inputs[0].type().shape[1];
  if (C % b != 0) return {};
  const bool mean = n.op->name == "ReduceMean";
  std::vector<int64_t> axes;
  if (mean) {
    axes = ints_or(n.attrs, "axes", {});
  } else if (n.inputs.size() > 1 && is_constant(n.inputs[1])) {
    const NDArray& a = static_cast<const ConstantNode&>(*n.inputs[1].node).data;
    if (a.dtype() != DataType::Int(64)) return {};
    axes.assign(a.data_as<int64_t>(), a.data_as<int64_t>() + a.numel());
  }
  if (!all_but_channels(axes)) return {};
  Value x = relayout_(n.inputs[0], 0, b, C);
  Attrs attrs = n.attrs;
  attrs.set("keepdims", int64_t{1});
  std::vector<Value> in{x};
  if (mean) attrs.set("axes", std::vector<int64_t>{0, 2, 3});
  else in.push_back(ints({0, 2, 3}, n.name + ".axes"));
  Value y = make_op(n.op, std::move(in), attrs, keep ? n.name : n.name + ".kept")->output();
  y = relayout_(y, b, 0, C);
  return {keep ? y : make_op("Reshape", {y, ints({C}, n.name + ".shape")}, {}, n.name)->output()};
}

// MaxPool's gradient of blocked values: kiln.MaxPoolArgmax(X, Y) and
// kiln.MaxPoolGrad(dY, argmax) with blocked=1 (windows over the pixels of
// each channel, as over NCHW's).
std::vector<Value> TrainLayoutRules::max_pool_grad(const OpNode& n) {
  const TensorType& t = n.op->name == "kiln.MaxPoolArgmax" ? n.inputs[0].type() : n.types[0];
  if (t.ndim() != 4 || !t.shape[1].is_static() || n.attrs.get_int_or("blocked", 0) != 0) return {};
  int64_t b = 0;
  for (const Value& v : n.inputs) b = std::max(b, block_behind(v));
  const int64_t C = t.shape[1];
  if (b == 0 || C % b != 0) return {};
  std::vector<Value> in;
  for (const Value& v : n.inputs) in.push_back(relayout_(v, 0, b, C));
  Attrs a = n.attrs;
  a.set("blocked", int64_t{1});
  if (a.has("input_shape")) {
    std::vector<int64_t> s = a.get_ints("input_shape");
    a.set("input_shape", std::vector<int64_t>{s[0], s[1] / b, s[2], s[3], b});
  }
  Value y = make_op(n.op, std::move(in), a, n.name)->output();
  return {relayout_(y, b, 0, C)};
}

// An elementwise/broadcast operator with a blocked input whose other inputs
// are per-channel tensors (or Expands of one), single values, or of its shape.
std::vector<Value> TrainLayoutRules::elementwise(const OpNode& n) {
  if (n.op->pattern > Pattern::Broadcast || n.num_outputs() != 1 || n.types[0].ndim() != 4 || n.op->name.rfind("kiln.", 0) == 0 || n.op->name == "Expand")
    return {};
  const Shape& out = n.types[0].shape;
  if (!out[1].is_static()) return {};
  const int64_t C = out[1];
  int64_t b = 0;
  for (const Value& v : n.inputs)
    if (v.defined() && block_behind(v) > 0) b = block_behind(v);
  if (b == 0 || C % b != 0) return {};
  std::vector<Value> in;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    const Value& v = n.inputs[i];
    const OpNode* p = producer(v);
    if (!v.defined() || n.op->reads_at_compile_time(static_cast<int>(i))) {
      in.push_back(v);
    } else if (p && p->op->name == "Expand" && per_channel(p->inputs[0].type(), C) && v.type().shape == out) {
      in.push_back(relayout_(p->inputs[0], 0, b, C));  // the blocked operator broadcasts it
    } else if (v.type().shape == out || per_channel(v.type(), C)) {
      in.push_back(relayout_(v, 0, b, C));  // looks through a transform from b
    } else if (single(v.type())) {
      in.push_back(v);
    } else {
      return {};
    }
  }
  Value y = make_op(n.op, std::move(in), n.attrs, n.name)->output();
  return {relayout_(y, b, 0, C)};
}

}  // namespace kiln::graph::layout_detail
