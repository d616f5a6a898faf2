#include "kiln/runtime/module.h"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <unordered_map>

#include "kiln/support/error.h"

namespace kiln {

ModuleNode::~ModuleNode() = default;

const char* Arg::kind_name() const {
  switch (kind_) {
    case Kind::Tensor: return "a tensor";
    case Kind::Int: return "an integer";
    case Kind::Float: return "a float";
  }
  return "?";
}

// ---------------------------------------------------------------- TimeResult

double TimeResult::min() const {
  KILN_USER_CHECK(!results.empty()) << "TimeResult::min: no timings recorded";
  return *std::min_element(results.begin(), results.end());
}

double TimeResult::max() const {
  KILN_USER_CHECK(!results.empty()) << "TimeResult::max: no timings recorded";
  return *std::max_element(results.begin(), results.end());
}

double TimeResult::median() const {
  KILN_USER_CHECK(!results.empty()) << "TimeResult::median: no timings recorded";
  std::vector<double> v = results;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double TimeResult::mean() const {
  KILN_USER_CHECK(!results.empty()) << "TimeResult::mean: no timings recorded";
  double sum = 0;
  for (double r : results) sum += r;
  return sum / static_cast<double>(results.size());
}

// ------------------------------------------------------- argument packing

namespace {

// "vadd: argument 2 'C'": the prefix of every argument error.
struct Where {
  const KernelInfo& kernel;
  size_t index;
};

std::ostream& operator<<(std::ostream& os, const Where& w) {
  return os << w.kernel.name << ": argument " << w.index << " '" << w.kernel.params[w.index].name << "'";
}

// Expected shapes print symbolic dimensions as '?'.
std::string expected_shape(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += shape[i] < 0 ? "?" : std::to_string(shape[i]);
  }
  return s + "]";
}

// "an int32", "a float32": error messages read as English.
std::string a_or_an(const std::string& word) {
  bool vowel = !word.empty() && std::string("aeiou").find(word[0]) != std::string::npos;
  return (vowel ? "an " : "a ") + word;
}

std::string dl_dtype_string(DLDataType d) {
  try {
    return from_dlpack_dtype(d).str();
  } catch (const Error&) {
    return "(DLPack code " + std::to_string(d.code) + ", bits " + std::to_string(d.bits) + ", lanes " +
           std::to_string(d.lanes) + ")";
  }
}

void* pack_buffer(const Where& w, const Arg& a) {
  const ParamInfo& p = w.kernel.params[w.index];
  KILN_USER_CHECK(a.kind() == Arg::Kind::Tensor)
      << w << " is " << a.kind_name() << ", expected " << a_or_an(p.dtype.str()) << " tensor of shape "
      << expected_shape(p.shape);
  const DLTensor* t = a.tensor();
  KILN_USER_CHECK(t) << w << " is a null tensor, expected " << a_or_an(p.dtype.str()) << " tensor of shape "
                     << expected_shape(p.shape);
  std::vector<int64_t> shape(t->shape, t->shape + std::max(t->ndim, 0));
  KILN_USER_CHECK(t->ndim == static_cast<int>(p.shape.size()))
      << w << " has rank " << t->ndim << " (shape " << shape_to_string(shape) << "), expected rank " << p.shape.size()
      << " (shape " << expected_shape(p.shape) << ")";
  bool dtype_ok = false;
  try {
    dtype_ok = from_dlpack_dtype(t->dtype) == p.dtype;
  } catch (const Error&) {
  }
  KILN_USER_CHECK(dtype_ok) << w << " has dtype " << dl_dtype_string(t->dtype) << ", expected " << p.dtype.str();
  for (size_t d = 0; d < p.shape.size(); ++d) {
    KILN_USER_CHECK(p.shape[d] < 0 || shape[d] == p.shape[d])
        << w << " has shape " << shape_to_string(shape) << ", expected " << expected_shape(p.shape);
  }
  KILN_USER_CHECK(t->device.device_type == kDLCPU)
      << w << " is on device " << device_to_string(t->device) << ", expected cpu; copy it to the host first";
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  // An empty tensor's data is never read, and some producers leave it null.
  KILN_USER_CHECK(t->data || numel == 0) << w << " has null data; pass an allocated array";
  KILN_USER_CHECK(is_contiguous(*t)) << w << " is not contiguous (shape " << shape_to_string(shape) << ", strides "
                                     << shape_to_string(std::vector<int64_t>(t->strides, t->strides + t->ndim))
                                     << "); pass a compact row-major array, e.g. a contiguous copy";
  return static_cast<char*>(t->data) + t->byte_offset;
}

// IEEE half from float, rounding to nearest even.
uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to infinity
  if (abs < 0x38800000u) {
    // Below the smallest normal half: the result is a subnormal, f * 2^24 rounded.
    float a;
    std::memcpy(&a, &abs, 4);
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(a * 16777216.0f)));
  }
  // Rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits to even.
  abs += 0xc8000fffu + ((abs >> 13) & 1u);
  return static_cast<uint16_t>(sign | (abs >> 13));
}

