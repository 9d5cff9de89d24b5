// The Store's queries: requests that report on the store and change nothing in it (contains,
// list, stat, status, clients, metrics). Kept apart from the requests that create, read and
// delete objects (store.cc).
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>

#include "common/prefetch.h"
#include "daemon/metrics_report.h"
#include "daemon/replies.h"
#include "daemon/request_limits.h"
#include "daemon/status_reply.h"
#include "daemon/store.h"

namespace depot {

void Store::OnContains(SessionId s, uint64_t id, const wire::GuidsRequest& req) {
  if (Status st = CheckGuidCount(req.guids()); !st.ok()) return ReplyError(s, id, st);
  flatbuffers::FlatBufferBuilder fbb(256);
  std::vector<flatbuffers::Offset<wire::GuidResult>> results;
  const ObjectTable& table = sessions_.at(s).ns->table();
  for (const wire::Guid* g : *req.guids()) {
    const StoredObject* o = table.Find(proto::FromWire(*g));
    wire::Code code = o && o->state == ObjectState::kSealed ? wire::Code::Ok : wire::Code::NotFound;
    auto msg = fbb.CreateString(!o                       ? "does not exist"
                                : code == wire::Code::Ok ? ""
                                                         : "not sealed yet");
    results.push_back(wire::CreateGuidResult(fbb, g, code, msg));
  }
  fbb.Finish(wire::CreateGuidsReply(fbb, fbb.CreateVector(results)));
  Reply(s, id, proto::MsgType::kContains, fbb);
}

void Store::OnList(SessionId s, uint64_t id, const wire::ListRequest& req) {
  rings_.TakeAll();  // a list shows every put that returned before it
  size_t limit = req.limit() == 0 ? 1000 : std::min(req.limit(), proto::kMaxListLimit);
  std::optional<Guid> after;
  if (req.after()) after = proto::FromWire(*req.after());
  const ObjectTable& table = sessions_.at(s).ns->table();
  std::vector<const StoredObject*> objects =
      req.holder_pid() == 0 ? table.List(after, limit + 1)
                            : HeldByProcess(table, req.holder_pid(), after, limit + 1);
  bool more = objects.size() > limit;
  if (more) objects.pop_back();
  flatbuffers::FlatBufferBuilder fbb(256 * objects.size() + 64);
  std::vector<flatbuffers::Offset<wire::ObjectInfo>> infos;
  infos.reserve(objects.size());
  // The records lie in id order and the listing goes in GUID order: at a million objects each
  // record is a cache miss, which cost most of a page. Fetched a few objects ahead, the misses
  // overlap the building of the entries before them.
  constexpr size_t kAhead = 16;
  for (size_t i = 0; i < objects.size(); ++i) {
    if (i + kAhead < objects.size()) {
      const auto* next = reinterpret_cast<const char*>(objects[i + kAhead]);
      Prefetch(next);
      Prefetch(next + sizeof(StoredObject) - 1);
    }
    infos.push_back(replies::ObjectInfo(fbb, *objects[i], false));
  }
  fbb.Finish(wire::CreateListReply(fbb, fbb.CreateVector(infos), more));
  Reply(s, id, proto::MsgType::kList, fbb);
}

std::vector<const StoredObject*> Store::HeldByProcess(const ObjectTable& table, int32_t pid,
                                                      std::optional<Guid> after,
                                                      size_t limit) const {
  // Only the sessions of `table`'s namespace hold its objects: another namespace's stay unseen.
  std::vector<const StoredObject*> held;
  for (const auto& [sid, st] : sessions_) {
    if (st.creds.pid != pid || st.ns == nullptr || &st.ns->table() != &table) continue;
    std::vector<const StoredObject*> objects = table.ObjectsHeldBy(sid);
    // What it holds through its reference slots counts too (ids that name nothing are skipped).
    if (const LockFreeGets* gets = st.ns->gets(); gets != nullptr) {
      gets->ForEachHeldBy(sid, [&](ObjectId id) {
        const StoredObject* o = table.Get(id);
        if (o != nullptr && !o->deleted) objects.push_back(o);
      });
    }
    for (const StoredObject* o : objects) {
      if (!after || *after < o->guid) held.push_back(o);
    }
  }
  std::sort(held.begin(), held.end(),
            [](const StoredObject* a, const StoredObject* b) { return a->guid < b->guid; });
  // A process with two connections may hold one object on both.
  held.erase(std::unique(held.begin(), held.end()), held.end());
  if (held.size() > limit) held.resize(limit);
  return held;
}

void Store::OnStat(SessionId s, uint64_t id, const wire::GuidRequest& req) {
  if (!req.guid()) return ReplyError(s, id, Status::InvalidArgument("no GUID given"));
  Guid guid = proto::FromWire(*req.guid());
  const ObjectTable& table = sessions_.at(s).ns->table();
  const StoredObject* o = table.Find(guid);
  if (!o) {
    return ReplyError(s, id,
                      Status::NotFound(fmt::format("object {} does not exist", guid.ToString())));
  }
  flatbuffers::FlatBufferBuilder fbb(512 + o->metadata().size());
  std::vector<flatbuffers::Offset<wire::HolderInfo>> holders;
  replies::Holders extra;
  for (const Holder& h : table.HoldersOf(o->id)) {
    const SessionState& holder = sessions_.at(h.session);
    holders.push_back(wire::CreateHolderInfo(fbb, h.session, holder.creds.pid, holder.creds.uid,
                                             fbb.CreateString(holder.process),
                                             fbb.CreateString(holder.name), h.references));
  }
  for (const auto& [sid, st] : sessions_) {
    // Sessions that hold it through a reference slot, and no daemon reference: a compare per
    // slot, nothing collected.
    if (st.ns == nullptr || &st.ns->table() != &table || st.ns->gets() == nullptr ||
        table.HeldBy(sid, o->id) > 0 || !st.ns->gets()->HeldBy(sid, o->id)) {
      continue;
    }
    holders.push_back(wire::CreateHolderInfo(fbb, sid, st.creds.pid, st.creds.uid,
                                             fbb.CreateString(st.process),
                                             fbb.CreateString(st.name), 1));
    ++extra.slot_holders;
  }
  extra.holders = fbb.CreateVector(holders);
  if (auto creator = sessions_.find(o->creator); creator != sessions_.end()) {
    extra.creator_session = o->creator;
    extra.creator_process = fbb.CreateString(creator->second.process);
  }
  fbb.Finish(wire::CreateStatReply(fbb, replies::ObjectInfo(fbb, *o, true, &extra)));
  Reply(s, id, proto::MsgType::kStat, fbb);
}

StoreStatus Store::Snapshot() const {
  StoreStatus st;
  st.daemon_version = options_.version;
  st.socket_path = options_.socket_path;
  st.daemon_pid = ::getpid();
  st.uptime_ms = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                           std::chrono::steady_clock::now() - started_)
                                           .count());
  namespaces_.Report(st);
  quotas_.Report(st);
  st.clients = static_cast<uint32_t>(sessions_.size());
  st.connections = connections_;
  st.gets_waiting = static_cast<uint32_t>(waits_.size());
  // The busiest user against each per-user limit; the metrics have every user's.
  st.pending_guids = waits_.guids();
  for (const auto& [uid, n] : waits_.guids_by_user()) {
    st.pending_guids_top_user = std::max(st.pending_guids_top_user, n);
  }
  st.max_pending_guids = options_.get_waits.guids_per_session;
  st.max_pending_guids_per_user = options_.get_waits.guids_per_user;
  const ParkedCreates& parked = namespaces_.spill().parked();
  st.parked_create_bytes = parked.bytes();
  for (const auto& [uid, n] : parked.bytes_by_user()) {
    st.parked_create_bytes_top_user = std::max(st.parked_create_bytes_top_user, n);
  }
  st.max_parked_bytes_per_user = options_.namespaces.spill.max_parked_bytes_per_user;
  for (const auto& [uid, n] : SessionsByUser()) {
    st.sessions_top_user = std::max(st.sessions_top_user, n);
  }
  st.max_sessions_per_user = options_.max_sessions_per_user;
  st.handshakes_top_user = static_cast<uint32_t>(handshakes_.top_user());
  st.handshakes_refused = handshakes_.refused();
  st.max_handshakes_per_user = static_cast<uint32_t>(handshakes_.per_user());
  st.references_top_user = references_.top_user();
  st.references_refused = references_.refused();
  st.max_references_per_user = references_.per_user();
  st.max_slots_per_user = options_.namespaces.max_slots_per_user;
  // Leases are allocated blocks, but no object's: `used` counts objects, `leased` the rest.
  st.leased = leases_.leased();
  st.used -= std::min(st.used, st.leased);
  st.leases_revoked = leases_revoked_;
  st.requests = requests_;
  st.errors.assign(errors_.begin(), errors_.begin() + static_cast<size_t>(wire::Code::MAX) + 1);
  st.devices_unavailable = devices_.unavailable();
  return st;
}

