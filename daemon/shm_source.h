// ShmSource makes the host pool's segments: sealed memfds. Each is reserved in full when it is
// made, so that memory short at that moment is an error here, never a SIGBUS in a client later;
// each is sealed against shrinking and growing, so that no client holding its descriptor can
// resize it under the daemon and the other clients; and none has a name in /dev/shm, so there is
// nothing to squat and nothing left behind by a crash. Every segment has a read-write descriptor,
// sent to its creators, and a read-only one, sent for gets (see SealedMemfd).
//
// Not thread-safe: the daemon's single loop owns it, through its pool.
#ifndef DEPOT_DAEMON_SHM_SOURCE_H_
#define DEPOT_DAEMON_SHM_SOURCE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "daemon/segment_maker.h"
#include "daemon/segment_source.h"

namespace depot {

// A memfd of `size` bytes named `name` (it shows in /proc/PID/maps as /memfd:NAME), reserved in
// full (or its first `reserve` bytes: the caller reserves the rest before anyone touches it),
// sealed with F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL, and reopened read-only through
// /proc/self/fd: a mapping of the read-only descriptor cannot be made writable (EACCES), whatever
// its holder asks. StoreFull, saying how much memory there is, when it cannot be reserved. With
// `huge`, reserved in full on 2 MiB pages where the kernel gives them (ReservePages).
Result<SegmentMemory> SealedMemfd(const std::string& name, uint64_t size,
                                  std::optional<uint64_t> reserve = std::nullopt,
                                  bool huge = false);

// A memfd a previous daemon made with SealedMemfd, from its descriptor alone (KeptMemory): sealed
// against resizing, of `size` bytes when `size` is not 0, and reopened read-only as SealedMemfd
// does. InvalidArgument, saying why, when it is not one.
Result<SegmentMemory> AdoptSealedMemfd(UniqueFd fd, uint64_t size, std::string name);

// Allocates every page of the first `size` bytes of `fd` through `addr`, a shared writable
// mapping of them (MADV_POPULATE_WRITE; posix_fallocate before Linux 5.14), asking for 2 MiB
// pages first: the kernel gives them where transparent_hugepage/shmem_enabled is "advise" or
// more, to pages allocated through a mapping that asked (pages posix_fallocate allocated are
// small ones under "advise"). StoreFull naming `what` and the memory there is.
Status ReservePages(void* addr, uint64_t size, int fd, const std::string& what);

class ShmSource : public SegmentSource {
 public:
  // Segment names are name_prefix + id, e.g. "depot-1000-ab12cd-7". With a `maker` (which must
  // outlive the source), segments can be made ahead on its thread. With `huge`, segments are made
  // on 2 MiB pages where the kernel gives them (the `hugepages` key).
  explicit ShmSource(std::string name_prefix, SegmentMaker* maker = nullptr, bool huge = false)
      : name_prefix_(std::move(name_prefix)), maker_(maker), huge_(huge) {}

  Result<SegmentMemory> Create(uint32_t id, uint64_t size) override;
  bool CreateAhead(uint32_t id, uint64_t size,
                   std::function<void(Result<SegmentMemory>)> done) override;
  // A memfd that nobody can shrink or grow, reopened read-only as SealedMemfd does.
  Result<SegmentMemory> Adopt(UniqueFd fd, uint64_t size, std::string name) override;
  // Closes the daemon's descriptors; the memory goes when the last client's mapping does.
  void Release(SegmentMemory& memory) override;
  // Segments are whole pages, so a client's mapping of one holds no byte of anything else.
  uint64_t granularity() const override { return kPage; }
  std::string_view describe() const override { return ""; }

  // The segment name prefix for a daemon serving `socket_path`: it carries the user and a hash of
  // the path, so that logs, depotctl and /proc/PID/maps tell one daemon's segments from
  // another's. Names are labels only: no file has them.
  static std::string NamePrefix(const std::string& socket_path);

  // What a pool of `capacity` bytes can use: whole pages, so every segment's allocator spans it.
  static uint64_t UsableCapacity(uint64_t capacity) { return capacity / kPage * kPage; }

 private:
  static constexpr uint64_t kPage = 4096;

  std::string name_prefix_;
  SegmentMaker* maker_;
  bool huge_;
};

}  // namespace depot

#endif  // DEPOT_DAEMON_SHM_SOURCE_H_
