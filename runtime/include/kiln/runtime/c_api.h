/** \file
 * The C API of kiln_runtime: load libraries exported by kiln and run their
 * kernels or models from C (or any language with a C FFI), with nothing but
 * libkiln_runtime, no LLVM and no Python.
 *
 * Conventions
 *  - Objects are opaque handles (KilnLibrary, KilnModel), created by a
 *    *_load function and released by the matching *_free.
 *  - Every function returns an int status: KILN_OK (0) on success, else one
 *    of the KILN_ERR_* codes below. No function throws or aborts; out
 *    parameters are written only on success.
 *  - After a failure, kiln_last_error() returns the message of that failure
 *    (the same words as the C++ API's kiln::Error: what went wrong and the
 *    fix). The message is per thread and stays until the next failure on the
 *    same thread; successful calls do not clear it.
 *  - Tensors are DLPack DLTensors (dlpack/dlpack.h) in CPU memory. Dtypes are
 *    DLDataType; bool is {code 6, bits 8, lanes 1}, as in later DLPack.
 *  - Strings and shapes the API hands out are borrowed from the handle and
 *    stay valid until it is freed.
 *  - Integrity: every library kiln exports ends in a seal (a checksum of the
 *    whole file, XXH3-128, and an export id; kiln/runtime/library_seal.h),
 *    and a weights file carries the same export id and a checksum of its
 *    data. kiln_library_load and kiln_model_load check them before the
 *    library is mapped or any of its code runs: a damaged, cut-short or
 *    unsealed library, or a weights file damaged or of another export, is
 *    KILN_ERR_INCOMPATIBLE, never a crash or a wrong answer. (A program that
 *    dlopens a static_runtime library itself to reach this API runs the
 *    library's code before that check.) Checking costs one read of the file:
 *    about 15 ms per 100 MB from the page cache.
 *  - A KilnLibrary may be called from several threads at once. A KilnModel
 *    holds inputs and outputs between calls: use each one from one thread
 *    at a time (load the model once per thread to run in parallel).
 *
 * A model in a few lines:
 *   KilnModel* m;
 *   if (kiln_model_load("model.so", &m) != KILN_OK) { puts(kiln_last_error()); return 1; }
 *   kiln_model_set_input(m, 0, &x);       // copies x
 *   kiln_model_run(m);
 *   kiln_model_get_output(m, 0, &y);      // copies into y, checked
 *   kiln_model_free(m);
 */
#ifndef KILN_RUNTIME_C_API_H
#define KILN_RUNTIME_C_API_H

#include <dlpack/dlpack.h>
#include <stdint.h>

#include "kiln/runtime/c_runtime_api.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Status codes. Every function returns one; 0 is success. */
enum KilnStatus {
  KILN_OK = 0,
  /** A null handle or pointer, an index out of range, a negative count. */
  KILN_ERR_BAD_ARGUMENT = 1,
  /** A file that does not exist or cannot be read (library, weights file), or no kernel/input/output of that name. */
  KILN_ERR_NOT_FOUND = 2,
  /** The file is not a kiln library (or not a model library), is corrupt or truncated (its checksum does not match), is a weights file of another export, was built for another runtime ABI, or needs CPU features this machine lacks. */
  KILN_ERR_INCOMPATIBLE = 3,
  /** A tensor whose shape, dtype, device, layout or argument count differs from what the kernel or model expects. */
  KILN_ERR_MISMATCH = 4,
  /** A call out of order: running a model before all its inputs are set, reading an output before a run. */
  KILN_ERR_STATE = 5,
  /** A kernel reported a failure while running. */
  KILN_ERR_KERNEL = 6,
  /** Memory allocation failed. */
  KILN_ERR_OUT_OF_MEMORY = 7,
  /** A bug in kiln (a broken internal invariant): please report it with the message. */
  KILN_ERR_INTERNAL = 8
};

