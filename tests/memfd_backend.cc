#include "tests/memfd_backend.h"

#include <cstdlib>

#include <fmt/format.h>

#include "daemon/shm_source.h"

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
  // Sealed and with a read-only twin, as host segments are, so that tests can show device chunks
  // keep the same rules where the memory allows them.
  auto memory = SealedMemfd(fmt::format("depot-test-gpu{}-chunk", index), size);
  if (!memory.ok()) return memory.status();
  ++live_;
  return DeviceChunk{std::move(memory->fd), ++chunks_, size, std::move(memory->read_only_fd)};
}

void MemfdBackend::ReleaseChunk(size_t, DeviceChunk& chunk) {
  --live_;
  chunk.fd = UniqueFd();
  chunk.read_only_fd = UniqueFd();
}

}  // namespace depot::test
