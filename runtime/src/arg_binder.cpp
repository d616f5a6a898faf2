// Argument checking, shape-variable binding and packing for every kernel call
// (see arg_binder.h). Scalar conversion lives in arg_scalars.cpp.
#include "kiln/runtime/arg_binder.h"

#include <algorithm>
#include <array>
#include <climits>

#include "arg_scalars.h"
#include "kiln/support/error.h"

namespace kiln {

using detail::a_or_an;
using detail::pack_int_scalar;
using detail::pack_scalar;
using detail::Where;

// ------------------------------------------------------------ metadata check

namespace {

void check_exprs(const KernelInfo& k, const ParamInfo& p, const std::vector<ShapeExpr>& exprs, const char* what) {
  KILN_USER_CHECK(exprs.size() == p.shape.size())
      << "kernel '" << k.name << "' parameter '" << p.name << "' has " << exprs.size() << " " << what << " for rank "
      << p.shape.size();
  for (const ShapeExpr& e : exprs) {
    e.for_each_param([&](int64_t j) {
      bool ok = j >= 0 && static_cast<size_t>(j) < k.params.size() && !k.params[j].is_buffer &&
                k.params[j].dtype.is_scalar() && k.params[j].dtype.is_integer();
      KILN_USER_CHECK(ok) << "kernel '" << k.name << "' parameter '" << p.name << "': its " << what
                          << " read parameter " << j << ", which is not an integer scalar parameter";
    });
  }
}

}  // namespace

void check_shape_metadata(const KernelInfo& k) {
  for (const ParamInfo& p : k.params) {
    if (!p.is_buffer) {
      KILN_USER_CHECK(p.dims.empty() && p.strides.empty())
          << "kernel '" << k.name << "' scalar parameter '" << p.name << "' has dims or strides; scalars have none";
      continue;
    }
    if (!p.dims.empty()) {
      check_exprs(k, p, p.dims, "dims");
      for (size_t d = 0; d < p.dims.size(); ++d) {
        int64_t want = p.dims[d].is_const() ? p.dims[d].value : -1;
        KILN_USER_CHECK(want >= -1 && p.shape[d] == want)
            << "kernel '" << k.name << "' parameter '" << p.name << "': dimension " << d << " is "
            << p.dims[d].str({}) << " in dims but " << p.shape[d] << " in shape";
      }
    }
    if (!p.strides.empty()) check_exprs(k, p, p.strides, "strides");
  }
}

// ------------------------------------------------------------------ binding

namespace {

std::vector<std::string> param_names(const KernelInfo& k) {
  std::vector<std::string> names;
  for (const ParamInfo& p : k.params) names.push_back(p.name);
  return names;
}

std::string exprs_string(const KernelInfo& k, const std::vector<ShapeExpr>& exprs) {
  std::vector<std::string> names = param_names(k);
  std::string s = "[";
  for (size_t i = 0; i < exprs.size(); ++i) s += (i ? ", " : "") + exprs[i].str(names);
  return s + "]";
}

// Expected shapes print dimensions as the kernel declares them ("[n, 16]"), or '?' without dims.
std::string expected_shape(const KernelInfo& k, const ParamInfo& p) {
  if (!p.dims.empty()) return exprs_string(k, p.dims);
  std::string s = "[";
  for (size_t i = 0; i < p.shape.size(); ++i) s += (i ? ", " : "") + (p.shape[i] < 0 ? "?" : std::to_string(p.shape[i]));
  return s + "]";
}

std::string dl_dtype_string(DLDataType d) {
  try {
    return from_dlpack_dtype(d).str();
  } catch (const Error&) {
    return "(DLPack code " + std::to_string(d.code) + ", bits " + std::to_string(d.bits) + ", lanes " +
           std::to_string(d.lanes) + ")";
  }
}

// Checks what a buffer argument is before its shape is bound; returns the tensor.
const DLTensor& check_tensor(const Where& w, const Arg& a) {
  const ParamInfo& p = w.kernel.params[w.index];
  std::string expected = a_or_an(p.dtype.str()) + " tensor of shape " + expected_shape(w.kernel, p);
  KILN_USER_CHECK(a.kind() == Arg::Kind::Tensor) << w << " is " << a.kind_name() << ", expected " << expected;
  const DLTensor* t = a.tensor();
  KILN_USER_CHECK(t) << w << " is a null tensor, expected " << expected;
  // The rank alone: with a wrong ndim the shape array's real length is unknown, so it is not read.
  KILN_USER_CHECK(t->ndim == static_cast<int>(p.shape.size()))
      << w << " has rank " << t->ndim << ", expected rank " << p.shape.size() << " (shape " << expected_shape(w.kernel, p) << ")";
  KILN_USER_CHECK(t->ndim == 0 || t->shape) << w << " has a null shape pointer, expected " << expected;
  std::vector<int64_t> shape(t->shape, t->shape + t->ndim);
  bool dtype_ok = false;
  try {
    dtype_ok = from_dlpack_dtype(t->dtype) == p.dtype;
  } catch (const Error&) {
  }
  KILN_USER_CHECK(dtype_ok) << w << " has dtype " << dl_dtype_string(t->dtype) << ", expected " << p.dtype.str();
  KILN_USER_CHECK(t->device.device_type == kDLCPU)
      << w << " is on device " << device_to_string(t->device) << ", expected cpu; copy it to the host first";
  int64_t numel = 1;
  bool negative = false;
  for (int64_t d : shape) {
    negative |= d < 0;
    if (__builtin_mul_overflow(numel, d, &numel)) numel = INT64_MAX;
  }
  KILN_USER_CHECK(!negative) << w << " has a negative dimension (shape " << shape_to_string(shape) << ")";
  // Kernels index with 32-bit arithmetic (storage_flatten refuses larger constant shapes at compile time).
  KILN_USER_CHECK(numel <= INT32_MAX || numel == 0)
      << w << " has shape " << shape_to_string(shape) << ", more than the 2147483647 (2^31 - 1) elements that kiln's "
      << "32-bit index arithmetic can address; split the work into smaller pieces";
  // An empty tensor's data is never read, and some producers leave it null.
  KILN_USER_CHECK(t->data || numel == 0) << w << " has null data; pass an allocated array";
  // The kernel addresses a buffer without declared strides as compact row-major.
  KILN_USER_CHECK(!p.strides.empty() || is_contiguous(*t))
      << w << " is not contiguous (shape " << shape_to_string(shape) << ", strides "
      << shape_to_string(std::vector<int64_t>(t->strides, t->strides + t->ndim))
      << "); pass a compact row-major array, e.g. a contiguous copy (numpy.ascontiguousarray)";
  return *t;
}

// Element strides of a tensor: its own, or compact row-major when it has none.
std::vector<int64_t> tensor_strides(const DLTensor& t) {
  if (t.strides) return std::vector<int64_t>(t.strides, t.strides + t.ndim);
  std::vector<int64_t> s(t.ndim);
  int64_t step = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    s[d] = step;
    step *= t.shape[d];
  }
  return s;
}

// Small per-parameter arrays without a heap allocation for common kernels.
template <typename T>
class ParamArray {
 public:
  explicit ParamArray(size_t n) : data_(inline_.data()) {
    if (n > inline_.size()) {
      heap_.resize(n);
      data_ = heap_.data();
    }
    std::fill(data_, data_ + n, T{});
  }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }
  const T* data() const { return data_; }

