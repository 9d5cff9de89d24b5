// StoredObject: one object as the daemon keeps it, a record of the object table (ObjectTable),
// with its frames inline or in the one allocation it shares with its name and metadata; and the
// names the table gives sessions, objects, their states and where their bytes are.
#ifndef DEPOT_DAEMON_STORED_OBJECT_H_
#define DEPOT_DAEMON_STORED_OBJECT_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "daemon/location.h"
#include "depot/guid.h"

namespace depot {

using SessionId = uint64_t;
using ObjectId = uint64_t;

enum class ObjectState : uint8_t { kCreating, kSealed };

// Where a sealed object's bytes are (see the class comment of ObjectTable).
enum class Residence : uint8_t { kMemory, kSpilling, kDisk, kRestoring, kLost };

// One object as the daemon keeps it. Laid out for a store of millions of small objects (104
// bytes): a single frame is kept inline; several frames, a name or metadata go together into
// one allocation, made only when the object has one of them, which also holds their counts.
class StoredObject {
 public:
  StoredObject() = default;
  StoredObject(std::span<const Location> frames, std::string_view name,
               std::span<const uint8_t> metadata);
  StoredObject(StoredObject&& o) noexcept { *this = std::move(o); }
  StoredObject& operator=(StoredObject&& o) noexcept;
  StoredObject(const StoredObject&) = delete;
  StoredObject& operator=(const StoredObject&) = delete;
  ~StoredObject() { delete[] Block(); }

  std::span<const Location> frames() const {
    if (layout_ == kOneFrame) return {&first_frame_, 1};
    if (layout_ == kNone) return {};
    return {BlockFrames(), Header().frame_count};
  }
  std::string_view name() const {
    if (layout_ != kBlock) return {};
    return {reinterpret_cast<const char*>(BlockExtra()), Header().name_size};
  }
  std::span<const uint8_t> metadata() const {
    if (layout_ != kBlock) return {};
    return {BlockExtra() + Header().name_size, Header().metadata_size};
  }
  uint64_t size() const;
  // Points the object at new memory of the same frame sizes (a restore).
  void Relocate(std::span<const Location> frames);

  ObjectId id = 0;
  Guid guid;
  int64_t created_ns = 0;  // wall clock, for people
  int64_t sealed_ns = 0;
  SessionId creator = 0;
  uint64_t checksum = 0;  // XXH3-64 of the bytes, recorded at seal when has_checksum

 private:
  // What the block starts with; its frames follow (then the name, then the metadata).
  struct BlockHeader {
    uint32_t frame_count;
    uint32_t metadata_size;
    uint16_t name_size;
  };
  static constexpr size_t kHeaderBytes = 16;  // keeps the frames after it aligned
  enum Layout { kNone, kOneFrame, kBlock };   // where the frames are (unscoped: fits 2 bits)
  uint8_t* Block() const { return layout_ == kBlock ? block_ : nullptr; }
  const BlockHeader& Header() const { return *reinterpret_cast<const BlockHeader*>(block_); }
  Location* BlockFrames() const { return reinterpret_cast<Location*>(block_ + kHeaderBytes); }
  const uint8_t* BlockExtra() const {
    return block_ + kHeaderBytes + Header().frame_count * sizeof(Location);
  }

  union {
    Location first_frame_{};  // kOneFrame
    uint8_t* block_;          // kBlock: owned
  };

 public:
  int32_t creator_pid = 0;
  uint32_t creator_uid = 0;
  uint32_t refcount = 0;  // sessions holding it (at most one per connection: cannot wrap)

 private:
  friend class ObjectTable;
  // Neighbours on the LRU the object is on (in_lru), or the next free record (a free one).
  uint32_t lru_prev_ = 0;
  uint32_t lru_next_ = 0;

 public:
  ObjectState state = ObjectState::kCreating;
  Residence residence = Residence::kMemory;
  bool deleted : 1 = false;  // gone from the index, waiting for its last reference
  bool indexed : 1 = false;  // was in the shared index once: a reference slot may hold it
  bool evictable : 1 = false;
  bool evicted : 1 = false;  // freed to make room, not because it was deleted
  bool in_lru : 1 = false;
  bool has_checksum : 1 = false;
  bool owner_scoped : 1 = false;  // lives no longer than its creator's connection (OwnerScopes)

 private:
  // (in the byte of the flags above)
  Layout layout_ : 2 = kNone;
  bool live_ : 1 = false;  // a record of ObjectTable in use
};

}  // namespace depot

#endif  // DEPOT_DAEMON_STORED_OBJECT_H_
