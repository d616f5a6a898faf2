#include "kiln/runtime/ndarray.h"

#include <cstdlib>
#include <cstring>
#include <limits>
#include <sstream>
#ifdef __linux__
#include <sys/mman.h>
#endif

#include "kiln/support/error.h"

namespace kiln {

namespace {

// Arrays of 4 MiB or more may take transparent huge pages, as numpy's do
// (numpy advises them itself where THP is "madvise", Debian's default):
// a kernel that streams a large array then misses the TLB once per 2 MiB
// instead of once per 4 KiB. Without it kiln's GEMV (1 x 4096 x 4096,
// 64 MiB of B) took ~1.2x the time of OpenBLAS reading a numpy array, and
// BERT's 128 x 768 x 3072 GEMM 3-13% longer than with it. The advice is a
// hint: failure (no THP) changes nothing.
void advise_huge_pages(void* p, int64_t bytes) {
#ifdef __linux__
  constexpr int64_t kMinBytes = 4 << 20, kPage = 4096;
  if (bytes < kMinBytes) return;
  auto begin = (reinterpret_cast<uintptr_t>(p) + kPage - 1) / kPage * kPage;
  auto end = (reinterpret_cast<uintptr_t>(p) + bytes) / kPage * kPage;
  if (end > begin) (void)madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
#else
  (void)p;
  (void)bytes;
#endif
}

constexpr int64_t kAllocAlign = 64;
}  // namespace

// The DLTensor's shape and strides point into the vectors below, so an Impl
// never moves or copies (it lives behind a shared_ptr).
struct NDArray::Impl {
  DLTensor tensor{};
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;  // empty: compact (tensor.strides == nullptr)
  DataType dtype;
  void* owned = nullptr;              // from empty(): freed with free()
  DLManagedTensor* managed = nullptr;  // from from_dlpack(): its deleter runs here

  Impl() = default;
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  ~Impl() {
    std::free(owned);
    if (managed && managed->deleter) managed->deleter(managed);
  }

  // Fills shape/strides/dtype from a foreign DLTensor; throws before anything is owned.
  void adopt_layout(const DLTensor& t) {
    KILN_USER_CHECK(t.ndim >= 0) << "DLTensor has negative ndim " << t.ndim;
    KILN_USER_CHECK(t.ndim == 0 || t.shape) << "DLTensor of rank " << t.ndim << " has a null shape pointer";
    tensor = t;
    dtype = from_dlpack_dtype(t.dtype);
    shape.assign(t.shape, t.shape + t.ndim);
    for (int64_t d : shape) KILN_USER_CHECK(d >= 0) << "DLTensor has a negative dimension: shape " << shape_to_string(shape);
    if (t.strides) strides.assign(t.strides, t.strides + t.ndim);
    link();
  }

