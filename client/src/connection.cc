#include "client/src/connection.h"

#include <fmt/format.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

#include "client/src/daemon_trust.h"
#include "client/src/link.h"
#include "client/src/new_holding.h"
#include "common/unix_socket.h"
#include "common/users.h"
#include "proto/index_layout.h"

namespace depot::internal {

Holding::~Holding() { conn->Forget(*this); }

namespace {

// Why a connect to `path` failed with EACCES or EPERM: the socket (or its directory) is closed to
// this user, which the service's socket is to anyone outside its group. Names the group that
// admits, found on the socket or, when its directory cannot even be searched, on the directory.
Status ConnectDenied(const std::string& path, int error) {
  struct stat st {};
  std::string dir = path.substr(0, path.find_last_of('/') + 1);
  bool known = ::stat(path.c_str(), &st) == 0 || (!dir.empty() && ::stat(dir.c_str(), &st) == 0);
  std::string group = known ? GroupName(st.st_gid) : "depot";
  return Status::PermissionDenied(fmt::format(
      "permission denied connecting to depotd at {} ({}): only members of the group {} may use "
      "it; ask an administrator to add you (`sudo usermod -aG {} $USER`), then log in again",
      path, std::strerror(error), group, group));
}

}  // namespace

Connection::Connection(UniqueFd fd, std::string path)
    : channel_(std::move(fd), std::move(path), segments_) {}

Result<std::shared_ptr<Connection>> Connection::Open(const std::string& path,
                                                     const std::string& name,
                                                     std::optional<uid_t> trusted_daemon_uid) {
  UniqueFd fd = ConnectUnix(path);
  if (!fd.valid() && errno == ENAMETOOLONG) {
    return Status::InvalidArgument(fmt::format("socket path {} is too long", path));
  }
  if (!fd.valid() && (errno == EACCES || errno == EPERM)) return ConnectDenied(path, errno);
  if (!fd.valid()) {
    return Status::Unavailable(fmt::format(
        "no depotd is listening at {} ({}): is the service running (`systemctl status depotd`)? "
        "Or start one with `depotd --socket {}`, or point DEPOT_SOCKET at the right socket",
        path, std::strerror(errno), path));
  }
  if (Status trusted = CheckDaemon(fd.get(), path, trusted_daemon_uid); !trusted.ok()) {
    return trusted;
  }
  std::shared_ptr<Connection> conn(new Connection(std::move(fd), path));
  conn->trusted_daemon_uid_ = trusted_daemon_uid;
  flatbuffers::FlatBufferBuilder fbb(128);
  auto client_name = fbb.CreateString(name);
  fbb.Finish(wire::CreateHelloRequest(fbb, proto::kProtocolVersion, client_name,
                                      index::kIndexLayout.version));
  auto reply = conn->Call(proto::MsgType::kHello, fbb);
  if (!reply.ok()) return reply.status();
  const auto* hello = proto::Body<wire::HelloReply>(reply->body);
  conn->session_id_ = hello->session_id();
  conn->resumes_ = hello->resumes();
  conn->daemon_pid_ = hello->daemon_pid();
  conn->segments_.set_hugepages(hello->hugepages());
  conn->lease_.set_offered(hello->leases());
  if (hello->max_frames() != 0) conn->object_limits_.max_frames = hello->max_frames();
  if (hello->max_metadata() != 0) conn->object_limits_.max_metadata = hello->max_metadata();
  conn->pools_.Set(DevicePoolsFromWire(hello->device_pools()),
                   hello->devices_unavailable() ? hello->devices_unavailable()->str() : "");
  // The fds: the index's and the slots' when it has an index, then the put ring's when it has one.
  size_t index_fds = hello->index_sets() > 0 ? 2 : 0;
  size_t ring_fds = hello->put_ring_bytes() > 0 ? 1 : 0;
  if (reply->index_fds.size() != index_fds + ring_fds) {
    return Status::ProtocolError(fmt::format("depotd's hello came with {} descriptors, not {}",
                                             reply->index_fds.size(), index_fds + ring_fds));
  }
  if (ring_fds == 1) {
    auto ring = PutRing::Map(reply->index_fds[index_fds], hello->put_ring_bytes());
    if (!ring.ok()) return ring.status();
    conn->lease_.set_ring(std::move(*ring));
  }
  if (index_fds == 2) {
    auto index = IndexReader::Map(reply->index_fds[0], hello->index_sets(), hello->index_arena());
    if (!index.ok()) return index.status();
    auto slots = SlotTable::Map(reply->index_fds[1], hello->slot_count());
    if (!slots.ok()) return slots.status();
    conn->indexes_.push_back(std::make_unique<IndexReader>(std::move(*index)));
    conn->index_.store(conn->indexes_.back().get(), std::memory_order_release);
    conn->index_generation_ = hello->index_generation();
    conn->slots_.emplace(std::move(*slots));
  }
  return conn;
}

std::optional<Object> Connection::Cached(const Guid& guid) {
  if (forked()) return std::nullopt;  // the caller's request then says why
  std::shared_ptr<Holding> h = cache_.Find(guid);
  if (!h) return std::nullopt;
  return Object(std::move(h));
}

std::optional<Object> Connection::FromIndex(const Guid& guid) {
  if (forked()) return std::nullopt;  // the slots are the parent's
  const IndexReader* index = index_.load(std::memory_order_acquire);
  if (index == nullptr) return std::nullopt;
  std::optional<IndexHit> hit = index->Find(guid);
  if (!hit && index->Retired() && Refresh(false)) {
    index = index_.load(std::memory_order_acquire);
    hit = index->Find(guid);
  }
  if (!hit) return std::nullopt;
  std::optional<uint32_t> slot = slots_->Publish(hit->id);
  if (!slot && Refresh(true)) slot = slots_->Publish(hit->id);
  if (!slot) return std::nullopt;
  if (!index->Unchanged(*hit)) {
    // Withdrawn (or moved) since it was read: the daemon may be freeing it.
    slots_->Clear(*slot);
    return std::nullopt;
  }
  auto h = NewHolding();
  h->slot = slot;  // from here on h's destruction clears it
  h->checksum = hit->checksum;
  h->creator_uid = hit->creator_uid;
  h->creator_pid = hit->creator_pid;
  auto found = Held(guid, std::move(h), AsSpan(hit->frames), std::move(hit->metadata));
  if (found) index_gets_.fetch_add(1, std::memory_order_relaxed);
  return found;
}

void Connection::GetLocal(std::span<const Guid> guids, std::span<Result<Object>> out,
                          std::vector<size_t>& missed) {
  if (forked()) {  // the cache and the slots are the parent's: the request then says why
    for (size_t i = 0; i < guids.size(); ++i) missed.push_back(i);
    return;
  }
  std::vector<std::shared_ptr<Holding>> held(guids.size());
  cache_.FindMany(guids, held);
  std::vector<size_t> look;  // positions not held
  look.reserve(guids.size());
  for (size_t i = 0; i < guids.size(); ++i) {
    if (held[i]) {
      out[i] = Object(std::move(held[i]));
    } else {
      look.push_back(i);
    }
  }
  const IndexReader* index = index_.load(std::memory_order_acquire);
  if (index == nullptr || look.empty()) {
    missed.insert(missed.end(), look.begin(), look.end());
    return;
  }
  size_t first_missed = missed.size();
  if (FromIndexMany(*index, guids, look, out, missed) && Refresh(false)) {
    // The index was replaced: what missed the old one is looked for in the new one.
    look.assign(missed.begin() + static_cast<ptrdiff_t>(first_missed), missed.end());
    missed.resize(first_missed);
    FromIndexMany(*index_.load(std::memory_order_acquire), guids, look, out, missed);
  }
}

bool Connection::FromIndexMany(const IndexReader& index, std::span<const Guid> guids,
                               std::span<const size_t> look, std::span<Result<Object>> out,
                               std::vector<size_t>& missed) {
  // What the index said of each object found, in flat arrays: one allocation each per batch.
  struct Found {
    size_t at;  // position in guids
    uint64_t entry, seq;
    uint32_t frames_begin, frames_end;
    uint32_t metadata_begin, metadata_end;
    std::optional<uint64_t> checksum;
    uint32_t creator_uid;
    int32_t creator_pid;
  };
  std::vector<Found> found;
  std::vector<uint64_t> ids;
  std::vector<wire::FrameLocation> frames;
  std::vector<std::byte> metadata;
  found.reserve(look.size());
  ids.reserve(look.size());
  frames.reserve(look.size());
  IndexHit hit;
  size_t misses = missed.size();
  // The entries lie at random in a table that may be far bigger than the cache, so each block of
  // the batch goes over it in passes, the misses of each overlapping: the tag lines of the GUIDs'
  // first sets are loaded (IndexReader::Prefetch), then each entry is located there (its line
  // loading once its tag matched), then the same in the second sets of the GUIDs not found in
  // their first, then the entries are read. One pass that kept each GUID's loads a few GUIDs
  // ahead of its read made a multi-get 1.1-2.0 times as long at a million (docs/performance.md).
  constexpr size_t kBlock = 512;
  std::array<uint64_t, kBlock> entries{};  // Locate's entry of each GUID of the block
  std::array<size_t, kBlock> second{};     // those of the block not in their first set
  for (size_t from = 0; from < look.size(); from += kBlock) {
    std::span<const size_t> block = look.subspan(from, std::min(kBlock, look.size() - from));
    const size_t n = block.size();
    for (size_t k = 0; k < n; ++k) index.Prefetch(guids[block[k]], IndexReader::Set::kFirst);
    size_t seconds = 0;
    for (size_t k = 0; k < n; ++k) {
      entries[k] = index.Locate(guids[block[k]], IndexReader::Set::kFirst);
      if (entries[k] == 0) {
        index.Prefetch(guids[block[k]], IndexReader::Set::kSecond);
        second[seconds++] = k;
      }
    }
    for (size_t i = 0; i < seconds; ++i) {
      entries[second[i]] = index.Locate(guids[block[second[i]]], IndexReader::Set::kSecond);
    }
    for (size_t k = 0; k < n; ++k) {
      size_t at = block[k];
      if (!index.FindInto(guids[at], hit, entries[k])) {
        missed.push_back(at);
        continue;
      }
      auto frames_begin = static_cast<uint32_t>(frames.size());
      auto metadata_begin = static_cast<uint32_t>(metadata.size());
      frames.insert(frames.end(), hit.frames.begin(), hit.frames.end());
      metadata.insert(metadata.end(), hit.metadata.begin(), hit.metadata.end());
      found.push_back({at, hit.entry, hit.seq, frames_begin, static_cast<uint32_t>(frames.size()),
                       metadata_begin, static_cast<uint32_t>(metadata.size()), hit.checksum,
                       hit.creator_uid, hit.creator_pid});
      ids.push_back(hit.id);
    }
  }
  bool retired = missed.size() > misses && index.Retired();
  // The slots, claimed together and published behind one fence; when they run out, once more
  // after asking for more, and what still has none is asked of the daemon.
  std::vector<uint32_t> slots(found.size());
  size_t claimed = slots_->PublishMany(ids, slots);
  if (claimed < found.size() && Refresh(true)) {
    claimed +=
        slots_->PublishMany(std::span(ids).subspan(claimed), std::span(slots).subspan(claimed));
  }
  for (size_t k = claimed; k < found.size(); ++k) missed.push_back(found[k].at);
  // Each entry read is checked unchanged since, in a pass of its own: its line was read a moment
  // ago but may have left the cache since (measured: a tenth of a batch's samples waited on this
  // load when it was made between the Holdings).
  std::vector<uint8_t> unchanged(claimed);
  for (size_t k = 0; k < claimed; ++k) index.PrefetchSeq(found[k].entry);
  for (size_t k = 0; k < claimed; ++k) unchanged[k] = index.Unchanged(found[k].entry, found[k].seq);
  std::vector<std::shared_ptr<Holding>> holdings;
  std::vector<size_t> positions;  // of each holding
  std::vector<SegmentMap::IndexedFrames> maps;
  holdings.reserve(claimed);
  positions.reserve(claimed);
  maps.reserve(claimed);
  std::shared_ptr<Connection> self = shared_from_this();
  for (size_t k = 0; k < claimed; ++k) {
    const Found& f = found[k];
    if (unchanged[k] == 0) {
      // Withdrawn (or moved) since it was read: the daemon may be freeing it.
      slots_->Clear(slots[k]);
      missed.push_back(f.at);
      continue;
    }
    auto h = NewHolding();
    h->slot = slots[k];  // from here on h's destruction clears it
    h->conn = self;
    h->guid = guids[f.at];
    h->checksum = f.checksum;
    h->creator_uid = f.creator_uid;
    h->creator_pid = f.creator_pid;
    h->metadata.assign(metadata.begin() + f.metadata_begin, metadata.begin() + f.metadata_end);
    std::span<const wire::FrameLocation> its(frames.data() + f.frames_begin,
                                             f.frames_end - f.frames_begin);
    h->frames.reserve(its.size());
    for (const wire::FrameLocation& fl : its) {
      if (fl.pool() != 0) {
        for (const wire::FrameLocation& p : its) h->places.push_back(pools_.PlaceOf(p.pool()));
        break;
      }
    }
    maps.push_back({.frames = its, .uses = &h->segment_uses, .views = &h->frames});
    holdings.push_back(std::move(h));
    positions.push_back(f.at);
  }
  segments_.MapIndexedMany(maps);
  size_t kept = 0;
  for (size_t k = 0; k < holdings.size(); ++k) {
    std::shared_ptr<Holding>& h = holdings[k];
    if (!maps[k].mapped) {
      // A segment not mapped yet: the daemon's reply brings it (h's destruction frees the slot).
      missed.push_back(positions[k]);
      h.reset();
      continue;
    }
    for (auto v : h->frames) h->size += v.size();
    positions[kept] = positions[k];
    holdings[kept++] = std::move(h);
  }
  holdings.resize(kept);
  cache_.RememberMany(holdings);
  if (kept > 0 && Left()) {  // each is forgotten as it goes; the daemon is asked instead
    missed.insert(missed.end(), positions.begin(),
                  positions.begin() + static_cast<ptrdiff_t>(kept));
    return retired;
  }
  if (kept > 0) NoteHeld();
  for (size_t k = 0; k < kept; ++k) out[positions[k]] = Object(std::move(holdings[k]));
  index_gets_.fetch_add(kept, std::memory_order_relaxed);
  return retired;
}

bool Connection::Refresh(bool more_slots) {
  std::lock_guard lk(refresh_mu_);
  auto now = std::chrono::steady_clock::now();
  uint32_t count = slots_->count();
  if (more_slots) {
    // Refused a moment ago, or full already: asking at every get would double its cost.
    if (slots_->HasFree()) return true;
    if (count == slots_->capacity() || now - slots_refused_ < std::chrono::seconds(1)) {
      return false;
    }
  } else if (!index_.load(std::memory_order_relaxed)->Retired()) {
    return true;
  }
  flatbuffers::FlatBufferBuilder fbb(64);
  uint32_t want = more_slots ? std::min(slots_->capacity(), count * 2) : count;
  fbb.Finish(wire::CreateIndexRequest(fbb, want, index_generation_));
  auto reply = Call(proto::MsgType::kIndex, fbb);
  if (!reply.ok()) {
    slots_refused_ = now;  // a daemon that does not know the request, or cannot answer it now
    return false;
  }
  const auto* r = proto::Body<wire::IndexReply>(reply->body);
  if (r->index_generation() != index_generation_ && reply->index_fds.size() == 1) {
    auto index = IndexReader::Map(reply->index_fds[0], r->index_sets(), r->index_arena());
    if (!index.ok()) return false;
    indexes_.push_back(std::make_unique<IndexReader>(std::move(*index)));
    index_.store(indexes_.back().get(), std::memory_order_release);
    index_generation_ = r->index_generation();
  }
  if (r->slot_count() > count) {
    slots_->Grow(r->slot_count());
  } else if (more_slots) {
    slots_refused_ = now;
  }
  return true;
}

std::optional<Object> Connection::FromOwnPut(const Guid& guid) {
  if (forked()) return std::nullopt;
  std::optional<Lease::OwnPut> put = lease_.HoldOwn(guid);
  if (!put) return std::nullopt;
  auto h = NewHolding();
  h->by_guid = true;  // from here on h's destruction releases it by GUID
  h->checksum = put->checksum;
  h->creator_uid = ::getuid();
  h->creator_pid = ::getpid();
  return Held(guid, std::move(h), put->frames, std::move(put->metadata));
}

std::optional<Object> Connection::Held(const Guid& guid, std::shared_ptr<Holding> h,
                                       std::span<const wire::FrameLocation> frames,
                                       std::vector<std::byte> metadata) {
  h->conn = shared_from_this();
  h->guid = guid;
  if (!segments_.MapIndexed(frames, h->segment_uses, h->frames)) return std::nullopt;
  for (auto f : h->frames) h->size += f.size();
  if (std::any_of(frames.begin(), frames.end(),
                  [](const wire::FrameLocation& f) { return f.pool() != 0; })) {
    for (const wire::FrameLocation& f : frames) h->places.push_back(pools_.PlaceOf(f.pool()));
  }
  h->metadata = std::move(metadata);
  cache_.Remember(h);
  if (Left()) return std::nullopt;  // h's destruction forgets it; the caller asks the daemon
  NoteHeld();
  return Object(std::move(h));
}

std::optional<Object> Connection::FromIndexAfterOwnPut(const Guid& guid) {
  if (forked()) return std::nullopt;
  // A full set means the daemon will not index it: waiting would only delay the round trip.
  const IndexReader* index = index_.load(std::memory_order_acquire);
  if (index == nullptr || !lease_.RecentlyPut(guid) || !index->HasRoomFor(guid)) {
    return std::nullopt;
  }
  auto deadline = std::chrono::steady_clock::now() + kOwnPutWait;
  do {
    sched_yield();
    if (auto found = FromIndex(guid)) return found;
  } while (std::chrono::steady_clock::now() < deadline);
  return std::nullopt;
}

Status Connection::CheckGetReply(std::span<const Guid> asked, const wire::GetReply& reply) {
  const auto* results = reply.results();
  if (results == nullptr || results->size() != asked.size()) {
    return channel_.Break(
        Status::ProtocolError(fmt::format("depotd answered a get of {} objects with {} results",
                                          asked.size(), results == nullptr ? 0 : results->size())));
  }
  for (size_t i = 0; i < asked.size(); ++i) {
    const wire::Guid* g = results->Get(i)->guid();
    if (g == nullptr || proto::FromWire(*g) != asked[i]) {
      return channel_.Break(Status::ProtocolError(fmt::format(
          "depotd answered a get of {} with a result for another object", asked[i].ToString())));
    }
  }
  return Status::OK();
}

Result<Object> Connection::Adopt(const Guid& guid, const wire::GetResult& r, Message& reply) {
  auto h = NewHolding();
  h->conn = shared_from_this();
  h->guid = guid;
  h->handle = r.handle();
  auto frames = segments_.MapFrames(r.frames(), false, reply.dedicated, h->segment_uses);
  if (!frames.ok()) return frames.status();  // h's destruction releases the reference
  for (auto& f : *frames) {
    h->frames.emplace_back(f.data(), f.size());
    h->size += f.size();
  }
  h->places = pools_.Places(r.frames());
  if (r.metadata()) {
    auto* m = reinterpret_cast<const std::byte*>(r.metadata()->data());
    h->metadata.assign(m, m + r.metadata()->size());
  }
  if (r.checksum()) h->checksum = *r.checksum();
  h->creator_uid = r.creator_uid();
  h->creator_pid = r.creator_pid();
  cache_.Remember(h);
  if (Left()) return Status::Disconnected("depotd went away as it answered this get");
  NoteHeld();
  return Object(std::move(h));
}

void Connection::Forget(Holding& h) {
  // A child forked while its parent held the object: the reference, the slot and the segment
  // uses are the parent's, and the locks below may have been held by a thread of the parent's.
  if (forked()) return;
  cache_.Forget(h);
  if (superseded_.load(std::memory_order_acquire)) {
    (void)segments_.DropUses(AsSpan(h.segment_uses));  // no one is there to hear of it
    if (auto link = link_.lock()) link->DropCarried(h);
    return;
  }
  DropUses(AsSpan(h.segment_uses));
  if (h.slot) slots_->Clear(*h.slot);
  if (h.handle != 0) releases_.Queue(h.handle);
  if (h.by_guid) releases_.QueueGuid(h.guid);
}

void Connection::Supersede(std::weak_ptr<Link> link, std::shared_ptr<Connection> next) {
  link_ = std::move(link);
  successor_ = std::move(next);
  superseded_.store(true, std::memory_order_release);
  segments_.RetireAll();
  // A daemon that is still there (a call found the connection broken while it lives on) would
  // otherwise keep this session, its lease and its references, for as long as the Link lasts:
  // what this process holds is held by `next` now.
  channel_.Shutdown();
}

Status Connection::Resume(uint64_t session) {
  flatbuffers::FlatBufferBuilder fbb(64);
  fbb.Finish(wire::CreateResumeRequest(fbb, session));
  return Call(proto::MsgType::kResume, fbb).status();
}

}  // namespace depot::internal
