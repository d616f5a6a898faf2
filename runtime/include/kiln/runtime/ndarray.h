/** \file
 * NDArray: an n-dimensional array laid out as a DLPack DLTensor, so numpy and
 * PyTorch tensors cross into kiln (and back) without copies.
 *
 * An NDArray is a shared handle: copying it is cheap and every copy sees the
 * same memory. The memory is one of
 *  - owned: allocated by NDArray::empty, 64-byte aligned, freed with the last handle;
 *  - managed: taken over from a DLManagedTensor (from_dlpack), whose deleter
 *    runs exactly once, when the last handle goes away;
 *  - borrowed: a view of someone else's DLTensor or pointer (view, wrap); the
 *    caller keeps that memory alive for as long as the NDArray is used.
 * Shape and strides are always copied into the NDArray, so a borrowed
 * DLTensor struct itself may go away; only its data must stay.
 */
#ifndef KILN_RUNTIME_NDARRAY_H
#define KILN_RUNTIME_NDARRAY_H

#include <dlpack/dlpack.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/ir/dtype.h"

namespace kiln {

/** DLPack has no bool code before v0.8; this is the value later versions use (kDLBool). */
constexpr uint8_t kDLBoolCode = 6;

/** The DLPack form of a dtype. Bool maps to {kDLBool, 8, lanes} (one byte per element). */
DLDataType to_dlpack_dtype(DataType t);
/** The kiln form of a DLPack dtype; throws kiln::Error for complex or unknown codes. */
DataType from_dlpack_dtype(DLDataType t);
/** Bytes one element of `t` takes in memory (bool: 1; float32x4: 16). */
int64_t dtype_storage_bytes(DataType t);

/** "[64, 32]": how error messages print shapes. */
std::string shape_to_string(const std::vector<int64_t>& shape);
/** "cpu", "cuda:1", ...: how error messages print devices. */
std::string device_to_string(DLDevice device);

class NDArray {
 public:
  /** The null array: defined() is false and every accessor throws. */
  NDArray() = default;

  /** A compact row-major CPU array of `shape` and `dtype`, 64-byte aligned, uninitialised. */
  static NDArray empty(const std::vector<int64_t>& shape, DataType dtype);
  /** Takes ownership of `tensor`: its deleter runs once, when the last handle dies. Null throws. */
  static NDArray from_dlpack(DLManagedTensor* tensor);
  /** A non-owning view of `tensor` (any device, any strides); the data must outlive the NDArray. */
  static NDArray view(const DLTensor* tensor);
  /** A non-owning compact CPU view of `data`; the memory must outlive the NDArray. */
  static NDArray wrap(void* data, const std::vector<int64_t>& shape, DataType dtype);

  /**
   * Exports the array. The returned tensor keeps the data alive (it holds a
   * handle) until its consumer calls its deleter, which it must do exactly once.
   */
  DLManagedTensor* to_dlpack() const;

  bool defined() const { return impl_ != nullptr; }
  /** The DLTensor itself: data is the base pointer, byte_offset still to add. */
  const DLTensor& dltensor() const;
  const std::vector<int64_t>& shape() const;
  /** Strides in elements; empty when the array is compact row-major by construction. */
  const std::vector<int64_t>& strides() const;
  DataType dtype() const;
  DLDevice device() const;
  int ndim() const { return static_cast<int>(shape().size()); }
  /** Pointer to the first element (base + byte_offset). */
  void* data() const;
  template <typename T>
  T* data_as() const {
    return static_cast<T*>(data());
  }
  int64_t numel() const;
  /** numel() times the element size: the bytes of a compact copy. */
  int64_t nbytes() const;
  /** Whether the elements are compact and row-major (size-1 dimensions may have any stride). */
  bool is_contiguous() const;
  /** Whether this NDArray owns or manages its memory (false for views). */
  bool owns_data() const;

  /** Copies `nbytes` bytes from host memory in; nbytes must equal nbytes(). Contiguous CPU arrays only. */
  void copy_from(const void* src, int64_t nbytes) const;
  /** Copies nbytes() bytes out to host memory; same conditions as copy_from. */
  void copy_to(void* dst, int64_t nbytes) const;
  /** Copies the elements of `other` (same shape and dtype, both contiguous CPU arrays). */
  void copy_from(const NDArray& other) const;

  /** Number of handles sharing this array (for tests of ownership). */
  long use_count() const { return impl_.use_count(); }

  struct Impl;

 private:
  explicit NDArray(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  const Impl& impl() const;

  std::shared_ptr<Impl> impl_;
};

/** True when `tensor` is compact row-major (null strides, or strides equal to the compact ones). */
bool is_contiguous(const DLTensor& tensor);

}  // namespace kiln

#endif  // KILN_RUNTIME_NDARRAY_H
