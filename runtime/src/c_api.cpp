// The C API (c_api.h): thin handles over Module and ModelRunner. Every entry
// point runs its body through `guard`, which turns any exception into a
// status code and the thread's last error message, so nothing escapes into C.
#include "kiln/runtime/c_api.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "kiln/runtime/arg_binder.h"
#include "kiln/runtime/library_info.h"
#include "kiln/runtime/model.h"
#include "kiln/runtime/model_shapes.h"
#include "kiln/runtime/module.h"
#include "kiln/support/error.h"

struct KilnLibrary {
  kiln::Module module;
};

struct KilnModel {
  kiln::ModelRunner runner;
  std::vector<kiln::NDArray> inputs;   // copies made by set_input; undefined until set
  std::vector<kiln::NDArray> outputs;  // of the last successful run; empty before
};

namespace {

using kiln::DataType;
using kiln::NDArray;

thread_local std::string last_error;

// An error whose status the API knows exactly (kiln::Error leaves it to the caller's default).
struct CError {
  int status;
  std::string msg;
};

[[noreturn]] void fail(int status, std::string msg) { throw CError{status, std::move(msg)}; }

// Runs `body`; a kiln::Error (user error) becomes `user_status`, since which
// kind of user error it is depends on what the entry point was doing.
template <typename F>
int guard(const char* fn, int user_status, F&& body) {
  try {
    body();
    return KILN_OK;
  } catch (const CError& e) {
    last_error = std::string(fn) + ": " + e.msg;
    return e.status;
  } catch (const kiln::Error& e) {
    last_error = std::string(fn) + ": " + e.what();
    return user_status;
  } catch (const kiln::InternalError& e) {
    last_error = std::string(fn) + ": " + e.what();
    return KILN_ERR_INTERNAL;
  } catch (const std::bad_alloc&) {
    last_error = std::string(fn) + ": out of memory";
    return KILN_ERR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    last_error = std::string(fn) + ": internal error: " + e.what();
    return KILN_ERR_INTERNAL;
  } catch (...) {
    last_error = std::string(fn) + ": internal error: unknown exception";
    return KILN_ERR_INTERNAL;
  }
}

void check_arg(bool ok, const char* what) {
  if (!ok) fail(KILN_ERR_BAD_ARGUMENT, what);
}

// A missing or unreadable file is NOT_FOUND; anything the loader says about an existing file is INCOMPATIBLE.
void check_readable(const char* path) {
  check_arg(path != nullptr, "the path is null");
  if (access(path, R_OK) != 0) {
    fail(KILN_ERR_NOT_FOUND, "cannot read '" + std::string(path) + "': " + std::strerror(errno) +
                                 "; check the path (a library exported by kiln)");
  }
}

const kiln::ModelTensor& tensor_at(const std::vector<kiln::ModelTensor>& v, int index, const char* what) {
  if (index < 0 || static_cast<size_t>(index) >= v.size()) {
    fail(KILN_ERR_BAD_ARGUMENT, std::string(what) + " index " + std::to_string(index) + " is out of range; the model has " +
                                    std::to_string(v.size()) + " " + what + "s");
  }
  return v[index];
}

DataType dtype_of(const DLTensor& t, const std::string& who) {
  try {
    return kiln::from_dlpack_dtype(t.dtype);
  } catch (const kiln::Error& e) {
    fail(KILN_ERR_MISMATCH, who + ": " + e.what());
  }
}

// Shape, dtype, device and layout of a caller tensor against a model tensor.
void check_tensor(const DLTensor* t, const kiln::ModelTensor& want, const std::string& who) {
  check_arg(t != nullptr, (who + " is a null DLTensor").c_str());
  if (t->device.device_type != kDLCPU)
    fail(KILN_ERR_MISMATCH, who + " is on " + kiln::device_to_string(t->device) + "; the model runs on the CPU");
  DataType dt = dtype_of(*t, who);
  if (dt != want.dtype) fail(KILN_ERR_MISMATCH, who + " has dtype " + dt.str() + "; the model expects " + want.dtype.str());
  check_arg(t->ndim >= 0 && (t->ndim == 0 || t->shape != nullptr), (who + " has no shape").c_str());
  // The rank first: a wrong ndim must not make us read past the caller's shape array.
  if (static_cast<size_t>(t->ndim) != want.shape.size()) {
    fail(KILN_ERR_MISMATCH, who + " has " + std::to_string(t->ndim) + " dimensions; the model was compiled for " +
                                std::to_string(want.shape.size()) + " " + kiln::shape_to_string(want.shape));
  }
  std::vector<int64_t> shape(t->shape, t->shape + t->ndim);
  // A dynamic model's -1 dimensions take any size here; the run checks them against each other.
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == want.shape[d] || (want.shape[d] < 0 && shape[d] >= 0)) continue;
    // Name the dimension, as a run's shape check does: the caller sees which one to fix.
    std::string expects = want.shape[d] < 0 ? "a size of at least 0" : std::to_string(want.shape[d]);
    fail(KILN_ERR_MISMATCH, who + " has " + std::to_string(shape[d]) + " in dimension " + std::to_string(d) + " (shape " + kiln::shape_to_string(shape) +
                                "); the model expects " + expects + " there (compiled for " + kiln::shape_to_string(want.shape) +
                                (want.dims.empty() ? ")" : ", -1: any size)"));
  }
  if (!kiln::is_contiguous(*t)) fail(KILN_ERR_MISMATCH, who + " is not compact row-major; pass a contiguous tensor");
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  check_arg(t->data != nullptr || numel == 0, (who + " has null data").c_str());
}

