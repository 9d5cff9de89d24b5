#include "daemon/device_source.h"

#include <fmt/format.h>

namespace depot {

Result<SegmentMemory> DeviceSource::Create(uint32_t id, uint64_t size) {
  auto chunk = backend_.CreateChunk(index_, size);
  if (!chunk.ok()) return chunk.status();
  return SegmentMemory{std::move(chunk->fd), chunk->size, fmt::format("{} chunk {}", uuid_, id),
                       chunk->handle, std::move(chunk->read_only_fd)};
}

Result<SegmentMemory> DeviceSource::Adopt(UniqueFd fd, uint64_t size, std::string name) {
  if (size == 0 || size % granularity_ != 0) {
    return Status::InvalidArgument(
        fmt::format("{} bytes is no size of a chunk of {}", size, uuid_));
  }
  auto chunk = backend_.AdoptChunk(index_, std::move(fd), size);
  if (!chunk.ok()) return chunk.status();
  return SegmentMemory{std::move(chunk->fd), chunk->size, std::move(name), chunk->handle,
                       std::move(chunk->read_only_fd)};
}

void DeviceSource::Release(SegmentMemory& memory) {
  DeviceChunk chunk{std::move(memory.fd), memory.handle, memory.size,
                    std::move(memory.read_only_fd)};
  backend_.ReleaseChunk(index_, chunk);
}

}  // namespace depot
