// depot::Object (a sealed object this process reads) and depot::Draft (an object this process is
// writing). Both point straight into shared memory: no bytes are copied to hand them out.
#ifndef DEPOT_OBJECT_H_
#define DEPOT_OBJECT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "depot/export.h"
#include "depot/guid.h"
#include "depot/status.h"

namespace depot {

// Where a frame lives: host memory, or the memory of the GPU with this UUID (as
// Client::DevicePools lists; a UUID, not an ordinal, since CUDA_VISIBLE_DEVICES renumbers).
struct Place {
  std::string gpu;  // empty: the host

  static Place Host() { return {}; }
  static Place Gpu(std::string uuid) { return {std::move(uuid)}; }
  bool host() const { return gpu.empty(); }
  bool operator==(const Place&) const = default;
};

namespace internal {
class Connection;
class Link;
struct Holding;
}  // namespace internal

// A sealed object, read-only and zero-copy: each frame is a view of the daemon's shared memory,
// mapped read-only into this process (writing through it faults). The process holds a reference
// on the object while any copy of this Object lives, so its bytes stay valid even if the object
// is deleted meanwhile; the last copy's destruction releases it (the release rides with this
// connection's next request, or goes on its own within a millisecond). Copies are cheap (shared).
// Thread-safe for reading.
class DEPOT_API Object {
 public:
  const Guid& guid() const;
  size_t frame_count() const;
  // The bytes of frame i (i < frame_count()). For a frame on a GPU (see place) this is a device
  // address range, mapped into this process's CUDA address space: hand it to kernels or copies,
  // never read it on the host.
  std::span<const std::byte> frame(size_t i) const;
  Place place(size_t i) const;
  std::span<const std::byte> metadata() const;
  // Total bytes over all frames.
  uint64_t size() const;

  // The checksum (XXH3-64 of every frame's bytes, in order) recorded at seal, when the creator
  // asked for one (CreateOptions::checksum; host frames only).
  std::optional<uint64_t> checksum() const;

  // Who created the object: its user and process, as the kernel vouched for them when the
  // creator connected. A GUID proposed in advance belongs to whoever creates it first, so a
  // consumer of such a GUID checks the creator before it trusts the bytes.
  uint32_t creator_uid() const;
  int32_t creator_pid() const;

  // Hashes the bytes again, here and without copying them, and compares with checksum(). OK when
  // they match; DataLoss when they do not; InvalidArgument when no checksum was recorded.
  Status Verify() const;

  // Fills this process's page tables for every host frame in one call per frame
  // (MADV_POPULATE_READ), so that the first read of each page does not fault. Device frames are
  // skipped: they are not host memory. Optional: it only moves the cost of first touch to here.
  Status Populate() const;

 private:
  friend class internal::Connection;
  explicit Object(std::shared_ptr<const internal::Holding> h) : h_(std::move(h)) {}
  std::shared_ptr<const internal::Holding> h_;
};

// An object being created: its frames are writable views of shared memory, mapped read-write
// into this process only. Seal() publishes it (immutable from then on); Abort() discards it. A
// Draft destroyed without either is aborted. Move-only; one thread at a time.
class DEPOT_API Draft {
 public:
  Draft(Draft&&) noexcept;
  Draft& operator=(Draft&&) noexcept;
  ~Draft();

  const Guid& guid() const { return guid_; }
  size_t frame_count() const { return frames_.size(); }
  // Frame i, writable; on a GPU, a device address range (see Object::frame).
  std::span<std::byte> frame(size_t i) const { return frames_[i]; }
  Place place(size_t i) const { return places_.empty() ? Place::Host() : places_[i]; }

  // Makes the object visible to every process and wakes those waiting for it (with the checksum
  // of its bytes when created with CreateOptions::checksum). The frames must not be written
  // afterwards. With frames on a CUDA GPU, seal first waits for `cuda_stream` (a CUstream; null:
  // the legacy default stream) to finish, so that the device writes queued on it are done
  // before anyone can read them; writes queued on other streams are the caller's to finish.
  // InvalidArgument when already sealed or aborted.
  Status Seal(void* cuda_stream = nullptr);

  // Discards the object and frees its memory. InvalidArgument when already sealed or aborted.
  Status Abort();

 private:
  friend class internal::Connection;
  friend class Client;
  Draft(std::shared_ptr<internal::Connection> conn, Guid guid,
        std::vector<std::span<std::byte>> frames, std::vector<uint64_t> segment_uses,
        std::vector<Place> places);
  Status Finish(bool seal, void* cuda_stream);

  std::shared_ptr<internal::Connection> conn_;
  Guid guid_;
  std::vector<std::span<std::byte>> frames_;
  std::vector<uint64_t> segment_uses_;
  std::vector<Place> places_;  // empty: every frame on the host
  bool open_ = true;
  bool checksum_ = false;  // record one at seal
};

}  // namespace depot

#endif  // DEPOT_OBJECT_H_
