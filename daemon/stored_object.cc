#include "daemon/stored_object.h"

#include <algorithm>
#include <new>

namespace depot {

StoredObject::StoredObject(std::span<const Location> frames, std::string_view name,
                           std::span<const uint8_t> metadata) {
  if (frames.size() == 1 && name.empty() && metadata.empty()) {
    layout_ = kOneFrame;
    first_frame_ = frames[0];
    return;
  }
  if (frames.empty() && name.empty() && metadata.empty()) return;
  layout_ = kBlock;
  block_ =
      new uint8_t[kHeaderBytes + frames.size() * sizeof(Location) + name.size() + metadata.size()];
  new (block_) BlockHeader{.frame_count = static_cast<uint32_t>(frames.size()),
                           .metadata_size = static_cast<uint32_t>(metadata.size()),
                           .name_size = static_cast<uint16_t>(name.size())};
  std::copy(frames.begin(), frames.end(), BlockFrames());
  uint8_t* extra = block_ + kHeaderBytes + frames.size() * sizeof(Location);
  std::copy(name.begin(), name.end(), extra);
  std::copy(metadata.begin(), metadata.end(), extra + name.size());
}

StoredObject& StoredObject::operator=(StoredObject&& o) noexcept {
  if (this == &o) return *this;
  delete[] Block();
  id = o.id;
  guid = o.guid;
  created_ns = o.created_ns;
  sealed_ns = o.sealed_ns;
  creator = o.creator;
  checksum = o.checksum;
  if (o.layout_ == kBlock) {
    block_ = o.block_;
  } else {
    first_frame_ = o.first_frame_;
  }
  layout_ = o.layout_;
  o.layout_ = kNone;  // the block is ours now
  creator_pid = o.creator_pid;
  creator_uid = o.creator_uid;
  refcount = o.refcount;
  lru_prev_ = o.lru_prev_;
  lru_next_ = o.lru_next_;
  state = o.state;
  residence = o.residence;
  deleted = o.deleted;
  indexed = o.indexed;
  evictable = o.evictable;
  evicted = o.evicted;
  in_lru = o.in_lru;
  has_checksum = o.has_checksum;
  live_ = o.live_;
  return *this;
}

uint64_t StoredObject::size() const {
  uint64_t total = 0;
  for (const Location& f : frames()) total += f.size;
  return total;
}

void StoredObject::Relocate(std::span<const Location> frames) {
  if (layout_ == kBlock) {
    std::copy(frames.begin(), frames.end(), BlockFrames());
  } else if (layout_ == kOneFrame) {
    first_frame_ = frames[0];
  }
}

}  // namespace depot