int info_of(const std::vector<kiln::ModelTensor>& v, int index, const char* what, const char** name, int* ndim,
            const int64_t** shape, DLDataType* dtype) {
  const kiln::ModelTensor& t = tensor_at(v, index, what);
  if (name) *name = t.name.c_str();
  if (ndim) *ndim = static_cast<int>(t.shape.size());
  if (shape) *shape = t.shape.data();
  if (dtype) *dtype = kiln::to_dlpack_dtype(t.dtype);
  return KILN_OK;
}

int input_index(const KilnModel* model, const char* name) {
  check_arg(model && name, "the model or the name is null");
  const auto& inputs = model->runner.inputs();
  std::string names;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].name == name) return static_cast<int>(i);
    names += (i ? ", " : "") + inputs[i].name;
  }
  fail(KILN_ERR_NOT_FOUND, "the model has no input '" + std::string(name) + "'; its inputs are: " + names);
}

// A 0-d tensor as the scalar Arg of its dtype (how kiln_kernel_call passes scalar parameters).
kiln::Arg scalar_arg(const DLTensor& t, const std::string& who) {
  DataType dt = dtype_of(t, who);
  check_arg(t.data != nullptr, (who + " has null data").c_str());
  const char* p = static_cast<const char*>(t.data) + t.byte_offset;
  auto read = [&](auto v) {
    std::memcpy(&v, p, sizeof(v));
    return v;
  };
  if (dt.is_float() && dt.bits() == 32) return kiln::Arg(read(float()));
  if (dt.is_float() && dt.bits() == 64) return kiln::Arg(read(double()));
  if (dt.is_int() || dt.is_uint()) {
    int64_t v = 0;
    switch (dt.bits()) {
      case 8: v = dt.is_int() ? int64_t(read(int8_t())) : int64_t(read(uint8_t())); break;
      case 16: v = dt.is_int() ? int64_t(read(int16_t())) : int64_t(read(uint16_t())); break;
      case 32: v = dt.is_int() ? int64_t(read(int32_t())) : int64_t(read(uint32_t())); break;
      case 64:
        if (dt.is_uint()) return kiln::Arg(read(uint64_t()));
        v = read(int64_t());
        break;
      default: fail(KILN_ERR_MISMATCH, who + ": scalar dtype " + dt.str() + " is not supported");
    }
    return kiln::Arg(v);
  }
  fail(KILN_ERR_MISMATCH, who + ": scalar dtype " + dt.str() + " is not supported");
}

}  // namespace

