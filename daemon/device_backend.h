// DeviceBackend is where device pools get their memory: the GPUs a node has, and chunks of one
// GPU's memory, each exported as a file descriptor that a client imports. The daemon uses the
// CUDA backend (VMM chunks with POSIX-fd handles, libcuda loaded at run time); tests without a GPU
// put a stand-in whose chunks are memfd segments behind the same interface.
//
// Not thread-safe: the daemon's single loop owns it.
#ifndef DEPOT_DAEMON_DEVICE_BACKEND_H_
#define DEPOT_DAEMON_DEVICE_BACKEND_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "depot/status.h"
#include "proto/fd_passing.h"

namespace depot {

struct DeviceInfo {
  std::string uuid;  // GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx: stable, unlike ordinals
  std::string name;
  uint64_t memory = 0;       // total bytes
  uint64_t granularity = 0;  // chunk sizes are multiples of it
  // What a user of this GPU should know, said wherever the GPU is listed (empty: nothing).
  std::string caveat;
};

// One chunk of a device's memory.
struct DeviceChunk {
  UniqueFd fd;          // sent to clients, who import it
  uint64_t handle = 0;  // the backend's own (CUmemGenericAllocationHandle)
  uint64_t size = 0;
  // Sent for gets where the backend has one (the tests' memfd stand-in); a CUDA chunk has none:
  // an importer sets its own access to device memory (cuMemSetAccess), so gets send `fd`.
  UniqueFd read_only_fd;
};

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;

  // How clients import chunks: "cuda" or "memfd-test".
  virtual std::string kind() const = 0;

  // The usable devices; Unavailable with the reason (no driver, no GPU, no VMM support) when
  // there are none.
  virtual Result<std::vector<DeviceInfo>> Devices() = 0;

  // A chunk of `size` bytes (a multiple of the device's granularity) on device `index` of
  // Devices(). StoreFull when the device has no room.
  virtual Result<DeviceChunk> CreateChunk(size_t index, uint64_t size) = 0;

  // A chunk of `size` bytes on device `index` that a previous daemon made and kept, from its
  // exported descriptor alone (KeptMemory): the daemon holds no allocation handle for it (`handle`
  // 0), and the memory stays while that descriptor or a client's import does.
  virtual Result<DeviceChunk> AdoptChunk(size_t index, UniqueFd fd, uint64_t size) = 0;

  // Gives a chunk back (an adopted one: closes its descriptor). Clients that imported it keep
  // their mappings until they unmap.
  virtual void ReleaseChunk(size_t index, DeviceChunk& chunk) = 0;
};

// The CUDA backend, or null with `why` set when this build has no CUDA support.
std::unique_ptr<DeviceBackend> MakeCudaBackend(std::string* why);

}  // namespace depot

#endif  // DEPOT_DAEMON_DEVICE_BACKEND_H_
