#include "tests/memfd_backend.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

namespace depot::test {

Result<std::vector<DeviceInfo>> MemfdBackend::Devices() {
  const char* env = std::getenv("DEPOT_TEST_GPUS");
  int n = env != nullptr ? std::atoi(env) : 2;
  if (n <= 0) return Status::Unavailable("DEPOT_TEST_GPUS=0: no stand-in GPUs");
  std::vector<DeviceInfo> out;
  for (int i = 0; i < n; ++i) {
    out.push_back({fmt::format("GPU-00000000-0000-4000-8000-{:012x}", i + 1),
                   fmt::format("memfd stand-in {}", i), uint64_t{256} << 20, uint64_t{2} << 20});
  }
  return out;
}

Result<DeviceChunk> MemfdBackend::CreateChunk(size_t index, uint64_t size) {
  int fd = ::memfd_create(fmt::format("depot-test-gpu{}-chunk", index).c_str(), MFD_CLOEXEC);
  if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(size)) != 0) {
    if (fd >= 0) ::close(fd);
    return Status::StoreFull(
        fmt::format("memfd chunk of {} bytes: {}", size, std::strerror(errno)));
  }
  ++live_;
  return DeviceChunk{UniqueFd(fd), ++chunks_, size};
}

void MemfdBackend::ReleaseChunk(size_t, DeviceChunk& chunk) {
  --live_;
  chunk.fd = UniqueFd();
}

}  // namespace depot::test