/** A loaded kernel library (Module::export_library). */
typedef struct KilnLibrary KilnLibrary;
/** A loaded model (graph::Executor::export_library), with its inputs and last outputs. */
typedef struct KilnModel KilnModel;

/** The message of the last failure on this thread ("" if none). Valid until the next failing call on this thread. */
const char* kiln_last_error(void);

/** The name of a status code ("KILN_ERR_MISMATCH"); "unknown status" for other values. Never null. */
const char* kiln_status_name(int status);

/** kiln's version ("0.1.0"). Never null. */
const char* kiln_runtime_version(void);

/* ------------------------------------------------------------ libraries */

/**
 * Loads the kernel library at `path` (a model library is a kernel library
 * too) and stores its handle in *out. Checks the library's runtime ABI and
 * CPU features first.
 * Errors: BAD_ARGUMENT (null path or out), NOT_FOUND (no such file or not
 * readable), INCOMPATIBLE (not a kiln library, damaged or truncated: its
 * checksum does not match; other ABI, CPU features missing).
 */
int kiln_library_load(const char* path, KilnLibrary** out);

/** Releases a library (unloads it once no model or call uses it). A null handle is a no-op. Always KILN_OK. */
int kiln_library_free(KilnLibrary* lib);

/** The number of kernels in the library. Errors: BAD_ARGUMENT. */
int kiln_library_num_kernels(const KilnLibrary* lib, int* num_kernels);

/** The name of kernel `index` (0 .. num_kernels-1), in metadata order. Errors: BAD_ARGUMENT (bad index). */
int kiln_library_kernel_name(const KilnLibrary* lib, int index, const char** name);

/**
 * The raw entry point of kernel `name`, for callers that pack arguments
 * themselves per c_runtime_api.h (no checks at all: prefer kiln_kernel_call).
 * Errors: BAD_ARGUMENT, NOT_FOUND (no such kernel; the message lists them).
 */
int kiln_library_get_kernel(const KilnLibrary* lib, const char* name, KilnKernel* fn);

/**
 * Calls kernel `name` with `num_args` arguments, checked as Module::call
 * checks them: each buffer parameter takes a CPU, compact row-major
 * DLTensor of the parameter's dtype and rank, whose dimensions must agree
 * with every other use of the same shape variable; a scalar parameter takes
 * a 0-d CPU DLTensor holding its value. Trailing shape scalars that the
 * arrays determine may be left out. Output buffers are written in place.
 * Errors: BAD_ARGUMENT (null lib, name, args or entry), NOT_FOUND (no such
 * kernel), MISMATCH (count, shape, dtype, device, layout; the message names
 * the parameter and both values), KERNEL (the kernel failed).
 */
int kiln_kernel_call(const KilnLibrary* lib, const char* name, DLTensor* const* args, int num_args);

/* --------------------------------------------------------------- models */

/**
 * Loads the model library at `path` (with its weights, embedded or in
 * `<path>.weights`) and stores its handle in *out.
 * Errors: BAD_ARGUMENT, NOT_FOUND (no such file, or its weights file is
 * missing), INCOMPATIBLE (not a kiln model library, a checksum that does not
 * match (library or weights file), a weights file of another export, other
 * ABI, CPU features missing).
 */
int kiln_model_load(const char* path, KilnModel** out);

/** Releases a model, its inputs and outputs. A null handle is a no-op. Always KILN_OK. */
int kiln_model_free(KilnModel* model);

/** The number of model inputs. Errors: BAD_ARGUMENT. */
int kiln_model_num_inputs(const KilnModel* model, int* num_inputs);

/** The number of model outputs. Errors: BAD_ARGUMENT. */
int kiln_model_num_outputs(const KilnModel* model, int* num_outputs);

/**
 * What input `index` is: its name, rank, shape (ndim entries) and dtype.
 * A model with shape variables has -1 where a dimension takes any size (see
 * kiln_model_shape_var). Any of the out pointers may be null (not wanted).
 * Borrowed; valid until the model is freed. Errors: BAD_ARGUMENT (null model, bad index).
 */
