#include "depot/client.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "client/src/checksum.h"
#include "client/src/connection.h"
#include "client/src/daemon_trust.h"
#include "client/src/status_reply.h"
#include "common/socket_path.h"

namespace depot {
namespace {

using internal::Checksum;
using internal::Connection;
using proto::MsgType;
using proto::ToStatus;
using proto::ToWire;
namespace fb = flatbuffers;

Guid FromWire(const wire::Guid* g) { return g ? proto::FromWire(*g) : Guid{}; }

// Requests without arguments (status, ping, clients, subscribe, metrics) carry an empty table.
Result<internal::Message> CallWithoutArguments(Connection& conn, MsgType type) {
  fb::FlatBufferBuilder fbb(64);
  fbb.Finish(wire::CreateEmptyReply(fbb));
  return conn.Call(type, fbb);
}

// A request names at most proto::kMaxGuidsPerRequest GUIDs: longer lists go in batches, one
// request each, and their results are joined in order. `batch` handles one part.
template <typename Batch>
auto InBatches(std::span<const Guid> guids, Batch batch) {
  decltype(batch(guids)) out;
  out.reserve(guids.size());
  for (size_t start = 0; start < guids.size(); start += proto::kMaxGuidsPerRequest) {
    size_t n = std::min<size_t>(proto::kMaxGuidsPerRequest, guids.size() - start);
    for (auto& result : batch(guids.subspan(start, n))) out.push_back(std::move(result));
  }
  return out;
}

static_assert(static_cast<int>(Event::Kind::kRestored) ==
                  static_cast<int>(wire::EventKind::Restored) &&
              wire::EventKind::MAX == wire::EventKind::Restored);
static_assert(static_cast<int>(ObjectInfo::Residence::kLost) ==
                  static_cast<int>(wire::Residence::Lost) &&
              wire::Residence::MAX == wire::Residence::Lost);

ObjectInfo FromWire(const wire::ObjectInfo& w) {
  ObjectInfo o;
  o.guid = FromWire(w.guid());
  o.name = w.name() ? w.name()->str() : "";
  o.state = w.state() == wire::State::Sealed    ? ObjectInfo::State::kSealed
            : w.state() == wire::State::Deleted ? ObjectInfo::State::kDeleted
                                                : ObjectInfo::State::kCreating;
  o.size = w.size();
  if (w.frames()) {
    for (const wire::FrameLocation* f : *w.frames()) {
      o.frames.push_back({f->pool(), f->segment(), f->offset(), f->size()});
    }
  }
  o.refcount = w.refcount();
  o.evictable = w.evictable();
  o.created_unix_ns = w.created_unix_ns();
  o.sealed_unix_ns = w.sealed_unix_ns();
  o.creator_pid = w.creator_pid();
  o.creator_uid = w.creator_uid();
  o.metadata_size = w.metadata_size();
  if (w.checksum()) o.checksum = *w.checksum();
  if (w.holders()) {
    for (const wire::HolderInfo* h : *w.holders()) {
      o.holders.push_back({h->session_id(), h->pid(), h->uid(),
                           h->process() ? h->process()->str() : "",
                           h->name() ? h->name()->str() : "", h->references()});
    }
  }
  o.creator_session = w.creator_session();
  o.creator_process = w.creator_process() ? w.creator_process()->str() : "";
  o.residence = static_cast<ObjectInfo::Residence>(w.residence());
  if (w.metadata()) {
    auto* m = reinterpret_cast<const std::byte*>(w.metadata()->data());
    o.metadata.assign(m, m + w.metadata()->size());
  }
  return o;
}

fb::Offset<wire::CreateRequest> BuildCreate(
    fb::FlatBufferBuilder& fbb, std::span<const uint64_t> sizes, std::span<const uint32_t> pools,
    const CreateOptions& o, std::span<const std::span<const std::byte>> inline_frames) {
  auto frame_sizes = fbb.CreateVector(sizes.data(), sizes.size());
  fb::Offset<fb::Vector<uint32_t>> frame_pools;
  if (!pools.empty()) frame_pools = fbb.CreateVector(pools.data(), pools.size());
  auto metadata =
      fbb.CreateVector(reinterpret_cast<const uint8_t*>(o.metadata.data()), o.metadata.size());
  fb::Offset<fb::String> name;
  if (!o.name.empty()) name = fbb.CreateString(o.name);
  fb::Offset<fb::Vector<uint8_t>> data;
  if (!inline_frames.empty()) {
    uint64_t total = 0;
    for (auto f : inline_frames) total += f.size();
    uint8_t* dst;
    data = fbb.CreateUninitializedVector(total, &dst);
    for (auto f : inline_frames) {
      if (!f.empty()) std::memcpy(dst, f.data(), f.size());
      dst += f.size();
    }
  }
  wire::CreateRequestBuilder b(fbb);
  b.add_frame_sizes(frame_sizes);
  if (!pools.empty()) b.add_frame_pools(frame_pools);
  b.add_metadata(metadata);
  if (!o.name.empty()) b.add_name(name);
  wire::Guid g;
  if (o.guid) {
    g = ToWire(*o.guid);
    b.add_guid(&g);
  }
  b.add_evictable(o.evictable);
  if (o.owner_scoped) b.add_owner_scoped(true);
  if (!inline_frames.empty()) {
    b.add_inline_data(data);
    b.add_seal(true);
    if (o.checksum) b.add_checksum(Checksum(inline_frames));
  }
  return b.Finish();
}

}  // namespace

std::string Client::DefaultSocketPath() { return depot::DefaultSocketPath(); }

Result<Client> Client::Connect(const ConnectOptions& options) {
  std::string path = options.socket_path;
  if (path.empty()) {
    const char* env = std::getenv("DEPOT_SOCKET");
    path = env != nullptr && *env != '\0' ? env : DefaultSocketPath();
  }
  auto trusted = internal::NamedDaemonUid(options.trusted_daemon_uid);
  if (!trusted.ok()) return trusted.status();
  auto conn = Connection::Open(path, options.client_name, *trusted);
  if (!conn.ok()) return conn.status();
  return Client(std::move(*conn));
}

const std::string& Client::socket_path() const { return conn_->path(); }

Result<Guid> Client::Put(std::span<const std::byte> data, const CreateOptions& options) {
  std::span<const std::byte> frames[] = {data};
  return Put(frames, options);
}

Result<Guid> Client::Put(std::span<const std::span<const std::byte>> frames,
                         const CreateOptions& options) {
  // Every rule the daemon keeps, before anything is written: a put it would refuse in its ring
  // must not return a GUID.
  if (Status shape = proto::CheckObjectShape(frames.size(), options.metadata.size(),
                                             options.name.size(), conn_->object_limits());
      !shape.ok()) {
    return shape;
  }
  if (auto put = conn_->PutInLease(frames, options)) return std::move(*put);
  std::vector<uint64_t> sizes;
  uint64_t total = 0;
  for (auto f : frames) {
    sizes.push_back(f.size());
    total += f.size();
  }
  if (total <= proto::kMaxInlineSize && !frames.empty() && options.places.empty()) {
    // Create, fill and seal in one round trip.
    fb::FlatBufferBuilder fbb(total + 256);
    fbb.Finish(BuildCreate(fbb, sizes, {}, options, frames));
    auto reply = conn_->CallCreate(fbb);
    if (!reply.ok()) return reply.status();
    return FromWire(proto::Body<wire::CreateReply>(reply->body)->guid());
  }
  auto draft = Create(sizes, options);
  if (!draft.ok()) return draft.status();
  for (size_t i = 0; i < frames.size(); ++i) {
    if (Status copied = conn_->CopyIn(draft->frame(i), frames[i], draft->place(i)); !copied.ok()) {
      return copied;  // the draft's destruction aborts the object
    }
  }
  Guid guid = draft->guid();
  Status sealed = draft->Seal();
  if (!sealed.ok()) return sealed;
  return guid;
}

Result<Draft> Client::Create(std::span<const uint64_t> sizes, const CreateOptions& options) {
  std::vector<uint32_t> pools;
  if (!options.places.empty()) {
    if (options.places.size() != sizes.size()) {
      return Status::InvalidArgument(
          fmt::format("{} places given for {} frames", options.places.size(), sizes.size()));
    }
    for (const Place& p : options.places) {
      auto pool = conn_->PoolOf(p);
      if (!pool.ok()) return pool.status();
      if (*pool != 0 && options.checksum) {
        return Status::InvalidArgument(
            "checksums cover host frames only; this object has a "
            "frame on a GPU");
      }
      pools.push_back(*pool);
    }
  }
  fb::FlatBufferBuilder fbb(256);
  fbb.Finish(BuildCreate(fbb, sizes, pools, options, {}));
  auto reply = conn_->CallCreate(fbb);
  if (!reply.ok()) return reply.status();
  auto draft = conn_->MakeDraft(*proto::Body<wire::CreateReply>(reply->body), *reply, sizes, pools);
  if (draft.ok()) draft->checksum_ = options.checksum;
  return draft;
}

Result<Object> Client::Get(const Guid& guid, std::chrono::milliseconds timeout) {
  if (auto held = conn_->Cached(guid)) return std::move(*held);
  if (auto found = conn_->FromIndex(guid)) return std::move(*found);
  if (auto found = conn_->FromOwnPut(guid)) return std::move(*found);
  if (auto found = conn_->FromIndexAfterOwnPut(guid)) return std::move(*found);
  return std::move(Get(std::span<const Guid>(&guid, 1), timeout).front());
}

std::vector<Result<Object>> Client::Get(std::span<const Guid> guids,
                                        std::chrono::milliseconds timeout) {
  if (guids.size() > proto::kMaxGuidsPerRequest) {
    // One deadline for all the batches: each waits for what is left of the timeout, and at least
    // a millisecond, so that an object still missing is a Timeout as in one request, not the
    // NotFound of a poll.
    auto deadline = std::chrono::steady_clock::now() + timeout;
    return InBatches(guids, [&](std::span<const Guid> part) {
      auto left =
          std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      return Get(part, timeout <= kNoWait ? timeout : std::max(left, std::chrono::milliseconds(1)));
    });
  }
  std::vector<Result<Object>> out(guids.size(), Status::NotFound("not requested"));
  std::vector<size_t> wanted;  // indexes of GUIDs not held already, asked in one round trip
  conn_->GetLocal(guids, out, wanted);
  if (wanted.empty()) return out;
  fb::FlatBufferBuilder fbb(64 + 16 * wanted.size());
  std::vector<wire::Guid> ids;
  for (size_t i : wanted) ids.push_back(ToWire(guids[i]));
  fbb.Finish(wire::CreateGetRequest(fbb, fbb.CreateVectorOfStructs(ids), timeout.count()));
  auto reply = conn_->Call(MsgType::kGet, fbb);
  if (!reply.ok()) {
    for (size_t i : wanted) out[i] = reply.status();
    return out;
  }
  std::vector<Guid> asked;
  for (size_t i : wanted) asked.push_back(guids[i]);
  const auto* get_reply = proto::Body<wire::GetReply>(reply->body);
  if (Status matches = conn_->CheckGetReply(asked, *get_reply); !matches.ok()) {
    for (size_t i : wanted) out[i] = matches;
    return out;
  }
  const auto* results = get_reply->results();
  for (size_t k = 0; k < wanted.size(); ++k) {
    const wire::GetResult* r = results->Get(k);
    if (r->code() != wire::Code::Ok) {
      out[wanted[k]] = ToStatus(r->code(), r->message());
    } else {
      out[wanted[k]] = conn_->Adopt(guids[wanted[k]], *r, *reply);
    }
  }
  conn_->DropIdle(*reply);
  return out;
}

Status Client::Delete(const Guid& guid) { return Delete(std::span<const Guid>(&guid, 1)).front(); }

std::vector<Status> Client::Delete(std::span<const Guid> guids) {
  if (guids.size() > proto::kMaxGuidsPerRequest) {
    return InBatches(guids, [&](std::span<const Guid> part) { return Delete(part); });
  }
  fb::FlatBufferBuilder fbb(64 + 16 * guids.size());
  std::vector<wire::Guid> ids;
  for (const Guid& g : guids) ids.push_back(ToWire(g));
  fbb.Finish(wire::CreateGuidsRequest(fbb, fbb.CreateVectorOfStructs(ids)));
  auto reply = conn_->Call(MsgType::kDelete, fbb);
  std::vector<Status> out(guids.size(), reply.status());
  if (!reply.ok()) return out;
  const auto* results = proto::Body<wire::GuidsReply>(reply->body)->results();
  for (size_t i = 0; results && i < results->size() && i < out.size(); ++i) {
    out[i] = ToStatus(results->Get(i)->code(), results->Get(i)->message());
    if (out[i].ok()) conn_->Deleted(guids[i]);
  }
  return out;
}

Result<bool> Client::Contains(const Guid& guid) {
  if (conn_->Cached(guid) || conn_->Indexed(guid)) return true;
  return std::move(Contains(std::span<const Guid>(&guid, 1)).front());
}

std::vector<Result<bool>> Client::Contains(std::span<const Guid> guids) {
  if (guids.size() > proto::kMaxGuidsPerRequest) {
    return InBatches(guids, [&](std::span<const Guid> part) { return Contains(part); });
  }
  fb::FlatBufferBuilder fbb(64 + 16 * guids.size());
  std::vector<wire::Guid> ids;
  for (const Guid& g : guids) ids.push_back(ToWire(g));
  fbb.Finish(wire::CreateGuidsRequest(fbb, fbb.CreateVectorOfStructs(ids)));
  auto reply = conn_->Call(MsgType::kContains, fbb);
  if (!reply.ok()) return std::vector<Result<bool>>(guids.size(), reply.status());
  const auto* results = proto::Body<wire::GuidsReply>(reply->body)->results();
  if (results == nullptr || results->size() != guids.size()) {
    return std::vector<Result<bool>>(
        guids.size(), Status::ProtocolError("depotd answered contains with the wrong count"));
  }
  std::vector<Result<bool>> out;
  out.reserve(guids.size());
  for (size_t i = 0; i < guids.size(); ++i) {
    out.push_back(results->Get(i)->code() == wire::Code::Ok);
  }
  return out;
}

Result<ObjectInfo> Client::Stat(const Guid& guid) {
  fb::FlatBufferBuilder fbb(64);
  wire::Guid g = ToWire(guid);
  fbb.Finish(wire::CreateGuidRequest(fbb, &g));
  auto reply = conn_->Call(MsgType::kStat, fbb);
  if (!reply.ok()) return reply.status();
  const auto* info = proto::Body<wire::StatReply>(reply->body)->info();
  if (info == nullptr) return Status::ProtocolError("depotd sent a stat reply without the object");
  return FromWire(*info);
}

Result<ListPage> Client::List(std::optional<Guid> after, uint32_t limit) {
  return ListHeldBy(0, after, limit);
}

Result<ListPage> Client::ListHeldBy(int32_t pid, std::optional<Guid> after, uint32_t limit) {
  fb::FlatBufferBuilder fbb(64);
  wire::Guid g;
  if (after) g = ToWire(*after);
  fbb.Finish(wire::CreateListRequest(fbb, after ? &g : nullptr, limit, pid));
  auto reply = conn_->Call(MsgType::kList, fbb);
  if (!reply.ok()) return reply.status();
  const auto* r = proto::Body<wire::ListReply>(reply->body);
  ListPage page;
  page.more = r->more();
  if (r->objects()) {
    // Reserved once: growing a vector of thousands of ObjectInfos moved each of them again and
    // again, into fresh pages, and cost most of a listing.
    page.objects.reserve(r->objects()->size());
    for (const wire::ObjectInfo* o : *r->objects()) page.objects.push_back(FromWire(*o));
  }
  return page;
}

Status Client::PinHostMemory() { return conn_->PinHostMemory(); }

Result<std::vector<DevicePoolInfo>> Client::DevicePools() const { return conn_->DevicePools(); }

Result<StoreStatus> Client::GetStatus() {
  auto reply = CallWithoutArguments(*conn_, MsgType::kStatus);
  if (!reply.ok()) return reply.status();
  return internal::StoreStatusFromReply(*proto::Body<wire::StatusReply>(reply->body));
}

uint64_t Client::index_gets() const { return conn_->index_gets(); }

Result<std::string> Client::Metrics() {
  auto reply = CallWithoutArguments(*conn_, MsgType::kMetrics);
  if (!reply.ok()) return reply.status();
  const auto* text = proto::Body<wire::MetricsReply>(reply->body)->text();
  return text ? text->str() : std::string();
}

Status Client::Ping() { return CallWithoutArguments(*conn_, MsgType::kPing).status(); }

Result<std::vector<ClientInfo>> Client::Clients() {
  auto reply = CallWithoutArguments(*conn_, MsgType::kClients);
  if (!reply.ok()) return reply.status();
  std::vector<ClientInfo> out;
  const auto* r = proto::Body<wire::ClientsReply>(reply->body);
  if (r->clients() == nullptr) return out;
  for (const wire::ClientInfo* c : *r->clients()) {
    ClientInfo i;
    i.session_id = c->session_id();
    i.pid = c->pid();
    i.uid = c->uid();
    i.gid = c->gid();
    i.name = c->name() ? c->name()->str() : "";
    i.process = c->process() ? c->process()->str() : "";
    i.references = c->references();
    i.bytes_held = c->bytes_held();
    i.creating = c->creating();
    i.requests = c->requests();
    i.connected_unix_ns = c->connected_unix_ns();
    i.subscribed = c->subscribed();
    i.created_objects = c->created_objects();
    i.created_bytes = c->created_bytes();
    out.push_back(std::move(i));
  }
  return out;
}

Result<Subscription> Client::Subscribe() {
  auto conn = Connection::Open(conn_->path(), "events", conn_->trusted_daemon_uid());
  if (!conn.ok()) return conn.status();
  auto reply = CallWithoutArguments(**conn, MsgType::kSubscribe);
  if (!reply.ok()) return reply.status();
  return Subscription(std::move(*conn));
}

Result<Event> Subscription::Next(std::chrono::milliseconds timeout) {
  auto msg = conn_->NextEvent(timeout);
  if (!msg.ok()) return msg.status();
  const auto* e = proto::Body<wire::Event>(msg->body);
  Event ev;
  ev.kind = static_cast<Event::Kind>(e->kind());
  ev.unix_ns = e->unix_ns();
  ev.guid = FromWire(e->guid());
  ev.name = e->name() ? e->name()->str() : "";
  ev.size = e->size();
  ev.session_id = e->session_id();
  ev.pid = e->pid();
  ev.uid = e->uid();
  ev.dropped = e->dropped();
  return ev;
}

std::string_view Event::KindName(Kind k) {
  static constexpr std::string_view kNames[] = {
      "created", "sealed",  "aborted",          "deleted",
      "evicted", "freed",   "client-connected", "client-disconnected",
      "spilled", "restored"};
  size_t i = static_cast<size_t>(k);
  return i < std::size(kNames) ? kNames[i] : "unknown";
}

}  // namespace depot
