#include "daemon/store.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/units.h"

namespace depot {
namespace {

using proto::FromWire;
using proto::MsgType;
using proto::ToWire;
namespace fb = flatbuffers;

wire::FrameLocation ToWire(const Location& l) {
  return wire::FrameLocation(l.offset, l.size, l.segment, /*pool=*/0);
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
  return b.Finish();
}

}  // namespace

Store::Store(boost::asio::io_context& io, StoreOptions options)
    : io_(io),
      options_(std::move(options)),
      table_([this](const StoredObject& o) { FreeFrames(o.frames()); }, WallClockNs),
      started_(std::chrono::steady_clock::now()) {
  Guid seed = Guid::Random();
  std::seed_seq seq{seed.hi, seed.lo, static_cast<uint64_t>(::getpid())};
  guid_bits_.seed(seq);
}

Result<std::unique_ptr<Store>> Store::Create(boost::asio::io_context& io, StoreOptions options) {
  std::unique_ptr<Store> store(new Store(io, std::move(options)));
  store->table_.set_observer([s = store.get()](TableEvent e, const StoredObject& o) {
    static constexpr wire::EventKind kKinds[] = {
        wire::EventKind::Created, wire::EventKind::Sealed,  wire::EventKind::Aborted,
        wire::EventKind::Deleted, wire::EventKind::Evicted, wire::EventKind::Freed};
    s->Emit(kKinds[static_cast<int>(e)], &o, s->current_);
  });
  auto pool = HostPool::Create(store->options_.pool,
                               [s = store.get()](uint32_t id) { s->OnSegmentRetired(id); });
  if (!pool.ok()) return pool.status();
  store->pool_ = std::move(*pool);
  return store;
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
  std::vector<uint64_t> parked;
  for (const auto& [wait_id, w] : waits_) {
    if (w.session == session) parked.push_back(wait_id);
  }
  for (uint64_t wait_id : parked) TakeWait(wait_id);
  current_ = session;
  table_.DropSession(session);
  current_ = 0;
  auto it = sessions_.find(session);
  bool greeted = it != sessions_.end() && it->second.greeted;
  if (greeted) Emit(wire::EventKind::ClientDisconnected, nullptr, session);
  sessions_.erase(session);
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
  Status st = Dispatch(s, it->second, h, body);
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
                  fb::FlatBufferBuilder& fbb, std::vector<proto::UniqueFd> fds) {
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
  st.greeted = true;
  if (req.client_name()) st.name = req.client_name()->str();
  std::ifstream comm(fmt::format("/proc/{}/comm", st.creds.pid));
  std::getline(comm, st.process);
  Emit(wire::EventKind::ClientConnected, nullptr, s);
  spdlog::info("client connected: session {} pid {} uid {} gid {}{}{}", s, st.creds.pid,
               st.creds.uid, st.creds.gid, req.client_name() ? " name " : "",
               req.client_name() ? req.client_name()->str() : "");
  fb::FlatBufferBuilder fbb;
  auto version = fbb.CreateString(options_.version);
  fbb.Finish(wire::CreateHelloReply(fbb, proto::kProtocolVersion, version, s, ::getpid(),
                                    options_.max_message_size, proto::kMaxInlineSize,
                                    options_.hugepages));
  Reply(s, id, proto::ReplyType(MsgType::kHello), fbb);
  return Status::OK();
}

Result<std::vector<Location>> Store::AllocateFrames(std::span<const uint64_t> sizes) {
  while (true) {
    std::vector<Location> frames;
    Status failed;
    for (uint64_t size : sizes) {
      if (size == 0) {
        frames.push_back(Location{});
        continue;
      }
      auto loc = pool_->Allocate(size);
      if (!loc.ok()) {
        failed = loc.status();
        break;
      }
      frames.push_back(*loc);
    }
    if (failed.ok()) return frames;
    FreeFrames(frames);
    if (!failed.IsStoreFull() || !options_.eviction || !table_.EvictLru()) return failed;
  }
}

void Store::FreeFrames(std::span<const Location> frames) {
  for (const Location& f : frames) {
    if (f.size > 0) pool_->Free(f);
  }
}

Status Store::WriteInline(const std::vector<Location>& frames, std::span<const uint8_t> data) {
  for (const Location& f : frames) {
    if (f.size == 0) continue;
    auto base = pool_->Map(f.segment);
    if (!base.ok()) return base.status();
    std::memcpy(*base + f.offset, data.data(), f.size);
    data = data.subspan(f.size);
  }
  return Status::OK();
}

void Store::OnCreate(SessionId s, uint64_t id, const wire::CreateRequest& req) {
  SessionState& st = sessions_.at(s);
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
    if (size > pool_->options().capacity) {
      return ReplyError(s, id, Status::StoreFull(fmt::format(
                                   "a frame of {} is larger than the store's capacity of {}",
                                   FormatBytes(size), FormatBytes(pool_->options().capacity))));
    }
    total += size;
  }
  bool inline_data = req.inline_data() != nullptr;
  if (inline_data && (req.inline_data()->size() != total || !req.seal())) {
    return invalid(fmt::format(
        "inline data of {} bytes must match the frames' {} bytes and come with seal",
        req.inline_data()->size(), total));
  }
  if (req.seal() && !inline_data) return invalid("seal on create needs the inline data");
  Guid guid = req.guid() ? FromWire(*req.guid()) : Guid::FromRandomBits(guid_bits_(), guid_bits_());
  if (guid.is_nil()) return invalid("the nil GUID cannot name an object");
  if (table_.Find(guid) != nullptr) {
    return ReplyError(s, id, Status::AlreadyExists(fmt::format("object {} already exists",
                                                               guid.ToString())));
  }

