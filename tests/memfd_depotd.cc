// A depotd for tests on machines without a GPU: the real daemon, with device pools whose
// "GPUs" are stand-ins and whose chunks are memfd segments. It exercises the device protocol,
// sub-allocation in chunks, chunk fd passing, the client's chunk cache and cleanup; it is not GPU
// coverage (that is the [cuda] tests, on a machine with a GPU).
//
// $DEPOT_TEST_GPUS is the number of stand-in GPUs (default 2), each of 256 MiB.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "daemon/daemon_main.h"

namespace depot {
namespace {

class MemfdBackend : public DeviceBackend {
 public:
  std::string kind() const override { return "memfd-test"; }

  Result<std::vector<DeviceInfo>> Devices() override {
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

  Result<DeviceChunk> CreateChunk(size_t index, uint64_t size) override {
    int fd = ::memfd_create(fmt::format("depot-test-gpu{}-chunk", index).c_str(), MFD_CLOEXEC);
    if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(size)) != 0) {
      if (fd >= 0) ::close(fd);
      return Status::StoreFull(fmt::format("memfd chunk of {} bytes: {}", size, std::strerror(errno)));
    }
    return DeviceChunk{UniqueFd(fd), ++chunks_, size};
  }

  void ReleaseChunk(size_t, DeviceChunk& chunk) override { chunk.fd = UniqueFd(); }

 private:
  uint64_t chunks_ = 0;
};

}  // namespace
}  // namespace depot

int main(int argc, char** argv) {
  return depot::DaemonMain(argc, argv, [](std::string*) {
    return std::make_unique<depot::MemfdBackend>();
  });
}
