// The ONNX quantized operators: QuantizeLinear and DequantizeLinear (the QDQ
// pairs of a quantized model), MatMulInteger and QLinearMatMul. The
// arithmetic is the spec's, in the types a numpy reference uses:
//   Quantize    y = saturate(round_half_even(x / scale) + zero_point)   (float32; NaN gives the zero point)
//   Dequantize  y = float32(int32(x) - int32(zero_point)) * scale
//   MatMulInteger  int32 sums of (a - a_zp) * (b - b_zp)
//   QLinearMatMul  y = saturate(round(float32(acc) * (a_scale * b_scale / y_scale)) + y_zp)
// Scales and zero points are inputs (kernel arguments); when they are
// constants, as in every exported model, their values are checked here (a
// zero or non-finite scale, a zero point outside its type) so a bad model
// fails at import, naming the node, instead of computing garbage.
#include <cmath>
#include <optional>

#include "elementwise_helpers.h"
#include "kiln/ops/graph_nn.h"
#include "quantize_helpers.h"

namespace kiln::graph::ops_detail {
namespace {

const DataType F32 = DataType::Float(32), I32 = DataType::Int(32);

bool quant_dtype(DataType t) { return t.is_scalar() && (t.is_int() || t.is_uint()) && (t.bits() == 8 || t.bits() == 16); }

std::string range_str(DataType t) {
  QRange r = range_of(t);
  return t.str() + " [" + std::to_string(r.lo) + ", " + std::to_string(r.hi) + "]";
}

template <typename T>
void append(const NDArray& a, std::vector<double>* v) {
  const T* p = static_cast<const T*>(a.data());
  for (int64_t k = 0; k < a.numel(); ++k) v->push_back(static_cast<double>(p[k]));
}
// The values of a constant scale or zero point (compact arrays, as constants are).
std::vector<double> constant_values(const NDArray& a) {
  std::vector<double> v;
  DataType t = a.dtype();
  if (t == DataType::Float(32))
    append<float>(a, &v);
  else if (t == DataType::Float(64))
    append<double>(a, &v);
  else if (t == DataType::Int(64))
    append<int64_t>(a, &v);
  else if (t == DataType::Int(32))
    append<int32_t>(a, &v);
  else if (t == DataType::Int(16))
    append<int16_t>(a, &v);
  else if (t == DataType::Int(8))
    append<int8_t>(a, &v);
  else if (t == DataType::UInt(64))
    append<uint64_t>(a, &v);
  else if (t == DataType::UInt(32))
    append<uint32_t>(a, &v);
  else if (t == DataType::UInt(16))
    append<uint16_t>(a, &v);
  else if (t == DataType::UInt(8))
    append<uint8_t>(a, &v);
  return v;
}

// A scale or zero point: a scalar (or one value) for the whole tensor, or a
// 1-D array of `along` values (the per-channel form). Returns whether it is per-channel.
bool check_param_shape(const OpCall& call, int i, const std::string& what, const std::optional<Dim>& along, const std::string& along_name) {
  const TensorType& t = call.input_types[i];
  if (!t.shape.is_static() && t.ndim() > 0) call.fail(what + " must have a static shape, not " + shape_to_string(t.shape));
  if (t.ndim() == 0 || (t.ndim() == 1 && t.shape[0] == 1)) return false;
  if (t.ndim() > 1) call.fail(what + " has shape " + shape_to_string(t.shape) + "; it must be a scalar (per tensor) or 1-D (per channel)");
  if (!along) call.fail(what + " has " + t.shape[0].str() + " values, but " + along_name + " (give a scalar)");
  if (!(t.shape[0] == *along))
    call.fail(what + " has " + t.shape[0].str() + " values but " + along_name + " has " + along->str() + "; a per-channel " + what +
              " needs one value per channel");
  return true;
}

}  // namespace

void check_scale(const OpCall& call, int i, const std::string& what) {
  if (call.input_types[i].dtype != F32) call.fail(what + " has dtype " + call.input_types[i].dtype.str() + "; it must be float32");
  if (!call.constants[i]) return;
  std::vector<double> v = constant_values(*call.constants[i]);
  for (size_t k = 0; k < v.size(); ++k)
    if (!std::isfinite(v[k]) || v[k] == 0)
      call.fail(what + (v.size() > 1 ? " element " + std::to_string(k) : std::string()) + " is " + std::to_string(v[k]) +
                "; a scale must be finite and non-zero (a zero scale comes from calibrating a constant tensor: give it a small positive scale)");
}

// The zero point's dtype is the quantized type `q`; an integer constant of another dtype is taken when its values fit.
void check_zero_point(const OpCall& call, int i, DataType q, const std::string& what) {
  if (!call.has_input(i)) return;
  DataType t = call.input_types[i].dtype;
  if (t == q) return;
  if (!t.is_integer() || !call.constants[i]) call.fail(what + " has dtype " + t.str() + "; it must have the quantized tensor's dtype " + q.str());
  QRange r = range_of(q);
  for (double v : constant_values(*call.constants[i]))
    if (v < static_cast<double>(r.lo) || v > static_cast<double>(r.hi))
      call.fail(what + " " + std::to_string(static_cast<int64_t>(v)) + " is out of the range of " + range_str(q) + "; give a zero point in that range");
}

namespace {

std::vector<Expr> exprs(const std::vector<Var>& i) { return std::vector<Expr>(i.begin(), i.end()); }

// ---------------------------------------------------------------- QuantizeLinear, DequantizeLinear

// The per-channel axis when the scale is 1-D (an axis that does not exist fails), else -1.
int channel_axis(const OpCall& call, int scale, const std::string& what) {
  int rank = call.input_types[0].ndim();
  const TensorType& s = call.input_types[scale];
  bool per_channel = s.ndim() == 1 && !(s.shape[0] == 1);
  if (!per_channel) return -1;
  int64_t axis = call.attrs.get_int("axis");
  if (axis < -rank || axis >= rank)
    call.fail("axis " + std::to_string(axis) + " does not exist in the input of rank " + std::to_string(rank) + " (a per-channel " + what +
              " runs along an axis in [" + std::to_string(-rank) + ", " + std::to_string(rank - 1) + "])");
  int a = static_cast<int>(axis < 0 ? axis + rank : axis);
  check_param_shape(call, scale, what, call.input_types[0].shape[a], "axis " + std::to_string(a) + " of the input");
  return a;
}

DataType quantize_out_dtype(const OpCall& call) {
  int64_t code = call.attrs.get_int("output_dtype");
  std::optional<DataType> t = code ? dtype_of_onnx_code(code) : std::nullopt;
  if (code && (!t || !quant_dtype(*t)))
    call.fail("output_dtype=" + std::to_string(code) + " is not one kiln quantizes to (2 uint8, 3 int8, 4 uint16, 5 int16)");
  if (t) return *t;
  if (!call.has_input(2)) return DataType::UInt(8);
  DataType z = call.input_types[2].dtype;
  if (!quant_dtype(z)) call.fail("y_zero_point has dtype " + z.str() + "; it must be uint8, int8, uint16 or int16 (or set output_dtype)");
  return z;
}

// Checks the scale (input 1) and zero point (input 2) of Q or DQ; returns the per-channel axis or -1.
int check_qdq_params(const OpCall& call, DataType q, const std::string& prefix) {
  check_scale(call, 1, prefix + "_scale");
  int axis = channel_axis(call, 1, prefix + "_scale");
  if (call.has_input(2)) {
    std::optional<Dim> along;
    if (axis >= 0) along = call.input_types[0].shape[axis];
    check_param_shape(call, 2, prefix + "_zero_point", along, "the scale is per tensor");
    if (!(call.input_types[2].shape == call.input_types[1].shape) && call.input_types[2].numel() != call.input_types[1].numel())
      call.fail(prefix + "_zero_point has shape " + shape_to_string(call.input_types[2].shape) + " but " + prefix + "_scale has " +
                shape_to_string(call.input_types[1].shape) + "; they must have one value each per channel");
    check_zero_point(call, 2, q, prefix + "_zero_point");
  }
  return axis;
}

OpDef qdq_def(const std::string& name, const std::string& doc) {
  OpDef d;
  d.name = name;
  d.doc = doc;
  d.min_inputs = 2;
  d.max_inputs = 3;
  // Injective, not Broadcast: a per-channel scale is indexed by one axis, not
  // numpy-broadcast, so the layout passes must not pass blocked layouts through.
  d.pattern = Pattern::Injective;
  // One scale and zero point: elementwise, so it fuses into a conv's epilogue (an int8 model's requantization).
  d.node_pattern = [](const OpNode& n) {
    for (size_t i = 1; i < n.inputs.size(); ++i)
      if (n.inputs[i].defined() && n.inputs[i].type().numel() != 1) return Pattern::Injective;
    return Pattern::Elementwise;
  };
  d.sharding = replicated_rule();
  d.cost = per_element_cost(3);
  return d;
}

OpDef quantize_def() {
  OpDef d = qdq_def("QuantizeLinear", "y = saturate(round_half_even(x / y_scale) + y_zero_point); per tensor or per channel along `axis`");
  d.attrs = {{"axis", AttrKind::Int, int64_t(1)}, {"output_dtype", AttrKind::Int, int64_t(0)}};
  d.infer = [](const OpCall& call) {
    if (call.input_types[0].dtype != F32) call.fail("x has dtype " + call.input_types[0].dtype.str() + "; kiln quantizes float32 tensors");
    DataType q = quantize_out_dtype(call);
    check_qdq_params(call, q, "y");
    return std::vector<TensorType>{TensorType{call.input_types[0].shape, q}};
  };
  d.compute = [](const OpCall& call, const std::vector<te::Tensor>& in) {
    DataType q = quantize_out_dtype(call);
    int axis = channel_axis(call, 1, "y_scale");
    te::Tensor x = in[0], s = in[1], z = in.size() > 2 ? in[2] : te::Tensor();
    return std::vector<te::Tensor>{te::compute(
        x.shape(),
        [&](const std::vector<Var>& i) {
          Expr c = axis >= 0 ? Expr(i[axis]) : Expr(0);
          return saturate_to(q, x(exprs(i)) / param_at(s, c), z.defined() ? param_at(z, c) : Expr());
        },
        "quantize")};
  };
  return d;
}

OpDef dequantize_def() {
  OpDef d = qdq_def("DequantizeLinear", "y = float32(x - x_zero_point) * x_scale; per tensor or per channel along `axis`");
  d.attrs = {{"axis", AttrKind::Int, int64_t(1)}};
  d.infer = [](const OpCall& call) {
    DataType x = call.input_types[0].dtype;
    if (!quant_dtype(x) && x != I32) call.fail("x has dtype " + x.str() + "; it must be uint8, int8, uint16, int16 or int32");
    check_qdq_params(call, x, "x");
    return std::vector<TensorType>{TensorType{call.input_types[0].shape, F32}};
  };
  d.compute = [](const OpCall& call, const std::vector<te::Tensor>& in) {
    int axis = channel_axis(call, 1, "x_scale");
    te::Tensor x = in[0], s = in[1], z = in.size() > 2 ? in[2] : te::Tensor();
    return std::vector<te::Tensor>{te::compute(
        x.shape(),
        [&](const std::vector<Var>& i) {
          Expr c = axis >= 0 ? Expr(i[axis]) : Expr(0);
          Expr v = cast(I32, x(exprs(i)));
          if (z.defined()) v = v - cast(I32, param_at(z, c));
          return cast(F32, v) * param_at(s, c);
        },
        "dequantize")};
  };
  return d;
}

// ---------------------------------------------------------------- MatMulInteger, QLinearMatMul

bool int8_dtype(DataType t) { return t == DataType::Int(8) || t == DataType::UInt(8); }

// The rows of a (its second-to-last dim) and the columns of b (its last), for per-row and per-column parameters.
std::optional<Dim> rows_of(const TensorType& a) { return a.ndim() >= 2 ? std::optional<Dim>(a.shape[a.ndim() - 2]) : std::nullopt; }
std::optional<Dim> cols_of(const TensorType& b) { return b.ndim() >= 2 ? std::optional<Dim>(b.shape.back()) : std::nullopt; }

void check_int8_operand(const OpCall& call, int i, const char* what) {
  if (!int8_dtype(call.input_types[i].dtype)) call.fail(std::string(what) + " has dtype " + call.input_types[i].dtype.str() + "; it must be uint8 or int8");
}

// A zero point (or scale when `scale`) of operand a (per row) or b (per column); `per_axis`: whether a 1-D form is allowed.
void check_operand_param(const OpCall& call, int i, int data, bool per_row, bool scale, const std::string& what, bool per_axis = true) {
  if (!call.has_input(i)) return;
  const TensorType& t = call.input_types[data];
  std::optional<Dim> along = !per_axis ? std::nullopt : per_row ? rows_of(t) : cols_of(t);
  std::string along_name = !along ? (per_axis ? shape_to_string(t.shape) + " is 1-D" : "a and b are not both matrices")
                                  : (per_row ? "the rows of " : "the columns of ") + shape_to_string(t.shape);
  check_param_shape(call, i, what, along, along_name);
  if (scale) check_scale(call, i, what);
}

// int32(x) - zero point, the zero point per row (axis ndim-2) or per column (axis ndim-1).
te::Tensor shifted(const te::Tensor& x, const te::Tensor& z, bool per_row, const std::string& name) {
  return te::compute(
      x.shape(),
      [&](const std::vector<Var>& i) {
        Expr v = cast(I32, x(exprs(i)));
        if (!z.defined()) return v;
        Expr c = x.ndim() >= 2 ? Expr(i[x.ndim() - (per_row ? 2 : 1)]) : Expr(0);
        return v - cast(I32, param_at(z, c));
      },
      name);
}

te::Tensor integer_matmul(const te::Tensor& a, const te::Tensor& za, const te::Tensor& b, const te::Tensor& zb) {
  return ops::matmul_nd(shifted(a, za, true, "a_shifted"), shifted(b, zb, false, "b_shifted"), "matmul_integer");
}

OpCost integer_matmul_cost(const OpCall& call, const std::vector<TensorType>& out, double epilogue) {
  OpCost c;
  double outputs = static_cast<double>(out[0].numel());
  c.macs = outputs * static_cast<double>(call.input_types[0].shape.back().is_static() ? call.input_types[0].shape.back().value() : 1);
  c.flops = 2 * c.macs + epilogue * outputs;
  c.rows = outputs / static_cast<double>(out[0].ndim() ? (out[0].shape.back().is_static() ? out[0].shape.back().value() : 1) : 1);
  return c;
}

OpDef matmul_integer_def() {
  OpDef d;
  d.name = "MatMulInteger";
  d.doc = "int32 numpy matmul of (A - a_zero_point) and (B - b_zero_point); uint8/int8 inputs, zero points per tensor, per row of A, per column of B";
  d.min_inputs = 2;
  d.max_inputs = 4;
  d.pattern = Pattern::OutputFusable;
  d.sharding = replicated_rule();
  d.infer = [](const OpCall& call) {
    check_int8_operand(call, 0, "A");
    check_int8_operand(call, 1, "B");
    check_operand_param(call, 2, 0, true, false, "a_zero_point");
    check_operand_param(call, 3, 1, false, false, "b_zero_point");
    check_zero_point(call, 2, call.input_types[0].dtype, "a_zero_point");
    check_zero_point(call, 3, call.input_types[1].dtype, "b_zero_point");
    return std::vector<TensorType>{TensorType{matmul_dims(call, call.input_types[0].shape, call.input_types[1].shape), I32}};
  };
  d.compute = [](const OpCall&, const std::vector<te::Tensor>& in) {
    auto opt = [&](size_t k) { return in.size() > k ? in[k] : te::Tensor(); };
    return std::vector<te::Tensor>{integer_matmul(in[0], opt(2), in[1], opt(3))};
  };
  d.cost = [](const OpCall& call, const std::vector<TensorType>& out) { return integer_matmul_cost(call, out, 0); };
  return d;
}

// QLinearMatMul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point).
OpDef qlinear_matmul_def() {
  OpDef d;
  d.name = "QLinearMatMul";
  d.doc = "quantized numpy matmul: int32 accumulation, requantized to y's scale and zero point (a per row, b per column, y per row, or per tensor)";
  d.min_inputs = d.max_inputs = 8;
  d.pattern = Pattern::OutputFusable;
  d.sharding = replicated_rule();
  d.infer = [](const OpCall& call) {
    check_int8_operand(call, 0, "a");
    check_int8_operand(call, 3, "b");
    DataType y = call.input_types[7].dtype;
    if (!int8_dtype(y)) call.fail("y_zero_point has dtype " + y.str() + "; it must be uint8 or int8 (the output's dtype)");
    Shape out = matmul_dims(call, call.input_types[0].shape, call.input_types[3].shape);
    bool two_d = call.input_types[0].ndim() >= 2 && call.input_types[3].ndim() >= 2;
    check_operand_param(call, 1, 0, true, true, "a_scale", two_d);
    check_operand_param(call, 2, 0, true, false, "a_zero_point", two_d);
    check_operand_param(call, 4, 3, false, true, "b_scale", two_d);
    check_operand_param(call, 5, 3, false, false, "b_zero_point", two_d);
    check_zero_point(call, 2, call.input_types[0].dtype, "a_zero_point");
    check_zero_point(call, 5, call.input_types[3].dtype, "b_zero_point");
    TensorType yt{out, y};
    std::optional<Dim> rows = two_d ? rows_of(yt) : std::nullopt;
    std::string rows_name = two_d ? "the rows of y " + shape_to_string(out) : "a and b are not both matrices";
    check_param_shape(call, 6, "y_scale", rows, rows_name);
    check_scale(call, 6, "y_scale");
    check_param_shape(call, 7, "y_zero_point", rows, rows_name);
    return std::vector<TensorType>{yt};
  };
  d.compute = [](const OpCall& call, const std::vector<te::Tensor>& in) {
    te::Tensor acc = integer_matmul(in[0], in[2], in[3], in[5]);
    DataType q = call.input_types[7].dtype;
    bool two_d = in[0].ndim() >= 2 && in[3].ndim() >= 2;
    return std::vector<te::Tensor>{te::compute(
        acc.shape(),
        [&](const std::vector<Var>& i) {
          size_t n = i.size();
          Expr row = two_d ? Expr(i[n - 2]) : Expr(0), col = two_d ? Expr(i[n - 1]) : Expr(0);
          Expr multiplier = param_at(in[1], row) * param_at(in[4], col) / param_at(in[6], row);
          return saturate_to(q, cast(F32, acc(exprs(i))) * multiplier, param_at(in[7], row));
        },
        "requantize")};
  };
  d.cost = [](const OpCall& call, const std::vector<TensorType>& out) { return integer_matmul_cost(call, out, 4); };
  return d;
}

const bool registered = [] {
  register_op(quantize_def());
  register_op(dequantize_def());
  register_op(matmul_integer_def());
  register_op(qlinear_matmul_def());
  return true;
}();

}  // namespace
}  // namespace kiln::graph::ops_detail
