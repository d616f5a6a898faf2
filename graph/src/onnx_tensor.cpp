// ONNX tensors to kiln arrays: element types and the data of initializers
// and Constant nodes (raw_data, or the typed repeated fields).
#include <cstring>

#include "kiln/support/error.h"
#include "onnx_internal.h"

namespace kiln::graph::onnx_detail {

namespace {

using TP = onnx::TensorProto;

const char* onnx_type_name(int32_t t) {
  return TP::DataType_IsValid(t) ? TP::DataType_Name(static_cast<TP::DataType>(t)).c_str() : "?";
}

// Copies a typed field (its length already checked) into the array, converting each value to T.
template <typename T, typename Field>
void copy_field(const Field& field, const NDArray& a) {
  T* out = a.data_as<T>();
  for (int i = 0; i < field.size(); ++i) out[i] = static_cast<T>(field.Get(i));
}

// The typed field that holds a data type's values when raw_data is absent.
const char* typed_field_name(int32_t t) {
  switch (t) {
    case TP::FLOAT: return "float_data";
    case TP::DOUBLE: return "double_data";
    case TP::INT64: return "int64_data";
    case TP::UINT32:
    case TP::UINT64: return "uint64_data";
    default: return "int32_data";
  }
}

int64_t typed_count(const TP& t) {
  switch (t.data_type()) {
    case TP::FLOAT: return t.float_data_size();
    case TP::DOUBLE: return t.double_data_size();
    case TP::INT64: return t.int64_data_size();
    case TP::UINT32:
    case TP::UINT64: return t.uint64_data_size();
    default: return t.int32_data_size();
  }
}

// Checks that the tensor holds as much data as its shape needs, before
// anything is allocated: a corrupt shape must not ask for terabytes.
void check_data_size(const TP& t, const std::vector<int64_t>& shape, DataType dt, const std::string& what) {
  int64_t numel = 1;
  for (int64_t d : shape) {
    KILN_USER_CHECK(d >= 0 && (d == 0 || numel <= (int64_t{1} << 40) / d))
        << what << " has the shape " << shape_to_string(shape) << ", which is negative or too large (the model is malformed)";
    numel *= d;
  }
  int64_t nbytes = numel * dtype_storage_bytes(dt);
  if (t.has_raw_data())
    KILN_USER_CHECK(static_cast<int64_t>(t.raw_data().size()) == nbytes)
        << what << " holds " << t.raw_data().size() << " bytes of raw data; its type " << dt.str() << shape_to_string(shape) << " needs "
        << nbytes << " (the model is malformed or truncated)";
  else
    KILN_USER_CHECK(typed_count(t) == numel) << what << " holds " << typed_count(t) << " values in " << typed_field_name(t.data_type())
                                             << " for " << numel << " elements of shape " << shape_to_string(shape)
                                             << " (the model is malformed or truncated)";
}

// The kiln dtype of an ONNX element type; Void when kiln has none.
DataType lookup_dtype(int32_t elem_type) {
  switch (elem_type) {
    case TP::FLOAT: return DataType::Float(32);
    case TP::DOUBLE: return DataType::Float(64);
    case TP::FLOAT16: return DataType::Float(16);
    case TP::INT8: return DataType::Int(8);
    case TP::INT16: return DataType::Int(16);
    case TP::INT32: return DataType::Int(32);
    case TP::INT64: return DataType::Int(64);
    case TP::UINT8: return DataType::UInt(8);
    case TP::UINT16: return DataType::UInt(16);
    case TP::UINT32: return DataType::UInt(32);
    case TP::UINT64: return DataType::UInt(64);
    case TP::BOOL: return DataType::Bool();
    default: return DataType::Void();
  }
}

}  // namespace

DataType dtype_from_onnx(int32_t elem_type, const std::string& what) {
  DataType t = lookup_dtype(elem_type);
  KILN_USER_CHECK(t.bits() != 0) << what << " has ONNX element type " << onnx_type_name(elem_type) << " (" << elem_type
                                 << "), which kiln does not support (it takes float, double, float16, int8/16/32/64, uint8/16/32/64 and bool)";
  return t;
}

NDArray tensor_from_onnx(const onnx::TensorProto& t, const std::string& what) {
  KILN_USER_CHECK(t.data_location() != TP::EXTERNAL)
      << what << " keeps its data in an external file ('"
      << (t.external_data_size() > 0 ? t.external_data(0).value() : std::string("?"))
      << "'), which kiln does not read; load the model with onnx.load(path) (it reads external data) and pass the ModelProto "
         "to kiln.graph.from_onnx, or save it self-contained with onnx.save_model(model, path, save_as_external_data=False)";
  KILN_USER_CHECK(!t.has_segment()) << what << " is a segment of a larger tensor, which kiln does not support";
  DataType dt = dtype_from_onnx(t.data_type(), what);
  std::vector<int64_t> shape(t.dims().begin(), t.dims().end());
  check_data_size(t, shape, dt, what);
  NDArray a = NDArray::empty(shape, dt);
  if (t.has_raw_data()) {
    const std::string& raw = t.raw_data();
    // ONNX raw data is little-endian, as are the machines kiln targets.
    if (!raw.empty()) std::memcpy(a.data(), raw.data(), raw.size());
    return a;
  }
  switch (t.data_type()) {
    case TP::FLOAT: copy_field<float>(t.float_data(), a); break;
    case TP::DOUBLE: copy_field<double>(t.double_data(), a); break;
    case TP::INT64: copy_field<int64_t>(t.int64_data(), a); break;
    case TP::INT32: copy_field<int32_t>(t.int32_data(), a); break;
    case TP::INT16: copy_field<int16_t>(t.int32_data(), a); break;
    case TP::INT8: copy_field<int8_t>(t.int32_data(), a); break;
    case TP::UINT16:
    case TP::FLOAT16:  // float16 values are stored as their bits in int32_data
      copy_field<uint16_t>(t.int32_data(), a);
      break;
    case TP::UINT8:
    case TP::BOOL: copy_field<uint8_t>(t.int32_data(), a); break;
    case TP::UINT32: copy_field<uint32_t>(t.uint64_data(), a); break;
    case TP::UINT64: copy_field<uint64_t>(t.uint64_data(), a); break;
    default: KILN_UNREACHABLE() << "dtype_from_onnx accepted " << t.data_type();
  }
  return a;
}

}  // namespace kiln::graph::onnx_detail
