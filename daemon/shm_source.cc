#include "daemon/shm_source.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <boost/interprocess/shared_memory_object.hpp>
#include <fmt/format.h>

#include "depot/units.h"

namespace depot {
namespace bip = boost::interprocess;

namespace {

constexpr const char* kShmDir = "/dev/shm";

}  // namespace

Result<SegmentMemory> ShmSource::Create(uint32_t id, uint64_t size) {
  std::string name = name_prefix_ + std::to_string(id);
  bip::shared_memory_object shm;
  try {
    shm = bip::shared_memory_object(bip::create_only, name.c_str(), bip::read_write,
                                    bip::permissions(0600));
    shm.truncate(static_cast<bip::offset_t>(size));
  } catch (const bip::interprocess_exception& e) {
    bip::shared_memory_object::remove(name.c_str());
    return Status::StoreFull(fmt::format("cannot create shared-memory segment {}/{} of {}: {}",
                                         kShmDir, name, FormatBytes(size), e.what()));
  }
  // Reserve every page now: a tmpfs that runs out later would SIGBUS the client that touches it.
  int err = ::posix_fallocate(shm.get_mapping_handle().handle, 0, static_cast<off_t>(size));
  if (err != 0) {
    bip::shared_memory_object::remove(name.c_str());
    return Status::StoreFull(
        fmt::format("cannot reserve {} in {} for a new segment: {} ({} free there); enlarge {} "
                    "(mount -o remount,size=... {}) or lower the capacity",
                    FormatBytes(size), kShmDir, std::strerror(err), FormatBytes(ShmAvailable()),
                    kShmDir, kShmDir));
  }
  // The segment outlives the Boost object, which closes its own descriptor.
  UniqueFd fd(::fcntl(shm.get_mapping_handle().handle, F_DUPFD_CLOEXEC, 0));
  if (!fd.valid()) {
    bip::shared_memory_object::remove(name.c_str());
    return Status::Unavailable(fmt::format("cannot keep shared-memory segment {}/{}: {}", kShmDir,
                                           name, std::strerror(errno)));
  }
  return SegmentMemory{std::move(fd), size, std::move(name)};
}

void ShmSource::Release(SegmentMemory& memory) {
  bip::shared_memory_object::remove(memory.name.c_str());
  memory.fd.reset();
}

std::string ShmSource::NamePrefix(const std::string& socket_path) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (char c : socket_path) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  return fmt::format("depot-{}-{:012x}-", ::getuid(), h & 0xffffffffffffull);
}

int ShmSource::RemoveStale(const std::string& prefix) {
  DIR* dir = ::opendir(kShmDir);
  if (dir == nullptr) return 0;
  int removed = 0;
  while (dirent* e = ::readdir(dir)) {
    std::string_view name(e->d_name);
    if (name.starts_with(prefix) && bip::shared_memory_object::remove(e->d_name)) ++removed;
  }
  ::closedir(dir);
  return removed;
}

uint64_t ShmSource::ShmAvailable() {
  struct statvfs st {};
  if (::statvfs(kShmDir, &st) != 0) return 0;
  return static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
}

}  // namespace depot
