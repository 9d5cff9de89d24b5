#include "depot/client.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include "client/src/connection.h"
#include "client/src/daemon_trust.h"
#include "client/src/guid_requests.h"
#include "client/src/retry.h"
#include "client/src/status_reply.h"
#include "common/socket_path.h"

namespace depot {
namespace {

Guid FromWire(const wire::Guid* g) { return g ? proto::FromWire(*g) : Guid{}; }

// Requests without arguments (status, ping, clients, subscribe, metrics) carry an empty table.
Result<internal::Message> CallWithoutArguments(internal::Connection& conn, proto::MsgType type) {
  flatbuffers::FlatBufferBuilder fbb(64);
  fbb.Finish(wire::CreateEmptyReply(fbb));
  return conn.Call(type, fbb);
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

// One get request's worth of `guids` (at most proto::kMaxGuidsPerRequest) on `conn`: what this
// process holds or finds in the shared index, and the rest in one round trip.
std::vector<Result<Object>> GetBatch(internal::Connection& conn, std::span<const Guid> guids,
                                     std::chrono::milliseconds timeout) {
  std::vector<Result<Object>> out(guids.size(), Status::NotFound("not requested"));
  std::vector<size_t> wanted;  // indexes of GUIDs not held already, asked in one round trip
  conn.GetLocal(guids, out, wanted);
  if (wanted.empty()) return out;
  flatbuffers::FlatBufferBuilder fbb(64 + 16 * wanted.size());
  std::vector<Guid> asked;
  for (size_t i : wanted) asked.push_back(guids[i]);
  fbb.Finish(wire::CreateGetRequest(fbb, internal::GuidVector(fbb, asked), timeout.count()));
  auto reply = conn.Call(proto::MsgType::kGet, fbb);
  if (!reply.ok()) {
    for (size_t i : wanted) out[i] = reply.status();
    return out;
  }
  const auto* get_reply = proto::Body<wire::GetReply>(reply->body);
  if (Status matches = conn.CheckGetReply(asked, *get_reply); !matches.ok()) {
    for (size_t i : wanted) out[i] = matches;
    return out;
  }
  const auto* results = get_reply->results();
  for (size_t k = 0; k < wanted.size(); ++k) {
    const wire::GetResult* r = results->Get(k);
    if (r->code() != wire::Code::Ok) {
      out[wanted[k]] = proto::ToStatus(r->code(), r->message());
    } else {
      out[wanted[k]] = conn.Adopt(guids[wanted[k]], *r, *reply);
    }
  }
  conn.DropIdle(*reply);
  return out;
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
  auto link = internal::Link::Open({.path = path,
                                    .name = options.client_name,
                                    .trusted_daemon_uid = *trusted,
                                    .reconnect_wait = options.reconnect_wait});
  if (!link.ok()) return link.status();
  return Client(std::move(*link));
}

const std::string& Client::socket_path() const { return link_->options().path; }

Result<Object> Client::Get(const Guid& guid, std::chrono::milliseconds timeout) {
  internal::Connection& conn = link_->now();
  if (auto held = conn.Cached(guid)) return std::move(*held);
  if (auto found = conn.FromIndex(guid)) return std::move(*found);
  if (auto found = conn.FromOwnPut(guid)) return std::move(*found);
  if (auto found = conn.FromIndexAfterOwnPut(guid)) return std::move(*found);
  return std::move(Get(std::span<const Guid>(&guid, 1), timeout).front());
}

std::vector<Result<Object>> Client::Get(std::span<const Guid> guids,
                                        std::chrono::milliseconds timeout) {
  if (guids.size() > proto::kMaxGuidsPerRequest) {
    // One deadline for all the batches: each waits for what is left of the timeout, and at least
    // a millisecond, so that an object still missing is a Timeout as in one request, not the
    // NotFound of a poll.
    auto deadline = std::chrono::steady_clock::now() + timeout;
    return internal::InBatches(guids, [&](std::span<const Guid> part) {
      auto left =
          std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      return Get(part, timeout <= kNoWait ? timeout : std::max(left, std::chrono::milliseconds(1)));
    });
  }
  return internal::Retry(
      *link_, [&](internal::Connection& conn) { return GetBatch(conn, guids, timeout); });
}

Status Client::Delete(const Guid& guid) { return Delete(std::span<const Guid>(&guid, 1)).front(); }

std::vector<Status> Client::Delete(std::span<const Guid> guids) {
  if (guids.size() > proto::kMaxGuidsPerRequest) {
    return internal::InBatches(guids, [&](std::span<const Guid> part) { return Delete(part); });
  }
  auto once = [&](internal::Connection& conn) {
    flatbuffers::FlatBufferBuilder fbb(64 + 16 * guids.size());
    fbb.Finish(wire::CreateGuidsRequest(fbb, internal::GuidVector(fbb, guids)));
    auto reply = conn.Call(proto::MsgType::kDelete, fbb);
    std::vector<Status> out(guids.size(), reply.status());
    if (!reply.ok()) return out;
    const auto* results = proto::Body<wire::GuidsReply>(reply->body)->results();
    for (size_t i = 0; results && i < results->size() && i < out.size(); ++i) {
      out[i] = proto::ToStatus(results->Get(i)->code(), results->Get(i)->message());
      if (out[i].ok()) conn.Deleted(guids[i]);
    }
    return out;
  };
  bool retried = false;
  std::vector<Status> out = internal::Retry(*link_, once, &retried);
  // Sent again after depotd went away: an object found gone was deleted by the first send, or is
  // gone anyway.
  for (Status& st : out) {
    if (retried && st.IsNotFound()) st = Status::OK();
  }
  return out;
}

Result<bool> Client::Contains(const Guid& guid) {
  if (internal::Connection& conn = link_->now(); conn.Cached(guid) || conn.Indexed(guid))
    return true;
  return std::move(Contains(std::span<const Guid>(&guid, 1)).front());
}

std::vector<Result<bool>> Client::Contains(std::span<const Guid> guids) {
  if (guids.size() > proto::kMaxGuidsPerRequest) {
    return internal::InBatches(guids, [&](std::span<const Guid> part) { return Contains(part); });
  }
  flatbuffers::FlatBufferBuilder fbb(64 + 16 * guids.size());
  fbb.Finish(wire::CreateGuidsRequest(fbb, internal::GuidVector(fbb, guids)));
  auto reply = internal::Retry(*link_, [&](internal::Connection& conn) {
    return conn.Call(proto::MsgType::kContains, fbb);
  });
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
  flatbuffers::FlatBufferBuilder fbb(64);
  wire::Guid g = proto::ToWire(guid);
  fbb.Finish(wire::CreateGuidRequest(fbb, &g));
  auto reply = internal::Retry(
      *link_, [&](internal::Connection& conn) { return conn.Call(proto::MsgType::kStat, fbb); });
  if (!reply.ok()) return reply.status();
  const auto* info = proto::Body<wire::StatReply>(reply->body)->info();
  if (info == nullptr) return Status::ProtocolError("depotd sent a stat reply without the object");
  return FromWire(*info);
}

Result<ListPage> Client::List(std::optional<Guid> after, uint32_t limit) {
  return ListHeldBy(0, after, limit);
}

Result<ListPage> Client::ListHeldBy(int32_t pid, std::optional<Guid> after, uint32_t limit) {
  flatbuffers::FlatBufferBuilder fbb(64);
  wire::Guid g;
  if (after) g = proto::ToWire(*after);
  fbb.Finish(wire::CreateListRequest(fbb, after ? &g : nullptr, limit, pid));
  auto reply = internal::Retry(
      *link_, [&](internal::Connection& conn) { return conn.Call(proto::MsgType::kList, fbb); });
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

Status Client::PinHostMemory() { return link_->PinHostMemory(); }

Result<std::vector<DevicePoolInfo>> Client::DevicePools() const {
  return link_->now().DevicePools();
}

Result<StoreStatus> Client::GetStatus() {
  auto reply = internal::Retry(*link_, [](internal::Connection& conn) {
    return CallWithoutArguments(conn, proto::MsgType::kStatus);
  });
  if (!reply.ok()) return reply.status();
  return internal::StoreStatusFromReply(*proto::Body<wire::StatusReply>(reply->body));
}

uint64_t Client::index_gets() const { return link_->now().index_gets(); }

Result<std::string> Client::Metrics() {
  auto reply = internal::Retry(*link_, [](internal::Connection& conn) {
    return CallWithoutArguments(conn, proto::MsgType::kMetrics);
  });
  if (!reply.ok()) return reply.status();
  const auto* text = proto::Body<wire::MetricsReply>(reply->body)->text();
  return text ? text->str() : std::string();
}

Status Client::Ping() {
  return internal::Retry(*link_,
                         [](internal::Connection& conn) {
                           return CallWithoutArguments(conn, proto::MsgType::kPing);
                         })
      .status();
}

Result<std::vector<ClientInfo>> Client::Clients() {
  auto reply = internal::Retry(*link_, [](internal::Connection& conn) {
    return CallWithoutArguments(conn, proto::MsgType::kClients);
  });
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
  const internal::Link::Options& o = link_->options();
  auto conn = internal::Connection::Open(o.path, "events", o.trusted_daemon_uid);
  if (!conn.ok()) return conn.status();
  auto reply = CallWithoutArguments(**conn, proto::MsgType::kSubscribe);
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