uint16_t float_to_bfloat16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // keep NaN a NaN
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

template <typename T>
void store(uint64_t* slot, T value) {
  std::memcpy(slot, &value, sizeof(T));
}

void pack_float_scalar(const Where& w, const Arg& a, DataType t, uint64_t* slot) {
  // Integers widen to a float parameter (as in C); the reverse is refused below.
  double v = a.kind() == Arg::Kind::Float ? a.float_value()
             : a.too_big()                ? static_cast<double>(static_cast<uint64_t>(a.int_value()))
                                          : static_cast<double>(a.int_value());
  if (t.is_bfloat()) return store(slot, float_to_bfloat16(static_cast<float>(v)));
  switch (t.bits()) {
    case 16: return store(slot, float_to_half(static_cast<float>(v)));
    case 32: return store(slot, static_cast<float>(v));
    case 64: return store(slot, v);
  }
  KILN_USER_ERROR() << w << " has dtype " << t.str() << ", which Module::call cannot pass";
}

void pack_int_scalar(const Where& w, const Arg& a, DataType t, uint64_t* slot) {
  int64_t v = a.int_value();
  int bits = t.bits();
  if (t.is_bool()) {
    KILN_USER_CHECK(!a.too_big() && (v == 0 || v == 1)) << w << " = " << v << " is not a bool; pass 0 or 1";
    return store(slot, static_cast<uint8_t>(v));
  }
  bool fits;
  if (t.is_int()) {
    fits = !a.too_big() && (bits == 64 || (v >= -(int64_t(1) << (bits - 1)) && v < (int64_t(1) << (bits - 1))));
  } else {
    fits = a.too_big() ? bits == 64 : v >= 0 && (bits == 64 || v < (int64_t(1) << bits));
  }
  KILN_USER_CHECK(fits) << w << " = " << (a.too_big() ? std::to_string(static_cast<uint64_t>(v)) : std::to_string(v))
                        << " does not fit " << t.str();
  switch (bits) {
    case 8: return store(slot, static_cast<uint8_t>(v));
    case 16: return store(slot, static_cast<uint16_t>(v));
    case 32: return store(slot, static_cast<uint32_t>(v));
    case 64: return store(slot, static_cast<uint64_t>(v));
  }
  KILN_USER_ERROR() << w << " has dtype " << t.str() << ", which Module::call cannot pass";
}

void pack_scalar(const Where& w, const Arg& a, uint64_t* slot) {
  DataType t = w.kernel.params[w.index].dtype;
  KILN_USER_CHECK(a.kind() != Arg::Kind::Tensor) << w << " is a tensor, expected " << a_or_an(t.str()) << " scalar";
  KILN_USER_CHECK(t.is_scalar() && (t.is_float() || t.is_integer() || t.is_bool()))
      << w << " has dtype " << t.str() << ", which Module::call cannot pass as a scalar";
  *slot = 0;
  if (t.is_float()) return pack_float_scalar(w, a, t, slot);
  KILN_USER_CHECK(a.kind() == Arg::Kind::Int)
      << w << " is a float (" << a.float_value() << "), expected " << a_or_an(t.str()) << " scalar; pass an integer";
  pack_int_scalar(w, a, t, slot);
}

// Fills ptrs[i] per the calling convention; scalar values live in vals[i].
void pack_args(const KernelInfo& k, const std::vector<Arg>& args, void** ptrs, uint64_t* vals) {
  if (args.size() != k.params.size()) {
    std::string names;
    for (size_t i = 0; i < k.params.size(); ++i) names += (i ? ", " : "") + k.params[i].name;
    KILN_USER_ERROR() << k.name << ": expected " << k.params.size() << " arguments (" << names << "), got " << args.size();
  }
  for (size_t i = 0; i < args.size(); ++i) {
    Where w{k, i};
    if (k.params[i].is_buffer) {
      ptrs[i] = pack_buffer(w, args[i]);
    } else {
      pack_scalar(w, args[i], &vals[i]);
      ptrs[i] = &vals[i];
    }
  }
}

