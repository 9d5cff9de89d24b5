#include "daemon/store.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "depot/units.h"

namespace depot {
namespace {

using proto::FromWire;
using proto::MsgType;
using proto::ToWire;
namespace fb = flatbuffers;

wire::FrameLocation ToWire(const Location& l) {
  return wire::FrameLocation(l.offset, l.size, l.segment, l.pool);
}

fb::Offset<fb::Vector<const wire::FrameLocation*>> Frames(fb::FlatBufferBuilder& fbb,
                                                          std::span<const Location> frames) {
  std::vector<wire::FrameLocation> out;
  out.reserve(frames.size());
  for (const Location& l : frames) out.push_back(ToWire(l));
  return fbb.CreateVectorOfStructs(out);
}

int64_t WallClockNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

fb::Offset<wire::ObjectInfo> BuildInfo(fb::FlatBufferBuilder& fbb, const StoredObject& o,
                                       bool with_metadata) {
  auto name = fbb.CreateString(o.name().data(), o.name().size());
  auto frames = Frames(fbb, o.frames());
  fb::Offset<fb::Vector<uint8_t>> metadata;
  if (with_metadata) metadata = fbb.CreateVector(o.metadata().data(), o.metadata().size());
  wire::ObjectInfoBuilder b(fbb);
  wire::Guid guid = ToWire(o.guid);
  b.add_guid(&guid);
  b.add_name(name);
  b.add_state(o.deleted ? wire::State::Deleted
                        : o.state == ObjectState::kSealed ? wire::State::Sealed
                                                          : wire::State::Creating);
  b.add_size(o.size());
  b.add_frames(frames);
  b.add_refcount(o.refcount);
  b.add_evictable(o.evictable);
  b.add_created_unix_ns(o.created_ns);
  b.add_sealed_unix_ns(o.sealed_ns);
  b.add_creator_pid(o.creator_pid);
  b.add_creator_uid(o.creator_uid);
  b.add_metadata_size(static_cast<uint32_t>(o.metadata().size()));
  if (with_metadata) b.add_metadata(metadata);
  if (o.has_checksum) b.add_checksum(o.checksum);
  return b.Finish();
}

}  // namespace

Store::Store(boost::asio::io_context& io, StoreOptions options)
    : io_(io), options_(std::move(options)), started_(std::chrono::steady_clock::now()) {
  budget_.capacity = HostPool::UsableCapacity(options_.pool.capacity);
  options_.pool.budget = &budget_;
  Guid seed = Guid::Random();
  std::seed_seq seq{seed.hi, seed.lo, static_cast<uint64_t>(::getpid())};
  guid_bits_.seed(seq);
}

Result<std::unique_ptr<Store>> Store::Create(boost::asio::io_context& io, StoreOptions options) {
  if (options.per_user_namespaces && options.pool.prefault) {
    return Status::InvalidArgument(
        "prefault reserves the whole capacity for one namespace; it cannot be combined with "
        "namespaces = per_user");
  }
  std::unique_ptr<Store> store(new Store(io, std::move(options)));
  if (Status st = store->OpenDevices(); !st.ok()) store->options_.devices_unavailable = st.message();
  if (!store->options_.per_user_namespaces) {
    // The one shared namespace exists from the start (prefaulted when asked).
    auto ns = store->NamespaceFor(0);
    if (!ns.ok()) return ns.status();
  }
  return store;
}

Status Store::OpenDevices() {
  if (options_.devices == "none") return Status::Unavailable("devices = none");
  if (options_.device_backend == nullptr) return Status::Unavailable(options_.devices_unavailable);
  auto found = options_.device_backend->Devices();
  if (!found.ok()) return found.status();
  std::string wanted = "," + options_.devices + ",";
  for (const DeviceInfo& d : *found) {
    if (options_.devices != "all" && wanted.find("," + d.uuid + ",") == std::string::npos) continue;
    auto capacity = ParseSize(options_.device_capacity, d.memory);
    if (!capacity) {
      return Status::InvalidArgument(
          fmt::format("device_capacity {} is not a size", options_.device_capacity));
    }
    uint64_t granularity = std::max<uint64_t>(d.granularity, 1);
    devices_.push_back(d);
    device_budgets_.push_back({std::min(*capacity, d.memory) / granularity * granularity, 0});
  }
  if (devices_.empty()) {
    return Status::Unavailable(fmt::format("none of the GPUs named in devices ({}) is here",
                                           options_.devices));
  }
  return Status::OK();
}

std::string Store::DeviceSummary() const {
  if (devices_.empty()) return fmt::format("unavailable ({})", options_.devices_unavailable);
  std::string out = fmt::format("{} GPU{} ({})", devices_.size(), devices_.size() == 1 ? "" : "s",
                                options_.device_backend->kind());
  for (size_t i = 0; i < devices_.size(); ++i) {
    out += fmt::format("; pool {}: {} {}, capacity {}", i + 1, devices_[i].uuid, devices_[i].name,
                       FormatBytes(device_budgets_[i].capacity));
  }
  return out;
}

fb::Offset<fb::Vector<fb::Offset<wire::DevicePoolInfo>>> Store::DevicePools(
    fb::FlatBufferBuilder& fbb) const {
  std::vector<fb::Offset<wire::DevicePoolInfo>> infos;
  for (size_t i = 0; i < devices_.size(); ++i) {
    DevicePool::Stats total;
    for (const auto& [key, ns] : namespaces_) {
      DevicePool::Stats s = ns->devices[i]->stats();
      total.used += s.used;
      total.chunks += s.chunks;
    }
    auto uuid = fbb.CreateString(devices_[i].uuid);
    auto name = fbb.CreateString(devices_[i].name);
    auto kind = fbb.CreateString(options_.device_backend->kind());
    infos.push_back(wire::CreateDevicePoolInfo(
        fbb, static_cast<uint32_t>(i + 1), uuid, name, kind, device_budgets_[i].capacity,
        options_.device_chunk_size, device_budgets_[i].reserved, total.used, total.chunks));
  }
  return fbb.CreateVector(infos);
}

Result<Store::Namespace*> Store::NamespaceFor(uid_t uid) {
  uint32_t key = options_.per_user_namespaces ? static_cast<uint32_t>(uid) : kShared;
  if (auto it = namespaces_.find(key); it != namespaces_.end()) return it->second.get();
  auto ns = std::make_unique<Namespace>();
  Namespace* raw = ns.get();
  raw->key = key;
  HostPoolOptions po = options_.pool;
  if (key != kShared) po.name_prefix += fmt::format("u{}-", key);
  auto pool = HostPool::Create(po, [this, raw](uint32_t id) { OnSegmentRetired(*raw, 0, id); });
  if (!pool.ok()) return pool.status();
  raw->pool = std::move(*pool);
  for (size_t i = 0; i < devices_.size(); ++i) {
    auto n = static_cast<uint32_t>(i + 1);
    raw->devices.push_back(std::make_unique<DevicePool>(
        *options_.device_backend, i, devices_[i], options_.device_chunk_size, &device_budgets_[i],
        [this, raw, n](uint32_t id) { OnSegmentRetired(*raw, n, id); }));
  }
  raw->table = std::make_unique<ObjectTable>(
      [this, raw](const StoredObject& o) { OnFreed(*raw, o); }, WallClockNs);
  raw->table->set_observer([this, raw](TableEvent e, const StoredObject& o) {
    static constexpr wire::EventKind kKinds[] = {
        wire::EventKind::Created, wire::EventKind::Sealed,  wire::EventKind::Aborted,
        wire::EventKind::Deleted, wire::EventKind::Evicted, wire::EventKind::Freed};
    Emit(kKinds[static_cast<int>(e)], &o, current_, raw);
  });
  if (key != kShared) spdlog::info("namespace of uid {} created", key);
  namespaces_.emplace(key, std::move(ns));
  return raw;
}

void Store::MaybeDropNamespace(Namespace* ns) {
  const ObjectCounts& c = ns->table->counts();
  if (ns->key == kShared || ns->sessions > 0 || c.creating + c.sealed + c.deleted > 0) return;
  spdlog::info("namespace of uid {} is empty; its segments are given back", ns->key);
  namespaces_.erase(ns->key);
}

std::string Store::Refusal(const PeerCredentials& c) const {
  const AccessOptions& a = options_.access;
  auto has = [](const auto& list, auto id) {
    return std::find(list.begin(), list.end(), id) != list.end();
  };
  auto member = [&](gid_t g) { return c.gid == g || has(c.groups, g); };
  if (c.uid == 0 || c.uid == a.daemon_uid || has(a.users, c.uid)) return "";
  if (a.users.empty() && a.groups.empty()) {
    if (member(a.socket_gid)) return "";
    return fmt::format(
        "uid {} may not use this depotd: it admits root, its own user (uid {}) and the members "
        "of the socket's group (gid {}); see allow_users and allow_groups in its config",
        c.uid, a.daemon_uid, a.socket_gid);
  }
  for (gid_t g : a.groups) {
    if (member(g)) return "";
  }
  return fmt::format(
      "uid {} may not use this depotd: it is not in allow_users and none of its groups is in "
      "allow_groups",
      c.uid);
}

Status Store::CheckQuota(const SessionState& st, uint64_t bytes) const {
  // `who` names the holder, in the message only.
  auto check = [&](const Quota& q, const Usage& u, const std::string& who,
                   std::string_view key) -> Status {
    if (q.objects != 0 && u.objects + 1 > q.objects) {
      return Status::QuotaExceeded(fmt::format("{} has {} objects, its limit ({}_objects)", who,
                                               u.objects, key));
    }
    if (q.bytes != 0 && u.bytes + bytes > q.bytes) {
      return Status::QuotaExceeded(fmt::format(
          "{} has {} in objects; {} more would pass its limit of {} ({}_bytes)", who,
          FormatBytes(u.bytes), FormatBytes(bytes), FormatBytes(q.bytes), key));
    }
    return Status::OK();
  };
  const Quota& uq = options_.user_quota;
  if (uq.bytes != 0 || uq.objects != 0) {
    auto it = user_usage_.find(st.creds.uid);
    Status user = check(uq, it == user_usage_.end() ? Usage{} : it->second,
                        fmt::format("uid {}", st.creds.uid), "user_quota");
    if (!user.ok()) return user;
  }
  return check(options_.client_quota, st.created, "this connection", "client_quota");
}

void Store::OnFreed(Namespace& ns, const StoredObject& o) {
  FreeFrames(ns, o.frames());
  uint64_t bytes = o.size();
  auto forget = [bytes](Usage& u) {
    u.bytes -= std::min(u.bytes, bytes);
    u.objects -= std::min<uint64_t>(u.objects, 1);
  };
  // Entries stay when they reach zero: a user who puts and deletes in a loop would otherwise
  // cost an allocation per object.
  if (auto it = user_usage_.find(o.creator_uid); it != user_usage_.end()) forget(it->second);
  if (auto it = sessions_.find(o.creator); it != sessions_.end()) forget(it->second.created);
}

SessionId Store::Open(Peer* peer, PeerCredentials creds) {
  SessionId id = next_session_++;
  ++connections_;
  SessionState st;
  st.peer = peer;
  st.creds = creds;
  st.connected_ns = WallClockNs();
  sessions_.emplace(id, std::move(st));
  return id;
}

void Store::Close(SessionId session) {
  auto it = sessions_.find(session);
  if (it == sessions_.end()) return;
  std::vector<uint64_t> parked;
  for (const auto& [wait_id, w] : waits_) {
    if (w.session == session) parked.push_back(wait_id);
  }
  for (uint64_t wait_id : parked) TakeWait(wait_id);
  Namespace* ns = it->second.ns;
  if (ns == nullptr) {  // never greeted
    sessions_.erase(it);
    return;
  }
  current_ = session;
  ns->table->DropSession(session);
  current_ = 0;
  Emit(wire::EventKind::ClientDisconnected, nullptr, session, ns);
  sessions_.erase(session);
  --ns->sessions;
  MaybeDropNamespace(ns);
}

Status Store::Handle(SessionId s, const proto::Header& h, std::span<const uint8_t> body) {
  auto it = sessions_.find(s);
  if (it == sessions_.end()) return Status::Disconnected("session is closed");
  auto type = static_cast<MsgType>(h.type);
  if (!it->second.greeted && type != MsgType::kHello) {
    NoteProtocolError();
    return Status::ProtocolError(
        fmt::format("expected hello as the first message, got {}", proto::TypeName(h.type)));
  }
  ++requests_;
  ++it->second.requests;
  current_ = s;  // events caused by this request name its session
  Status st;
  try {
    st = Dispatch(s, it->second, h, body);
  } catch (const std::bad_alloc&) {
    // The daemon's own memory (metadata, replies) ran out: this request fails, the rest go on.
    spdlog::error("out of memory answering {} from session {}", proto::TypeName(h.type), s);
    ReplyError(s, h.request_id,
               Status::Unavailable("depotd ran out of memory while answering this request"));
  }
  current_ = 0;
  return st;
}

Status Store::Dispatch(SessionId s, SessionState& st, const proto::Header& h,
                       std::span<const uint8_t> body) {
  auto type = static_cast<MsgType>(h.type);
  uint64_t id = h.request_id;
  switch (type) {
    case MsgType::kHello:
      if (st.greeted) {
        NoteProtocolError();
        return Status::ProtocolError("hello sent twice");
      }
      return OnHello(s, id, *proto::Body<wire::HelloRequest>(body));
    case MsgType::kCreate:
      OnCreate(s, id, *proto::Body<wire::CreateRequest>(body));
      break;
    case MsgType::kSeal:
    case MsgType::kAbort:
      OnSealOrAbort(s, id, type == MsgType::kSeal, *proto::Body<wire::GuidRequest>(body));
      break;
    case MsgType::kGet:
      OnGet(s, id, *proto::Body<wire::GetRequest>(body));
      break;
    case MsgType::kRelease:
      OnRelease(s, *proto::Body<wire::ReleaseRequest>(body));
      break;
    case MsgType::kDelete:
      OnDelete(s, id, *proto::Body<wire::GuidsRequest>(body));
      break;
    case MsgType::kContains:
      OnContains(s, id, *proto::Body<wire::GuidsRequest>(body));
      break;
    case MsgType::kList:
      OnList(s, id, *proto::Body<wire::ListRequest>(body));
      break;
    case MsgType::kStat:
      OnStat(s, id, *proto::Body<wire::GuidRequest>(body));
      break;
    case MsgType::kStatus:
      OnStatus(s, id);
      break;
    case MsgType::kPing:
    case MsgType::kSubscribe:
      OnEmpty(s, id, type);
      break;
    case MsgType::kClients:
      OnClients(s, id);
      break;
    default:
      NoteProtocolError();
      return Status::ProtocolError(
          fmt::format("{} is not a request a client may send", proto::TypeName(h.type)));
  }
  return Status::OK();
}

void Store::Reply(SessionId session, uint64_t request_id, uint16_t type,
                  fb::FlatBufferBuilder& fbb, std::vector<UniqueFd> fds) {
  auto it = sessions_.find(session);
  if (it == sessions_.end()) return;
  it->second.peer->Send(proto::Encode(type, request_id, fbb), std::move(fds));
}

void Store::ReplyError(SessionId session, uint64_t request_id, const Status& status) {
  ++errors_[static_cast<size_t>(status.code())];
  auto it = sessions_.find(session);
  if (it == sessions_.end()) return;
  it->second.peer->Send(proto::EncodeError(request_id, ToWire(status.code()), status.message()), {});
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
  if (std::string why = Refusal(st.creds); !why.empty()) {
    spdlog::warn("refused pid {}: {}", st.creds.pid, why);
    return Status::PermissionDenied(why);
  }
  auto ns = NamespaceFor(st.creds.uid);
  if (!ns.ok()) return Status::Unavailable(ns.status().message());
  st.ns = *ns;
  ++st.ns->sessions;
  st.greeted = true;
  if (req.client_name()) st.name = req.client_name()->str();
  std::ifstream comm(fmt::format("/proc/{}/comm", st.creds.pid));
  std::getline(comm, st.process);
  Emit(wire::EventKind::ClientConnected, nullptr, s, st.ns);
  spdlog::info("client connected: session {} pid {} uid {} gid {}{}{}", s, st.creds.pid,
               st.creds.uid, st.creds.gid, req.client_name() ? " name " : "",
               req.client_name() ? req.client_name()->str() : "");
  fb::FlatBufferBuilder fbb;
  auto version = fbb.CreateString(options_.version);
  auto pools = DevicePools(fbb);
  auto unavailable = fbb.CreateString(options_.devices_unavailable);
  fbb.Finish(wire::CreateHelloReply(fbb, proto::kProtocolVersion, version, s, ::getpid(),
                                    options_.max_message_size, proto::kMaxInlineSize,
                                    options_.hugepages, pools, unavailable));
  Reply(s, id, proto::ReplyType(MsgType::kHello), fbb);
  return Status::OK();
}

Result<std::vector<Location>> Store::AllocateFrames(Namespace& ns, std::span<const uint64_t> sizes,
                                                   std::span<const uint32_t> pools) {
  while (true) {
    std::vector<Location> frames;
    Status failed;
    for (size_t i = 0; i < sizes.size(); ++i) {
      uint32_t pool = pools.empty() ? 0 : pools[i];
      if (sizes[i] == 0) {
        frames.push_back(Location{.pool = pool});
        continue;
      }
      auto loc = pool == 0 ? ns.pool->Allocate(sizes[i]) : ns.devices[pool - 1]->Allocate(sizes[i]);
      if (!loc.ok()) {
        failed = loc.status();
        break;
      }
      loc->pool = pool;
      frames.push_back(*loc);
    }
    if (failed.ok()) return frames;
    FreeFrames(ns, frames);
    if (!failed.IsStoreFull()) return failed;
    // Other namespaces' spare segments go before this namespace's evictable objects.
    uint64_t released = 0;
    for (auto& [key, other] : namespaces_) {
      if (other.get() == &ns) continue;
      released += other->pool->ReleaseSpares();
      for (auto& d : other->devices) released += d->ReleaseSpares();
    }
    if (released == 0 && (!options_.eviction || !ns.table->EvictLru())) return failed;
  }
}

void Store::FreeFrames(Namespace& ns, std::span<const Location> frames) {
  for (const Location& f : frames) {
    if (f.size == 0) continue;
    if (f.pool == 0) {
      ns.pool->Free(f);
    } else {
      ns.devices[f.pool - 1]->Free(f);
    }
  }
}

Status Store::WriteInline(Namespace& ns, const std::vector<Location>& frames,
                          std::span<const uint8_t> data) {
  for (const Location& f : frames) {
    if (f.size == 0) continue;
    auto base = ns.pool->Map(f.segment);
    if (!base.ok()) return base.status();
    std::memcpy(*base + f.offset, data.data(), f.size);
    data = data.subspan(f.size);
  }
  return Status::OK();
}

void Store::OnCreate(SessionId s, uint64_t id, const wire::CreateRequest& req) {
  SessionState& st = sessions_.at(s);
  Namespace& ns = *st.ns;
  size_t nframes = req.frame_sizes() ? req.frame_sizes()->size() : 0;
  size_t metadata_size = req.metadata() ? req.metadata()->size() : 0;
  size_t name_size = req.name() ? req.name()->size() : 0;
  auto invalid = [&](std::string msg) { ReplyError(s, id, Status::InvalidArgument(std::move(msg))); };
  if (nframes == 0 || nframes > options_.max_frames) {
    return invalid(fmt::format("an object has 1 to {} frames, not {}", options_.max_frames, nframes));
  }
  if (metadata_size > options_.max_metadata) {
    return invalid(fmt::format("metadata of {} bytes exceeds the limit of {} bytes", metadata_size,
                               options_.max_metadata));
  }
  if (name_size > proto::kMaxNameSize) {
    return invalid(fmt::format("name of {} bytes exceeds the limit of {} bytes", name_size,
                               proto::kMaxNameSize));
  }
  std::vector<uint64_t> sizes(req.frame_sizes()->begin(), req.frame_sizes()->end());
  uint64_t total = 0;
  for (uint64_t size : sizes) {
    if (size > budget_.capacity) {
      return ReplyError(s, id, Status::StoreFull(fmt::format(
                                   "a frame of {} is larger than the store's capacity of {}",
                                   FormatBytes(size), FormatBytes(budget_.capacity))));
    }
    total += size;
  }
  std::vector<uint32_t> pools;
  if (req.frame_pools()) {
    pools.assign(req.frame_pools()->begin(), req.frame_pools()->end());
    if (pools.size() != nframes) {
      return invalid(fmt::format("{} frame pools given for {} frames", pools.size(), nframes));
    }
    for (uint32_t p : pools) {
      if (p == 0 || p <= devices_.size()) continue;
      if (devices_.empty()) {
        return ReplyError(s, id, Status::Unavailable(fmt::format(
                                     "device pools: unavailable ({})", options_.devices_unavailable)));
      }
      return invalid(fmt::format("there is no device pool {} (this depotd has {})", p, devices_.size()));
    }
  }
  bool device_frames = std::any_of(pools.begin(), pools.end(), [](uint32_t p) { return p != 0; });
  bool inline_data = req.inline_data() != nullptr;
  if (inline_data && device_frames) return invalid("device frames cannot travel inside a request");
  if (inline_data && (req.inline_data()->size() != total || !req.seal())) {
    return invalid(fmt::format(
        "inline data of {} bytes must match the frames' {} bytes and come with seal",
        req.inline_data()->size(), total));
  }
  if (req.seal() && !inline_data) return invalid("seal on create needs the inline data");
  Guid guid = req.guid() ? FromWire(*req.guid()) : Guid::FromRandomBits(guid_bits_(), guid_bits_());
  if (guid.is_nil()) return invalid("the nil GUID cannot name an object");
  if (ns.table->Find(guid) != nullptr) {
    return ReplyError(s, id, Status::AlreadyExists(fmt::format("object {} already exists",
                                                               guid.ToString())));
  }
  if (Status q = CheckQuota(st, total); !q.ok()) {
    spdlog::warn("create for pid {} uid {}: {}", st.creds.pid, st.creds.uid, q.message());
    return ReplyError(s, id, q);
  }

  auto frames = AllocateFrames(ns, sizes, pools);
  if (!frames.ok()) {
    spdlog::warn("create for pid {}: {}", st.creds.pid, frames.status().message());
    return ReplyError(s, id, frames.status());
  }
  if (inline_data) {
    Status w = WriteInline(ns, *frames, {req.inline_data()->data(), req.inline_data()->size()});
    if (!w.ok()) {
      FreeFrames(ns, *frames);
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
  n.creator = s;
  n.creator_pid = st.creds.pid;
  n.creator_uid = st.creds.uid;
  auto created = ns.table->Create(std::move(n));
  // The GUID was checked above and nothing ran since: Create cannot fail here.
  const StoredObject* obj = *created;
  Usage& user = user_usage_[st.creds.uid];
  for (Usage* u : {&user, &st.created}) {
    u->bytes += total;
    ++u->objects;
  }

  fb::FlatBufferBuilder fbb;
  std::vector<uint64_t> ids;
  std::vector<UniqueFd> fds;
  if (inline_data) {
    std::optional<uint64_t> checksum = req.checksum();
    ns.table->Seal(s, guid, checksum);
    WakeWaiters(ns, guid);
  } else if (Status c = CollectSegments(st, obj->frames(), ids, fds); !c.ok()) {
    ns.table->Abort(s, guid);
    return ReplyError(s, id, c);
  }
  auto segments = SegmentInfos(fbb, ns, ids);
  auto locations = Frames(fbb, obj->frames());
  wire::Guid g = ToWire(guid);
  fbb.Finish(wire::CreateCreateReply(fbb, &g, locations, segments));
  Reply(s, id, proto::ReplyType(MsgType::kCreate), fbb, std::move(fds));
}

void Store::OnSealOrAbort(SessionId s, uint64_t id, bool seal, const wire::GuidRequest& req) {
  if (!req.guid()) return ReplyError(s, id, Status::InvalidArgument("no GUID given"));
  Guid guid = FromWire(*req.guid());
  Namespace& ns = *sessions_.at(s).ns;
  std::optional<uint64_t> checksum = req.checksum();
  Status st = seal ? ns.table->Seal(s, guid, checksum) : ns.table->Abort(s, guid);
  if (!st.ok()) return ReplyError(s, id, st);
  if (seal) WakeWaiters(ns, guid);
  fb::FlatBufferBuilder fbb(64);
  fbb.Finish(wire::CreateEmptyReply(fbb));
  Reply(s, id, proto::ReplyType(seal ? MsgType::kSeal : MsgType::kAbort), fbb);
}

Status Store::CheckGuidCount(const fb::Vector<const wire::Guid*>* guids) {
  size_t n = guids ? guids->size() : 0;
  if (n == 0 || n > proto::kMaxGuidsPerRequest) {
    return Status::InvalidArgument(
        fmt::format("a request names 1 to {} GUIDs, not {}", proto::kMaxGuidsPerRequest, n));
  }
  return Status::OK();
}

void Store::OnGet(SessionId s, uint64_t id, const wire::GetRequest& req) {
  if (Status st = CheckGuidCount(req.guids()); !st.ok()) return ReplyError(s, id, st);
  size_t n = req.guids()->size();
  int64_t timeout = req.timeout_ms();
  if (timeout < -1) {
    return ReplyError(s, id, Status::InvalidArgument(fmt::format(
                                 "timeout {} ms is invalid (0: poll, -1: forever)", timeout)));
  }
  SessionState& st = sessions_.at(s);
  ObjectTable& table = *st.ns->table;
  uint64_t wait_id = next_wait_++;
  GetWait w{s, id, {}, std::vector<const StoredObject*>(n), std::vector<Status>(n), 0, nullptr};
  for (size_t i = 0; i < n; ++i) {
    Guid g = FromWire(*req.guids()->Get(i));
    w.guids.push_back(g);
    auto got = table.Acquire(s, g);
    if (got.ok()) {
      w.acquired[i] = *got;
    } else if (timeout == 0) {
      w.errors[i] = got.status();
    } else {
      ++w.missing;
    }
  }
  if (w.missing > 0 && st.waiting >= options_.max_pending) {
    for (const StoredObject* o : w.acquired) {
      if (o != nullptr) table.Release(s, o->id);
    }
    return ReplyError(s, id, Status::QuotaExceeded(fmt::format(
                                 "this connection already has {} gets waiting, its limit "
                                 "(max_pending)",
                                 st.waiting)));
  }
  for (size_t i = 0; i < n; ++i) {
    if (w.acquired[i] == nullptr && w.errors[i].ok()) waiting_on_.emplace(w.guids[i], wait_id);
  }
  ++st.waiting;
  auto& parked = waits_.emplace(wait_id, std::move(w)).first->second;
  if (parked.missing == 0) return FinishGet(wait_id);
  // A timer counts nanoseconds in 64 bits: a longer wait (over about 35 years) waits forever.
  constexpr int64_t kLongestTimeoutMs = int64_t{1} << 40;
  if (timeout > 0 && timeout < kLongestTimeoutMs) {
    parked.timer = std::make_unique<boost::asio::steady_timer>(io_, std::chrono::milliseconds(timeout));
    parked.timer->async_wait([this, wait_id](const boost::system::error_code& ec) {
      if (!ec) FinishGet(wait_id);
    });
  }
}

void Store::WakeWaiters(Namespace& ns, const Guid& guid) {
  // Waiters in other namespaces wait for another object of the same GUID.
  auto [b, e] = waiting_on_.equal_range(guid);
  std::vector<uint64_t> ids;
  for (auto it = b; it != e;) {
    auto w = waits_.find(it->second);
    if (w != waits_.end() && sessions_.at(w->second.session).ns != &ns) {
      ++it;
      continue;
    }
    ids.push_back(it->second);
    it = waiting_on_.erase(it);
  }
  for (uint64_t wait_id : ids) {
    auto it = waits_.find(wait_id);
    if (it == waits_.end()) continue;
    GetWait& w = it->second;
    for (size_t i = 0; i < w.guids.size(); ++i) {
      if (w.guids[i] != guid || w.acquired[i] != nullptr) continue;
      auto got = ns.table->Acquire(w.session, guid);
      if (!got.ok()) continue;
      w.acquired[i] = *got;
      --w.missing;
    }
    if (w.missing == 0) FinishGet(wait_id);
  }
}

std::optional<Store::GetWait> Store::TakeWait(uint64_t wait_id) {
  auto it = waits_.find(wait_id);
  if (it == waits_.end()) return std::nullopt;
  GetWait w = std::move(it->second);
  waits_.erase(it);
  if (auto s = sessions_.find(w.session); s != sessions_.end()) --s->second.waiting;
  for (const Guid& g : w.guids) {
    auto [b, e] = waiting_on_.equal_range(g);
    for (auto x = b; x != e;) x = (x->second == wait_id) ? waiting_on_.erase(x) : std::next(x);
  }
  return w;
}

void Store::FinishGet(uint64_t wait_id) {
  std::optional<GetWait> taken = TakeWait(wait_id);
  if (!taken) return;
  GetWait& w = *taken;
  auto sit = sessions_.find(w.session);
  if (sit == sessions_.end()) return;
  SessionState& st = sit->second;

  fb::FlatBufferBuilder fbb(1024);
  std::vector<fb::Offset<wire::GetResult>> results;
  std::vector<uint64_t> ids;
  std::vector<UniqueFd> fds;
  for (size_t i = 0; i < w.guids.size(); ++i) {
    wire::Guid g = ToWire(w.guids[i]);
    const StoredObject* o = w.acquired[i];
    if (o == nullptr) {
      Status err = w.errors[i];
      if (err.ok()) {
        err = Status::Timeout(fmt::format("object {} was not {} before the timeout",
                                          w.guids[i].ToString(),
                                          st.ns->table->Find(w.guids[i]) ? "sealed" : "created"));
      }
      auto msg = fbb.CreateString(err.message());
      results.push_back(wire::CreateGetResult(fbb, &g, ToWire(err.code()), msg));
      continue;
    }
    if (Status c = CollectSegments(st, o->frames(), ids, fds); !c.ok()) {
      // Nothing is handed over: give back every reference this get took.
      for (const StoredObject* held : w.acquired) {
        if (held != nullptr) st.ns->table->Release(w.session, held->id);
      }
      return ReplyError(w.session, w.request_id, c);
    }
    auto frames = Frames(fbb, o->frames());
    auto metadata = fbb.CreateVector(o->metadata().data(), o->metadata().size());
    std::optional<uint64_t> checksum;
    if (o->has_checksum) checksum = o->checksum;
    results.push_back(
        wire::CreateGetResult(fbb, &g, wire::Code::Ok, 0, o->id, frames, metadata, checksum));
  }
  auto results_vec = fbb.CreateVector(results);
  auto segments = SegmentInfos(fbb, *st.ns, ids);
  fbb.Finish(wire::CreateGetReply(fbb, results_vec, segments));
  Reply(w.session, w.request_id, proto::ReplyType(MsgType::kGet), fbb, std::move(fds));
}

Store::SegmentRef Store::SegmentOf(const Namespace& ns, uint32_t pool, uint32_t id) {
  if (pool == 0) {
    const HostPool::Segment* seg = ns.pool->segment(id);
    return {seg->fd(), seg->size, seg->dedicated};
  }
  const DevicePool::Chunk* chunk = ns.devices.at(pool - 1)->chunk(id);
  return {chunk->memory.fd.get(), chunk->memory.size, chunk->dedicated};
}

Status Store::CollectSegments(SessionState& st, std::span<const Location> frames,
                              std::vector<uint64_t>& keys, std::vector<UniqueFd>& fds) {
  for (const Location& f : frames) {
    if (f.size == 0) continue;
    SegmentRef seg = SegmentOf(*st.ns, f.pool, f.segment);
    uint64_t key = SegmentKey(f.pool, f.segment);
    bool needed = seg.dedicated ? std::find(keys.begin(), keys.end(), key) == keys.end()
                                : !st.sent_segments.contains(key);
    if (!needed) continue;
    UniqueFd fd(::fcntl(seg.fd, F_DUPFD_CLOEXEC, 0));
    if (!fd.valid()) {
      // The caller sends nothing, so the peer still lacks every segment of this reply.
      for (uint64_t sent : keys) st.sent_segments.erase(sent);
      std::string why = fmt::format("depotd cannot pass a segment: {}", std::strerror(errno));
      spdlog::error("{} (raise LimitNOFILE / RLIMIT_NOFILE)", why);
      return Status::Unavailable(why);
    }
    if (!seg.dedicated) st.sent_segments.insert(key);
    keys.push_back(key);
    fds.push_back(std::move(fd));
  }
  return Status::OK();
}

fb::Offset<fb::Vector<fb::Offset<wire::SegmentInfo>>> Store::SegmentInfos(
    fb::FlatBufferBuilder& fbb, const Namespace& ns, const std::vector<uint64_t>& keys) {
  std::vector<fb::Offset<wire::SegmentInfo>> infos;
  for (uint64_t key : keys) {
    auto pool = static_cast<uint32_t>(key >> 32);
    auto id = static_cast<uint32_t>(key);
    SegmentRef seg = SegmentOf(ns, pool, id);
    infos.push_back(wire::CreateSegmentInfo(fbb, id, seg.size, seg.dedicated, pool));
  }
  return fbb.CreateVector(infos);
}

void Store::OnSegmentRetired(const Namespace& ns, uint32_t pool, uint32_t segment) {
  for (auto& [id, st] : sessions_) {
    if (st.ns != &ns || st.sent_segments.erase(SegmentKey(pool, segment)) == 0) continue;
    fb::FlatBufferBuilder fbb(64);
    std::vector<uint32_t> ids{segment};
    fbb.Finish(wire::CreateSegmentsRetired(fbb, fbb.CreateVector(ids), pool));
    st.peer->Send(proto::Encode(static_cast<uint16_t>(MsgType::kSegmentsRetired), 0, fbb), {});
  }
}

void Store::OnRelease(SessionId s, const wire::ReleaseRequest& req) {
  if (!req.handles()) return;
  ObjectTable& table = *sessions_.at(s).ns->table;
  for (uint64_t handle : *req.handles()) {
    Status st = table.Release(s, handle);
    if (!st.ok()) spdlog::debug("release from session {}: {}", s, st.message());
  }
}

void Store::OnDelete(SessionId s, uint64_t id, const wire::GuidsRequest& req) {
  if (Status st = CheckGuidCount(req.guids()); !st.ok()) return ReplyError(s, id, st);
  ObjectTable& table = *sessions_.at(s).ns->table;
  fb::FlatBufferBuilder fbb(256);
  std::vector<fb::Offset<wire::GuidResult>> results;
  for (const wire::Guid* g : *req.guids()) {
    Status st = table.Delete(FromWire(*g));
    auto msg = fbb.CreateString(st.message());
    results.push_back(wire::CreateGuidResult(fbb, g, ToWire(st.code()), msg));
  }
  fbb.Finish(wire::CreateGuidsReply(fbb, fbb.CreateVector(results)));
  Reply(s, id, proto::ReplyType(MsgType::kDelete), fbb);
}

void Store::OnContains(SessionId s, uint64_t id, const wire::GuidsRequest& req) {
  if (Status st = CheckGuidCount(req.guids()); !st.ok()) return ReplyError(s, id, st);
  fb::FlatBufferBuilder fbb(256);
  std::vector<fb::Offset<wire::GuidResult>> results;
  const ObjectTable& table = *sessions_.at(s).ns->table;
  for (const wire::Guid* g : *req.guids()) {
    const StoredObject* o = table.Find(FromWire(*g));
    wire::Code code = o && o->state == ObjectState::kSealed ? wire::Code::Ok : wire::Code::NotFound;
    auto msg = fbb.CreateString(!o ? "does not exist" : code == wire::Code::Ok ? "" : "not sealed yet");
    results.push_back(wire::CreateGuidResult(fbb, g, code, msg));
  }
  fbb.Finish(wire::CreateGuidsReply(fbb, fbb.CreateVector(results)));
  Reply(s, id, proto::ReplyType(MsgType::kContains), fbb);
}

void Store::OnList(SessionId s, uint64_t id, const wire::ListRequest& req) {
  size_t limit = req.limit() == 0 ? 1000 : std::min(req.limit(), proto::kMaxListLimit);
  std::optional<Guid> after;
  if (req.after()) after = FromWire(*req.after());
  auto objects = sessions_.at(s).ns->table->List(after, limit + 1);
  bool more = objects.size() > limit;
  if (more) objects.pop_back();
  fb::FlatBufferBuilder fbb(256 * objects.size() + 64);
  std::vector<fb::Offset<wire::ObjectInfo>> infos;
  for (const StoredObject* o : objects) infos.push_back(BuildInfo(fbb, *o, false));
  fbb.Finish(wire::CreateListReply(fbb, fbb.CreateVector(infos), more));
  Reply(s, id, proto::ReplyType(MsgType::kList), fbb);
}

void Store::OnStat(SessionId s, uint64_t id, const wire::GuidRequest& req) {
  if (!req.guid()) return ReplyError(s, id, Status::InvalidArgument("no GUID given"));
  Guid guid = FromWire(*req.guid());
  const StoredObject* o = sessions_.at(s).ns->table->Find(guid);
  if (!o) return ReplyError(s, id, Status::NotFound(fmt::format("object {} does not exist", guid.ToString())));
  fb::FlatBufferBuilder fbb(512 + o->metadata().size());
  fbb.Finish(wire::CreateStatReply(fbb, BuildInfo(fbb, *o, true)));
  Reply(s, id, proto::ReplyType(MsgType::kStat), fbb);
}

void Store::OnStatus(SessionId s, uint64_t id) {
  StoreStatus st;
  st.daemon_version = options_.version;
  st.socket_path = options_.socket_path;
  st.daemon_pid = ::getpid();
  st.uptime_ms = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                           std::chrono::steady_clock::now() - started_)
                                           .count());
  st.capacity = budget_.capacity;
  for (size_t i = 0; i < devices_.size(); ++i) {
    st.device_pools.push_back({.pool = static_cast<uint32_t>(i + 1),
                               .uuid = devices_[i].uuid,
                               .name = devices_[i].name,
                               .kind = options_.device_backend->kind(),
                               .capacity = device_budgets_[i].capacity,
                               .chunk_size = options_.device_chunk_size,
                               .reserved = device_budgets_[i].reserved});
  }
  // Totals over every namespace.
  for (const auto& [key, ns] : namespaces_) {
    HostPoolStats p = ns->pool->stats();
    st.reserved += p.reserved;
    st.used += p.used;
    st.largest_free = std::max(st.largest_free, p.largest_free);
    st.free_in_segments += p.free_in_segments;
    st.largest_free_block = std::max(st.largest_free_block, p.largest_block);
    st.segments += p.segments;
    const ObjectCounts& n = ns->table->counts();
    st.objects_creating += n.creating;
    st.objects_sealed += n.sealed;
    st.objects_deleted += n.deleted;
    st.evictions += n.evictions;
    st.evicted_bytes += n.evicted_bytes;
    for (size_t i = 0; i < st.device_pools.size(); ++i) {
      DevicePool::Stats d = ns->devices[i]->stats();
      st.device_pools[i].used += d.used;
      st.device_pools[i].chunks += d.chunks;
    }
  }
  if (namespaces_.empty()) st.largest_free = budget_.capacity - budget_.reserved;
  st.prefault = options_.pool.prefault;
  st.clients = static_cast<uint32_t>(sessions_.size());
  st.connections = connections_;
  st.gets_waiting = static_cast<uint32_t>(waits_.size());
  st.requests = requests_;
  st.errors.assign(errors_.begin(), errors_.begin() + static_cast<size_t>(wire::Code::MAX) + 1);
  for (const auto& [uid, u] : user_usage_) {
    if (u.objects > 0) st.users.push_back({uid, u.objects, u.bytes});
  }
  st.user_quota_bytes = options_.user_quota.bytes;
  st.user_quota_objects = options_.user_quota.objects;
  st.client_quota_bytes = options_.client_quota.bytes;
  st.client_quota_objects = options_.client_quota.objects;
  st.per_user_namespaces = options_.per_user_namespaces;
  st.namespaces = static_cast<uint32_t>(namespaces_.size());
  st.devices_unavailable = options_.devices_unavailable;
  fb::FlatBufferBuilder fbb(512 + 32 * st.users.size());
  fbb.Finish(BuildStatusReply(fbb, st));
  Reply(s, id, proto::ReplyType(MsgType::kStatus), fbb);
}

void Store::OnEmpty(SessionId s, uint64_t id, MsgType type) {
  if (type == MsgType::kSubscribe) sessions_.at(s).subscribed = true;
  fb::FlatBufferBuilder fbb(64);
  fbb.Finish(wire::CreateEmptyReply(fbb));
  Reply(s, id, proto::ReplyType(type), fbb);
}

void Store::OnClients(SessionId s, uint64_t id) {
  fb::FlatBufferBuilder fbb(256 * sessions_.size() + 64);
  std::vector<fb::Offset<wire::ClientInfo>> infos;
  for (const auto& [sid, st] : sessions_) {
    if (!st.greeted) continue;
    Holdings h = st.ns->table->HoldingsOf(sid);
    auto name = fbb.CreateString(st.name);
    auto process = fbb.CreateString(st.process);
    infos.push_back(wire::CreateClientInfo(
        fbb, sid, st.creds.pid, st.creds.uid, st.creds.gid, name, process, h.references, h.bytes,
        h.creating, st.requests, st.connected_ns, st.subscribed, st.created.objects,
        st.created.bytes));
  }
  fbb.Finish(wire::CreateClientsReply(fbb, fbb.CreateVector(infos)));
  Reply(s, id, proto::ReplyType(MsgType::kClients), fbb);
}

void Store::Emit(wire::EventKind kind, const StoredObject* object, SessionId cause,
                 const Namespace* ns) {
  // A subscriber that stops reading must not make the daemon hold events without bound: past
  // this many unwritten messages, events are counted as dropped and reported with the next one.
  constexpr size_t kMaxBacklog = 4096;
  auto cause_it = sessions_.find(cause);
  for (auto& [sid, st] : sessions_) {
    if (!st.subscribed || st.ns != ns) continue;
    if (st.peer->Backlog() >= kMaxBacklog) {
      ++st.events_dropped;
      continue;
    }
    fb::FlatBufferBuilder fbb(256);
    fb::Offset<fb::String> name;
    if (object) name = fbb.CreateString(object->name().data(), object->name().size());
    wire::EventBuilder b(fbb);
    b.add_kind(kind);
    b.add_unix_ns(WallClockNs());
    wire::Guid g;
    if (object) {
      g = ToWire(object->guid);
      b.add_guid(&g);
      b.add_name(name);
      b.add_size(object->size());
    }
    b.add_session_id(cause);
    if (cause_it != sessions_.end()) {
      b.add_pid(cause_it->second.creds.pid);
      b.add_uid(cause_it->second.creds.uid);
    }
    b.add_dropped(st.events_dropped);
    fbb.Finish(b.Finish());
    st.events_dropped = 0;
    st.peer->Send(proto::Encode(static_cast<uint16_t>(MsgType::kEvent), 0, fbb), {});
  }
}

}  // namespace depot
