// depot::Object and depot::Draft (declared in depot/object.h): views of shared memory that hold
// a reference on the daemon (an Object, through its internal::Holding) or an object being
// written (a Draft, through its connection).
#include "depot/object.h"

#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "client/src/checksum.h"
#include "client/src/connection.h"

namespace depot {

namespace {}  // namespace

const Guid& Object::guid() const { return h_->guid; }
size_t Object::frame_count() const { return h_->frames.size(); }
std::span<const std::byte> Object::frame(size_t i) const { return h_->frames.at(i); }
Place Object::place(size_t i) const {
  return h_->places.empty() ? Place::Host() : h_->places.at(i);
}
std::span<const std::byte> Object::metadata() const { return h_->metadata; }
uint64_t Object::size() const { return h_->size; }
std::optional<uint64_t> Object::checksum() const { return h_->checksum; }
uint32_t Object::creator_uid() const { return h_->creator_uid; }
int32_t Object::creator_pid() const { return h_->creator_pid; }

Status Object::Verify() const {
  if (!h_->checksum) {
    return Status::InvalidArgument(
        fmt::format("object {} was sealed without a checksum", h_->guid.ToString()));
  }
  uint64_t now = internal::Checksum(h_->frames);
  if (now != *h_->checksum) {
    return Status::DataLoss(
        fmt::format("object {}: its bytes hash to {:016x}, not the {:016x} "
                    "recorded at seal",
                    h_->guid.ToString(), now, *h_->checksum));
  }
  return Status::OK();
}

Status Object::Populate() const {
  static const uintptr_t kPage = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  for (size_t i = 0; i < h_->frames.size(); ++i) {
    std::span<const std::byte> f = h_->frames[i];
    if (f.empty() || !place(i).host()) continue;
    uintptr_t start = reinterpret_cast<uintptr_t>(f.data()) & ~(kPage - 1);
    uintptr_t end = reinterpret_cast<uintptr_t>(f.data()) + f.size();
    if (::madvise(reinterpret_cast<void*>(start), end - start, MADV_POPULATE_READ) != 0) {
      return Status::Unavailable(
          fmt::format("madvise(MADV_POPULATE_READ): {}", std::strerror(errno)));
    }
  }
  return Status::OK();
}

Draft::Draft(std::shared_ptr<internal::Connection> conn, Guid guid,
             std::vector<std::span<std::byte>> frames, std::vector<uint64_t> segment_uses,
             std::vector<Place> places)
    : conn_(std::move(conn)),
      guid_(guid),
      frames_(std::move(frames)),
      segment_uses_(std::move(segment_uses)),
      places_(std::move(places)) {}

Draft::Draft(Draft&& o) noexcept
    : conn_(std::move(o.conn_)),
      guid_(o.guid_),
      frames_(std::move(o.frames_)),
      segment_uses_(std::move(o.segment_uses_)),
      places_(std::move(o.places_)),
      open_(std::exchange(o.open_, false)),
      checksum_(o.checksum_) {}

Draft& Draft::operator=(Draft&& o) noexcept {
  if (this != &o) {
    if (open_) (void)Abort();  // nobody to tell; a lost connection aborts it in the daemon
    conn_ = std::move(o.conn_);
    guid_ = o.guid_;
    frames_ = std::move(o.frames_);
    segment_uses_ = std::move(o.segment_uses_);
    places_ = std::move(o.places_);
    open_ = std::exchange(o.open_, false);
    checksum_ = o.checksum_;
  }
  return *this;
}

Draft::~Draft() {
  if (open_) (void)Abort();  // nobody to tell; a lost connection aborts it in the daemon
}

Status Draft::Seal(void* cuda_stream) { return Finish(true, cuda_stream); }
Status Draft::Abort() { return Finish(false, nullptr); }

Status Draft::Finish(bool seal, void* cuda_stream) {
  if (!open_) {
    return Status::InvalidArgument(
        fmt::format("object {} was already sealed or aborted", guid_.ToString()));
  }
  if (seal) {
    // Sealing promises the device writes are done; the draft stays open when that fails.
    if (Status synced = conn_->SyncDevices(places_, cuda_stream); !synced.ok()) return synced;
  }
  open_ = false;
  flatbuffers::FlatBufferBuilder fbb(64);
  wire::Guid g = proto::ToWire(guid_);
  flatbuffers::Optional<uint64_t> checksum;
  if (seal && checksum_) checksum = internal::Checksum(frames_);
  fbb.Finish(wire::CreateGuidRequest(fbb, &g, checksum));
  // Unmapped before the daemon hears of it: once sealed, a reader may release and delete the
  // object at once, and a dedicated segment is then given back without a retire notice.
  frames_.clear();
  conn_->DropUses(segment_uses_);
  segment_uses_.clear();
  Status told = conn_->Call(seal ? proto::MsgType::kSeal : proto::MsgType::kAbort, fbb).status();
  conn_->DraftEnded();  // after the seal: a daemon that took it made an object of those bytes
  return told;
}

}  // namespace depot