int kiln_model_input_info(const KilnModel* model, int index, const char** name, int* ndim, const int64_t** shape,
                          DLDataType* dtype);

/** The same for output `index`. */
int kiln_model_output_info(const KilnModel* model, int index, const char** name, int* ndim, const int64_t** shape,
                           DLDataType* dtype);

/** The index of the input called `name`. Errors: BAD_ARGUMENT, NOT_FOUND (the message lists the inputs). */
int kiln_model_input_index(const KilnModel* model, const char* name, int* index);

/**
 * Sets input `index` to a copy of `tensor`, which must be a CPU, compact
 * row-major tensor of exactly the input's shape (any size where it is -1)
 * and dtype; the caller's memory is not used after the call. The input
 * keeps its value (and shape) for later runs until set again.
 * Errors: BAD_ARGUMENT (null, bad index, null data), MISMATCH (shape, dtype,
 * device, layout; the message names the input and both values).
 */
int kiln_model_set_input(KilnModel* model, int index, const DLTensor* tensor);

/** kiln_model_set_input by input name. Errors as above, plus NOT_FOUND (no such input). */
int kiln_model_set_input_by_name(KilnModel* model, const char* name, const DLTensor* tensor);

/**
 * Runs the model on its inputs; the outputs are kept until the next run.
 * A model with shape variables binds them from the inputs' shapes here and
 * its outputs take the shapes they give (read them with kiln_model_output).
 * Errors: BAD_ARGUMENT, STATE (an input was never set; the message names
 * it), MISMATCH (the inputs' shapes disagree with each other, or break a
 * range or constraint; the message names the input, dimension, variable and
 * value), KERNEL (a kernel failed). On failure the previous outputs are gone.
 */
int kiln_model_run(KilnModel* model);

/**
 * Copies output `index` of the last run into `out`, a CPU, compact row-major
 * tensor with the output's shape in that run (kiln_model_output_info's, or
 * kiln_model_output's for a model with shape variables) and dtype.
 * Errors: BAD_ARGUMENT, STATE (no successful run yet), MISMATCH.
 */
int kiln_model_get_output(const KilnModel* model, int index, DLTensor* out);

/**
 * Borrows output `index` of the last run without a copy: *out points to a
 * compact CPU DLTensor (data, ndim, shape, dtype) owned by the model, valid
 * until the next kiln_model_run or kiln_model_free.
 * Errors: BAD_ARGUMENT, STATE (no successful run yet).
 */
int kiln_model_output(const KilnModel* model, int index, const DLTensor** out);

/* ------------------------------------------------------ shape variables */

/** The number of the model's shape variables (0: its shapes are fixed). Errors: BAD_ARGUMENT. */
int kiln_model_num_shape_vars(const KilnModel* model, int* num_shape_vars);

/**
 * Shape variable `index`: its name and inclusive range (lo, hi; both -1
 * when it has none). Out pointers may be null. Errors: BAD_ARGUMENT.
 */
int kiln_model_shape_var(const KilnModel* model, int index, const char** name, int64_t* lo, int64_t* hi);

/**
 * The arena bytes a run with these shape values (one per variable, in order)
 * uses; a model without shape variables takes none. Errors: BAD_ARGUMENT
 * (null, a wrong count), MISMATCH (a value out of range or breaking a constraint).
 */
int kiln_model_memory(const KilnModel* model, const int64_t* values, int num_values, int64_t* arena_bytes);

/**
 * The arena bytes at every shape variable's range maximum: the most a run
 * uses when the sizes grow with the variables (model_shapes.h says when it
 * is a bound). Errors: BAD_ARGUMENT, NOT_FOUND (a variable has no range).
 */
int kiln_model_memory_bound(const KilnModel* model, int64_t* arena_bytes);

#ifdef __cplusplus
}
#endif

#endif  // KILN_RUNTIME_C_API_H