void Store::OnStatus(SessionId s, uint64_t id) {
  rings_.TakeAll();
  StoreStatus st = Snapshot();
  flatbuffers::FlatBufferBuilder fbb(512 + 32 * st.users.size());
  fbb.Finish(BuildStatusReply(fbb, st));
  Reply(s, id, proto::MsgType::kStatus, fbb);
}

std::string Store::Metrics() const {
  StoreStatus status = Snapshot();
  std::vector<PoolReport> pools = namespaces_.PoolReports();
  ObjectCounts objects = namespaces_.Counts(true);
  std::map<uid_t, UserLoad> by_user;
  for (const auto& [uid, n] : SessionsByUser()) by_user[uid].sessions = n;
  for (const auto& [uid, n] : waits_.guids_by_user()) by_user[uid].pending_guids = n;
  for (const auto& [uid, n] : namespaces_.spill().parked().bytes_by_user()) {
    by_user[uid].parked_create_bytes = n;
  }
  std::vector<UserLoad> loads;
  for (auto& [uid, load] : by_user) {
    load.uid = uid;
    loads.push_back(load);
  }
  return RenderMetrics({status, pools, objects, counters_, loads});
}

void Store::OnMetrics(SessionId s, uint64_t id) {
  std::string text = Metrics();
  flatbuffers::FlatBufferBuilder fbb(text.size() + 64);
  fbb.Finish(wire::CreateMetricsReply(fbb, fbb.CreateString(text)));
  Reply(s, id, proto::MsgType::kMetrics, fbb);
}

