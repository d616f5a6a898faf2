// Resize (opset 13 form: X, roi, scales, sizes): nearest on any dimensions,
// linear as 2-D bilinear on the last two. roi is read by ONNX only for
// tf_crop_and_resize, which kiln does not take, so it is ignored.
#include <cmath>

#include "kiln/support/error.h"
#include "op_helpers.h"
#include "transform_common.h"

namespace kiln::graph::ops_detail {
namespace {

struct ResizeSpec {
  std::vector<int64_t> out_shape;
  std::vector<double> scales;  // output / input per dimension, as ONNX's coordinate formulas use it
  bool linear = false;
  ops::CoordMode coord = ops::CoordMode::HalfPixel;
  ops::NearestMode nearest = ops::NearestMode::RoundPreferFloor;
};

ops::CoordMode coord_mode(const OpCall& call) {
  const std::string& m = call.attrs.get_string("coordinate_transformation_mode");
  if (m == "half_pixel") return ops::CoordMode::HalfPixel;
  if (m == "pytorch_half_pixel") return ops::CoordMode::PytorchHalfPixel;
  if (m == "align_corners") return ops::CoordMode::AlignCorners;
  if (m == "asymmetric") return ops::CoordMode::Asymmetric;
  call.fail("coordinate_transformation_mode '" + m + "' is not supported (half_pixel, pytorch_half_pixel, align_corners or asymmetric)");
}

ops::NearestMode nearest_mode(const OpCall& call) {
  const std::string& m = call.attrs.get_string("nearest_mode");
  if (m == "round_prefer_floor") return ops::NearestMode::RoundPreferFloor;
  if (m == "round_prefer_ceil") return ops::NearestMode::RoundPreferCeil;
  if (m == "floor") return ops::NearestMode::Floor;
  if (m == "ceil") return ops::NearestMode::Ceil;
  call.fail("nearest_mode '" + m + "' is not supported (round_prefer_floor, round_prefer_ceil, floor or ceil)");
}

// The output shape and scales from whichever of scales (input 2) and sizes (input 3) is given.
void resize_shape(const OpCall& call, ResizeSpec* s) {
  const TensorType& in = call.input_types[0];
  bool has_scales = input_given(call, 2), has_sizes = input_given(call, 3);
  if (has_scales == has_sizes)
    call.fail(has_scales ? "both scales and sizes are given; give one (the other absent or empty)" : "neither scales nor sizes is given; give one");
  if (has_scales) {
    s->scales = constant_floats(call, 2, "scales");
    if (static_cast<int>(s->scales.size()) != in.ndim())
      call.fail("scales has " + std::to_string(s->scales.size()) + " entries for the input " + in.str());
    for (int k = 0; k < in.ndim(); ++k) {
      if (!(s->scales[k] > 0)) call.fail("scale " + std::to_string(s->scales[k]) + " of dimension " + std::to_string(k) + " is not positive");
      s->out_shape.push_back(static_cast<int64_t>(std::floor(static_cast<double>(in.shape[k]) * s->scales[k])));
    }
    return;
  }
  s->out_shape = call.constant_ints(3, "sizes");
  if (static_cast<int>(s->out_shape.size()) != in.ndim())
    call.fail("sizes " + shape_to_string(s->out_shape) + " has " + std::to_string(s->out_shape.size()) + " entries for the input " + in.str());
  for (int k = 0; k < in.ndim(); ++k) {
    if (s->out_shape[k] <= 0 || in.shape[k] == 0) call.fail("sizes " + shape_to_string(s->out_shape) + " cannot resize " + in.str());
    s->scales.push_back(static_cast<double>(s->out_shape[k]) / static_cast<double>(in.shape[k]));
  }
}

ResizeSpec resize_spec(const OpCall& call) {
  const TensorType& in = call.input_types[0];
  ResizeSpec s;
  const std::string& mode = call.attrs.get_string("mode");
  if (mode == "linear") s.linear = true;
  else if (mode != "nearest") call.fail("mode '" + mode + "' is not supported (nearest or linear)");
  s.coord = coord_mode(call);
  s.nearest = nearest_mode(call);
  resize_shape(call, &s);
  if (s.linear) {
    if (in.ndim() < 2 || !in.dtype.is_float())
      call.fail("linear mode resizes the last two dimensions of a float tensor; the input is " + in.str());
    for (int k = 0; k < in.ndim() - 2; ++k)
      if (s.out_shape[k] != in.shape[k])
        call.fail("linear mode changes only the last two dimensions (bilinear), but dimension " + std::to_string(k) + " goes from " +
                  std::to_string(in.shape[k]) + " to " + std::to_string(s.out_shape[k]));
  }
  for (int64_t d : s.out_shape)
    if (d <= 0) call.fail("the output shape " + shape_to_string(s.out_shape) + " has an empty dimension");
  return s;
}

const bool registered = [] {
  OpDef d;
  d.name = "Resize";
  d.doc = "Resize(X, roi, scales, sizes): nearest (any dims) or linear (bilinear, last two dims); one of scales/sizes; roi is ignored";
  d.min_inputs = 1;
  d.max_inputs = 4;
  d.attrs = {{"mode", AttrKind::String, AttrValue(std::string("nearest"))},
             {"coordinate_transformation_mode", AttrKind::String, AttrValue(std::string("half_pixel"))},
             {"nearest_mode", AttrKind::String, AttrValue(std::string("round_prefer_floor"))},
             // Accepted for ONNX models; they matter only for cubic and tf_crop_and_resize, which kiln rejects.
             {"cubic_coeff_a", AttrKind::Float, AttrValue(-0.75)},
             {"exclude_outside", AttrKind::Int, AttrValue(int64_t(0))},
             {"extrapolation_value", AttrKind::Float, AttrValue(0.0)}};
  d.pattern = Pattern::Injective;
  d.const_inputs = {1, 2, 3};
  d.infer = [](const OpCall& call) {
    return std::vector<TensorType>{TensorType{resize_spec(call).out_shape, call.input_types[0].dtype}};
  };
  d.compute = [](const OpCall& call, const std::vector<te::Tensor>& in) {
    ResizeSpec s = resize_spec(call);
    te::Tensor out = s.linear ? ops::resize_bilinear(in[0], s.out_shape, s.scales, s.coord, "resize")
                              : ops::resize_nearest(in[0], s.out_shape, s.scales, s.coord, s.nearest, "resize");
    return std::vector<te::Tensor>{out};
  };
  d.sharding = replicated_rule();
  register_op(std::move(d));
  return true;
}();

}  // namespace
}  // namespace kiln::graph::ops_detail
