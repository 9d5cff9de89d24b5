// Catalog is a namespace's list of sealed objects in memory (host segments and device chunks, a
// device frame under its pool's number in the daemon that wrote it), kept in a memfd of its own so
// that it outlives the daemon with the segments it describes (see KeptMemory): a new depotd reads
// it and serves the same objects from the same pages. Only the daemon ever holds its descriptor.
//
// It is written so that a daemon killed at any instruction leaves it readable: each object has an
// entry at a fixed place (its ObjectTable record number), whose state word is the last thing
// written when it is recorded and the first thing cleared when it goes. An entry also carries a
// hash of everything else it says (and of its extra bytes: more frames, the name, the metadata),
// seeded with a number drawn when the catalog was made, so a torn entry, or a stale one whose
// extra bytes were since reused, never reads as an object. The layout is versioned (kVersion):
// a catalog of another version is refused whole, and the daemon falls back to what the spill
// directory holds.
//
// Layout: a 4 KiB header, then kMaxEntries entries of 128 bytes, then the extra bytes, which an
// Allocator hands out in 32-byte units. The file is sparse: only the pages written take memory.
//
// Not thread-safe: the daemon's single loop owns it.
#ifndef DEPOT_DAEMON_CATALOG_H_
#define DEPOT_DAEMON_CATALOG_H_

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/unique_fd.h"
#include "daemon/allocator.h"
#include "daemon/object_table.h"

namespace depot {

// One object a catalog holds, as read back.
struct CatalogObject {
  NewObject object;
  SpilledFacts facts;
};

class Catalog {
 public:
  static constexpr uint32_t kVersion = 1;
  static constexpr uint64_t kMaxEntries = uint64_t{1} << 26;   // record numbers of a table
  static constexpr uint64_t kExtraBytes = uint64_t{64} << 30;  // frames, names and metadata

  // A new, empty catalog for namespace `key`. Unavailable when its memfd cannot be made.
  static Result<std::unique_ptr<Catalog>> Create(uint32_t key);
  // A catalog a previous daemon left, for namespace `key`. InvalidArgument, saying why, when it
  // is not one (another version, another namespace, too small).
  static Result<std::unique_ptr<Catalog>> Open(UniqueFd fd, uint32_t key);
  ~Catalog();
  Catalog(const Catalog&) = delete;
  Catalog& operator=(const Catalog&) = delete;

  // Records `o` (sealed, in memory) at entry `slot`, replacing what was there. False, recording
  // nothing, when it cannot be kept: a slot past kMaxEntries, or no room left for its extra bytes.
  bool Record(uint32_t slot, const StoredObject& o);
  // The object at entry `slot` is gone (nothing when there is none).
  void Erase(uint32_t slot);

  // Every entry that reads as a whole object, in slot order; `torn` counts entries marked in use
  // whose contents do not check out (a daemon killed while writing one, or damage). Read once, by
  // the daemon that adopts it: it records what it adopts in a catalog of its own.
  std::vector<CatalogObject> Read(uint64_t* torn) const;

  int fd() const { return fd_.get(); }
  uint32_t key() const { return key_; }
  uint64_t entries() const { return entries_; }  // recorded now

  struct Entry;  // one object, at a fixed place (defined in catalog.cc)

 private:
  Catalog(UniqueFd fd, uint8_t* base, uint32_t key, uint64_t seed);
  Entry& EntryAt(uint32_t slot) const;
  uint64_t Hash(const Entry& e) const;
  std::span<const uint8_t> Extra(const Entry& e) const;

  UniqueFd fd_;
  uint8_t* base_;
  uint32_t key_;
  uint64_t seed_;
  Allocator extra_;
  uint64_t entries_ = 0;
};

}  // namespace depot

#endif  // DEPOT_DAEMON_CATALOG_H_
