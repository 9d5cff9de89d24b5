#include "daemon/shm_source.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/shared_mapping.h"
#include "common/system_memory.h"
#include "depot/units.h"

namespace depot {

namespace {

Status NotReserved(uint64_t size, const std::string& what, int err) {
  return Status::StoreFull(fmt::format(
      "cannot reserve {} of memory for {}: {} ({}); lower the capacity or give the daemon more "
      "memory",
      FormatBytes(size), what, std::strerror(err), DescribeAvailableMemory()));
}

}  // namespace

Status ReservePages(void* addr, uint64_t size, int fd, const std::string& what) {
  (void)::madvise(addr, size, MADV_HUGEPAGE);
  // In parts: the kernel holds the process's mapping lock for a part's faults, and a thread
  // that maps or unmaps meanwhile (the loop, while the helper thread reserves a bigger index)
  // waits for the whole part.
  constexpr uint64_t kPart = uint64_t{4} << 20;
  int err = 0;
  for (uint64_t at = 0; at < size && err == 0; at += kPart) {
    err = ::madvise(static_cast<char*>(addr) + at, std::min(kPart, size - at),
                    MADV_POPULATE_WRITE) == 0
              ? 0
              : errno;
  }
  if (err == EINVAL) err = ::posix_fallocate(fd, 0, static_cast<off_t>(size));  // before 5.14
  return err == 0 ? Status::OK() : NotReserved(size, what, err);
}

Result<SegmentMemory> SealedMemfd(const std::string& name, uint64_t size,
                                  std::optional<uint64_t> reserve, bool huge) {
  // Boost.Interprocess makes only named POSIX objects, which cannot carry seals; memfd_create can.
  UniqueFd fd(::memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd.valid()) {
    return Status::Unavailable(
        fmt::format("cannot create segment {}: memfd_create: {}", name, std::strerror(errno)));
  }
  // A memfd is born mode 0777: whoever holds any descriptor of it could reopen it read-write
  // through /proc/self/fd/N. Mode 0600 leaves that to the daemon's own user (and root).
  if (::fchmod(fd.get(), 0600) != 0) {
    return Status::Unavailable(
        fmt::format("cannot restrict segment {}: {}", name, std::strerror(errno)));
  }
  if (::ftruncate(fd.get(), static_cast<off_t>(size)) != 0) {
    return Status::StoreFull(fmt::format("cannot size segment {} to {}: {}", name,
                                         FormatBytes(size), std::strerror(errno)));
  }
  // Reserve every page now: memory that runs out later would SIGBUS whoever touches the page.
  // (A caller that reserves less reserves the rest before anyone may touch it.) On huge pages
  // through a mapping of its own, which goes again: the pages stay with the memfd.
  uint64_t reserved = reserve.value_or(size);
  if (huge && reserved == size && size > 0) {
    auto map = SharedMapping::Map(fd.get(), size, true, "segment");
    if (!map.ok()) return map.status();
    if (Status st = ReservePages(map->words(), size, fd.get(), "segment " + name); !st.ok()) {
      return st;
    }
  } else if (int err =
                 reserved == 0 ? 0 : ::posix_fallocate(fd.get(), 0, static_cast<off_t>(reserved));
             err != 0) {
    return NotReserved(size, "segment " + name, err);
  }
  if (::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    return Status::Unavailable(
        fmt::format("cannot seal segment {}: {}", name, std::strerror(errno)));
  }
  // A descriptor opened O_RDONLY cannot back a writable shared mapping, nor be made to.
  UniqueFd read_only(
      ::open(fmt::format("/proc/self/fd/{}", fd.get()).c_str(), O_RDONLY | O_CLOEXEC));
  if (!read_only.valid()) {
    return Status::Unavailable(
        fmt::format("cannot reopen segment {} read-only: {}", name, std::strerror(errno)));
  }
  SegmentMemory memory{std::move(fd), size, name, 0, UniqueFd()};
  memory.read_only_fd = std::move(read_only);
  return memory;
}

Result<SegmentMemory> AdoptSealedMemfd(UniqueFd fd, uint64_t size, std::string name) {
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0) {
    return Status::InvalidArgument("not a segment");
  }
  if (size != 0 && static_cast<uint64_t>(st.st_size) != size) {
    return Status::InvalidArgument(fmt::format("{} bytes, not {}", st.st_size, size));
  }
  int seals = ::fcntl(fd.get(), F_GET_SEALS);
  if (seals < 0 || (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW)) {
    return Status::InvalidArgument("not sealed against resizing");
  }
  UniqueFd read_only(
      ::open(fmt::format("/proc/self/fd/{}", fd.get()).c_str(), O_RDONLY | O_CLOEXEC));
  if (!read_only.valid()) return Status::Unavailable("cannot reopen it read-only");
  return SegmentMemory{std::move(fd), static_cast<uint64_t>(st.st_size), std::move(name), 0,
                       std::move(read_only)};
}

Result<SegmentMemory> ShmSource::Adopt(UniqueFd fd, uint64_t size, std::string name) {
  return AdoptSealedMemfd(std::move(fd), size, std::move(name));
}

Result<SegmentMemory> ShmSource::Create(uint32_t id, uint64_t size) {
  return SealedMemfd(name_prefix_ + std::to_string(id), size, std::nullopt, huge_);
}

bool ShmSource::CreateAhead(uint32_t id, uint64_t size,
                            std::function<void(Result<SegmentMemory>)> done) {
  if (maker_ == nullptr) return false;
  maker_->Make(name_prefix_ + std::to_string(id), size, std::move(done), huge_);
  return true;
}

void ShmSource::Release(SegmentMemory& memory) {
  memory.fd.reset();
  memory.read_only_fd.reset();
}

std::string ShmSource::NamePrefix(const std::string& socket_path) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (char c : socket_path) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  return fmt::format("depot-{}-{:012x}-", ::getuid(), h & 0xffffffffffffull);
}

}  // namespace depot