extern "C" {

const char* kiln_last_error(void) { return last_error.c_str(); }

const char* kiln_status_name(int status) {
  switch (status) {
    case KILN_OK: return "KILN_OK";
    case KILN_ERR_BAD_ARGUMENT: return "KILN_ERR_BAD_ARGUMENT";
    case KILN_ERR_NOT_FOUND: return "KILN_ERR_NOT_FOUND";
    case KILN_ERR_INCOMPATIBLE: return "KILN_ERR_INCOMPATIBLE";
    case KILN_ERR_MISMATCH: return "KILN_ERR_MISMATCH";
    case KILN_ERR_STATE: return "KILN_ERR_STATE";
    case KILN_ERR_KERNEL: return "KILN_ERR_KERNEL";
    case KILN_ERR_OUT_OF_MEMORY: return "KILN_ERR_OUT_OF_MEMORY";
    case KILN_ERR_INTERNAL: return "KILN_ERR_INTERNAL";
  }
  return "unknown status";
}

const char* kiln_runtime_version(void) { return kiln::kiln_version(); }

// ------------------------------------------------------------- libraries

int kiln_library_load(const char* path, KilnLibrary** out) {
  return guard(__func__, KILN_ERR_INCOMPATIBLE, [&] {
    check_arg(out != nullptr, "out is null");
    check_readable(path);
    auto lib = std::make_unique<KilnLibrary>();
    lib->module = kiln::Module::load(path);
    *out = lib.release();
  });
}

int kiln_library_free(KilnLibrary* lib) {
  delete lib;
  return KILN_OK;
}

int kiln_library_num_kernels(const KilnLibrary* lib, int* num_kernels) {
  return guard(__func__, KILN_ERR_BAD_ARGUMENT, [&] {
    check_arg(lib && num_kernels, "the library or num_kernels is null");
    *num_kernels = static_cast<int>(lib->module.kernels().size());
  });
}

int kiln_library_kernel_name(const KilnLibrary* lib, int index, const char** name) {
  return guard(__func__, KILN_ERR_BAD_ARGUMENT, [&] {
    check_arg(lib && name, "the library or name is null");
    const auto& ks = lib->module.kernels();
    if (index < 0 || static_cast<size_t>(index) >= ks.size()) {
      fail(KILN_ERR_BAD_ARGUMENT, "kernel index " + std::to_string(index) + " is out of range; the library has " +
                                      std::to_string(ks.size()) + " kernels");
    }
    *name = ks[index].name.c_str();
  });
}

int kiln_library_get_kernel(const KilnLibrary* lib, const char* name, KilnKernel* fn) {
  return guard(__func__, KILN_ERR_NOT_FOUND, [&] {
    check_arg(lib && name && fn, "the library, name or fn is null");
    *fn = lib->module.get_kernel(name);
  });
}

int kiln_kernel_call(const KilnLibrary* lib, const char* name, DLTensor* const* args, int num_args) {
  std::string fn = std::string(__func__) + "('" + (name ? name : "") + "')";
  return guard(fn.c_str(), KILN_ERR_MISMATCH, [&] {
    check_arg(lib && name, "the library or the kernel name is null");
    check_arg(num_args >= 0 && (num_args == 0 || args), "args is null or num_args is negative");
    if (!lib->module.has(name)) {
      try {
        lib->module.info(name);
      } catch (const kiln::Error& e) {
        fail(KILN_ERR_NOT_FOUND, e.what());  // the message lists the kernels
      }
    }
    const kiln::KernelInfo& k = lib->module.info(name);
    KilnKernel entry = lib->module.get_kernel(name);
    std::vector<kiln::Arg> call_args;
    for (int i = 0; i < num_args; ++i) {
      std::string who = "argument " + std::to_string(i);
      check_arg(args[i] != nullptr, (who + " is null").c_str());
      bool scalar = static_cast<size_t>(i) < k.params.size() && !k.params[i].is_buffer && args[i]->ndim == 0;
      call_args.push_back(scalar ? scalar_arg(*args[i], who + " ('" + k.params[i].name + "')") : kiln::Arg(args[i]));
    }
    kiln::PackedArgs packed(k, call_args);  // shape, dtype, layout checks: MISMATCH
    kiln_set_last_error("");
    if (int32_t rc = entry(packed.data()); rc != 0) {
      std::string msg = kiln_get_last_error();
      fail(KILN_ERR_KERNEL, "the kernel failed (returned " + std::to_string(rc) + "): " + (msg.empty() ? "no message" : msg));
    }
  });
}

// ---------------------------------------------------------------- models

int kiln_model_load(const char* path, KilnModel** out) {
  return guard(__func__, KILN_ERR_INCOMPATIBLE, [&] {
    check_arg(out != nullptr, "out is null");
    check_readable(path);
    auto model = std::make_unique<KilnModel>();
    try {
      model->runner = kiln::ModelRunner::load(path);
    } catch (const kiln::MissingWeightsError& e) {
      // Weights kept beside the library but absent: a missing file, not a bad library.
      fail(KILN_ERR_NOT_FOUND, e.what());
    }
    model->inputs.resize(model->runner.inputs().size());
    *out = model.release();
  });
}

int kiln_model_free(KilnModel* model) {
  delete model;
  return KILN_OK;
}

int kiln_model_num_inputs(const KilnModel* model, int* num_inputs) {
  return guard(__func__, KILN_ERR_BAD_ARGUMENT, [&] {
    check_arg(model && num_inputs, "the model or num_inputs is null");
    *num_inputs = static_cast<int>(model->runner.inputs().size());
  });
}

int kiln_model_num_outputs(const KilnModel* model, int* num_outputs) {
  return guard(__func__, KILN_ERR_BAD_ARGUMENT, [&] {
    check_arg(model && num_outputs, "the model or num_outputs is null");
    *num_outputs = static_cast<int>(model->runner.outputs().size());
  });
}

int kiln_model_input_info(const KilnModel* model, int index, const char** name, int* ndim, const int64_t** shape,
                          DLDataType* dtype) {
  return guard(__func__, KILN_ERR_BAD_ARGUMENT, [&] {
    check_arg(model != nullptr, "the model is null");
    info_of(model->runner.inputs(), index, "input", name, ndim, shape, dtype);
  });
}

int kiln_model_output_info(const KilnModel* model, int index, const char** name, int* ndim, const int64_t** shape,
                           DLDataType* dtype) {
  return guard(__func__, KILN_ERR_BAD_ARGUMENT, [&] {
    check_arg(model != nullptr, "the model is null");
    info_of(model->runner.outputs(), index, "output", name, ndim, shape, dtype);
  });
}

int kiln_model_input_index(const KilnModel* model, const char* name, int* index) {
  return guard(__func__, KILN_ERR_BAD_ARGUMENT, [&] {
    check_arg(index != nullptr, "index is null");
    *index = input_index(model, name);
  });
}

namespace {
void set_input(KilnModel* model, int index, const DLTensor* tensor) {
  check_arg(model != nullptr, "the model is null");
  const kiln::ModelTensor& want = tensor_at(model->runner.inputs(), index, "input");
  check_tensor(tensor, want, "input '" + want.name + "'");
  NDArray copy = NDArray::empty(std::vector<int64_t>(tensor->shape, tensor->shape + tensor->ndim), want.dtype);
  if (copy.nbytes() > 0) copy.copy_from(NDArray::view(tensor));
  model->inputs[index] = std::move(copy);
}
}  // namespace

int kiln_model_set_input(KilnModel* model, int index, const DLTensor* tensor) {
  return guard(__func__, KILN_ERR_MISMATCH, [&] { set_input(model, index, tensor); });
}

int kiln_model_set_input_by_name(KilnModel* model, const char* name, const DLTensor* tensor) {
  return guard(__func__, KILN_ERR_MISMATCH, [&] { set_input(model, input_index(model, name), tensor); });
}

int kiln_model_run(KilnModel* model) {
  return guard(__func__, KILN_ERR_KERNEL, [&] {
    check_arg(model != nullptr, "the model is null");
    model->outputs.clear();
    for (size_t i = 0; i < model->inputs.size(); ++i) {
      if (!model->inputs[i].defined()) {
        fail(KILN_ERR_STATE, "input " + std::to_string(i) + " ('" + model->runner.inputs()[i].name +
                                 "') is not set; set every input with kiln_model_set_input before running");
      }
    }
    try {
      model->outputs = model->runner.run(model->inputs);
    } catch (const kiln::ShapeError& e) {  // inputs whose shapes disagree (a dynamic model)
      fail(KILN_ERR_MISMATCH, e.what());
    }
  });
}

namespace {
const NDArray& output_of(const KilnModel* model, int index) {
  check_arg(model != nullptr, "the model is null");
  tensor_at(model->runner.outputs(), index, "output");
  if (model->outputs.empty()) fail(KILN_ERR_STATE, "the model has not run; call kiln_model_run first");
  return model->outputs[index];
}
}  // namespace

int kiln_model_get_output(const KilnModel* model, int index, DLTensor* out) {
  return guard(__func__, KILN_ERR_MISMATCH, [&] {
    const NDArray& result = output_of(model, index);
    kiln::ModelTensor want = model->runner.outputs()[index];
    want.shape = result.shape();  // a dynamic model's output has the shape of the last run
    want.dims.clear();
    check_tensor(out, want, "the tensor for output '" + want.name + "'");
    if (result.nbytes() > 0) NDArray::view(out).copy_from(result);
  });
}

int kiln_model_output(const KilnModel* model, int index, const DLTensor** out) {
  return guard(__func__, KILN_ERR_BAD_ARGUMENT, [&] {
    check_arg(out != nullptr, "out is null");
    *out = &output_of(model, index).dltensor();
  });
}

// --------------------------------------------------------- shape variables

int kiln_model_num_shape_vars(const KilnModel* model, int* num_shape_vars) {
  return guard(__func__, KILN_ERR_BAD_ARGUMENT, [&] {
    check_arg(model && num_shape_vars, "the model or num_shape_vars is null");
    *num_shape_vars = static_cast<int>(model->runner.plan().shape_vars.size());
  });
}

int kiln_model_shape_var(const KilnModel* model, int index, const char** name, int64_t* lo, int64_t* hi) {
  return guard(__func__, KILN_ERR_BAD_ARGUMENT, [&] {
    check_arg(model != nullptr, "the model is null");
    const kiln::ModelPlan& plan = model->runner.plan();
    if (index < 0 || static_cast<size_t>(index) >= plan.shape_vars.size()) {
      fail(KILN_ERR_BAD_ARGUMENT,
           "shape variable index " + std::to_string(index) + " is out of range; the model has " + std::to_string(plan.shape_vars.size()));
    }
    bool ranged = static_cast<size_t>(index) < plan.shape_ranges.size() && plan.shape_ranges[index];
    if (name) *name = plan.shape_vars[index].c_str();
    if (lo) *lo = ranged ? plan.shape_ranges[index]->lo : -1;
    if (hi) *hi = ranged ? plan.shape_ranges[index]->hi : -1;
  });
}

int kiln_model_memory(const KilnModel* model, const int64_t* values, int num_values, int64_t* arena_bytes) {
  return guard(__func__, KILN_ERR_MISMATCH, [&] {
    check_arg(model && arena_bytes && num_values >= 0 && (values || num_values == 0), "the model or arena_bytes is null, or the values are missing");
    if (static_cast<size_t>(num_values) != model->runner.plan().shape_vars.size()) {
      fail(KILN_ERR_BAD_ARGUMENT,
           "the model has " + std::to_string(model->runner.plan().shape_vars.size()) + " shape variables, got " + std::to_string(num_values) + " values");
    }
    *arena_bytes = model->runner.memory(std::vector<int64_t>(values, values + num_values)).arena_bytes;
  });
}

int kiln_model_memory_bound(const KilnModel* model, int64_t* arena_bytes) {
  return guard(__func__, KILN_ERR_BAD_ARGUMENT, [&] {
    check_arg(model && arena_bytes, "the model or arena_bytes is null");
    std::optional<kiln::MemoryPlanStats> m = model->runner.memory_bound();
    if (!m) fail(KILN_ERR_NOT_FOUND, "a shape variable of the model has no range, so its memory has no bound; pass values to kiln_model_memory");
    *arena_bytes = m->arena_bytes;
  });
}

}  // extern "C"
