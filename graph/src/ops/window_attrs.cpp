// Conv's and the pools' window attributes (window_attrs.h).
#include "window_attrs.h"

#include <string>

#include "kiln/support/error.h"

namespace kiln::graph::ops_detail {

namespace {

std::string list_str(const std::vector<int64_t>& v) { return attr_to_string(v); }

}  // namespace

Dim out_dim(const ops::WindowDim& d) { return d.is_symbolic() ? Dim(d.out_symbolic) : Dim(d.out); }

std::vector<int64_t> spatial_attr(const OpCall& call, const char* name, size_t n, int64_t fallback, size_t per_dim) {
  if (!call.attrs.has(name)) return std::vector<int64_t>(n * per_dim, fallback);
  const std::vector<int64_t>& v = call.attrs.get_ints(name);
  if (v.empty()) return std::vector<int64_t>(n * per_dim, fallback);
  if (v.size() != n * per_dim)
    call.fail(std::string(name) + " " + list_str(v) + " has " + std::to_string(v.size()) + " values but the input has " + std::to_string(n) +
              " spatial dims" + (per_dim == 2 ? ", so it needs " + std::to_string(2 * n) + " (all begins, then all ends)" : ""));
  return v;
}

std::vector<ops::WindowDim> resolve_windows(const OpCall& call, const std::vector<int64_t>& kernel, bool pads_below_kernel) {
  const TensorType& x = call.input_types[0];
  size_t n = kernel.size();
  std::vector<int64_t> strides = spatial_attr(call, "strides", n, 1), dilations = spatial_attr(call, "dilations", n, 1);
  std::vector<int64_t> pads = spatial_attr(call, "pads", n, 0, 2);
  ops::AutoPad mode = ops::AutoPad::NotSet;
  try {
    mode = ops::parse_auto_pad(call.attrs.get_string("auto_pad"));
  } catch (const Error& e) {
    call.fail(e.what());
  }
  bool ceil_mode = call.attrs.get_int_or("ceil_mode", 0) != 0;
  std::vector<ops::WindowDim> dims(n);
  for (size_t j = 0; j < n; ++j) {
    ops::WindowDim& d = dims[j];
    const Dim& in = x.shape[j + 2];
    if (in.is_symbolic()) d.in_symbolic = in.expr();  // out becomes an expression of it (ops::resolve_window)
    else d.in = in.value();
    d.kernel = kernel[j];
    d.stride = strides[j];
    d.dilation = dilations[j];
    d.pad_begin = pads[j];
    d.pad_end = pads[j + n];
    std::string where = " in spatial dim " + std::to_string(j);
    if (d.kernel < 1) call.fail("kernel size " + std::to_string(d.kernel) + where + " must be positive");
    if (d.stride < 1) call.fail("stride " + std::to_string(d.stride) + where + " must be positive");
    if (d.dilation < 1) call.fail("dilation " + std::to_string(d.dilation) + where + " must be positive");
    if (d.pad_begin < 0 || d.pad_end < 0) call.fail("pads " + list_str(pads) + " must not be negative");
    try {
      ops::resolve_window(&d, mode, ceil_mode);
    } catch (const Error& e) {
      call.fail(e.what() + where);
    }
    if (!d.is_symbolic() && d.out < 1)
      call.fail("the kernel (" + std::to_string(d.span()) + " wide with dilation " + std::to_string(d.dilation) + ") is larger than the input (" +
                std::to_string(d.in) + " plus pads " + std::to_string(d.pad_begin) + " + " + std::to_string(d.pad_end) + ")" + where +
                "; shrink the kernel or pad the input");
    if (pads_below_kernel && (d.pad_begin >= d.span() || d.pad_end >= d.span()))
      call.fail("pads " + std::to_string(d.pad_begin) + ", " + std::to_string(d.pad_end) + where + " must be smaller than the window (" + std::to_string(d.span()) +
                "), or a window would lie entirely in the padding");
  }
  return dims;
}

}  // namespace kiln::graph::ops_detail
