// The Store's create requests (docs/design.md, "The object model and its lifecycle"): checked
// against the limits and the user's quota, then given memory, which may first wait for objects
// to be written out to disk or for retired segments to be let go. Kept apart from the seal, get
// and delete requests (store.cc) and the puts in one message (store_puts.cc).
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <vector>

#include "daemon/replies.h"
#include "daemon/request_limits.h"
#include "daemon/store.h"
#include "proto/wire.h"

namespace depot {

void Store::OnCreate(SessionId s, uint64_t id, std::span<const uint8_t> body, bool waited) {
  const wire::CreateRequest& req = *proto::Body<wire::CreateRequest>(body);
  RequestLimits limits{{options_.max_frames, options_.max_metadata},
                       namespaces_.host_budget().capacity,
                       devices_.size(),
                       devices_.unavailable()};
  if (Status invalid = CheckCreate(req, limits); !invalid.ok()) return ReplyError(s, id, invalid);
  SessionState& st = sessions_.at(s);
  Namespace& ns = *st.ns;
  std::vector<uint64_t> sizes(req.frame_sizes()->begin(), req.frame_sizes()->end());
  std::vector<uint32_t> pools;
  if (req.frame_pools()) pools.assign(req.frame_pools()->begin(), req.frame_pools()->end());
  uint64_t total = 0;
  for (uint64_t size : sizes) total += size;
  Guid guid = req.guid() ? proto::FromWire(*req.guid()) : Guid::Random();
  if (guid.is_nil()) {
    return ReplyError(s, id, Status::InvalidArgument("the nil GUID cannot name an object"));
  }
  if (ns.table().Find(guid) != nullptr) {
    return ReplyError(
        s, id, Status::AlreadyExists(fmt::format("object {} already exists", guid.ToString())));
  }
  if (Status q = quotas_.Check(st.creds.uid, s, total); !q.ok()) {
    spdlog::warn("create for pid {} uid {}: {}", st.creds.pid, st.creds.uid, q.message());
    return ReplyError(s, id, q);
  }

  auto frames = namespaces_.Allocate(ns, sizes, pools, s, st.creds.uid);
  if (!frames.ok() && frames.status().IsStoreFull()) {
    // Asked again once objects are written out to disk (a copy: the request's buffer goes).
    Status room = namespaces_.spill().MakeRoomFor(
        ns, s, st.creds.uid, body.size(), sizes, pools, frames.status(),
        [this, s, id, copy = std::vector<uint8_t>(body.begin(), body.end())] {
          if (sessions_.contains(s)) OnCreate(s, id, copy);
        });
    if (room.ok()) return;
    frames = room;
  }
  // Host memory that clients still map in retired segments comes back within a round trip of
  // each that reads its socket: a create waits for it once, a bounded while, as a restore does.
  bool host = std::all_of(pools.begin(), pools.end(), [](uint32_t p) { return p == 0; });
  if (!frames.ok() && frames.status().IsStoreFull() && host && !waited &&
      namespaces_.spill().WaitForDrop(
          ns, s, st.creds.uid, body.size(),
          [this, s, id, copy = std::vector<uint8_t>(body.begin(), body.end())] {
            if (sessions_.contains(s)) OnCreate(s, id, copy, true);
          })) {
    return;
  }
  if (!frames.ok()) {
    spdlog::warn("create for pid {}: {}", st.creds.pid, frames.status().message());
    return ReplyError(s, id, frames.status());
  }
  bool inline_data = req.inline_data() != nullptr;
  if (inline_data) {
    Status w = ns.WriteInline(*frames, {req.inline_data()->data(), req.inline_data()->size()});
    if (!w.ok()) {
      ns.Free(*frames);
      spdlog::error("{}", w.message());
      return ReplyError(s, id, w);
    }
  }
  NewObject n;
  n.guid = guid;
  n.frames = *frames;
  if (req.metadata()) n.metadata.assign(req.metadata()->begin(), req.metadata()->end());
  if (req.name()) n.name = req.name()->str();
  n.evictable = req.evictable();
  n.owner_scoped = req.owner_scoped();
  n.creator = s;
  n.creator_pid = st.creds.pid;
  n.creator_uid = st.creds.uid;
  // The GUID was checked above and nothing ran since: Create fails only on a broken invariant,
  // which fails this request alone.
  auto created = ns.table().Create(std::move(n));
  if (!created.ok()) {
    ns.Free(*frames);
    return ReplyError(s, id, created.status());
  }
  const StoredObject* obj = *created;
  if (req.owner_scoped()) owner_scopes_.Add(s, guid, ns.table());
  quotas_.Charge(st.creds.uid, s, total);
  counters_.ObserveObject(total);

  flatbuffers::FlatBufferBuilder fbb;
  std::vector<uint64_t> keys;
  std::vector<UniqueFd> fds;
  if (inline_data) {
    // Created just now by this session: its seal fails only on a broken invariant.
    if (Status sealed = ns.table().Seal(s, guid, req.checksum()); !sealed.ok()) {
      (void)ns.table().Abort(s, guid);
      return ReplyError(s, id, sealed);
    }
    waits_.Wake(ns.table(), guid);
  } else if (Status c = segments_.Collect(s, obj->frames(), true, keys, fds); !c.ok()) {
    (void)ns.table().Abort(s, guid);  // created just now by this session: it goes
    return ReplyError(s, id, c);
  }
  auto segments = replies::Segments(fbb, ns, keys);
  auto locations = replies::Frames(fbb, obj->frames());
  wire::Guid g = proto::ToWire(guid);
  fbb.Finish(wire::CreateCreateReply(fbb, &g, locations, segments));
  Reply(s, id, proto::MsgType::kCreate, fbb, std::move(fds));
}

}  // namespace depot
