// ShmSource makes the host pool's segments: named POSIX shared-memory segments (Boost.Interprocess,
// mode 0600), each reserved in full with posix_fallocate when it is made, so that a full /dev/shm
// is an error here, never a SIGBUS in a client later. Its static helpers are what the daemon
// knows about /dev/shm: segment names, leftovers of a crashed daemon, free space.
//
// Not thread-safe: the daemon's single loop owns it, through its pool.
#ifndef DEPOT_DAEMON_SHM_SOURCE_H_
#define DEPOT_DAEMON_SHM_SOURCE_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "daemon/segment_source.h"

namespace depot {

class ShmSource : public SegmentSource {
 public:
  // Segment names are name_prefix + id, e.g. "depot-1000-ab12cd-7".
  explicit ShmSource(std::string name_prefix) : name_prefix_(std::move(name_prefix)) {}

  Result<SegmentMemory> Create(uint32_t id, uint64_t size) override;
  // Unlinks the segment's name.
  void Release(SegmentMemory& memory) override;
  // Segments are whole pages, so a client's mapping of one holds no byte of anything else.
  uint64_t granularity() const override { return kPage; }
  std::string_view describe() const override { return ""; }

  // The segment name prefix for a daemon serving `socket_path`: it carries the user and a hash of
  // the path, so a daemon restarted on the same socket finds what a crashed one left, and daemons
  // on other sockets are untouched.
  static std::string NamePrefix(const std::string& socket_path);

  // Unlinks leftover segments whose names start with `prefix` (from a daemon that crashed).
  // Returns how many were removed.
  static int RemoveStale(const std::string& prefix);

  // Free bytes of the filesystem behind POSIX shared memory (/dev/shm).
  static uint64_t ShmAvailable();

  // What a pool of `capacity` bytes can use: whole pages, so every segment's allocator spans it.
  static uint64_t UsableCapacity(uint64_t capacity) { return capacity / kPage * kPage; }

 private:
  static constexpr uint64_t kPage = 4096;

  std::string name_prefix_;
};

}  // namespace depot

#endif  // DEPOT_DAEMON_SHM_SOURCE_H_
