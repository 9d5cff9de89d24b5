// DevicePool is one GPU's memory for device frames: chunks taken from the DeviceBackend up to a
// capacity (created on demand: creating one is slow), objects carved out of chunks by the same
// Allocator as the host pool, 256-byte aligned. An object larger than half a chunk gets a chunk
// of its own. Chunks that fall empty are given back, one shared chunk kept as a spare.
//
// Not thread-safe: the daemon's single loop owns it.
#ifndef DEPOT_DAEMON_DEVICE_POOL_H_
#define DEPOT_DAEMON_DEVICE_POOL_H_

#include <cstdint>
#include <functional>
#include <map>

#include "daemon/allocator.h"
#include "daemon/device_backend.h"
#include "daemon/host_pool.h"

namespace depot {

class DevicePool {
 public:
  struct Chunk {
    uint32_t id;
    DeviceChunk memory;
    bool dedicated;  // holds one object larger than half a chunk
    Allocator allocator;
  };
  struct Stats {
    uint64_t reserved = 0;  // bytes in chunks
    uint64_t used = 0;      // bytes in allocated blocks
    uint32_t chunks = 0;
  };

  // Called with a chunk's id when it is given back, so that clients can unmap it.
  using RetireFn = std::function<void(uint32_t chunk)>;

  // `budget` (this GPU's capacity, shared with other namespaces' pools on the same GPU) outlives
  // the pool.
  DevicePool(DeviceBackend& backend, size_t device, const DeviceInfo& info, uint64_t chunk_size,
             PoolBudget* budget, RetireFn on_retire);
  // Gives every chunk back to the backend.
  ~DevicePool();
  DevicePool(const DevicePool&) = delete;
  DevicePool& operator=(const DevicePool&) = delete;

  // Reserves `size` (> 0) bytes. StoreFull, with the sizes, when neither a chunk nor the
  // capacity left can hold it, or when the GPU has no room for a new chunk.
  Result<Location> Allocate(uint64_t size);
  void Free(const Location& location);
  // Gives back the empty shared chunks kept as spares; returns how many bytes went back.
  uint64_t ReleaseSpares();

  // nullptr for an unknown or retired id.
  const Chunk* chunk(uint32_t id) const;
  Stats stats() const;
  uint64_t chunk_size() const { return chunk_size_; }

 private:
  void Retire(std::map<uint32_t, Chunk>::iterator it);

  DeviceBackend& backend_;
  size_t device_;
  uint64_t granularity_;
  uint64_t chunk_size_;
  PoolBudget* budget_;
  RetireFn on_retire_;
  std::map<uint32_t, Chunk> chunks_;
  uint32_t next_id_ = 1;
  uint64_t reserved_ = 0;
};

}  // namespace depot

#endif  // DEPOT_DAEMON_DEVICE_POOL_H_