 private:
  std::array<T, 16> inline_{};
  std::vector<T> heap_;
  T* data_;
};

// Where a shape variable got its value: its own argument, or an array's dimension (or stride).
struct Source {
  enum class Kind : uint8_t { None, Argument, Dimension } kind = Kind::None;
  bool stride = false;
  size_t arg = 0, dim = 0;
};

class Binder {
 public:
  Binder(const KernelInfo& k, const std::vector<Arg>& args, void** ptrs, uint64_t* vals)
      : k_(k), args_(args), ptrs_(ptrs), vals_(vals), value_(k.params.size()), source_(k.params.size()) {}

  void run();

 private:
  void check_count() const;
  bool inferable(size_t scalar) const;
  void bind_dims(size_t i, const std::vector<ShapeExpr>& exprs, const std::vector<int64_t>& actual, bool stride);
  void check_exprs(size_t i, const std::vector<ShapeExpr>& exprs, const std::vector<int64_t>& actual, bool stride);
  std::string describe(const Source& s) const;
  std::string bindings_of(const ShapeExpr& e) const;
  // Throws kiln::Error naming the argument, the dimension and both values.
  void mismatch(size_t i, size_t d, bool stride, int64_t actual, const ShapeExpr& e,
                             const std::vector<int64_t>& all) const;

