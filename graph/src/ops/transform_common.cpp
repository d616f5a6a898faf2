#include "transform_common.h"

#include <algorithm>

#include "kiln/support/error.h"
#include "op_helpers.h"

namespace kiln::graph::ops_detail {

std::vector<int> normalize_axes(const OpCall& call, const std::vector<int64_t>& axes, int rank, const std::string& what) {
  std::vector<int> out;
  for (int64_t a : axes) {
    if (a < -rank || a >= rank)
      call.fail(what + " " + shape_to_string(axes) + ": axis " + std::to_string(a) + " is out of range for rank " + std::to_string(rank) +
                " (valid: " + std::to_string(-rank) + " to " + std::to_string(rank - 1) + ")");
    int n = static_cast<int>(a < 0 ? a + rank : a);
    if (std::find(out.begin(), out.end(), n) != out.end()) call.fail(what + " " + shape_to_string(axes) + " name axis " + std::to_string(n) + " twice");
    out.push_back(n);
  }
  std::sort(out.begin(), out.end());
  return out;
}

double array_value(const NDArray& a, int64_t k) {
  DataType t = a.dtype();
  if (t == DataType::Float(32)) return a.data_as<float>()[k];
  if (t == DataType::Float(64)) return a.data_as<double>()[k];
  if (t == DataType::Int(64)) return static_cast<double>(a.data_as<int64_t>()[k]);
  if (t == DataType::Int(32)) return a.data_as<int32_t>()[k];
  if (t == DataType::Int(16)) return a.data_as<int16_t>()[k];
  if (t == DataType::Int(8)) return a.data_as<int8_t>()[k];
  if (t == DataType::UInt(8) || t.is_bool()) return a.data_as<uint8_t>()[k];
  KILN_USER_ERROR() << "cannot read a " << t.str() << " array as numbers here";
  return 0;  // not reached: KILN_USER_ERROR throws
}

std::vector<double> constant_floats(const OpCall& call, int i, const char* what) {
  const NDArray& a = call.constant(i, what);
  std::vector<double> out;
  try {
    for (int64_t k = 0; k < a.numel(); ++k) out.push_back(array_value(a, k));
  } catch (const Error&) {
    call.fail(std::string("input ") + std::to_string(i) + " (" + what + ") has the unsupported dtype " + a.dtype().str());
  }
  return out;
}

DataType onnx_dtype(const OpCall& call, int64_t code) {
  std::optional<DataType> t = dtype_of_onnx_code(code);
  if (!t) call.fail("dtype " + std::to_string(code) + " is not an ONNX data type kiln supports (1 float, 6 int32, 7 int64, 9 bool, 11 double, ...)");
  return *t;
}

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

bool input_given(const OpCall& call, int i) { return call.has_input(i) && call.input_types[i].numel() > 0; }

}  // namespace kiln::graph::ops_detail
