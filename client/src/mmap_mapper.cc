#include "client/src/mmap_mapper.h"

#include <fmt/format.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstring>

namespace depot::internal {

Result<void*> MmapMapper::Map(int fd, uint64_t size, uint32_t pool, bool writable) {
  void* p = ::mmap(nullptr, size, writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    return Status::Unavailable(
        fmt::format("cannot map a segment of {} bytes: {}", size, std::strerror(errno)));
  }
  if (hugepages_ && pool == 0) ::madvise(p, size, MADV_HUGEPAGE);
  return p;
}

Status MmapMapper::Unmap(void* base, uint64_t size) {
  if (::munmap(base, size) == 0) return Status::OK();
  return Status::Unavailable(fmt::format("munmap: {}", std::strerror(errno)));
}

}  // namespace depot::internal