  auto frames = AllocateFrames(sizes);
  if (!frames.ok()) {
    spdlog::warn("create for pid {}: {}", st.creds.pid, frames.status().message());
    return ReplyError(s, id, frames.status());
  }
  if (inline_data) {
    Status w = WriteInline(*frames, {req.inline_data()->data(), req.inline_data()->size()});
    if (!w.ok()) {
      FreeFrames(*frames);
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
  auto created = table_.Create(std::move(n));
  // The GUID was checked above and nothing ran since: Create cannot fail here.
  const StoredObject* obj = *created;

  fb::FlatBufferBuilder fbb;
  std::vector<uint32_t> ids;
  std::vector<proto::UniqueFd> fds;
  if (inline_data) {
    table_.Seal(s, guid);
    WakeWaiters(guid);
  } else {
    CollectSegments(st, obj->frames(), ids, fds);
  }
  auto segments = SegmentInfos(fbb, ids);
  auto locations = Frames(fbb, obj->frames());
  wire::Guid g = ToWire(guid);
  fbb.Finish(wire::CreateCreateReply(fbb, &g, locations, segments));
  Reply(s, id, proto::ReplyType(MsgType::kCreate), fbb, std::move(fds));
}

void Store::OnSealOrAbort(SessionId s, uint64_t id, bool seal, const wire::GuidRequest& req) {
  if (!req.guid()) return ReplyError(s, id, Status::InvalidArgument("no GUID given"));
  Guid guid = FromWire(*req.guid());
  Status st = seal ? table_.Seal(s, guid) : table_.Abort(s, guid);
  if (!st.ok()) return ReplyError(s, id, st);
  if (seal) WakeWaiters(guid);
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
  uint64_t wait_id = next_wait_++;
  GetWait w{s, id, {}, std::vector<const StoredObject*>(n), std::vector<Status>(n), 0, nullptr};
  for (size_t i = 0; i < n; ++i) {
    Guid g = FromWire(*req.guids()->Get(i));
    w.guids.push_back(g);
    auto got = table_.Acquire(s, g);
    if (got.ok()) {
      w.acquired[i] = *got;
    } else if (timeout == 0) {
      w.errors[i] = got.status();
    } else {
      ++w.missing;
      waiting_on_.emplace(g, wait_id);
    }
  }
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

void Store::WakeWaiters(const Guid& guid) {
  auto [b, e] = waiting_on_.equal_range(guid);
  std::vector<uint64_t> ids;
  for (auto it = b; it != e; ++it) ids.push_back(it->second);
  waiting_on_.erase(b, e);
  for (uint64_t wait_id : ids) {
    auto it = waits_.find(wait_id);
    if (it == waits_.end()) continue;
    GetWait& w = it->second;
    for (size_t i = 0; i < w.guids.size(); ++i) {
      if (w.guids[i] != guid || w.acquired[i] != nullptr) continue;
      auto got = table_.Acquire(w.session, guid);
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

  fb::FlatBufferBuilder fbb(1024);
  std::vector<fb::Offset<wire::GetResult>> results;
  std::vector<uint32_t> ids;
  std::vector<proto::UniqueFd> fds;
  for (size_t i = 0; i < w.guids.size(); ++i) {
    wire::Guid g = ToWire(w.guids[i]);
    const StoredObject* o = w.acquired[i];
    if (o == nullptr) {
      Status st = w.errors[i];
      if (st.ok()) {
        st = Status::Timeout(fmt::format("object {} was not {} before the timeout",
                                         w.guids[i].ToString(),
                                         table_.Find(w.guids[i]) ? "sealed" : "created"));
      }
      auto msg = fbb.CreateString(st.message());
      results.push_back(wire::CreateGetResult(fbb, &g, ToWire(st.code()), msg));
      continue;
    }
    CollectSegments(sit->second, o->frames(), ids, fds);
    auto frames = Frames(fbb, o->frames());
    auto metadata = fbb.CreateVector(o->metadata().data(), o->metadata().size());
    results.push_back(wire::CreateGetResult(fbb, &g, wire::Code::Ok, 0, o->id, frames, metadata));
  }
  auto results_vec = fbb.CreateVector(results);
  auto segments = SegmentInfos(fbb, ids);
  fbb.Finish(wire::CreateGetReply(fbb, results_vec, segments));
  Reply(w.session, w.request_id, proto::ReplyType(MsgType::kGet), fbb, std::move(fds));
}

void Store::CollectSegments(SessionState& st, std::span<const Location> frames,
                            std::vector<uint32_t>& ids, std::vector<proto::UniqueFd>& fds) {
  for (const Location& f : frames) {
    if (f.size == 0) continue;
    const HostPool::Segment* seg = pool_->segment(f.segment);
    bool needed = seg->dedicated ? std::find(ids.begin(), ids.end(), f.segment) == ids.end()
                                 : st.sent_segments.insert(f.segment).second;
    if (!needed) continue;
    ids.push_back(f.segment);
    fds.emplace_back(::fcntl(seg->fd(), F_DUPFD_CLOEXEC, 0));
  }
}

fb::Offset<fb::Vector<fb::Offset<wire::SegmentInfo>>> Store::SegmentInfos(
    fb::FlatBufferBuilder& fbb, const std::vector<uint32_t>& ids) {
  std::vector<fb::Offset<wire::SegmentInfo>> infos;
  for (uint32_t id : ids) {
    const HostPool::Segment* seg = pool_->segment(id);
    infos.push_back(wire::CreateSegmentInfo(fbb, id, seg->size, seg->dedicated));
  }
  return fbb.CreateVector(infos);
}

void Store::OnSegmentRetired(uint32_t segment) {
  for (auto& [id, st] : sessions_) {
    if (st.sent_segments.erase(segment) == 0) continue;
    fb::FlatBufferBuilder fbb(64);
    std::vector<uint32_t> ids{segment};
    fbb.Finish(wire::CreateSegmentsRetired(fbb, fbb.CreateVector(ids)));
    st.peer->Send(proto::Encode(static_cast<uint16_t>(MsgType::kSegmentsRetired), 0, fbb), {});
  }
}

void Store::OnRelease(SessionId s, const wire::ReleaseRequest& req) {
  if (!req.handles()) return;
  for (uint64_t handle : *req.handles()) {
    Status st = table_.Release(s, handle);
    if (!st.ok()) spdlog::debug("release from session {}: {}", s, st.message());
  }
}

void Store::OnDelete(SessionId s, uint64_t id, const wire::GuidsRequest& req) {
  if (Status st = CheckGuidCount(req.guids()); !st.ok()) return ReplyError(s, id, st);
  fb::FlatBufferBuilder fbb(256);
  std::vector<fb::Offset<wire::GuidResult>> results;
  for (const wire::Guid* g : *req.guids()) {
    Status st = table_.Delete(FromWire(*g));
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
  for (const wire::Guid* g : *req.guids()) {
    const StoredObject* o = table_.Find(FromWire(*g));
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
  auto objects = table_.List(after, limit + 1);
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
  const StoredObject* o = table_.Find(guid);
  if (!o) return ReplyError(s, id, Status::NotFound(fmt::format("object {} does not exist", guid.ToString())));
  fb::FlatBufferBuilder fbb(512 + o->metadata().size());
  fbb.Finish(wire::CreateStatReply(fbb, BuildInfo(fbb, *o, true)));
  Reply(s, id, proto::ReplyType(MsgType::kStat), fbb);
}

void Store::OnStatus(SessionId s, uint64_t id) {
  HostPoolStats ps = pool_->stats();
  const ObjectCounts& c = table_.counts();
  fb::FlatBufferBuilder fbb(512);
  auto version = fbb.CreateString(options_.version);
  auto socket = fbb.CreateString(options_.socket_path);
  auto errors = fbb.CreateVector(errors_.data(), static_cast<size_t>(wire::Code::MAX) + 1);
  auto uptime = std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::steady_clock::now() - started_).count();
  wire::StatusReplyBuilder b(fbb);
  b.add_daemon_version(version);
  b.add_daemon_pid(::getpid());
  b.add_uptime_ms(static_cast<uint64_t>(uptime));
  b.add_socket_path(socket);
  b.add_capacity(ps.capacity);
  b.add_reserved(ps.reserved);
  b.add_used(ps.used);
  b.add_largest_free(ps.largest_free);
  b.add_segments(ps.segments);
  b.add_objects_creating(c.creating);
  b.add_objects_sealed(c.sealed);
  b.add_objects_deleted(c.deleted);
  b.add_clients(static_cast<uint32_t>(sessions_.size()));
  b.add_evictions(c.evictions);
  b.add_evicted_bytes(c.evicted_bytes);
  b.add_prefault(pool_->options().prefault);
  b.add_gets_waiting(static_cast<uint32_t>(waits_.size()));
  b.add_free_in_segments(ps.free_in_segments);
  b.add_largest_free_block(ps.largest_block);
  b.add_requests(requests_);
  b.add_errors(errors);
  b.add_connections(connections_);
  fbb.Finish(b.Finish());
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
    Holdings h = table_.HoldingsOf(sid);
    auto name = fbb.CreateString(st.name);
    auto process = fbb.CreateString(st.process);
    infos.push_back(wire::CreateClientInfo(fbb, sid, st.creds.pid, st.creds.uid, st.creds.gid,
                                           name, process, h.references, h.bytes, h.creating,
                                           st.requests, st.connected_ns, st.subscribed));
  }
  fbb.Finish(wire::CreateClientsReply(fbb, fbb.CreateVector(infos)));
  Reply(s, id, proto::ReplyType(MsgType::kClients), fbb);
}

void Store::Emit(wire::EventKind kind, const StoredObject* object, SessionId cause) {
  // A subscriber that stops reading must not make the daemon hold events without bound: past
  // this many unwritten messages, events are counted as dropped and reported with the next one.
  constexpr size_t kMaxBacklog = 4096;
  auto cause_it = sessions_.find(cause);
  for (auto& [sid, st] : sessions_) {
    if (!st.subscribed) continue;
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