  const KernelInfo& k_;
  const std::vector<Arg>& args_;
  void** ptrs_;
  uint64_t* vals_;
  ParamArray<int64_t> value_;
  ParamArray<Source> source_;
};

void Binder::check_count() const {
  size_t n = k_.params.size(), given = args_.size();
  bool ok = given == n;
  std::string why;
  if (given < n) {
    ok = true;
    for (size_t i = given; i < n; ++i) {
      if (inferable(i)) continue;
      ok = false;
      if (why.empty() && !k_.params[i].is_buffer) {
        why = "; '" + k_.params[i].name + "' is not a dimension of any array passed, so it must be given";
      }
    }
  }
  if (ok) return;
  std::string names;
  for (size_t i = 0; i < n; ++i) names += (i ? ", " : "") + k_.params[i].name;
  KILN_USER_ERROR() << k_.name << ": expected " << n << " arguments (" << names << "), got " << given << why;
}

// A scalar left out can be inferred when a given array has it as a plain dimension or stride.
bool Binder::inferable(size_t j) const {
  if (k_.params[j].is_buffer) return false;
  for (size_t i = 0; i < std::min(args_.size(), k_.params.size()); ++i) {
    const ParamInfo& p = k_.params[i];
    if (!p.is_buffer) continue;
    for (const auto* exprs : {&p.dims, &p.strides})
      for (const ShapeExpr& e : *exprs)
        if (e.is_param() && static_cast<size_t>(e.value) == j) return true;
  }
  return false;
}

// "argument 3", or "argument 0 'A' dimension 1": where a variable's value came from.
std::string Binder::describe(const Source& s) const {
  std::string out = "argument " + std::to_string(s.arg);
  if (s.kind == Source::Kind::Argument) return out;
  return out + " '" + k_.params[s.arg].name + "'" + (s.stride ? " stride " : " dimension ") + std::to_string(s.dim);
}

// "n = 10 (from argument 0 'A' dimension 0)" for each parameter e reads.
std::string Binder::bindings_of(const ShapeExpr& e) const {
  std::string out;
  std::vector<int64_t> seen;
  e.for_each_param([&](int64_t j) {
    if (std::find(seen.begin(), seen.end(), j) != seen.end()) return;
    seen.push_back(j);
    out += (out.empty() ? "" : ", ") + k_.params[j].name + " = " + std::to_string(value_[j]) + " (from " +
           describe(source_[j]) + ")";
  });
  return out;
}

void Binder::mismatch(size_t i, size_t d, bool stride, int64_t actual, const ShapeExpr& e,
                      const std::vector<int64_t>& all) const {
  Where w{k_, i};
  const char* what = stride ? "stride" : "dimension";
  std::string shape = (stride ? " (strides " : " (shape ") + shape_to_string(all) + ")";
  if (e.is_param() && source_[e.value].kind == Source::Kind::Argument) {
    // The caller's own scalar disagrees: name it first, it is what to fix.
    size_t j = static_cast<size_t>(e.value);
    Source here{Source::Kind::Dimension, stride, i, d};
    KILN_USER_ERROR() << Where{k_, j} << " = " << value_[j] << " disagrees with " << describe(here) << ", which is "
                      << actual << shape << "; '" << k_.params[j].name
                      << "' must equal it (or leave the argument out to infer it)";
  }
  std::string want = e.str(param_names(k_));
  KILN_USER_ERROR() << w << " has " << actual << " in " << what << " " << d << shape << ", expected " << want
                    << (e.is_const() ? "" : " with " + bindings_of(e));
}

