#include "proto/object_rules.h"

#include <fmt/format.h>

namespace depot::proto {

Status CheckObjectShape(uint64_t frames, uint64_t metadata, uint64_t name,
                        const ObjectLimits& limits) {
  if (frames == 0 || frames > limits.max_frames) {
    return Status::InvalidArgument(
        fmt::format("an object has 1 to {} frames, not {}", limits.max_frames, frames));
  }
  if (metadata > limits.max_metadata) {
    return Status::InvalidArgument(
        fmt::format("metadata of {} bytes exceeds the limit of {} bytes (max_metadata)", metadata,
                    limits.max_metadata));
  }
  if (name > kMaxNameSize) {
    return Status::InvalidArgument(
        fmt::format("name of {} bytes exceeds the limit of {} bytes", name, kMaxNameSize));
  }
  return Status::OK();
}

}  // namespace depot::proto
