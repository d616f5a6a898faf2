// kiln's blocked-layout channel index maps, made by the alter_conv_layout
// pass (never imported): a channel shuffle, slice or re-blocking of one
// blocked tensor, and a join of blocked tensors whose channels do not fall
// on whole blocks (padded or of other blocks). Batch and image sizes may be
// symbolic; channels are static.
#include <limits>

#include "kiln/ops/layout.h"

#include "op_helpers.h"

namespace kiln::graph::ops_detail {
namespace {

// The true channels of a blocked input that holds them (the last block padded by less than a block).
void check_holds(const OpCall& c, int i, int64_t C) {
  const auto& s = c.input_types[i].shape;
  if (s.size() != 5 || !s[1].is_static() || !s[4].is_static()) c.fail("input " + c.input_types[i].str() + " is not blocked [N, C/b, H, W, b] with static channels");
  const int64_t held = s[1].value() * s[4].value();
  if (C <= 0 || C > held || held - C >= s[4].value())
    c.fail("input " + c.input_types[i].str() + " does not hold " + std::to_string(C) + " channels; give its true channel count");
}

Shape blocked_shape(const Shape& like, int64_t C, int64_t to) { return Shape{like[0], (C + to - 1) / to, like[2], like[3], to}; }

const bool registered = [] {
  OpDef perm;
  perm.name = "kiln.ChannelPermuteNCHWc";
  perm.doc = "out channel j < count = in channel perm(start + j), perm(t) = (t % groups) * (channels / groups) + t / groups "
             "(a channel shuffle; groups 1: a slice), blocked by dst_block with a zero padded tail";
  perm.attrs = {{"channels", AttrKind::Int, std::nullopt}, {"groups", AttrKind::Int, int64_t{1}}, {"start", AttrKind::Int, int64_t{0}},
                {"count", AttrKind::Int, std::nullopt}, {"dst_block", AttrKind::Int, std::nullopt}};
  perm.pattern = Pattern::Injective;
  perm.infer = [](const OpCall& c) {
    const int64_t C = c.attrs.get_int("channels"), g = c.attrs.get_int_or("groups", 1), start = c.attrs.get_int_or("start", 0);
    const int64_t count = c.attrs.get_int("count"), to = c.attrs.get_int("dst_block");
    check_holds(c, 0, C);
    if (g <= 0 || C % g != 0) c.fail(std::to_string(C) + " channels do not split into " + std::to_string(g) + " groups");
    if (start < 0 || count <= 0 || start + count > C || to <= 0)
      c.fail(std::to_string(count) + " channels from " + std::to_string(start) + " of " + std::to_string(C) + " in blocks of " + std::to_string(to) + " do not fit");
    return std::vector<TensorType>{{blocked_shape(c.input_types[0].shape, count, to), c.input_types[0].dtype}};
  };
  perm.compute = [](const OpCall& c, const std::vector<te::Tensor>& in) {
    return std::vector<te::Tensor>{ops::channel_permute_nchwc(in[0], c.attrs.get_int("channels"), c.attrs.get_int_or("groups", 1), c.attrs.get_int_or("start", 0),
                                                              c.attrs.get_int("count"), static_cast<int>(c.attrs.get_int("dst_block")))};
  };
  perm.sharding = replicated_rule();
  register_op(perm);

  OpDef cat;
  cat.name = "kiln.ChannelConcatNCHWc";
  cat.doc = "the channels of blocked inputs (channels: the true count of each) one after another, blocked by dst_block with a zero padded tail";
  cat.min_inputs = 1;
  cat.max_inputs = std::numeric_limits<int>::max();
  cat.attrs = {{"channels", AttrKind::Ints, std::nullopt}, {"dst_block", AttrKind::Int, std::nullopt}};
  cat.pattern = Pattern::Injective;
  cat.infer = [](const OpCall& c) {
    const auto& C = c.attrs.get_ints("channels");
    const int64_t to = c.attrs.get_int("dst_block");
    if (static_cast<int>(C.size()) != c.num_inputs()) c.fail("needs one channel count per input");
    if (to <= 0) c.fail("needs a positive dst_block");
    int64_t total = 0;
    const auto& s0 = c.input_types[0].shape;
    for (int i = 0; i < c.num_inputs(); ++i) {
      check_holds(c, i, C[i]);
      const auto& s = c.input_types[i].shape;
      if (!(s[0] == s0[0]) || !(s[2] == s0[2]) || !(s[3] == s0[3]) || c.input_types[i].dtype != c.input_types[0].dtype)
        c.fail("input " + c.input_types[i].str() + " does not match input " + c.input_types[0].str() + " outside the channels");
      total += C[i];
    }
    return std::vector<TensorType>{{blocked_shape(s0, total, to), c.input_types[0].dtype}};
  };
  cat.compute = [](const OpCall& c, const std::vector<te::Tensor>& in) {
    return std::vector<te::Tensor>{ops::channel_concat_nchwc(in, c.attrs.get_ints("channels"), static_cast<int>(c.attrs.get_int("dst_block")))};
  };
  cat.sharding = replicated_rule();
  register_op(cat);
  return true;
}();

}  // namespace
}  // namespace kiln::graph::ops_detail