// Packed arguments with inline storage: call() allocates nothing for up to 16 parameters.
class PackedArgs {
 public:
  PackedArgs(const KernelInfo& k, const std::vector<Arg>& args) {
    size_t n = std::max(k.params.size(), args.size());
    if (n > kInline) {
      ptr_heap_.resize(n);
      val_heap_.resize(n);
      ptrs_ = ptr_heap_.data();
      vals_ = val_heap_.data();
    }
    pack_args(k, args, ptrs_, vals_);
  }
  PackedArgs(const PackedArgs&) = delete;
  PackedArgs& operator=(const PackedArgs&) = delete;
  void* const* data() const { return ptrs_; }

 private:
  static constexpr size_t kInline = 16;
  void* ptr_inline_[kInline];
  uint64_t val_inline_[kInline];
  std::vector<void*> ptr_heap_;
  std::vector<uint64_t> val_heap_;
  void** ptrs_ = ptr_inline_;
  uint64_t* vals_ = val_inline_;
};

void invoke(const std::string& name, KilnKernel fn, void* const* args) {
  kiln_set_last_error("");
  int32_t rc = fn(args);
  if (rc != 0) {
    std::string msg = kiln_get_last_error();
    KILN_USER_ERROR() << name << ": kernel failed (returned " << rc << "): " << (msg.empty() ? "no error message was set" : msg);
  }
}

}  // namespace

// ------------------------------------------------------------------- Module

struct Module::State {
  std::shared_ptr<ModuleNode> backing;
  std::vector<KernelInfo> kernels;
  std::unordered_map<std::string, size_t> index;
  // Entry points, looked up on first use. Racing lookups store the same value.
  std::unique_ptr<std::atomic<KilnKernel>[]> resolved;

  size_t find(const std::string& name) const {
    auto it = index.find(name);
    if (it != index.end()) return it->second;
    std::string names;
    for (size_t i = 0; i < kernels.size(); ++i) names += (i ? ", " : "") + kernels[i].name;
    KILN_USER_ERROR() << "module has no kernel '" << name << "'; it has: " << (names.empty() ? "(none)" : names);
    return 0;
  }

  KilnKernel resolve(size_t k) const {
    KilnKernel fn = resolved[k].load(std::memory_order_acquire);
    if (fn) return fn;
    fn = backing->lookup(kernels[k].name);
    KILN_USER_CHECK(fn) << "kernel '" << kernels[k].name
                        << "' is listed in the module's metadata but its code has no such symbol";
    resolved[k].store(fn, std::memory_order_release);
    return fn;
  }
};

Module::Module(std::shared_ptr<ModuleNode> backing, std::vector<KernelInfo> kernels) : state_(std::make_shared<State>()) {
  KILN_USER_CHECK(backing) << "Module: the backing ModuleNode is null";
  for (size_t i = 0; i < kernels.size(); ++i) {
    const KernelInfo& k = kernels[i];
    KILN_USER_CHECK(state_->index.emplace(k.name, i).second) << "Module: two kernels are named '" << k.name << "'";
    for (const ParamInfo& p : k.params) {
      KILN_USER_CHECK(p.is_buffer || p.shape.empty())
          << "Module: kernel '" << k.name << "' scalar parameter '" << p.name << "' has a shape; scalars have none";
      for (int64_t d : p.shape) {
        KILN_USER_CHECK(d >= -1) << "Module: kernel '" << k.name << "' parameter '" << p.name << "' has shape "
                                 << shape_to_string(p.shape) << "; use -1 for a symbolic dimension";
      }
    }
  }
  state_->backing = std::move(backing);
  state_->resolved.reset(new std::atomic<KilnKernel>[kernels.size()]);
  for (size_t i = 0; i < kernels.size(); ++i) state_->resolved[i].store(nullptr);
  state_->kernels = std::move(kernels);
}

namespace {
// A shared library opened with dlopen, closed with the last Module using it.
class DsoModuleNode : public ModuleNode {
 public:
  explicit DsoModuleNode(void* handle) : handle_(handle) {}
  ~DsoModuleNode() override { dlclose(handle_); }
  KilnKernel lookup(const std::string& symbol) override {
    return reinterpret_cast<KilnKernel>(dlsym(handle_, symbol.c_str()));
  }
  void* symbol(const char* name) const { return dlsym(handle_, name); }