void Store::OnClients(SessionId s, uint64_t id) {
  flatbuffers::FlatBufferBuilder fbb(256 * sessions_.size() + 64);
  std::vector<flatbuffers::Offset<wire::ClientInfo>> infos;
  for (const auto& [sid, st] : sessions_) {
    if (st.ns == nullptr) continue;  // not greeted
    Holdings h = st.ns->table().HoldingsOf(sid);
    if (const LockFreeGets* gets = st.ns->gets(); gets != nullptr) {
      // What it holds through its reference slots counts as its references too. The slots are
      // looked up in the table only when they changed since the last call: garbage left in
      // them costs a pass over them, not a lookup of each.
      const ObjectTable& table = st.ns->table();
      auto names = [&table](ObjectId id) { return table.Get(id) != nullptr; };
      for (ObjectId id : gets->NamedBy(sid, names)) {
        const StoredObject* o = table.Get(id);
        if (o == nullptr || table.HeldBy(sid, id) > 0) continue;
        ++h.references;
        h.bytes += o->size();
      }
    }
    QuotaUsage created = quotas_.OfSession(sid);
    auto name = fbb.CreateString(st.name);
    auto process = fbb.CreateString(st.process);
    infos.push_back(wire::CreateClientInfo(fbb, sid, st.creds.pid, st.creds.uid, st.creds.gid, name,
                                           process, h.references, h.bytes, h.creating, st.requests,
                                           st.connected_ns, events_.subscribed(sid),
                                           created.objects, created.bytes));
  }
  fbb.Finish(wire::CreateClientsReply(fbb, fbb.CreateVector(infos)));
  Reply(s, id, proto::MsgType::kClients, fbb);
}

}  // namespace depot