  void link() {
    tensor.ndim = static_cast<int32_t>(shape.size());
    tensor.shape = shape.data();
    tensor.strides = strides.empty() ? nullptr : strides.data();
  }
};

DLDataType to_dlpack_dtype(DataType t) {
  DLDataType d;
  d.bits = static_cast<uint8_t>(t.bits());
  d.lanes = static_cast<uint16_t>(t.lanes());
  switch (t.code()) {
    case DataType::Code::Int: d.code = kDLInt; break;
    case DataType::Code::UInt: d.code = kDLUInt; break;
    case DataType::Code::Float: d.code = kDLFloat; break;
    case DataType::Code::BFloat: d.code = kDLBfloat; break;
    case DataType::Code::Bool:
      d.code = kDLBoolCode;
      d.bits = 8;
      break;
    case DataType::Code::Handle:
      KILN_USER_CHECK(!t.is_void()) << "dtype void has no DLPack form; arrays need an element type such as float32";
      d.code = kDLOpaqueHandle;
      break;
  }
  return d;
}

DataType from_dlpack_dtype(DLDataType d) {
  int bits = d.bits, lanes = d.lanes;
  auto fail = [&]() -> DataType {
    KILN_USER_ERROR() << "unsupported DLPack dtype (code " << int(d.code) << ", bits " << bits << ", lanes " << lanes
                      << "); kiln supports bool, int8..int64, uint8..uint64, float16/32/64 and bfloat16";
    return {};
  };
  bool int_bits = bits == 8 || bits == 16 || bits == 32 || bits == 64;
  if (lanes < 1) return fail();
  switch (d.code) {
    case kDLInt: return int_bits ? DataType::Int(bits, lanes) : fail();
    case kDLUInt:
      if (bits == 1) return DataType::Bool(lanes);  // the pre-kDLBool spelling of bool (TVM)
      return int_bits ? DataType::UInt(bits, lanes) : fail();
    case kDLFloat: return bits == 16 || bits == 32 || bits == 64 ? DataType::Float(bits, lanes) : fail();
    case kDLBfloat: return bits == 16 ? DataType::BFloat16(lanes) : fail();
    case kDLOpaqueHandle: return bits == 64 && lanes == 1 ? DataType::Handle() : fail();
    case kDLBoolCode: return bits == 8 ? DataType::Bool(lanes) : fail();
    default: return fail();
  }
}

int64_t dtype_storage_bytes(DataType t) { return int64_t(t.bytes()) * t.lanes(); }

std::string shape_to_string(const std::vector<int64_t>& shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

std::string device_to_string(DLDevice device) {
  std::string name;
  switch (device.device_type) {
    case kDLCPU: name = "cpu"; break;
    case kDLCUDA: name = "cuda"; break;
    case kDLCUDAHost: name = "cuda_host"; break;
    case kDLCUDAManaged: name = "cuda_managed"; break;
    case kDLROCM: name = "rocm"; break;
    case kDLOpenCL: name = "opencl"; break;
    case kDLVulkan: name = "vulkan"; break;
    case kDLMetal: name = "metal"; break;
    default: name = "device_type_" + std::to_string(int(device.device_type)); break;
  }
  if (device.device_type != kDLCPU || device.device_id != 0) name += ":" + std::to_string(device.device_id);
  return name;
}

bool is_contiguous(const DLTensor& t) {
  if (!t.strides) return true;
  // No elements: any strides are compact (numpy gives an empty array's inner axes stride 0 too).
  for (int i = 0; i < t.ndim; ++i)
    if (t.shape[i] == 0) return true;
  int64_t expected = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    if (t.shape[i] != 1 && t.strides[i] != expected) return false;
    expected *= t.shape[i];
  }
  return true;
}

NDArray NDArray::empty(const std::vector<int64_t>& shape, DataType dtype) {
  KILN_USER_CHECK(!dtype.is_void()) << "NDArray::empty: dtype void has no elements; use e.g. float32";
  auto impl = std::make_shared<Impl>();
  impl->shape = shape;
  impl->dtype = dtype;
  int64_t bytes = dtype_storage_bytes(dtype);
  for (int64_t d : shape) {
    KILN_USER_CHECK(d >= 0) << "NDArray::empty: shape " << shape_to_string(shape) << " has a negative dimension";
    KILN_USER_CHECK(d == 0 || bytes <= std::numeric_limits<int64_t>::max() / d)
        << "NDArray::empty: shape " << shape_to_string(shape) << " of " << dtype.str() << " overflows 64-bit sizes";
    bytes *= d;
  }
  // Round up for aligned_alloc; an empty array still gets a real pointer so
  // that "data is non-null" holds for every array kiln allocates.
  int64_t size = std::max<int64_t>((bytes + kAllocAlign - 1) / kAllocAlign * kAllocAlign, kAllocAlign);
  impl->owned = std::aligned_alloc(kAllocAlign, static_cast<size_t>(size));
  KILN_USER_CHECK(impl->owned) << "NDArray::empty: out of memory allocating " << bytes << " bytes for shape "
                               << shape_to_string(shape) << " of " << dtype.str();
  advise_huge_pages(impl->owned, size);
  impl->tensor.data = impl->owned;
  impl->tensor.device = DLDevice{kDLCPU, 0};
  impl->tensor.dtype = to_dlpack_dtype(dtype);
  impl->tensor.byte_offset = 0;
  impl->link();
  return NDArray(std::move(impl));
}

NDArray NDArray::from_dlpack(DLManagedTensor* tensor) {
  KILN_USER_CHECK(tensor) << "NDArray::from_dlpack: got a null DLManagedTensor";
  auto impl = std::make_shared<Impl>();
  impl->adopt_layout(tensor->dl_tensor);
  // Only now, with nothing left to throw, take ownership: on error the
  // caller still owns the tensor (and a Python capsule stays unconsumed).
  impl->managed = tensor;
  return NDArray(std::move(impl));
}

NDArray NDArray::view(const DLTensor* tensor) {
  KILN_USER_CHECK(tensor) << "NDArray::view: got a null DLTensor";
  auto impl = std::make_shared<Impl>();
  impl->adopt_layout(*tensor);
  return NDArray(std::move(impl));
}

NDArray NDArray::wrap(void* data, const std::vector<int64_t>& shape, DataType dtype) {
  DLTensor t{};
  t.data = data;
  t.device = DLDevice{kDLCPU, 0};
  t.dtype = to_dlpack_dtype(dtype);
  t.ndim = static_cast<int32_t>(shape.size());
  t.shape = const_cast<int64_t*>(shape.data());
  return view(&t);
}

namespace {
// The exported tensor and the handle that keeps the data alive, freed together.
struct ExportedTensor {
  DLManagedTensor managed;
  std::shared_ptr<NDArray::Impl> hold;
};
}  // namespace

DLManagedTensor* NDArray::to_dlpack() const {
  auto* e = new ExportedTensor{DLManagedTensor{impl().tensor, nullptr, nullptr}, impl_};
  e->managed.manager_ctx = e;
  e->managed.deleter = [](DLManagedTensor* self) { delete static_cast<ExportedTensor*>(self->manager_ctx); };
  return &e->managed;
}

const NDArray::Impl& NDArray::impl() const {
  KILN_USER_CHECK(impl_) << "use of a null NDArray; create one with NDArray::empty, from_dlpack or view";
  return *impl_;
}

const DLTensor& NDArray::dltensor() const { return impl().tensor; }
const std::vector<int64_t>& NDArray::shape() const { return impl().shape; }
const std::vector<int64_t>& NDArray::strides() const { return impl().strides; }
DataType NDArray::dtype() const { return impl().dtype; }
DLDevice NDArray::device() const { return impl().tensor.device; }
bool NDArray::is_contiguous() const { return kiln::is_contiguous(impl().tensor); }
bool NDArray::owns_data() const { return impl().owned || impl().managed; }

void* NDArray::data() const {
  const DLTensor& t = impl().tensor;
  return t.data ? static_cast<char*>(t.data) + t.byte_offset : nullptr;
}

int64_t NDArray::numel() const {
  int64_t n = 1;
  for (int64_t d : shape()) n *= d;
  return n;
}

int64_t NDArray::nbytes() const { return numel() * dtype_storage_bytes(dtype()); }

namespace {
void check_host_copy(const NDArray& a, int64_t nbytes, const char* what) {
  KILN_USER_CHECK(a.device().device_type == kDLCPU)
      << "NDArray::" << what << ": the array is on " << device_to_string(a.device()) << "; host copies need a cpu array";
  KILN_USER_CHECK(a.is_contiguous()) << "NDArray::" << what << ": the array (shape " << shape_to_string(a.shape())
                                     << ", strides " << shape_to_string(a.strides()) << ") is not contiguous";
  KILN_USER_CHECK(nbytes == a.nbytes()) << "NDArray::" << what << ": got " << nbytes << " bytes but the array of shape "
                                        << shape_to_string(a.shape()) << " and dtype " << a.dtype().str() << " holds "
                                        << a.nbytes();
}
}  // namespace

void NDArray::copy_from(const void* src, int64_t nbytes) const {
  check_host_copy(*this, nbytes, "copy_from");
  if (nbytes == 0) return;
  KILN_USER_CHECK(src) << "NDArray::copy_from: source pointer is null";
  KILN_USER_CHECK(data()) << "NDArray::copy_from: the array has null data";
  std::memcpy(data(), src, static_cast<size_t>(nbytes));
}

void NDArray::copy_to(void* dst, int64_t nbytes) const {
  check_host_copy(*this, nbytes, "copy_to");
  if (nbytes == 0) return;
  KILN_USER_CHECK(dst) << "NDArray::copy_to: destination pointer is null";
  KILN_USER_CHECK(data()) << "NDArray::copy_to: the array has null data";
  std::memcpy(dst, data(), static_cast<size_t>(nbytes));
}

void NDArray::copy_from(const NDArray& other) const {
  KILN_USER_CHECK(other.shape() == shape() && other.dtype() == dtype())
      << "NDArray::copy_from: source has shape " << shape_to_string(other.shape()) << " and dtype " << other.dtype().str()
      << ", destination has shape " << shape_to_string(shape()) << " and dtype " << dtype().str();
  check_host_copy(other, other.nbytes(), "copy_from (source)");
  copy_from(other.data(), other.nbytes());
}

}  // namespace kiln
