// SegmentSource is where a SegmentedPool gets its memory: whole segments, each a file descriptor
// that clients map (host shared memory, ShmSource) or import (a GPU's memory, DeviceSource). The
// pool decides when a segment is made or given back; the source only makes and releases them.
//
// Not thread-safe: the daemon's single loop owns it, through its pool.
#ifndef DEPOT_DAEMON_SEGMENT_SOURCE_H_
#define DEPOT_DAEMON_SEGMENT_SOURCE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "common/unique_fd.h"
#include "depot/status.h"

namespace depot {

// One segment's memory.
struct SegmentMemory {
  UniqueFd fd;  // read-write: sent to the creators of objects in it, who map or import it
  uint64_t size = 0;
  std::string name;     // for logs and messages: "depot-1000-ab12cd-7", "GPU-… chunk 7"
  uint64_t handle = 0;  // the backend's own, for device chunks (CUmemGenericAllocationHandle)
  // Read-only: sent for gets. Invalid where the memory has no such descriptor (a CUDA chunk,
  // whose importer sets its own access); then gets are sent `fd`.
  UniqueFd read_only_fd;
};

class SegmentSource {
 public:
  virtual ~SegmentSource() = default;

  // A segment of `size` bytes (a multiple of granularity()) that its pool numbers `id`. StoreFull,
  // saying where and with the sizes, when there is no room for it.
  virtual Result<SegmentMemory> Create(uint32_t id, uint64_t size) = 0;

  // Makes segment `id` as Create would, off the loop where the source can; `done` gets the result
  // on the loop later. Returns false, calling nothing, where it cannot (then the pool makes its
  // segments when it needs them).
  virtual bool CreateAhead(uint32_t /*id*/, uint64_t /*size*/,
                           std::function<void(Result<SegmentMemory>)> /*done*/) {
    return false;
  }

  // A segment that a previous daemon made and kept (KeptMemory), from its descriptor `fd` alone:
  // `size` is what its kept name says (a device chunk's descriptor does not tell it; a host
  // segment's does, and a different one is refused). InvalidArgument, saying why, when `fd` is not
  // a segment this source could have made.
  virtual Result<SegmentMemory> Adopt(UniqueFd fd, uint64_t size, std::string name) = 0;

  // Gives a segment back and closes its fd. Clients that mapped it keep their mappings until they
  // unmap.
  virtual void Release(SegmentMemory& memory) = 0;

  // Segment sizes are multiples of this.
  virtual uint64_t granularity() const = 0;

  // Where the memory is, in the words that follow "cannot allocate 1.0 MiB" in a pool's StoreFull
  // message: "on the GPU"; empty for host shared memory, which the daemon's users know as "the
  // pool".
  virtual std::string_view describe() const = 0;
};

}  // namespace depot

#endif  // DEPOT_DAEMON_SEGMENT_SOURCE_H_
