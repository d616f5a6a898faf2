// The training rules of alter_conv_layout (train_layout.cpp): a training
// step's convolutions read weights the step computes (graph inputs the
// optimizer updates), not constants, so they are packed by a kernel of the
// step; batch norm on batch statistics (per-channel reductions and
// broadcasts over [1, C, 1, 1]) runs on the blocked tensors. Internal to the
// graph passes.
#ifndef KILN_GRAPH_PASSES_TRAIN_LAYOUT_H
#define KILN_GRAPH_PASSES_TRAIN_LAYOUT_H

#include <functional>
#include <vector>

#include "kiln/codegen/target.h"
#include "kiln/graph/graph.h"

namespace kiln::graph::layout_detail {

/** A value of C channels from block `from` to block `to` (0: NCHW), as LayoutRewriter makes it. */
using Relayout = std::function<Value(const Value& v, int64_t from, int64_t to, int64_t C)>;

class TrainLayoutRules {
 public:
  TrainLayoutRules(const Graph& g, int64_t max_block, int64_t lanes, Relayout relayout);
  /** Whether the graph is (part of) a training step's: a 2-D Conv whose weights are not a constant, or a convolution's gradient. */
  bool active() const { return active_; }
  /** The blocked rewrite of n (its outputs), or nothing where no training rule applies. */
  std::vector<Value> operator()(const Ref<OpNode>& n);

 private:
  std::vector<Value> conv(const OpNode& n);
  std::vector<Value> depthwise_conv(const OpNode& n);
  std::vector<Value> conv_grad_input(const OpNode& n);
  std::vector<Value> conv_grad_weight(const OpNode& n);
  std::vector<Value> channel_reduce(const OpNode& n);
  std::vector<Value> max_pool_grad(const OpNode& n);
  std::vector<Value> elementwise(const OpNode& n);
  int64_t block(int64_t C) const;
  int64_t depthwise_channels(const TensorType& w) const;

  bool active_ = false;
  int64_t max_block_, lanes_;
  Relayout relayout_;
};

}  // namespace kiln::graph::layout_detail

#endif  // KILN_GRAPH_PASSES_TRAIN_LAYOUT_H
