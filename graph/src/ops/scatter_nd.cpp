// ScatterND(data, indices, updates): a copy of data whose slices at the
// index tuples take the updates (reduction none), or add or multiply them in.
// Exported models use it on constants (Swin's shifted-window attention mask is
// built by slice assignment), so it runs at compile time: constant folding
// evaluates it on the host; a run-time operand is a clear error.
#include <cstring>

#include "kiln/graph/op_registry.h"
#include "kiln/runtime/ndarray.h"
#include "kiln/support/error.h"
#include "op_helpers.h"

namespace kiln::graph::ops_detail {
namespace {

struct ScatterShape {
  int k = 0;              // entries of one index tuple: the leading dims of data it selects
  int64_t tuples = 0;     // index tuples
  int64_t slice = 1;      // elements of data (and of one update) per tuple
};

ScatterShape scatter_shape(const OpCall& call) {
  const TensorType& data = call.input_types[0];
  const TensorType& idx = call.input_types[1];
  const TensorType& upd = call.input_types[2];
  if (!idx.dtype.is_integer()) call.fail("indices are " + idx.str() + "; they must be int32 or int64");
  if (upd.dtype != data.dtype) call.fail("updates are " + upd.str() + " but data is " + data.str() + "; dtypes must agree");
  if (idx.ndim() < 1) call.fail("indices " + idx.str() + " must have at least one dimension (the last holds each index tuple)");
  ScatterShape s;
  s.k = static_cast<int>(idx.shape.back());
  if (s.k < 1 || s.k > data.ndim())
    call.fail("index tuples of " + std::to_string(s.k) + " entries (indices " + idx.str() + ") for data " + data.str() + "; 1 to its rank");
  std::vector<int64_t> want(idx.shape.begin(), idx.shape.end() - 1);
  want.insert(want.end(), data.shape.begin() + s.k, data.shape.end());
  if (upd.shape != want)
    call.fail("updates are " + upd.str() + "; indices " + idx.str() + " and data " + data.str() + " need shape " + shape_to_string(want));
  s.tuples = 1;
  for (size_t d = 0; d + 1 < idx.shape.size(); ++d) s.tuples *= idx.shape[d];
  for (int d = s.k; d < data.ndim(); ++d) s.slice *= data.shape[d];
  const std::string& r = call.attrs.get_string("reduction");
  if (r != "none" && r != "add" && r != "mul") call.fail("reduction '" + r + "' is not supported (none, add or mul)");
  if (r != "none" && !data.dtype.is_float() && !data.dtype.is_int())
    call.fail("reduction '" + r + "' of " + data.str() + ": float or signed integer data only");
  return s;
}

template <typename T>
void combine(T* dst, const T* src, int64_t n, bool add) {
  for (int64_t i = 0; i < n; ++i) dst[i] = add ? dst[i] + src[i] : dst[i] * src[i];
}

void combine_typed(DataType t, void* dst, const void* src, int64_t n, bool add) {
  if (t == DataType::Float(32)) return combine(static_cast<float*>(dst), static_cast<const float*>(src), n, add);
  if (t == DataType::Float(64)) return combine(static_cast<double*>(dst), static_cast<const double*>(src), n, add);
  if (t == DataType::Int(32)) return combine(static_cast<int32_t*>(dst), static_cast<const int32_t*>(src), n, add);
  if (t == DataType::Int(64)) return combine(static_cast<int64_t*>(dst), static_cast<const int64_t*>(src), n, add);
  KILN_USER_ERROR() << "ScatterND: reduction of " << t.str() << " data is not supported (float32/64, int32/64)";
}

std::vector<NDArray> evaluate_scatter_nd(const OpCall& call, const std::vector<NDArray>& in) {
  ScatterShape s = scatter_shape(call);
  const char* names[] = {"data", "indices", "updates"};
  for (int i = 0; i < 3; ++i)
    if (!in[i].defined())
      call.fail(std::string("its ") + names[i] + " is computed at run time; kiln evaluates ScatterND at compile time only, "
                "so data, indices and updates must be constants (fixed shapes make an exported mask constant)");
  const TensorType& data = call.input_types[0];
  NDArray out = NDArray::empty(data.shape, data.dtype);
  const int64_t elem = dtype_storage_bytes(data.dtype);
  if (out.nbytes() > 0) std::memcpy(out.data(), in[0].data(), out.nbytes());
  std::vector<int64_t> idx = call.constant_ints(1, "indices");
  std::vector<int64_t> stride(s.k, s.slice);  // elements between consecutive values of each selected dim
  for (int d = s.k - 2; d >= 0; --d) stride[d] = stride[d + 1] * data.shape[d + 1];
  const std::string& reduction = call.attrs.get_string("reduction");
  auto* dst = static_cast<char*>(out.data());
  auto* src = static_cast<const char*>(in[2].data());
  for (int64_t t = 0; t < s.tuples; ++t) {
    int64_t at = 0;
    for (int d = 0; d < s.k; ++d) {
      int64_t i = idx[t * s.k + d], n = data.shape[d];
      if (i < -n || i >= n)
        call.fail("index " + std::to_string(i) + " of tuple " + std::to_string(t) + " is out of range for dimension " + std::to_string(d) +
                  " of data " + data.str());
      at += (i < 0 ? i + n : i) * stride[d];
    }
    if (reduction == "none") std::memcpy(dst + at * elem, src + t * s.slice * elem, s.slice * elem);
    else combine_typed(data.dtype, dst + at * elem, src + t * s.slice * elem, s.slice, reduction == "add");
  }
  return {out};
}

const bool registered = [] {
  OpDef d;
  d.name = "ScatterND";
  d.doc = "ScatterND(data, indices, updates): data with the slices at indices[..., :] set to updates (reduction none), or "
          "updates added or multiplied in; evaluated at compile time, so all three must be constants";
  d.min_inputs = d.max_inputs = 3;
  d.attrs = {{"reduction", AttrKind::String, std::string("none")}};
  d.pattern = Pattern::Opaque;
  d.infer = [](const OpCall& call) {
    scatter_shape(call);
    return std::vector<TensorType>{call.input_types[0]};
  };
  d.evaluate = evaluate_scatter_nd;
  d.sharding = replicated_rule();
  register_op(std::move(d));
  return true;
}();

}  // namespace
}  // namespace kiln::graph::ops_detail
