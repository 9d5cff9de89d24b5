// What memory this machine, and this process's cgroup, have: for sizing the pools and for saying
// why a segment could not be reserved.
#ifndef DEPOT_COMMON_SYSTEM_MEMORY_H_
#define DEPOT_COMMON_SYSTEM_MEMORY_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace depot {

// Physical memory of this machine in bytes.
uint64_t PhysicalMemory();

// The memory limit of this process's cgroup (memory.max in cgroup v2, memory.limit_in_bytes in
// v1), or nullopt when it has none ("max") or it cannot be read.
std::optional<uint64_t> CgroupMemoryLimit();

// What memory.max says: bytes, or nullopt for "max" or anything unreadable.
std::optional<uint64_t> ParseCgroupMemoryMax(std::string_view text);

// Bytes this process can still reserve: the kernel's MemAvailable, at most what its cgroup's
// limit leaves (memory.max - memory.current).
uint64_t AvailableMemory();

// "1.2 GiB available, cgroup limit 4.0 GiB" (or "no cgroup limit"), for messages.
std::string DescribeAvailableMemory();

// Where the kernel says whether shared memory (memfds: segments, the index) gets huge pages.
inline constexpr const char* kShmemHugePagesPath =
    "/sys/kernel/mm/transparent_hugepage/shmem_enabled";
// That policy: the bracketed word ("advise" in "always within_size [advise] never deny force"),
// or "" when it cannot be read.
std::string ShmemHugePagePolicy();
// The bracketed word of `text`, as the file says it; "" when there is none.
std::string ParseShmemHugePagePolicy(std::string_view text);
// Whether that policy gives huge pages to a mapping that asks for them.
bool ShmemHugePagesAllowed();

}  // namespace depot

#endif  // DEPOT_COMMON_SYSTEM_MEMORY_H_
