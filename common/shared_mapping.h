// SharedMapping is one MAP_SHARED mapping of a whole file, unmapped when it goes: the index and
// the reference slots behind gets without a round trip (see proto/index_layout.h), on both sides
// of the socket.
//
// Not thread-safe to move or destroy; the words it maps are shared, read and written as atomics.
#ifndef DEPOT_COMMON_SHARED_MAPPING_H_
#define DEPOT_COMMON_SHARED_MAPPING_H_

#include <cstddef>
#include <cstdint>

#include "depot/status.h"

namespace depot {

class SharedMapping {
 public:
  SharedMapping() = default;
  // Maps `size` bytes of `fd`, read-write or read-only. Unavailable, naming `what`, when mmap
  // fails.
  static Result<SharedMapping> Map(int fd, size_t size, bool writable, const char* what);
  SharedMapping(SharedMapping&& o) noexcept : base_(o.base_), size_(o.size_) {
    o.base_ = nullptr;
    o.size_ = 0;
  }
  SharedMapping& operator=(SharedMapping&& o) noexcept;
  SharedMapping(const SharedMapping&) = delete;
  SharedMapping& operator=(const SharedMapping&) = delete;
  ~SharedMapping();

  // The mapping as 64-bit words (a mapping is page aligned).
  uint64_t* words() const { return static_cast<uint64_t*>(base_); }
  size_t size() const { return size_; }
  bool valid() const { return base_ != nullptr; }

 private:
  void* base_ = nullptr;
  size_t size_ = 0;
};

}  // namespace depot

#endif  // DEPOT_COMMON_SHARED_MAPPING_H_
