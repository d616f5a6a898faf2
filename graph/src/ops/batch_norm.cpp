// BatchNormalization in its inference form (ONNX opset 15):
//   y = (x - mean[c]) / sqrt(var[c] + epsilon) * scale[c] + B[c],  c = axis 1.
// After a Conv with constant parameters, fold_batch_norm folds it into the
// Conv's weights; elsewhere it is this broadcast compute. In a training
// graph (lift_parameters with training) it normalises with batch statistics.
#include "elementwise_helpers.h"
#include "sharding_rules.h"

namespace kiln::graph::ops_detail {
namespace {

const char* const kParams[] = {"X", "scale", "B", "input_mean", "input_var"};

// training_mode=1 (a model exported for training) imports, so that kiln.train
// can rewrite it to batch statistics (lift_parameters); as an inference
// kernel it has no meaning, so only its compute refuses it.
std::vector<TensorType> infer(const OpCall& call) {
  const TensorType& x = call.input_types[0];
  expect_dtype(call, 0, DTypes::Float, "X");
  if (x.ndim() < 2) call.fail("X has type " + x.str() + "; BatchNormalization needs at least 2 dimensions (N, C, ...)");
  int64_t C = x.shape[1];
  for (int i = 1; i < 5; ++i) {
    const TensorType& p = call.input_types[i];
    expect_dtype(call, i, DTypes::Float, kParams[i]);
    if (p.shape != std::vector<int64_t>{C})
      call.fail(std::string(kParams[i]) + " has type " + p.str() + "; it must have shape [" + std::to_string(C) + "] (X's channels, axis 1)");
  }
  return {x};
}

std::vector<te::Tensor> compute(const OpCall& call, const std::vector<te::Tensor>& in) {
  if (call.attrs.get_int("training_mode") != 0)
    call.fail("training_mode=1 computes batch statistics: train the model with kiln.train, or export it in eval mode for inference");
  DataType t = in[0].dtype();
  Expr eps = make_const(t, call.attrs.get_float("epsilon"));
  te::Tensor X = in[0], scale = in[1], B = in[2], mean = in[3], var = in[4];
  return {te::compute(X.shape(), [&](const std::vector<Var>& i) {
    std::vector<Expr> c{i[1]};
    Expr x = X(std::vector<Expr>(i.begin(), i.end()));
    return (x - cast(t, mean(c))) / sqrt(cast(t, var(c)) + eps) * cast(t, scale(c)) + cast(t, B(c));
  }, "BatchNormalization")};
}

const bool registered = [] {
  OpDef d;
  d.name = "BatchNormalization";
  d.doc = "inference batch norm over axis 1: (x - mean) / sqrt(var + epsilon) * scale + B";
  d.min_inputs = d.max_inputs = 5;
  d.attrs = {{"epsilon", AttrKind::Float, AttrValue(1e-5)},
             {"momentum", AttrKind::Float, AttrValue(0.9)},  // training only
             {"training_mode", AttrKind::Int, AttrValue(int64_t{0})}};
  d.pattern = Pattern::Broadcast;
  // Per channel: batch and channel splits carry, the parameters follow the channels.
  d.sharding = channel_rule();
  d.cost = per_element_cost(4);  // subtract, divide, scale, shift
  d.infer = infer;
  d.compute = compute;
  register_op(std::move(d));
  return true;
}();

}  // namespace
}  // namespace kiln::graph::ops_detail
