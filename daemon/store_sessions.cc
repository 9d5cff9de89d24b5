// The Store's sessions from start to end (see store.h): a connection registered (Open), its hello
// answered with what the session may use (the namespace's index, its reference slots and its put
// ring, each sent as an fd), and its close, which stores what it put and drops what it held.
// Kept apart from the requests a greeted session sends (store.cc).
#include <fcntl.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <fstream>
#include <map>

#include "common/wall_clock.h"
#include "daemon/replies.h"
#include "daemon/request_limits.h"
#include "daemon/store.h"
#include "proto/index_layout.h"
#include "proto/put_ring_layout.h"

namespace depot {

Result<SessionId> Store::Open(Peer* peer, PeerCredentials creds) {
  if (Status st = handshakes_.Take(creds.uid); !st.ok()) return st;  // the session logs it
  SessionId id = next_session_++;
  ++connections_;
  SessionState& st = sessions_[id];
  st.peer = peer;
  st.creds = std::move(creds);
  st.connected_ns = WallClockNs();
  return id;
}

void Store::Close(SessionId session) {
  auto it = sessions_.find(session);
  if (it == sessions_.end()) return;
  waits_.DropSession(session);
  Namespace* ns = it->second.ns;
  if (ns == nullptr) {  // never greeted
    handshakes_.Give(it->second.creds.uid);
    sessions_.erase(it);
    return;
  }
  // What it put before it went is stored, as if its messages had been read.
  if (Status taken = rings_.Take(session); !taken.ok()) {
    spdlog::warn("session {} closed with a broken put ring: {}", session, taken.message());
  }
  rings_.Leave(session);
  namespaces_.kept().ForgetRing(session);
  if (ns->gets() != nullptr) ns->gets()->Leave(session);  // its slots keep nothing from now on
  {
    ObjectTable::FreeBatch batch(ns->table());  // one read of the slots for both
    ns->table().DropSession(session);
    owner_scopes_.Close(session, ns->table());
  }
  WatchPins();
  events_.Emit(wire::EventKind::ClientDisconnected, nullptr, session, ns);
  events_.Leave(session);
  segments_.Leave(session);
  quotas_.CreditBytes(it->second.creds.uid, session, leases_.End(session));
  quotas_.ForgetSession(session);
  PeerCredentials creds = it->second.creds;
  sessions_.erase(session);
  --ns->sessions;
  namespaces_.MaybeDrop(ns);
  // The last connection of a process that made owner-scoped objects before a crash.
  if (owner_scopes_.HasOrphans(creds.pid, creds.uid)) DropOrphans(creds.pid, creds.uid);
}

Status Store::CheckSlotWords(SessionId s) {
  const SessionState& st = sessions_.at(s);
  if (st.ns == nullptr || st.ns->gets() == nullptr || st.ns->gets()->SlotsIntact(s)) {
    return Status::OK();
  }
  NoteProtocolError();
  return Status::ProtocolError(
      "reference slots: their layout words were overwritten; a client must not write them");
}

std::map<uid_t, uint32_t> Store::SessionsByUser() const {
  std::map<uid_t, uint32_t> open;
  for (const auto& [sid, st] : sessions_) {
    if (st.ns != nullptr) ++open[st.creds.uid];  // greeted: unanswered ones end at handshake
  }
  return open;
}

Status Store::OnHello(SessionId s, uint64_t id, const wire::HelloRequest& req) {
  SessionState& st = sessions_.at(s);
  if (req.version() != proto::kProtocolVersion) {
    NoteProtocolError();
    return Status::ProtocolError(
        fmt::format("client speaks protocol version {}, this depotd speaks version {}",
                    req.version(), proto::kProtocolVersion));
  }
  if (req.client_name() && req.client_name()->size() > proto::kMaxNameSize) {
    return Status::InvalidArgument(fmt::format("a client name has at most {} bytes, not {}",
                                               proto::kMaxNameSize, req.client_name()->size()));
  }
  if (std::string why = access_.Refusal(st.creds); !why.empty()) {
    spdlog::warn("refused pid {}: {}", st.creds.pid, why);
    return Status::PermissionDenied(why);
  }
  // One user's connections are bounded, so that it cannot take every connection the daemon
  // serves (max_clients) or the memory each holds; the daemon's own user (its administrator,
  // running depotctl) is not, so that it can always look.
  if (uint32_t open = SessionsByUser()[st.creds.uid];
      st.creds.uid != options_.access.daemon_uid && open >= options_.max_sessions_per_user) {
    spdlog::warn("refused pid {} uid {}: {} connections open, the limit", st.creds.pid,
                 st.creds.uid, open);
    return Status::QuotaExceeded(
        fmt::format("user {} already has {} connections open to depotd, its limit "
                    "(max_sessions_per_user)",
                    st.creds.uid, open));
  }
  auto ns = namespaces_.For(st.creds.uid);
  if (!ns.ok()) return Status::Unavailable(ns.status().message());
  st.ns = *ns;
  handshakes_.Give(st.creds.uid);
  st.ns->table().Join(s, st.creds.uid, &references_);
  ++st.ns->sessions;
  events_.Join(s, st.peer, st.creds, st.ns);
  segments_.Join(s, st.ns);
  if (req.client_name()) st.name = req.client_name()->str();
  std::ifstream comm(fmt::format("/proc/{}/comm", st.creds.pid));
  std::getline(comm, st.process);
  events_.Emit(wire::EventKind::ClientConnected, nullptr, s, st.ns);
  spdlog::info("client connected: session {} pid {} uid {} gid {}{}{}", s, st.creds.pid,
               st.creds.uid, st.creds.gid, req.client_name() ? " name " : "",
               req.client_name() ? req.client_name()->str() : "");
  // The index and this session's slots: without them (no index, or no memory for the slots)
  // every get goes through the daemon.
  std::vector<UniqueFd> fds;
  uint64_t sets = 0;
  uint64_t arena = 0;
  // A library that reads another layout of the index than this daemon writes (one from before a
  // change of it, still running through an upgrade) is sent none: its gets take round trips.
  uint16_t reads = req.index_layout() == 0 ? 1 : req.index_layout();
  LockFreeGets* gets = st.ns->gets();
  if (gets != nullptr && reads != index::kIndexLayout.version) {
    spdlog::info("session {}: gets go through the daemon: the client reads index layout {}, not {}",
                 s, reads, index::kIndexLayout.version);
    gets = nullptr;
  }
  if (gets != nullptr) {
    auto slots = gets->Join(s, st.creds.uid);
    if (slots.ok()) {
      fds.emplace_back(::fcntl(gets->index().read_only_fd(), F_DUPFD_CLOEXEC, 0));
      fds.emplace_back(::fcntl((*slots)->fd(), F_DUPFD_CLOEXEC, 0));
      sets = gets->index().sets();
      arena = gets->index().arena_bytes();
    }
    if (!slots.ok() || !fds[0].valid() || !fds[1].valid()) {
      spdlog::warn("session {}: gets go through the daemon: {}", s,
                   slots.ok() ? "cannot pass the index" : slots.status().message());
      gets->Leave(s);
      fds.clear();
      sets = arena = 0;
    }
  }
  // The put ring: without it (no memory for it) puts go in messages.
  uint64_t ring_bytes = 0;
  if (auto ring = rings_.Join(s, st.creds.uid); ring.ok()) {
    namespaces_.kept().KeepRing(st.ns->key(), st.creds.uid, st.creds.pid, s, (*ring)->fd());
    UniqueFd fd(::fcntl((*ring)->fd(), F_DUPFD_CLOEXEC, 0));
    if (fd.valid()) {
      fds.push_back(std::move(fd));
      ring_bytes = put_ring::kRingFileBytes;
    }
  } else {
    namespaces_.kept().KeepRing(st.ns->key(), st.creds.uid, st.creds.pid, s, -1);
    spdlog::warn("session {}: puts go in messages: {}", s, ring.status().message());
  }
  flatbuffers::FlatBufferBuilder fbb;
  auto version = fbb.CreateString(options_.version);
  auto pools = replies::DevicePools(fbb, namespaces_.DevicePools());
  auto unavailable = fbb.CreateString(devices_.unavailable());
  fbb.Finish(wire::CreateHelloReply(
      fbb, proto::kProtocolVersion, version, s, ::getpid(), options_.max_message_size,
      proto::kMaxInlineSize, options_.hugepages, pools, unavailable, sets, arena,
      sets > 0 ? index::kSlotCount : 0, /*leases=*/true, ring_bytes, options_.max_frames,
      options_.max_metadata, sets > 0 ? st.ns->gets()->generation() : 0, /*resumes=*/true));
  Reply(s, id, proto::MsgType::kHello, fbb, std::move(fds));
  return Status::OK();
}

void Store::OnHold(SessionId s, uint64_t id, const wire::GuidsRequest& req) {
  if (Status st = CheckGuidCount(req.guids()); !st.ok()) return ReplyError(s, id, st);
  SessionState& state = sessions_.at(s);
  ObjectTable& table = state.ns->table();
  flatbuffers::FlatBufferBuilder fbb(64 + 48 * req.guids()->size());
  std::vector<flatbuffers::Offset<wire::GuidResult>> results;
  results.reserve(req.guids()->size());
  for (const wire::Guid* g : *req.guids()) {
    Guid guid = proto::FromWire(*g);
    auto obj = table.Acquire(s, guid);
    // One reference a GUID: a second hold of the same object (or one of a put got from the ring)
    // gives its acquire back.
    if (obj.ok() && !state.guid_holds.emplace(guid, (*obj)->id).second) {
      (void)table.Release(s, (*obj)->id);
    }
    Status st = obj.status();
    results.push_back(
        wire::CreateGuidResult(fbb, g, proto::ToWire(st.code()), fbb.CreateString(st.message())));
  }
  fbb.Finish(wire::CreateGuidsReply(fbb, fbb.CreateVector(results)));
  Reply(s, id, proto::MsgType::kHold, fbb);
}

void Store::OnResume(SessionId s, uint64_t id, const wire::ResumeRequest& req) {
  const PeerCredentials& creds = sessions_.at(s).creds;
  if (!namespaces_.kept().Resumed(req.session_id(), creds.pid, creds.uid)) {
    return ReplyError(s, id,
                      Status::NotFound(fmt::format(
                          "session {} of the last depotd is not one the grace period waits for "
                          "from process {} of user {}",
                          req.session_id(), creds.pid, creds.uid)));
  }
  spdlog::info("session {}: process {} resumed session {} of the last depotd", s, creds.pid,
               req.session_id());
  sessions_.at(s).peer->Send(replies::Empty(proto::MsgType::kResume, id), {});
}

size_t Store::DropOrphans(int32_t pid, uint32_t uid) {
  for (const auto& [id, st] : sessions_) {
    if (st.ns != nullptr && st.creds.pid == pid && st.creds.uid == uid) return 0;  // still here
  }
  auto ns = namespaces_.For(uid);
  if (!ns.ok()) return 0;
  size_t deleted = owner_scopes_.DropOrphans(pid, uid, (*ns)->table());
  namespaces_.MaybeDrop(*ns);
  return deleted;
}

void Store::OnGraceEnd() {
  size_t deleted = 0;
  for (auto [pid, uid] : owner_scopes_.Orphaned()) deleted += DropOrphans(pid, uid);
  if (deleted > 0) {
    spdlog::info(
        "{} owner-scoped objects deleted: the processes that made them had not connected again "
        "when the grace period after the start ended",
        deleted);
  }
}

void Store::OnIndex(SessionId s, SessionState& st, uint64_t id, const wire::IndexRequest& req) {
  LockFreeGets* gets = st.ns != nullptr ? st.ns->gets() : nullptr;
  uint32_t slots = gets != nullptr ? gets->Grant(s, req.slots()) : 0;
  if (slots == 0) {
    return ReplyError(s, id, Status::InvalidArgument("this connection has no shared index"));
  }
  std::vector<UniqueFd> fds;
  const ObjectIndex& index = gets->index();
  if (req.index_generation() != gets->generation()) {
    fds.emplace_back(::fcntl(index.read_only_fd(), F_DUPFD_CLOEXEC, 0));
    if (!fds.back().valid()) {
      return ReplyError(s, id, Status::Unavailable("cannot pass the shared index"));
    }
  }
  flatbuffers::FlatBufferBuilder fbb;
  fbb.Finish(wire::CreateIndexReply(fbb, slots, index.sets(), index.arena_bytes(),
                                    gets->generation(), !fds.empty()));
  Reply(s, id, proto::MsgType::kIndex, fbb, std::move(fds));
}

}  // namespace depot