 private:
  void* handle_;
};
}  // namespace

Module Module::load(const std::string& so_path) {
  dlerror();
  // A path without a slash would make dlopen search the library path; a
  // kernel library is always named by its file.
  std::string path = so_path.find('/') == std::string::npos ? "./" + so_path : so_path;
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* why = dlerror();
    KILN_USER_ERROR() << "Module::load: cannot load kernel library '" << so_path << "': " << (why ? why : "unknown error")
                      << "; check that the file exists and was exported by kiln for this machine";
  }
  auto node = std::make_shared<DsoModuleNode>(handle);
  auto* metadata = static_cast<const char* const*>(node->symbol("kiln_module_metadata"));
  KILN_USER_CHECK(metadata && *metadata) << "Module::load: '" << so_path
                                         << "' has no kiln_module_metadata symbol; it is not a library exported by kiln";
  std::vector<KernelInfo> kernels;
  try {
    kernels = kernels_from_json(*metadata);
  } catch (const Error& e) {
    KILN_USER_ERROR() << "Module::load: '" << so_path << "': " << e.what();
  }
  for (const KernelInfo& k : kernels) {
    KILN_USER_CHECK(node->lookup(k.name)) << "Module::load: '" << so_path << "' lists kernel '" << k.name
                                          << "' in its metadata but does not export that symbol";
  }
  return Module(std::move(node), std::move(kernels));
}

bool Module::has(const std::string& name) const { return state_ && state_->index.count(name) > 0; }

const KernelInfo& Module::info(const std::string& name) const {
  KILN_USER_CHECK(state_) << "use of a null Module; create one with Module::load or a backend's build";
  return state_->kernels[state_->find(name)];
}

std::vector<std::string> Module::names() const {
  std::vector<std::string> out;
  for (const KernelInfo& k : kernels()) out.push_back(k.name);
  return out;
}

const std::vector<KernelInfo>& Module::kernels() const {
  KILN_USER_CHECK(state_) << "use of a null Module; create one with Module::load or a backend's build";
  return state_->kernels;
}

const std::shared_ptr<ModuleNode>& Module::backing() const {
  KILN_USER_CHECK(state_) << "use of a null Module; create one with Module::load or a backend's build";
  return state_->backing;
}

KilnKernel Module::get_kernel(const std::string& name) const {
  const KernelInfo& k = info(name);
  return state_->resolve(static_cast<size_t>(&k - state_->kernels.data()));
}

void Module::call(const std::string& name, const std::vector<Arg>& args) const {
  const KernelInfo& k = info(name);
  PackedArgs packed(k, args);
  invoke(k.name, get_kernel(name), packed.data());
}

TimeResult Module::time_evaluator(const std::string& name, const std::vector<Arg>& args, int number, int repeat,
                                  double min_repeat_ms) const {
  KILN_USER_CHECK(number >= 1 && repeat >= 1 && min_repeat_ms >= 0)
      << "time_evaluator of '" << name << "': number (" << number << ") and repeat (" << repeat
      << ") must be at least 1 and min_repeat_ms (" << min_repeat_ms << ") at least 0";
  const KernelInfo& k = info(name);
  PackedArgs packed(k, args);
  KilnKernel fn = get_kernel(name);
  void* const* argv = packed.data();
  invoke(k.name, fn, argv);  // warm-up: caches, page faults, lazy thread-pool start

  using Clock = std::chrono::steady_clock;
  TimeResult out;
  for (int r = 0; r < repeat; ++r) {
    for (;;) {
      auto start = Clock::now();
      for (int i = 0; i < number; ++i) invoke(k.name, fn, argv);
      double seconds = std::chrono::duration<double>(Clock::now() - start).count();
      if (seconds * 1e3 >= min_repeat_ms || number >= std::numeric_limits<int>::max() / 2) {
        out.results.push_back(seconds / number);
        break;
      }
      // Too short to trust: aim straight for the target (as TVM does), but
      // grow by at least 1.618x so a noisy first guess still converges fast.
      double per_call = std::max(seconds / number, 1e-9);
      double want = std::max(min_repeat_ms / 1e3 / per_call + 1, number * 1.618);
      number = static_cast<int>(std::min(want, double(std::numeric_limits<int>::max() / 2)));
    }
  }
  out.number = number;
  return out;
}

}  // namespace kiln
