#include "tests/store_fixture.h"

#include <fmt/format.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <utility>

#include "proto/index_layout.h"

namespace depot::test {
namespace {

namespace fb = flatbuffers;

std::string CodeName(wire::Code c) {
  return std::string(Status::CodeName(static_cast<Status::Code>(c)));
}

fb::Offset<fb::Vector<const wire::Guid*>> Guids(fb::FlatBufferBuilder& fbb,
                                                const std::vector<Guid>& guids) {
  std::vector<wire::Guid> out;
  for (const Guid& g : guids) out.push_back(proto::ToWire(g));
  return fbb.CreateVectorOfStructs(out);
}

}  // namespace

std::string Message::code() const {
  if (!IsError()) return "OK";
  return CodeName(As<wire::ErrorReply>()->code());
}

std::string Message::message() const {
  if (!IsError() || As<wire::ErrorReply>()->message() == nullptr) return "";
  return As<wire::ErrorReply>()->message()->str();
}

void FakePeer::Send(std::vector<uint8_t> message, std::vector<UniqueFd> fds) {
  // CHECK, not REQUIRE: this runs inside the store, which must not be unwound.
  proto::Header h;
  CHECK(message.size() >= sizeof h);
  if (message.size() < sizeof h) return;
  std::memcpy(&h, message.data(), sizeof h);
  CHECK(proto::CheckHeader(h).empty());
  CHECK(message.size() == sizeof h + h.length);
  Message m{h.type, h.request_id, std::vector<uint8_t>(message.begin() + sizeof h, message.end()),
            std::move(fds)};
  CHECK(proto::VerifyBody(h.type, m.body));
  received.push_back(std::move(m));
}

StoreOptions MakeOptions(const StoreSetup& setup) {
  static int stores = 0;  // with the pid: a segment name prefix no other store uses
  // The daemon's defaults, then what the test sets.
  StoreOptions o = StoreOptionsFrom(DefaultOptions(16ull << 30, 16ull << 30), "/store_test.sock",
                                    nullptr, kNoDevices);
  o.namespaces.host.capacity = setup.capacity;
  o.namespaces.host.segment_size = setup.segment_size;
  o.namespaces.host.keep_warm = setup.keep_warm;
  o.namespaces.host.name_prefix = fmt::format("depot-storetest-{}-{}-", ::getpid(), stores++);
  o.namespaces.eviction = setup.eviction;
  o.namespaces.per_user = setup.per_user_namespaces;
  o.namespaces.index_entries = setup.index_entries;
  o.version = "store_test";
  o.max_frames = setup.max_frames;
  o.max_metadata = setup.max_metadata;
  o.max_message_size = setup.max_message_size;
  o.access.users = setup.allow_users;
  o.access.groups = setup.allow_groups;
  o.access.daemon_uid = kDaemonUid;
  o.access.socket_gid = kSocketGid;
  o.user_quota = setup.user_quota;
  o.client_quota = setup.client_quota;
  o.max_pending = setup.max_pending;
  o.get_waits = {.gets_per_session = setup.max_pending,
                 .guids_per_session = setup.max_pending_guids,
                 .guids_per_user = setup.max_pending_guids_per_user};
  o.max_sessions_per_user = setup.max_sessions_per_user;
  return o;
}

StoreHarness::StoreHarness(const StoreSetup& setup) {
  auto store = Store::Create(io_, MakeOptions(setup));
  REQUIRE(store.ok());
  store_ = std::move(*store);
}

StoreHarness::~StoreHarness() {
  for (FakeClient& c : clients_) Close(c);
}

FakeClient& StoreHarness::Connect(uid_t uid, gid_t gid, std::vector<gid_t> groups) {
  FakeClient& c = clients_.emplace_back();
  c.creds = PeerCredentials{::getpid(), uid, gid, std::move(groups)};
  auto opened = store_->Open(&c.peer, c.creds);
  REQUIRE(opened.ok());
  c.id = *opened;
  return c;
}

FakeClient& StoreHarness::Hello(uid_t uid, gid_t gid, std::vector<gid_t> groups) {
  FakeClient& c = Connect(uid, gid, std::move(groups));
  Status st = SayHello(c);
  INFO(st.ToString());
  REQUIRE(st.ok());
  return c;
}

Status StoreHarness::SayHello(FakeClient& c, uint16_t version, const std::string& name) {
  fb::FlatBufferBuilder fbb;
  fbb.Finish(
      wire::CreateHelloRequestDirect(fbb, version, name.c_str(), index::kIndexLayout.version));
  uint64_t id = 0;
  Status st = Send(c, MsgType::kHello, fbb, &id);
  if (!st.ok()) return st;
  std::optional<Message> reply = Reply(c, id);
  REQUIRE(reply);
  REQUIRE(reply->type == proto::ReplyType(MsgType::kHello));
  REQUIRE(reply->As<wire::HelloReply>()->session_id() == c.id);
  return st;
}

void StoreHarness::Close(FakeClient& c) {
  if (!c.open) return;
  c.open = false;
  store_->Close(c.id);
}

Status StoreHarness::Send(FakeClient& c, MsgType type, fb::FlatBufferBuilder& fbb, uint64_t* id) {
  uint64_t request = c.next_request++;
  if (id != nullptr) *id = request;
  std::vector<uint8_t> m = proto::Encode(static_cast<uint16_t>(type), request, fbb);
  proto::Header h;
  std::memcpy(&h, m.data(), sizeof h);
  std::vector<uint8_t> body(m.begin() + sizeof h, m.end());
  REQUIRE(proto::VerifyBody(h.type, body));  // what Session checks before Handle
  return store_->Handle(c.id, h, body);
}

std::optional<Message> StoreHarness::Reply(FakeClient& c, uint64_t id) {
  for (auto it = c.peer.received.begin(); it != c.peer.received.end(); ++it) {
    if (it->request_id != id) continue;
    Message m = std::move(*it);
    c.peer.received.erase(it);
    return m;
  }
  return std::nullopt;
}

Message StoreHarness::Call(FakeClient& c, MsgType type, fb::FlatBufferBuilder& fbb) {
  uint64_t id = 0;
  Status st = Send(c, type, fbb, &id);
  INFO(proto::TypeName(static_cast<uint16_t>(type)) << ": " << st.ToString());
  REQUIRE(st.ok());
  std::optional<Message> reply = Reply(c, id);
  REQUIRE(reply);
  if (!reply->IsError()) REQUIRE(reply->type == proto::ReplyType(type));
  return std::move(*reply);
}

Message StoreHarness::Create(FakeClient& c, const CreateArgs& a) {
  std::optional<Message> reply = Reply(c, SendCreate(c, a));
  INFO("create: no reply");
  REQUIRE(reply);
  return std::move(*reply);
}

uint64_t StoreHarness::SendCreate(FakeClient& c, const CreateArgs& a) {
  fb::FlatBufferBuilder fbb;
  auto sizes = fbb.CreateVector(a.sizes);
  fb::Offset<fb::Vector<uint8_t>> metadata, data;  // null offsets are left out
  fb::Offset<fb::String> name;
  fb::Offset<fb::Vector<uint32_t>> pools;
  if (!a.metadata.empty()) metadata = fbb.CreateVector(a.metadata);
  if (!a.name.empty()) name = fbb.CreateString(a.name);
  if (a.inline_data) data = fbb.CreateVector(*a.inline_data);
  if (!a.pools.empty()) pools = fbb.CreateVector(a.pools);
  wire::CreateRequestBuilder b(fbb);
  b.add_frame_sizes(sizes);
  b.add_metadata(metadata);
  b.add_name(name);
  wire::Guid g;
  if (a.guid) {
    g = proto::ToWire(*a.guid);
    b.add_guid(&g);
  }
  b.add_evictable(a.evictable);
  b.add_inline_data(data);
  b.add_seal(a.seal);
  b.add_frame_pools(pools);
  fbb.Finish(b.Finish());
  uint64_t id = 0;
  REQUIRE(Send(c, MsgType::kCreate, fbb, &id).ok());
  return id;
}

Guid StoreHarness::Put(FakeClient& c, uint64_t size, bool evictable, std::optional<Guid> guid) {
  Message created = Create(c, {.sizes = {size}, .guid = guid, .evictable = evictable});
  INFO(created.message());
  REQUIRE(created.code() == "OK");
  Guid g = CreatedGuid(created);
  Message sealed = Seal(c, g);
  INFO(sealed.message());
  REQUIRE(sealed.code() == "OK");
  return g;
}

Message StoreHarness::Seal(FakeClient& c, const Guid& g, std::optional<uint64_t> checksum) {
  fb::FlatBufferBuilder fbb;
  wire::Guid w = proto::ToWire(g);
  fbb.Finish(wire::CreateGuidRequest(fbb, &w, checksum));
  return Call(c, MsgType::kSeal, fbb);
}

Message StoreHarness::Abort(FakeClient& c, const Guid& g) {
  fb::FlatBufferBuilder fbb;
  wire::Guid w = proto::ToWire(g);
  fbb.Finish(wire::CreateGuidRequest(fbb, &w));
  return Call(c, MsgType::kAbort, fbb);
}

uint64_t StoreHarness::SendGet(FakeClient& c, const std::vector<Guid>& guids, int64_t timeout_ms) {
  fb::FlatBufferBuilder fbb;
  fbb.Finish(wire::CreateGetRequest(fbb, Guids(fbb, guids), timeout_ms));
  uint64_t id = 0;
  REQUIRE(Send(c, MsgType::kGet, fbb, &id).ok());
  return id;
}

Message StoreHarness::Get(FakeClient& c, const std::vector<Guid>& guids, int64_t timeout_ms) {
  std::optional<Message> reply = Reply(c, SendGet(c, guids, timeout_ms));
  REQUIRE(reply);
  return std::move(*reply);
}

void StoreHarness::Release(FakeClient& c, const std::vector<uint64_t>& handles) {
  fb::FlatBufferBuilder fbb;
  fbb.Finish(wire::CreateReleaseRequest(fbb, fbb.CreateVector(handles)));
  uint64_t id = 0;
  REQUIRE(Send(c, MsgType::kRelease, fbb, &id).ok());
  REQUIRE_FALSE(Reply(c, id));  // one way
}

size_t StoreHarness::DropRetired(FakeClient& c) {
  size_t dropped = 0;
  auto& received = c.peer.received;
  for (auto it = received.begin(); it != received.end();) {
    if (it->type != static_cast<uint16_t>(MsgType::kSegmentsRetired)) {
      ++it;
      continue;
    }
    const auto* notice = it->As<wire::SegmentsRetired>();
    std::vector<uint32_t> ids(notice->ids()->begin(), notice->ids()->end());
    fb::FlatBufferBuilder fbb;
    fbb.Finish(wire::CreateSegmentsRetired(fbb, fbb.CreateVector(ids), notice->pool()));
    uint64_t id = 0;
    REQUIRE(Send(c, MsgType::kSegmentsDropped, fbb, &id).ok());
    REQUIRE_FALSE(Reply(c, id));  // one way
    dropped += ids.size();
    it = received.erase(it);
  }
  return dropped;
}

Message StoreHarness::Delete(FakeClient& c, const std::vector<Guid>& guids) {
  fb::FlatBufferBuilder fbb;
  fbb.Finish(wire::CreateGuidsRequest(fbb, Guids(fbb, guids)));
  return Call(c, MsgType::kDelete, fbb);
}

Message StoreHarness::Contains(FakeClient& c, const std::vector<Guid>& guids) {
  fb::FlatBufferBuilder fbb;
  fbb.Finish(wire::CreateGuidsRequest(fbb, Guids(fbb, guids)));
  return Call(c, MsgType::kContains, fbb);
}

Message StoreHarness::List(FakeClient& c) {
  fb::FlatBufferBuilder fbb;
  fbb.Finish(wire::CreateListRequest(fbb, nullptr, proto::kMaxListLimit));
  return Call(c, MsgType::kList, fbb);
}

Message StoreHarness::Stat(FakeClient& c, const Guid& g) {
  fb::FlatBufferBuilder fbb;
  wire::Guid w = proto::ToWire(g);
  fbb.Finish(wire::CreateGuidRequest(fbb, &w));
  return Call(c, MsgType::kStat, fbb);
}

Message StoreHarness::Subscribe(FakeClient& c) {
  fb::FlatBufferBuilder fbb;
  fbb.Finish(wire::CreateEmptyReply(fbb));
  return Call(c, MsgType::kSubscribe, fbb);
}

StatusSummary StoreHarness::StatusOf(FakeClient& c) {
  fb::FlatBufferBuilder fbb;
  fbb.Finish(wire::CreateEmptyReply(fbb));
  Message m = Call(c, MsgType::kStatus, fbb);
  REQUIRE(m.code() == "OK");
  const auto* r = m.As<wire::StatusReply>();
  StatusSummary s;
  s.used = r->used();
  s.segments = r->segments();
  s.creating = r->objects_creating();
  s.sealed = r->objects_sealed();
  s.deleted = r->objects_deleted();
  s.evictions = r->evictions();
  s.gets_waiting = r->gets_waiting();
  s.namespaces = r->namespaces();
  s.clients = r->clients();
  s.reserved = r->reserved();
  s.retired_held = r->retired_held();
  s.index_entries = r->index_entries();
  s.index_growths = r->index_growths();
  s.index_moving = r->index_moving();
  if (r->errors()) s.errors.assign(r->errors()->begin(), r->errors()->end());
  if (r->users()) {
    for (const wire::UserUsage* u : *r->users()) s.users[u->uid()] = {u->objects(), u->bytes()};
  }
  return s;
}

std::vector<Message> StoreHarness::Events(FakeClient& c) {
  std::vector<Message> events;
  for (auto it = c.peer.received.begin(); it != c.peer.received.end();) {
    if (it->type == static_cast<uint16_t>(MsgType::kEvent)) {
      events.push_back(std::move(*it));
      it = c.peer.received.erase(it);
    } else {
      ++it;
    }
  }
  return events;
}

void StoreHarness::RunFor(std::chrono::milliseconds limit) {
  io_.restart();
  io_.run_for(limit);
}

Guid CreatedGuid(const Message& reply) {
  REQUIRE(reply.type == proto::ReplyType(MsgType::kCreate));
  return proto::FromWire(*reply.As<wire::CreateReply>()->guid());
}

std::vector<std::string> ResultCodes(const Message& reply) {
  std::vector<std::string> codes;
  if (reply.type == proto::ReplyType(MsgType::kGet)) {
    for (const wire::GetResult* r : *reply.As<wire::GetReply>()->results()) {
      codes.push_back(CodeName(r->code()));
    }
  } else {
    REQUIRE(!reply.IsError());
    for (const wire::GuidResult* r : *reply.As<wire::GuidsReply>()->results()) {
      codes.push_back(CodeName(r->code()));
    }
  }
  return codes;
}

std::vector<uint64_t> Handles(const Message& reply) {
  REQUIRE(reply.type == proto::ReplyType(MsgType::kGet));
  std::vector<uint64_t> handles;
  for (const wire::GetResult* r : *reply.As<wire::GetReply>()->results()) {
    handles.push_back(r->handle());
  }
  return handles;
}

}  // namespace depot::test
