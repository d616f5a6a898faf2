/** \file
 * The object system of the IR: an intrusive, atomic reference count in every
 * node and Ref<T>, the handle that holds one. A counted handle can be rebuilt
 * from a raw `const T*` (which shared_ptr cannot), so visitors that receive
 * `const AddNode*` can return the very same node.
 */
#ifndef KILN_IR_OBJECT_H
#define KILN_IR_OBJECT_H

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <utility>

namespace kiln {

/** Base of every reference-counted node. Nodes are immutable after creation. */
class Object {
 public:
  Object() = default;
  Object(const Object&) = delete;
  Object& operator=(const Object&) = delete;
  virtual ~Object() = default;

  void inc_ref() const { ref_count_.fetch_add(1, std::memory_order_relaxed); }
  void dec_ref() const {
    if (ref_count_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }
  int use_count() const { return ref_count_.load(std::memory_order_relaxed); }

 private:
  mutable std::atomic<int32_t> ref_count_{0};
};

/** Intrusive counted pointer to a const node. */
template <typename T>
class Ref {
 public:
  Ref() = default;
  Ref(std::nullptr_t) {}
  Ref(const T* p) : ptr_(p) {
    if (ptr_) ptr_->inc_ref();
  }
  Ref(const Ref& o) : Ref(o.ptr_) {}
  Ref(Ref&& o) noexcept : ptr_(o.ptr_) { o.ptr_ = nullptr; }
  template <typename U>
  Ref(const Ref<U>& o) : Ref(static_cast<const T*>(o.get())) {}
  ~Ref() {
    if (ptr_) ptr_->dec_ref();
  }
  Ref& operator=(Ref o) noexcept {
    std::swap(ptr_, o.ptr_);
    return *this;
  }

  const T* get() const { return ptr_; }
  const T* operator->() const { return ptr_; }
  const T& operator*() const { return *ptr_; }
  bool defined() const { return ptr_ != nullptr; }
  explicit operator bool() const { return ptr_ != nullptr; }
  /** Pointer identity (not structural equality). */
  bool same_as(const Ref& o) const { return ptr_ == o.ptr_; }
  bool operator==(const Ref& o) const { return ptr_ == o.ptr_; }

 private:
  const T* ptr_ = nullptr;
};

/** Hash of a Ref by identity, for unordered containers keyed by node. */
struct RefHash {
  template <typename T>
  size_t operator()(const Ref<T>& r) const {
    return std::hash<const void*>()(r.get());
  }
};

}  // namespace kiln

#endif  // KILN_IR_OBJECT_H
