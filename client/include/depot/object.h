// depot::Object (a sealed object this process reads) and depot::Draft (an object this process is
// writing). Both point straight into shared memory: no bytes are copied to hand them out.
#ifndef DEPOT_OBJECT_H_
#define DEPOT_OBJECT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "depot/guid.h"
#include "depot/status.h"

namespace depot {

namespace internal {
class Connection;
struct Holding;
}  // namespace internal

// A sealed object, read-only and zero-copy: each frame is a view of the daemon's shared memory,
// mapped read-only into this process (writing through it faults). The process holds a reference
// on the object while any copy of this Object lives, so its bytes stay valid even if the object
// is deleted meanwhile; the last copy's destruction releases it (the release rides with this
// connection's next request, or goes on its own within a millisecond). Copies are cheap (shared).
// Thread-safe for reading.
class Object {
 public:
  const Guid& guid() const;
  size_t frame_count() const;
  // The bytes of frame i (i < frame_count()).
  std::span<const std::byte> frame(size_t i) const;
  std::span<const std::byte> metadata() const;
  // Total bytes over all frames.
  uint64_t size() const;

  // The checksum (XXH3-64 of every frame's bytes, in order) recorded at seal, when the creator
  // asked for one (CreateOptions::checksum).
  std::optional<uint64_t> checksum() const;

  // Hashes the bytes again, here and without copying them, and compares with checksum(). OK when
  // they match; DataLoss when they do not; InvalidArgument when no checksum was recorded.
  Status Verify() const;

  // Fills this process's page tables for every frame in one call per frame
  // (MADV_POPULATE_READ), so that the first read of each page does not fault. Optional: it only
  // moves the cost of first touch to here.
  Status Populate() const;

 private:
  friend class internal::Connection;
  explicit Object(std::shared_ptr<const internal::Holding> h) : h_(std::move(h)) {}
  std::shared_ptr<const internal::Holding> h_;
};

// An object being created: its frames are writable views of shared memory, mapped read-write
// into this process only. Seal() publishes it (immutable from then on); Abort() discards it. A
// Draft destroyed without either is aborted. Move-only; one thread at a time.
class Draft {
 public:
  Draft(Draft&&) noexcept;
  Draft& operator=(Draft&&) noexcept;
  ~Draft();

  const Guid& guid() const { return guid_; }
  size_t frame_count() const { return frames_.size(); }
  std::span<std::byte> frame(size_t i) const { return frames_[i]; }

  // Makes the object visible to every process and wakes those waiting for it (with the checksum
  // of its bytes when created with CreateOptions::checksum). The frames must not be written
  // afterwards. InvalidArgument when already sealed or aborted.
  Status Seal();

  // Discards the object and frees its memory. InvalidArgument when already sealed or aborted.
  Status Abort();

 private:
  friend class internal::Connection;
  friend class Client;
  Draft(std::shared_ptr<internal::Connection> conn, Guid guid, std::vector<std::span<std::byte>> frames,
        std::vector<uint32_t> segment_uses);
  Status Finish(bool seal);

  std::shared_ptr<internal::Connection> conn_;
  Guid guid_;
  std::vector<std::span<std::byte>> frames_;
  std::vector<uint32_t> segment_uses_;
  bool open_ = true;
  bool checksum_ = false;  // record one at seal
};

}  // namespace depot

#endif  // DEPOT_OBJECT_H_
