// ZeroedArray is a fixed number of zero-initialized values of a trivial type, from calloc, which
// does not write them: a large one comes as fresh pages that the kernel zeroes when they are first
// touched. The daemon's loop makes big tables (buckets, entry maps) as its store grows; zeroing
// one of 8 MiB at once faulted in every page there and then (37 ms of the loop on a VM), where
// untouched pages now cost nothing until a change reaches them, and never count in the daemon's
// resident memory before.
#ifndef DEPOT_DAEMON_ZEROED_ARRAY_H_
#define DEPOT_DAEMON_ZEROED_ARRAY_H_

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>

namespace depot {

template <typename T>
class ZeroedArray {
  static_assert(std::is_trivial_v<T>, "its values are bytes that calloc zeroed");

 public:
  ZeroedArray() = default;
  // `n` zeros; std::bad_alloc when there is no memory.
  explicit ZeroedArray(size_t n) : values_(static_cast<T*>(std::calloc(n, sizeof(T)))), size_(n) {
    if (values_ == nullptr && n > 0) throw std::bad_alloc();
  }
  // `n` values, the first of them copied from `from` (as many as fit), the rest zeros.
  ZeroedArray(const ZeroedArray& from, size_t n) : ZeroedArray(n) {
    size_t kept = std::min(from.size_, n);
    if (kept > 0) std::memcpy(values_.get(), from.values_.get(), kept * sizeof(T));
  }
  ZeroedArray(ZeroedArray&& o) noexcept
      : values_(std::move(o.values_)), size_(std::exchange(o.size_, 0)) {}
  ZeroedArray& operator=(ZeroedArray&& o) noexcept {
    values_ = std::move(o.values_);
    size_ = std::exchange(o.size_, 0);
    return *this;
  }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T& operator[](size_t i) { return values_.get()[i]; }
  const T& operator[](size_t i) const { return values_.get()[i]; }
  const T* begin() const { return values_.get(); }
  const T* end() const { return values_.get() + size_; }

 private:
  struct Free {
    void operator()(T* p) const { std::free(p); }
  };
  std::unique_ptr<T, Free> values_;
  size_t size_ = 0;
};

}  // namespace depot

#endif  // DEPOT_DAEMON_ZEROED_ARRAY_H_
