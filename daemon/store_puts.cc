// The Store's puts in one message (docs/design.md, "Puts in one message"): leases of host memory
// (OnLease), puts into them that need no reply (OnPut) or no message at all (OnRingPut, from the
// put rings), blocks of deleted objects handed back to their lease (ReturnToLease), and the drain
// that keeps "once a put returns, a get that starts later finds it" although the daemon may not
// have read the put yet (DrainFirst). Kept apart from the create, seal and get requests (store.cc).
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "daemon/replies.h"
#include "daemon/request_limits.h"
#include "daemon/store.h"
#include "proto/object_rules.h"

namespace depot {

namespace {
constexpr uint64_t kMinLeaseGrant = uint64_t{64} << 10;
}  // namespace

void Store::OnLease(SessionId s, uint64_t id, const wire::LeaseRequest& req) {
  SessionState& st = sessions_.at(s);
  uid_t uid = st.creds.uid;
  // Whatever the answer, the session's previous lease ends: its client forgets it.
  quotas_.CreditBytes(uid, s, leases_.End(s));
  // A lease is charged in bytes; the objects put into it are counted as they come, so a limit
  // on objects could not be kept. Such a client creates instead.
  if (quotas_.user_quota().objects != 0 || quotas_.client_quota().objects != 0) {
    return ReplyError(s, id, Status::Unavailable("no leases while a quota limits objects"));
  }
  if (Status invalid = CheckLease(req); !invalid.ok()) return ReplyError(s, id, invalid);
  // From the shared segments, which are kept warm, never a segment of large objects; and at most
  // a sixteenth of the capacity, so that leases held by idle clients cannot fill a small pool.
  uint64_t most =
      std::min(options_.namespaces.host.segment_size / 2, namespaces_.host_budget().capacity / 16);
  // And at least kMinLeaseGrant where the pool allows: a lease costs the daemon a record and
  // every miss a look at its ring, so many tiny ones must cost their user memory and quota.
  uint64_t size = proto::RoundUpToBlock(std::min(std::max(req.size(), kMinLeaseGrant), most));
  if (size < req.at_least()) {
    return ReplyError(
        s, id,
        Status::Unavailable(fmt::format(
            "leases here are at most {} bytes, less than the {} asked for", size, req.at_least())));
  }
  if (Status q = quotas_.Check(uid, s, size); !q.ok()) return ReplyError(s, id, q);
  uint64_t sizes[] = {size};
  auto frames = namespaces_.Allocate(*st.ns, sizes, {}, s, uid);
  if (!frames.ok()) return ReplyError(s, id, frames.status());
  quotas_.ChargeBytes(uid, s, size);
  leases_.Grant(s, *st.ns, frames->front(), size);
  WatchForDrain(s);  // before the reply: every put message comes after it
  if (PutRing* ring = rings_.Find(s)) ring->LeaseGranted();
  std::vector<uint64_t> keys;
  std::vector<UniqueFd> fds;
  if (Status c = segments_.Collect(s, *frames, true, keys, fds); !c.ok()) {
    quotas_.CreditBytes(uid, s, leases_.End(s));
    return ReplyError(s, id, c);
  }
  flatbuffers::FlatBufferBuilder fbb(256);
  auto segments = replies::Segments(fbb, *st.ns, keys);
  auto locations = replies::Frames(fbb, *frames);
  wire::CreateReplyBuilder b(fbb);
  b.add_frames(locations);
  b.add_segments(segments);
  fbb.Finish(b.Finish());
  Reply(s, id, proto::MsgType::kLease, fbb, std::move(fds));
}

Status Store::OnPut(SessionId s, const wire::PutRequest& req) {
  SessionState& st = sessions_.at(s);
  ObjectTable& table = st.ns->table();
  // A client of the library never breaks these rules (its GUIDs are random, its lease charged
  // already): whoever does is hostile or broken, and its connection closes.
  auto refuse = [this](std::string why) {
    NoteProtocolError();
    return Status::ProtocolError(std::move(why));
  };
  // The same rules as a create's, which the library checked before it wrote the put.
  if (Status invalid = CheckPut(req, {options_.max_frames, options_.max_metadata}); !invalid.ok()) {
    return refuse(invalid.message());
  }
  Guid guid = proto::FromWire(*req.guid());
  if (table.Find(guid) != nullptr) {
    return refuse(fmt::format("put of object {}, which exists already", guid.ToString()));
  }
  NewObject n;
  n.guid = guid;
  if (req.metadata()) n.metadata.assign(req.metadata()->begin(), req.metadata()->end());
  if (req.name()) n.name = req.name()->str();
  auto frames = leases_.Carve(s, *req.frames());
  if (!frames.ok()) return refuse(frames.status().message());
  n.frames = *frames;
  n.evictable = req.evictable();
  n.owner_scoped = req.owner_scoped();
  n.creator = s;
  n.creator_pid = st.creds.pid;
  n.creator_uid = st.creds.uid;
  // The same two steps as a create and its seal, so that whatever watches them sees puts too.
  auto created = table.Create(std::move(n));
  if (!created.ok()) {  // the GUID was checked above: a broken invariant, which ends this session
    std::vector<Location> cut;
    std::ranges::copy_if(*frames, std::back_inserter(cut),
                         [](const Location& l) { return l.size; });
    st.ns->Free(cut);
    return refuse(created.status().message());
  }
  const StoredObject* obj = *created;
  if (req.owner_scoped()) owner_scopes_.Add(s, guid, table);
  quotas_.CountObject(st.creds.uid, s);
  counters_.ObserveObject(obj->size());
  // Created just now by this session: its seal fails only on a broken invariant, which ends the
  // session (and aborts the object with it).
  if (Status sealed = table.Seal(s, guid, req.checksum()); !sealed.ok()) {
    return refuse(sealed.message());
  }
  waits_.Wake(table, guid);
  return Status::OK();
}

Status Store::OnRingPut(SessionId s, std::span<const uint8_t> body, bool held) {
  auto put = static_cast<uint16_t>(proto::MsgType::kPut);
  if (!proto::VerifyBody(put, body)) {
    NoteProtocolError();
    return Status::ProtocolError("a put in the put ring does not verify");
  }
  ++requests_;
  ++sessions_.at(s).requests;
  auto start = std::chrono::steady_clock::now();
  const wire::PutRequest& req = *proto::Body<wire::PutRequest>(body);
  Status st = OnPut(s, req);
  counters_.ObserveRequest(put, std::chrono::steady_clock::now() - start);
  if (!st.ok() || !held) return st;
  SessionState& state = sessions_.at(s);
  Guid guid = proto::FromWire(*req.guid());
  auto obj = state.ns->table().Acquire(s, guid);  // it was sealed just now
  if (obj.ok() && state.guid_holds.emplace(guid, (*obj)->id).second) return st;
  if (obj.ok()) (void)state.ns->table().Release(s, (*obj)->id);
  return st;
}

bool Store::ReturnToLease(const StoredObject& o, const Location& frame) {
  PutRing* ring = rings_.Find(o.creator);
  if (ring == nullptr || !ring->CanReturn()) return false;
  auto block = leases_.TakeBack(o.creator, frame);
  if (!block) return false;
  quotas_.ChargeBytes(o.creator_uid, o.creator, block->size);
  ring->Return(*block);
  return true;
}

bool Store::RevokeIdleLeases() {
  bool any = false;
  for (SessionId s : leases_.IdleSince(std::chrono::steady_clock::now() - options_.lease_idle)) {
    PutRing* ring = rings_.Find(s);
    if (ring == nullptr || !ring->Revoke()) continue;
    const SessionState& st = sessions_.at(s);
    uint64_t leased = leases_.leased();
    quotas_.CreditBytes(st.creds.uid, s, leases_.End(s));
    spdlog::debug("lease of session {} (pid {}) taken back: {} bytes idle", s, st.creds.pid,
                  leased - leases_.leased());
    ++leases_revoked_;
    any = true;
  }
  return any;
}

Result<bool> Store::TakeRingTurn(SessionId s) {
  if (Status taken = rings_.Take(s, PutRings::kTurnRecords); !taken.ok()) return taken;
  const PutRing* ring = rings_.Find(s);
  return ring != nullptr && ring->Pending();
}

bool Store::DrainFirst(SessionId s, const proto::Header& h, std::span<const uint8_t> body) {
  if (drain_replaying_ || leases_.empty()) return false;
  const ObjectTable& table = sessions_.at(s).ns->table();
  auto missing = [&table](const wire::Guid* g) {
    return g != nullptr && table.Find(proto::FromWire(*g)) == nullptr;
  };
  auto any_missing = [&](const flatbuffers::Vector<const wire::Guid*>* guids) {
    return guids != nullptr && std::any_of(guids->begin(), guids->end(), missing);
  };
  bool miss = false;
  switch (static_cast<proto::MsgType>(h.type)) {
    case proto::MsgType::kGet:
      miss = any_missing(proto::Body<wire::GetRequest>(body)->guids());
      break;
    case proto::MsgType::kDelete:
    case proto::MsgType::kContains:
      miss = any_missing(proto::Body<wire::GuidsRequest>(body)->guids());
      break;
    case proto::MsgType::kStat:
      miss = missing(proto::Body<wire::GuidRequest>(body)->guid());
      break;
    default:
      return false;
  }
  if (!miss) return false;
  if (drain_reading_) {
    // Read during a drain: it may have been sent after a put that the drain has not reached yet.
    // Answered once the drain is over, as if it came then.
    deferred_.push_back({s, h, std::vector<uint8_t>(body.begin(), body.end())});
    return true;
  }
  drain_reading_ = true;
  for (SessionId sender : SentSinceDrain(s)) {
    auto it = sessions_.find(sender);
    if (it != sessions_.end()) it->second.peer->HandleArrived();
  }
  // The polled rings with a put in them. A ring that is not polled rang its doorbell with its
  // first put since (every put that returned did, or found the ring polled), and its message
  // was read just above, which took that ring.
  bool took = rings_.TakePolled();
  drain_reading_ = false;
  // A get that the rings answered: a process gets what others put, as soon as they return.
  if (took && static_cast<proto::MsgType>(h.type) == proto::MsgType::kGet &&
      !any_missing(proto::Body<wire::GetRequest>(body)->guids())) {
    rings_.NoteHandOff();
  }
  drain_replaying_ = true;
  std::vector<Deferred> deferred = std::move(deferred_);
  deferred_.clear();
  for (Deferred& d : deferred) {
    auto it = sessions_.find(d.session);
    if (it == sessions_.end()) continue;
    // Its own session's error, never this one's: a request that breaks the protocol, or fails
    // with an exception, closes the session that sent it.
    Status st;
    try {
      st = Dispatch(d.session, it->second, d.header, d.body);
    } catch (const std::exception& e) {
      st = Failed(d.session, proto::TypeName(d.header.type), e);
    }
    if (!st.ok()) it->second.peer->Abort(st);
  }
  drain_replaying_ = false;
  return false;
}

void Store::WatchForDrain(SessionId s) {
  if (!drain_poll_.valid() && !drain_all_) {
    drain_poll_ = UniqueFd(::epoll_create1(EPOLL_CLOEXEC));
    drain_all_ = !drain_poll_.valid();
    if (drain_all_) spdlog::warn("no epoll set for drains: {}", std::strerror(errno));
  }
  int fd = sessions_.at(s).peer->fd();
  if (drain_all_ || fd < 0) return;
  // Edge-triggered: reported once per arrival of bytes, not for as long as bytes wait; bytes
  // already there count as an arrival. The socket leaves the set when it closes. A session that
  // takes a second lease is in the set already (EEXIST).
  epoll_event ev{.events = EPOLLIN | EPOLLET, .data = {.u64 = s}};
  if (::epoll_ctl(drain_poll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0 && errno != EEXIST) {
    spdlog::warn("session {}: drains read it at every miss: {}", s, std::strerror(errno));
    drain_again_.insert(s);
  }
}

void Store::NoteUnhandled(SessionId s) {
  drain_again_.insert(s);
  // Closed sessions' ids go when they pile up, the next drain being perhaps far off.
  if (drain_again_.size() > 2 * sessions_.size() + 64) {
    std::erase_if(drain_again_, [this](SessionId id) { return !sessions_.contains(id); });
  }
}

std::vector<SessionId> Store::SentSinceDrain(SessionId s) {
  std::vector<SessionId> senders(drain_again_.begin(), drain_again_.end());
  drain_again_.clear();
  if (drain_all_) {
    std::vector<SessionId> holders = leases_.Holders();
    senders.insert(senders.end(), holders.begin(), holders.end());
  } else if (drain_poll_.valid()) {
    // The sessions whose socket took bytes since the last drain: no system call per session.
    epoll_event ready[64];
    int n = 0;
    do {
      n = ::epoll_wait(drain_poll_.get(), ready, 64, 0);
      for (int i = 0; i < n; ++i) senders.push_back(ready[i].data.u64);
    } while (n == 64);
  }
  // The session that asked is in the middle of its own message: its edge waits for the next.
  if (std::erase(senders, s) > 0) drain_again_.insert(s);
  std::sort(senders.begin(), senders.end());
  senders.erase(std::unique(senders.begin(), senders.end()), senders.end());
  return senders;
}

}  // namespace depot