// Pass 1 over a buffer: constants are checked, plain variables bound (or checked when already bound).
void Binder::bind_dims(size_t i, const std::vector<ShapeExpr>& exprs, const std::vector<int64_t>& actual, bool stride) {
  for (size_t d = 0; d < exprs.size(); ++d) {
    const ShapeExpr& e = exprs[d];
    if (e.is_const() && actual[d] != e.value) mismatch(i, d, stride, actual[d], e, actual);
    if (!e.is_param()) continue;
    size_t j = static_cast<size_t>(e.value);
    if (source_[j].kind == Source::Kind::None) {
      value_[j] = actual[d];
      source_[j] = {Source::Kind::Dimension, stride, i, d};
    } else if (value_[j] != actual[d]) {
      mismatch(i, d, stride, actual[d], e, actual);
    }
  }
}

// Pass 2: expressions, once every variable has its value.
void Binder::check_exprs(size_t i, const std::vector<ShapeExpr>& exprs, const std::vector<int64_t>& actual, bool stride) {
  for (size_t d = 0; d < exprs.size(); ++d) {
    const ShapeExpr& e = exprs[d];
    if (e.is_const() || e.is_param()) continue;
    std::optional<int64_t> want = e.eval(value_.data(), k_.params.size());
    KILN_USER_CHECK(want) << Where{k_, i} << ": " << (stride ? "stride " : "dimension ") << d << " is "
                          << e.str(param_names(k_)) << ", which overflows or divides by zero with " << bindings_of(e);
    if (*want != actual[d]) mismatch(i, d, stride, actual[d], e, actual);
  }
}

void Binder::run() {
  check_count();
  const size_t given = args_.size();
  // Scalars first: a shape variable given explicitly is what the arrays are checked against.
  for (size_t i = 0; i < given; ++i) {
    if (k_.params[i].is_buffer) continue;
    pack_scalar(Where{k_, i}, args_[i], &vals_[i]);
    ptrs_[i] = &vals_[i];
    if (args_[i].kind() == Arg::Kind::Int) {
      value_[i] = args_[i].int_value();
      source_[i] = {Source::Kind::Argument, false, i, 0};
    }
  }
  std::vector<int64_t> shape, strides;
  auto actual = [&](size_t i) {
    const DLTensor& t = *args_[i].tensor();
    shape.assign(t.shape, t.shape + t.ndim);
    strides = tensor_strides(t);
  };
  for (size_t i = 0; i < given; ++i) {
    const ParamInfo& p = k_.params[i];
    if (!p.is_buffer) continue;
    const DLTensor& t = check_tensor(Where{k_, i}, args_[i]);
    ptrs_[i] = static_cast<char*>(t.data) + t.byte_offset;
    actual(i);
    if (p.dims.empty()) {
      // Metadata without dims: only constant dimensions can be checked.
      for (size_t d = 0; d < p.shape.size(); ++d) {
        KILN_USER_CHECK(p.shape[d] < 0 || shape[d] == p.shape[d])
            << Where{k_, i} << " has shape " << shape_to_string(shape) << ", expected " << expected_shape(k_, p);
      }
    }
    bind_dims(i, p.dims, shape, false);
    bind_dims(i, p.strides, strides, true);
  }
  for (size_t i = 0; i < given; ++i) {
    const ParamInfo& p = k_.params[i];
    if (!p.is_buffer || (p.dims.empty() && p.strides.empty())) continue;
    actual(i);
    check_exprs(i, p.dims, shape, false);
    check_exprs(i, p.strides, strides, true);
  }
  // Trailing shape scalars the caller left out (check_count made sure they are bound).
  for (size_t i = given; i < k_.params.size(); ++i) {
    pack_int_scalar(Where{k_, i}, Arg(value_[i]), k_.params[i].dtype, &vals_[i]);
    ptrs_[i] = &vals_[i];
  }
}

}  // namespace

PackedArgs::PackedArgs(const KernelInfo& k, const std::vector<Arg>& args) : size_(k.params.size()) {
  size_t n = std::max(k.params.size(), args.size());
  if (n > kInline) {
    ptr_heap_.resize(n);
    val_heap_.resize(n);
    ptrs_ = ptr_heap_.data();
    vals_ = val_heap_.data();
  }
  Binder(k, args, ptrs_, vals_).run();
}

}  // namespace kiln
