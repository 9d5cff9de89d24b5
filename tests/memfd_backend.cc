#include "tests/memfd_backend.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "daemon/shm_source.h"

namespace depot::test {

Result<std::vector<DeviceInfo>> MemfdBackend::Devices() {
  const char* env = std::getenv("DEPOT_TEST_GPUS");
  int n = env != nullptr ? std::atoi(env) : 2;
  if (const char* file = std::getenv("DEPOT_TEST_GPUS_FILE"); file != nullptr) {
    // Read at each call, so that a test can make GPUs appear while the daemon runs.
    // Then, optionally, how many milliseconds a look takes (a driver slow to initialise).
    std::ifstream in(file);
    if (!(in >> n)) n = 0;
    if (int ms = 0; in >> ms && ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  }
  if (n <= 0) return Status::Unavailable("no stand-in GPUs (DEPOT_TEST_GPUS is 0)");
  std::vector<DeviceInfo> out;
  for (int i = 0; i < n; ++i) {
    out.push_back({fmt::format("GPU-00000000-0000-4000-8000-{:012x}", i + 1),
                   fmt::format("memfd stand-in {}", i), kMemory, uint64_t{2} << 20});
  }
  used_.resize(out.size());
  return out;
}

Result<DeviceChunk> MemfdBackend::CreateChunk(size_t index, uint64_t size) {
  if (index >= used_.size()) {
    return Status::InvalidArgument(fmt::format("no stand-in GPU {}", index));
  }
  if (size > kMemory - used_[index]) {
    return Status::StoreFull(fmt::format("stand-in GPU {} has {} bytes left, not {}", index,
                                         kMemory - used_[index], size));
  }
  // Sealed and with a read-only twin, as host segments are, so that tests can show device chunks
  // keep the same rules where the memory allows them.
  auto memory = SealedMemfd(fmt::format("depot-test-gpu{}-chunk", index), size);
  if (!memory.ok()) return memory.status();
  ++live_;
  used_[index] += size;
  return DeviceChunk{std::move(memory->fd), ++chunks_, size, std::move(memory->read_only_fd)};
}

Result<DeviceChunk> MemfdBackend::AdoptChunk(size_t index, UniqueFd fd, uint64_t size) {
  if (index >= used_.size()) {
    return Status::InvalidArgument(fmt::format("no stand-in GPU {}", index));
  }
  auto memory = AdoptSealedMemfd(std::move(fd), size, "adopted chunk");
  if (!memory.ok()) return memory.status();
  ++live_;
  used_[index] += size;
  return DeviceChunk{std::move(memory->fd), 0, size, std::move(memory->read_only_fd)};
}

void MemfdBackend::ReleaseChunk(size_t index, DeviceChunk& chunk) {
  --live_;
  used_.at(index) -= chunk.size;
  chunk.fd = UniqueFd();
  chunk.read_only_fd = UniqueFd();
}

}  // namespace depot::test
