// Writes the seed corpus of the fuzz targets: valid messages of every type for fuzz_frame; for
// fuzz_store sequences of operations (fuzz_store.cc describes the format) that walk through
// the protocol: lifecycles, parked gets, events, eviction, errors and disconnects; and for
// fuzz_client a fake daemon's side of a session (fuzz_client.cc describes the format), honest and
// with each lie a client must catch; for fuzz_index indexes and slot contents (fuzz_index.cc
// describes the format). The output is
// committed under fuzz/corpus/; run this again after a protocol change:
//
//   build/fuzz/fuzz_make_corpus fuzz/corpus
//
// The output is the same on every run.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "proto/index_layout.h"
#include "proto/wire.h"

namespace depot::fuzz {
namespace {

namespace fb = flatbuffers;
using proto::MsgType;
using Bytes = std::vector<uint8_t>;

constexpr uint16_t T(MsgType t) { return static_cast<uint16_t>(t); }

Bytes Encode(uint16_t type, fb::FlatBufferBuilder& fbb, uint64_t id = 7) {
  return proto::Encode(type, id, fbb);
}

wire::Guid G(uint64_t n) {
  return wire::Guid(0x1111222233334000ull + n, 0x8000000000000000ull + n);
}

// Requests.

Bytes Hello() {
  fb::FlatBufferBuilder fbb;
  fbb.Finish(wire::CreateHelloRequestDirect(fbb, proto::kProtocolVersion, "seed"));
  return Encode(T(MsgType::kHello), fbb, 1);
}

struct CreateArgs {
  std::vector<uint64_t> sizes = {4096};
  std::optional<uint64_t> guid;
  std::string name;
  Bytes metadata;
  bool evictable = false;
  bool inline_data = false;  // the frames' bytes in the message, sealed at once
  std::optional<uint64_t> checksum;
  std::vector<uint32_t> pools;  // per frame; empty: all on the host
};

CreateArgs Args(std::vector<uint64_t> sizes, std::optional<uint64_t> guid, std::string name = "",
                Bytes metadata = {}, bool evictable = false, bool inline_data = false,
                std::optional<uint64_t> checksum = std::nullopt, std::vector<uint32_t> pools = {}) {
  return CreateArgs{std::move(sizes), guid,        std::move(name), std::move(metadata),
                    evictable,        inline_data, checksum,        std::move(pools)};
}

Bytes Create(const CreateArgs& a) {
  fb::FlatBufferBuilder fbb;
  wire::Guid g = a.guid ? G(*a.guid) : wire::Guid();
  Bytes data;
  if (a.inline_data) {
    uint64_t total = 0;
    for (uint64_t s : a.sizes) total += s;
    data.resize(total);
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 7);
  }
  // Fields are set by name throughout, so that a field added to a table changes no other.
  auto sizes = fbb.CreateVector(a.sizes);
  auto metadata = a.metadata.empty() ? 0 : fbb.CreateVector(a.metadata);
  auto name = a.name.empty() ? 0 : fbb.CreateString(a.name);
  auto inline_data = a.inline_data ? fbb.CreateVector(data) : 0;
  auto pools = a.pools.empty() ? 0 : fbb.CreateVector(a.pools);
  wire::CreateRequestBuilder b(fbb);
  b.add_frame_sizes(sizes);
  if (!a.metadata.empty()) b.add_metadata(metadata);
  if (!a.name.empty()) b.add_name(name);
  if (a.guid) b.add_guid(&g);
  b.add_evictable(a.evictable);
  if (a.inline_data) {
    b.add_inline_data(inline_data);
    b.add_seal(true);
  }
  if (a.checksum) b.add_checksum(*a.checksum);
  if (!a.pools.empty()) b.add_frame_pools(pools);
  fbb.Finish(b.Finish());
  return Encode(T(MsgType::kCreate), fbb);
}

Bytes GuidMessage(MsgType type, uint64_t guid, std::optional<uint64_t> checksum = std::nullopt) {
  fb::FlatBufferBuilder fbb;
  wire::Guid g = G(guid);
  wire::GuidRequestBuilder b(fbb);
  b.add_guid(&g);
  if (checksum) b.add_checksum(*checksum);
  fbb.Finish(b.Finish());
  return Encode(T(type), fbb);
}

Bytes Get(const std::vector<uint64_t>& guids, int64_t timeout_ms) {
  fb::FlatBufferBuilder fbb;
  std::vector<wire::Guid> gs;
  for (uint64_t g : guids) gs.push_back(G(g));
  fbb.Finish(wire::CreateGetRequest(fbb, fbb.CreateVectorOfStructs(gs), timeout_ms));
  return Encode(T(MsgType::kGet), fbb);
}

Bytes Guids(MsgType type, const std::vector<uint64_t>& guids) {
  fb::FlatBufferBuilder fbb;
  std::vector<wire::Guid> gs;
  for (uint64_t g : guids) gs.push_back(G(g));
  fbb.Finish(wire::CreateGuidsRequest(fbb, fbb.CreateVectorOfStructs(gs)));
  return Encode(T(type), fbb);
}

Bytes Release(const std::vector<uint64_t>& handles) {
  fb::FlatBufferBuilder fbb;
  fbb.Finish(wire::CreateReleaseRequestDirect(fbb, &handles));
  return Encode(T(MsgType::kRelease), fbb, 0);
}

Bytes List(std::optional<uint64_t> after, uint32_t limit) {
  fb::FlatBufferBuilder fbb;
  wire::Guid g = after ? G(*after) : wire::Guid();
  fbb.Finish(wire::CreateListRequest(fbb, after ? &g : nullptr, limit));
  return Encode(T(MsgType::kList), fbb);
}

Bytes Resume(uint64_t session) {
  fb::FlatBufferBuilder fbb;
  fbb.Finish(wire::CreateResumeRequest(fbb, session));
  return Encode(T(MsgType::kResume), fbb);
}

Bytes Lease(uint64_t size, uint64_t at_least = 0) {
  fb::FlatBufferBuilder fbb;
  fbb.Finish(wire::CreateLeaseRequest(fbb, size, at_least));
  return Encode(T(MsgType::kLease), fbb);
}

// A put of frames (offset, size) in host segment `segment`.
Bytes Put(uint64_t guid, const std::vector<std::pair<uint64_t, uint64_t>>& frames,
          uint32_t segment = 1, std::optional<uint64_t> checksum = std::nullopt) {
  fb::FlatBufferBuilder fbb;
  wire::Guid g = G(guid);
  std::vector<wire::FrameLocation> locations;
  for (auto [offset, size] : frames) locations.emplace_back(offset, size, segment, 0);
  auto frame_vec = fbb.CreateVectorOfStructs(locations);
  auto name = fbb.CreateString("put");
  wire::PutRequestBuilder b(fbb);
  b.add_guid(&g);
  b.add_frames(frame_vec);
  b.add_name(name);
  if (checksum) b.add_checksum(*checksum);
  fbb.Finish(b.Finish());
  return Encode(T(MsgType::kPut), fbb, 0);
}

Bytes Empty(uint16_t type) {
  fb::FlatBufferBuilder fbb;
  fbb.Finish(wire::CreateEmptyReply(fbb));
  return Encode(type, fbb);
}

// Replies and the daemon's own messages.

fb::Offset<wire::DevicePoolInfo> DevicePool(fb::FlatBufferBuilder& fbb) {
  auto uuid = fbb.CreateString("GPU-00000000-1111-2222-3333-444444444444");
  auto name = fbb.CreateString("seed GPU");
  auto kind = fbb.CreateString("memfd-test");
  wire::DevicePoolInfoBuilder b(fbb);
  b.add_pool(1);
  b.add_uuid(uuid);
  b.add_name(name);
  b.add_kind(kind);
  b.add_capacity(1ull << 33);
  b.add_chunk_size(1ull << 30);
  b.add_reserved(1ull << 30);
  b.add_used(4096);
  b.add_chunks(1);
  return b.Finish();
}

Bytes HelloReply() {
  fb::FlatBufferBuilder fbb;
  auto version = fbb.CreateString("0.1.0");
  std::vector<fb::Offset<wire::DevicePoolInfo>> pools = {DevicePool(fbb)};
  auto pools_vec = fbb.CreateVector(pools);
  wire::HelloReplyBuilder b(fbb);
  b.add_version(proto::kProtocolVersion);
  b.add_daemon_version(version);
  b.add_session_id(3);
  b.add_daemon_pid(4242);
  b.add_max_message_size(proto::kMaxMessageSize);
  b.add_max_inline_size(proto::kMaxInlineSize);
  b.add_hugepages(true);
  b.add_device_pools(pools_vec);
  b.add_index_sets(16384);
  b.add_index_arena(4 << 20);
  b.add_slot_count(1024);
  fbb.Finish(b.Finish());
  return Encode(proto::ReplyType(MsgType::kHello), fbb, 1);
}

std::vector<fb::Offset<wire::SegmentInfo>> Segments(fb::FlatBufferBuilder& fbb) {
  return {wire::CreateSegmentInfo(fbb, 1, 64 << 20, false),
          wire::CreateSegmentInfo(fbb, 2, 1 << 30, true)};
}

std::vector<wire::FrameLocation> Frames() { return {{0, 4096, 1, 0}, {0, 1 << 30, 2, 0}}; }

// A create reply, or (kLease) a lease reply: the same table, without a GUID.
Bytes CreateReply(MsgType type = MsgType::kCreate) {
  fb::FlatBufferBuilder fbb;
  wire::Guid g = G(1);
  auto frames = Frames();
  auto segments = Segments(fbb);
  fbb.Finish(wire::CreateCreateReplyDirect(fbb, type == MsgType::kCreate ? &g : nullptr, &frames,
                                           &segments));
  return Encode(proto::ReplyType(type), fbb);
}

Bytes GetReply() {
  fb::FlatBufferBuilder fbb;
  auto frames = Frames();
  Bytes metadata = {1, 2, 3, 4, 5};
  wire::Guid a = G(1), b = G(2);
  auto frames_vec = fbb.CreateVectorOfStructs(frames);
  auto metadata_vec = fbb.CreateVector(metadata);
  wire::GetResultBuilder ok(fbb);
  ok.add_guid(&a);
  ok.add_code(wire::Code::Ok);
  ok.add_handle(9);
  ok.add_frames(frames_vec);
  ok.add_metadata(metadata_vec);
  ok.add_checksum(0x0123456789abcdefull);
  std::vector<fb::Offset<wire::GetResult>> results = {ok.Finish()};
  auto message = fbb.CreateString("not sealed in time");
  wire::GetResultBuilder timeout(fbb);
  timeout.add_guid(&b);
  timeout.add_code(wire::Code::Timeout);
  timeout.add_message(message);
  results.push_back(timeout.Finish());
  auto segments = Segments(fbb);
  fbb.Finish(wire::CreateGetReplyDirect(fbb, &results, &segments));
  return Encode(proto::ReplyType(MsgType::kGet), fbb);
}

Bytes GuidsReply(MsgType type) {
  fb::FlatBufferBuilder fbb;
  wire::Guid a = G(1), b = G(2);
  std::vector<fb::Offset<wire::GuidResult>> results = {
      wire::CreateGuidResultDirect(fbb, &a, wire::Code::Ok, ""),
      wire::CreateGuidResultDirect(fbb, &b, wire::Code::NotFound, "does not exist")};
  fbb.Finish(wire::CreateGuidsReplyDirect(fbb, &results));
  return Encode(proto::ReplyType(type), fbb);
}

fb::Offset<wire::ObjectInfo> Info(fb::FlatBufferBuilder& fbb, uint64_t n, bool metadata) {
  auto frames = Frames();
  Bytes md = {9, 8, 7};
  wire::Guid g = G(n);
  auto name = fbb.CreateString("seed object");
  auto frames_vec = fbb.CreateVectorOfStructs(frames);
  auto md_vec = metadata ? fbb.CreateVector(md) : 0;
  wire::ObjectInfoBuilder b(fbb);
  b.add_guid(&g);
  b.add_name(name);
  b.add_state(wire::State::Sealed);
  b.add_size(4096 + (1 << 30));
  b.add_frames(frames_vec);
  b.add_refcount(2);
  b.add_evictable(true);
  b.add_created_unix_ns(1700000000000000000);
  b.add_sealed_unix_ns(1700000000000001000);
  b.add_creator_pid(4242);
  b.add_creator_uid(1000);
  b.add_metadata_size(3);
  if (metadata) b.add_metadata(md_vec);
  b.add_checksum(0x0123456789abcdefull);
  return b.Finish();
}

Bytes StatReply() {
  fb::FlatBufferBuilder fbb;
  fbb.Finish(wire::CreateStatReply(fbb, Info(fbb, 1, true)));
  return Encode(proto::ReplyType(MsgType::kStat), fbb);
}

Bytes ListReply() {
  fb::FlatBufferBuilder fbb;
  std::vector<fb::Offset<wire::ObjectInfo>> infos = {Info(fbb, 1, false), Info(fbb, 2, false)};
  fbb.Finish(wire::CreateListReplyDirect(fbb, &infos, true));
  return Encode(proto::ReplyType(MsgType::kList), fbb);
}

Bytes StatusReply() {
  fb::FlatBufferBuilder fbb;
  std::vector<uint64_t> errors(10, 1);
  std::vector<wire::UserUsage> users = {{1000, 3, 8192}, {1001, 1, 64}};
  auto version = fbb.CreateString("0.1.0");
  auto socket = fbb.CreateString("/tmp/depot.sock");
  auto errors_vec = fbb.CreateVector(errors);
  auto users_vec = fbb.CreateVectorOfStructs(users);
  auto unavailable = fbb.CreateString("no GPU");
  wire::StatusReplyBuilder b(fbb);
  b.add_daemon_version(version);
  b.add_daemon_pid(4242);
  b.add_uptime_ms(1000);
  b.add_socket_path(socket);
  b.add_capacity(1 << 30);
  b.add_reserved(64 << 20);
  b.add_used(4096);
  b.add_largest_free(1 << 29);
  b.add_segments(1);
  b.add_objects_creating(1);
  b.add_objects_sealed(2);
  b.add_objects_deleted(3);
  b.add_clients(4);
  b.add_evictions(5);
  b.add_evicted_bytes(6);
  b.add_prefault(true);
  b.add_gets_waiting(7);
  b.add_free_in_segments(8);
  b.add_largest_free_block(9);
  b.add_requests(10);
  b.add_errors(errors_vec);
  b.add_connections(11);
  b.add_users(users_vec);
  b.add_user_quota_bytes(1 << 20);
  b.add_user_quota_objects(100);
  b.add_client_quota_bytes(1 << 19);
  b.add_client_quota_objects(50);
  b.add_per_user_namespaces(true);
  b.add_namespaces(2);
  b.add_devices_unavailable(unavailable);
  fbb.Finish(b.Finish());
  return Encode(proto::ReplyType(MsgType::kStatus), fbb);
}

Bytes MetricsReply() {
  flatbuffers::FlatBufferBuilder fbb;
  fbb.Finish(wire::CreateMetricsReplyDirect(
      fbb,
      "# HELP depot_clients Connections open now.\n# TYPE depot_clients gauge\n"
      "depot_clients 1\n"));
  return Encode(proto::ReplyType(MsgType::kMetrics), fbb);
}

Bytes ClientsReply() {
  fb::FlatBufferBuilder fbb;
  auto name = fbb.CreateString("seed");
  auto process = fbb.CreateString("worker");
  wire::ClientInfoBuilder b(fbb);
  b.add_session_id(1);
  b.add_pid(4242);
  b.add_uid(1000);
  b.add_gid(1000);
  b.add_name(name);
  b.add_process(process);
  b.add_references(2);
  b.add_bytes_held(8192);
  b.add_creating(1);
  b.add_requests(30);
  b.add_connected_unix_ns(1700000000000000000);
  b.add_subscribed(true);
  b.add_created_objects(3);
  b.add_created_bytes(12288);
  std::vector<fb::Offset<wire::ClientInfo>> clients = {b.Finish()};
  fbb.Finish(wire::CreateClientsReplyDirect(fbb, &clients));
  return Encode(proto::ReplyType(MsgType::kClients), fbb);
}

Bytes Event() {
  fb::FlatBufferBuilder fbb;
  wire::Guid g = G(1);
  auto name = fbb.CreateString("seed object");
  wire::EventBuilder b(fbb);
  b.add_kind(wire::EventKind::Sealed);
  b.add_unix_ns(1700000000000000000);
  b.add_guid(&g);
  b.add_name(name);
  b.add_size(4096);
  b.add_session_id(3);
  b.add_pid(4242);
  b.add_uid(1000);
  b.add_dropped(2);
  fbb.Finish(b.Finish());
  return Encode(T(MsgType::kEvent), fbb, 0);
}

// A retire notice, or (kSegmentsDropped) a client's answer to one: the same table.
Bytes SegmentsRetired(MsgType type = MsgType::kSegmentsRetired) {
  fb::FlatBufferBuilder fbb;
  std::vector<uint32_t> ids = {1, 2};
  auto ids_vec = fbb.CreateVector(ids);
  wire::SegmentsRetiredBuilder b(fbb);
  b.add_ids(ids_vec);
  b.add_pool(1);
  fbb.Finish(b.Finish());
  return Encode(T(type), fbb, 0);
}

Bytes Error() { return proto::EncodeError(7, wire::Code::NotFound, "object does not exist"); }

// fuzz_store's operations (see fuzz_store.cc).
class Ops {
 public:
  Ops& Msg(int slot, const Bytes& m) {
    out_.push_back(static_cast<uint8_t>(slot));
    out_.insert(out_.end(), m.begin(), m.end());
    return *this;
  }
  Ops& Greet(int slot) { return Op(slot, 4); }
  Ops& Close(int slot) { return Op(slot, 5); }
  Ops& Poll(bool sleep) {
    Op(0, 6);
    out_.push_back(sleep ? 1 : 0);
    return *this;
  }
  Ops& Stall(int slot) { return Op(slot, 7); }
  // A record in the slot's put ring: `body` is a whole put message, whose body is written.
  Ops& Ring(int slot, const Bytes& put, uint8_t flags = 0) {
    Op(slot, 8);
    size_t length = put.size() - sizeof(proto::Header);
    out_.insert(out_.end(),
                {flags, static_cast<uint8_t>(length), static_cast<uint8_t>(length >> 8)});
    out_.insert(out_.end(), put.begin() + sizeof(proto::Header), put.end());
    return *this;
  }
  // The slot's ring's lease word set to `value` (see fuzz_store.cc).
  Ops& LeaseWord(int slot, uint8_t value) {
    Op(slot, 8);
    out_.insert(out_.end(), {static_cast<uint8_t>(8 | value << 4), 0, 0});
    return *this;
  }
  const Bytes& bytes() const { return out_; }

 private:
  Ops& Op(int slot, int kind) {
    out_.push_back(static_cast<uint8_t>(slot + 3 * kind));
    return *this;
  }
  Bytes out_;
};

void Write(const std::filesystem::path& dir, const std::string& name, const Bytes& bytes) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir / name, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
}

void WriteFrameCorpus(const std::filesystem::path& dir) {
  CreateArgs full =
      Args({4096, 0, 100}, 1, "tensor", {1, 2, 3}, true, false, std::nullopt, {0, 0, 1});
  CreateArgs small = Args({16, 8}, 2, "", {}, false, true, 0x0123456789abcdefull);
  std::vector<std::pair<std::string, Bytes>> messages = {
      {"hello", Hello()},
      {"create", Create(full)},
      {"create-inline", Create(small)},
      {"seal", GuidMessage(MsgType::kSeal, 1)},
      {"seal-checksum", GuidMessage(MsgType::kSeal, 1, 0x0123456789abcdefull)},
      {"abort", GuidMessage(MsgType::kAbort, 1)},
      {"get", Get({1, 2, 3}, 100)},
      {"release", Release({1, 2})},
      {"delete", Guids(MsgType::kDelete, {1, 2})},
      {"contains", Guids(MsgType::kContains, {1})},
      {"hold", Guids(MsgType::kHold, {1, 2})},
      {"resume", Resume(1)},
      {"list", List(1, 10)},
      {"stat", GuidMessage(MsgType::kStat, 1)},
      {"status", Empty(T(MsgType::kStatus))},
      {"ping", Empty(T(MsgType::kPing))},
      {"clients", Empty(T(MsgType::kClients))},
      {"subscribe", Empty(T(MsgType::kSubscribe))},
      {"metrics", Empty(T(MsgType::kMetrics))},
      {"segments-dropped", SegmentsRetired(MsgType::kSegmentsDropped)},
      {"lease", Lease(1 << 20)},
      {"put", Put(1, {{0, 1000}, {1024, 0}, {1088, 64}}, 1, 0x0123456789abcdefull)},
      {"hello-reply", HelloReply()},
      {"create-reply", CreateReply()},
      {"lease-reply", CreateReply(MsgType::kLease)},
      {"seal-reply", Empty(proto::ReplyType(MsgType::kSeal))},
      {"get-reply", GetReply()},
      {"delete-reply", GuidsReply(MsgType::kDelete)},
      {"contains-reply", GuidsReply(MsgType::kContains)},
      {"hold-reply", GuidsReply(MsgType::kHold)},
      {"resume-reply", Empty(proto::ReplyType(MsgType::kResume))},
      {"list-reply", ListReply()},
      {"stat-reply", StatReply()},
      {"status-reply", StatusReply()},
      {"ping-reply", Empty(proto::ReplyType(MsgType::kPing))},
      {"clients-reply", ClientsReply()},
      {"metrics-reply", MetricsReply()},
      {"event", Event()},
      {"segments-retired", SegmentsRetired()},
      {"error", Error()},
  };
  Bytes stream;
  for (const auto& [name, m] : messages) {
    Write(dir, name, m);
    stream.insert(stream.end(), m.begin(), m.end());
  }
  Write(dir, "stream-of-all", stream);
}

void WriteStoreCorpus(const std::filesystem::path& dir) {
  // One object through its whole life, and every inspection request.
  CreateArgs two = Args({4096, 100}, 1, "two frames", {1, 2, 3}, false, false);
  Write(dir, "lifecycle",
        Ops()
            .Msg(0, Hello())
            .Msg(0, Create(two))
            .Msg(0, GuidMessage(MsgType::kSeal, 1, 0x0123456789abcdefull))
            .Msg(0, Get({1}, 0))
            .Msg(0, GuidMessage(MsgType::kStat, 1))
            .Msg(0, Guids(MsgType::kContains, {1, 2}))
            .Msg(0, List(std::nullopt, 0))
            .Msg(0, List(1, 5))
            .Msg(0, Empty(T(MsgType::kStatus)))
            .Msg(0, Empty(T(MsgType::kPing)))
            .Msg(0, Empty(T(MsgType::kClients)))
            .Msg(0, Release({1}))
            .Msg(0, Guids(MsgType::kDelete, {1}))
            .bytes());

  // Small objects in the request, a multi-get with a missing GUID, release after delete.
  CreateArgs inline_a = Args({64, 0, 8}, 2, "inline", {}, false, true);
  CreateArgs inline_b = Args({1000}, 3, "", {7}, true, true, 0xfedcba9876543210ull);
  Write(dir, "inline",
        Ops()
            .Greet(0)
            .Msg(0, Create(inline_a))
            .Msg(0, Create(inline_b))
            .Msg(0, Get({2, 3, 4}, 0))
            .Msg(0, Guids(MsgType::kDelete, {2}))
            .Msg(0, Release({1, 2}))
            .Msg(0, Get({3}, 0))
            .bytes());

  // Holds after a reconnect: objects of another session held by GUID (one missing, one named
  // twice), deleted while held, held again; then a resume of a session no grace period waits for.
  Write(dir, "holds",
        Ops()
            .Greet(0)
            .Greet(1)
            .Msg(0, Create(inline_a))
            .Msg(0, Create(inline_b))
            .Msg(1, Guids(MsgType::kHold, {2, 3, 4, 2}))
            .Msg(0, Guids(MsgType::kDelete, {2}))
            .Msg(1, Guids(MsgType::kHold, {2, 3}))
            .Msg(1, Resume(1))
            .bytes());

  // Gets parked before their objects exist, woken by a seal, timed out, or orphaned by a close.
  Write(dir, "parked-gets",
        Ops()
            .Greet(0)
            .Greet(1)
            .Greet(2)
            .Msg(1, Get({5}, -1))
            .Msg(1, Get({5, 6}, 1))
            .Msg(2, Get({6}, 1000))
            .Msg(0, Create(Args({4096}, 5)))
            .Msg(1, Get({5}, 50))
            .Msg(0, GuidMessage(MsgType::kSeal, 5))
            .Poll(true)
            .Msg(0, Create(Args({128}, 6)))
            .Close(2)
            .Msg(0, GuidMessage(MsgType::kSeal, 6))
            .Poll(false)
            .bytes());

  // A creator that disconnects: its object is aborted, the get waiting for it times out.
  Write(dir, "creator-closes",
        Ops()
            .Greet(0)
            .Greet(1)
            .Msg(0, Create(Args({300 << 10}, 7)))
            .Msg(1, Get({7}, 1))
            .Msg(1, GuidMessage(MsgType::kSeal, 7))
            .Msg(1, GuidMessage(MsgType::kAbort, 7))
            .Close(0)
            .Poll(true)
            .Msg(1, GuidMessage(MsgType::kStat, 7))
            .bytes());

  // Events to a subscriber, one that stops reading and falls behind, then reads again.
  Write(dir, "events",
        Ops()
            .Greet(2)
            .Msg(2, Empty(T(MsgType::kSubscribe)))
            .Greet(0)
            .Msg(0, Create(Args({512}, 8, "evt", {}, false, true)))
            .Stall(2)
            .Msg(0, Create(Args({512}, 9, "", {}, false, false)))
            .Msg(0, GuidMessage(MsgType::kAbort, 9))
            .Stall(2)
            .Msg(0, Guids(MsgType::kDelete, {8}))
            .Close(0)
            .bytes());

  // Evictable objects fill the pool (a dedicated segment too); a create that needs room evicts.
  Ops evict;
  evict.Greet(0);
  for (uint64_t i = 0; i < 6; ++i) {
    evict.Msg(0, Create(Args({i == 0 ? (300u << 10) : (240u << 10)}, 20 + i, "", {}, true, false)));
    evict.Msg(0, GuidMessage(MsgType::kSeal, 20 + i));
  }
  evict.Msg(0, Create(Args({1u << 20}, 30)))
      .Msg(0, Create(Args({1u << 20}, 31)))
      .Msg(0, Empty(T(MsgType::kStatus)))
      .Msg(0, Create(Args({3u << 20}, 32)));
  Write(dir, "eviction", evict.bytes());

  // Puts in one message: a lease (the pool caps it at half a segment, 128 KiB, from offset 0 of
  // segment 1), puts with gaps, one ending exactly at the lease's end, one past it (refused: the
  // session closes), a renewal, a get that finds a put, and hostile puts from other sessions:
  // before any lease, with a GUID that exists, in another session's lease.
  Write(dir, "puts",
        Ops()
            .Greet(0)
            .Greet(1)
            .Greet(2)
            .Msg(1, Get({40}, 1000))
            .Msg(0, Lease(1 << 20, 1 << 20))
            .Msg(0, Lease(1 << 20))
            .Msg(0, Put(40, {{0, 1000}, {1024, 0}}))
            .Msg(0, Put(41, {{4096, 64}, {8192, 100}}, 1, 0x0123456789abcdefull))
            .Msg(0, Put(42, {{(128 << 10) - 64, 64}}))
            .Msg(0, Lease(4096))
            .Msg(2, Put(43, {{0, 64}}))
            .Msg(1, Lease(4096))
            .Msg(1, Put(40, {{131072 + 4096, 64}}))
            .Msg(0, Put(44, {{(128 << 10) + 64, 64}}, 1))
            .Msg(0, Put(45, {{(1 << 20), 64}}))
            .Msg(0, Empty(T(MsgType::kStatus)))
            .Msg(0, Guids(MsgType::kDelete, {40, 41, 42}))
            .bytes());

  // Puts without a message: the same lease, puts written into the put ring (one held, as a get of
  // one's own put marks it), taken at the session's next message, by another session's miss, and
  // at close; then a record that breaks the rules (a frame outside the lease: the session closes).
  Write(dir, "ring",
        Ops()
            .Greet(0)
            .Greet(1)
            .Msg(0, Lease(1 << 20))
            .Ring(0, Put(50, {{0, 1000}}))
            .Ring(0, Put(51, {{1024, 64}}), 1)
            .Msg(0, Empty(T(MsgType::kPutsWritten)))
            .Ring(0, Put(52, {{4096, 100}}))
            .Msg(1, Get({52}, 0))
            .Msg(0, Guids(MsgType::kDelete, {50}))
            .Ring(0, Put(53, {{0, 900}}))
            .Poll(true)
            .Ring(0, Put(54, {{(1 << 20) + 64, 64}}))
            .Msg(0, Empty(T(MsgType::kPing)))
            .Greet(2)
            .Msg(2, Lease(4096))
            .Ring(2, Put(55, {{0, 64}}))
            .Close(2)
            .Msg(1, Guids(MsgType::kDelete, {51, 52, 53, 55}))
            .bytes());

  // Idle leases taken back: two sessions put through their rings, one of them then holds its
  // lease word at writing; a third fills the pool, which takes back the idle lease only. The put
  // written afterwards into the lease taken back breaks the rules (its session closes).
  Ops revoked;
  revoked.Greet(0).Greet(1).Greet(2);
  for (int slot : {0, 2}) {  // leases of half a segment, one after the other
    uint64_t at = slot == 0 ? 0 : 128 << 10;
    revoked.Msg(slot, Lease(1 << 20))
        .Ring(slot, Put(static_cast<uint64_t>(60 + slot), {{at, 1000}}))
        .Msg(slot, Empty(T(MsgType::kPing)));
  }
  revoked.LeaseWord(2, 1);
  for (uint64_t id = 70; id < 90; ++id) revoked.Msg(1, Create(Args({100 << 10}, id)));
  revoked.Msg(1, Empty(T(MsgType::kStatus)))
      .Ring(0, Put(63, {{1024, 64}}))
      .Msg(0, Empty(T(MsgType::kPing)))
      .Ring(2, Put(64, {{(128 << 10) + 1024, 64}}))
      .Msg(2, Empty(T(MsgType::kPing)));
  Write(dir, "ring-revoked", revoked.bytes());

  // Requests the store refuses, each answered with an error while the session stays open.
  Write(dir, "refused",
        Ops()
            .Greet(0)
            .Msg(0, Create(Args({}, 10)))
            .Msg(0, Create(Args({1, 2, 3, 4, 5, 6, 7, 8, 9}, 10)))
            .Msg(0, Create(Args({16}, 10, "", Bytes(2000, 1))))
            .Msg(0, Create(Args({16}, 10, std::string(300, 'n'))))
            .Msg(0, Create(Args({16}, 0)))
            .Msg(0, Create(Args({16, 32}, 13, "", {}, false, false, std::nullopt, {0, 1})))
            .Msg(0, Create(Args({16, 32}, 14, "", {}, false, false, std::nullopt, {0})))
            .Msg(0, GuidMessage(MsgType::kSeal, 11))
            .Msg(0, Create(Args({16}, 11)))
            .Msg(0, Create(Args({16}, 11)))
            .Msg(0, GuidMessage(MsgType::kSeal, 11))
            .Msg(0, GuidMessage(MsgType::kSeal, 11))
            .Msg(0, Get({}, 0))
            .Msg(0, Get({11}, -5))
            .Msg(0, Guids(MsgType::kDelete, {12}))
            .Msg(0, GuidMessage(MsgType::kStat, 12))
            .Greet(1)
            .Msg(1, GuidMessage(MsgType::kAbort, 11))
            .bytes());

  // Protocol errors close the session: no hello first, a second hello, a reply type.
  Write(dir, "protocol-errors",
        Ops()
            .Msg(0, Empty(T(MsgType::kPing)))
            .Greet(1)
            .Greet(1)
            .Greet(2)
            .Msg(2, Empty(proto::ReplyType(MsgType::kPing)))
            .Greet(0)
            .Msg(0, Empty(T(MsgType::kPing)))
            .bytes());
}

// fuzz_client: what a fake daemon sends, as records (fuzz_client.cc describes the format).
class Records {
 public:
  // `message`, with memfds of `fd_sizes` riding on its first byte, once the client's next request
  // is in.
  Records& Send(const Bytes& message, std::vector<uint32_t> fd_sizes = {}) {
    bytes_.push_back(static_cast<uint8_t>(4 | fd_sizes.size()));
    for (uint32_t size : fd_sizes) Append(&size, sizeof size);
    auto length = static_cast<uint16_t>(message.size());
    Append(&length, sizeof length);
    bytes_.insert(bytes_.end(), message.begin(), message.end());
    return *this;
  }
  const Bytes& bytes() const { return bytes_; }

 private:
  void Append(const void* p, size_t n) {
    auto* b = static_cast<const uint8_t*>(p);
    bytes_.insert(bytes_.end(), b, b + n);
  }
  Bytes bytes_;
};

Bytes ClientHelloReply() {
  fb::FlatBufferBuilder fbb;
  wire::HelloReplyBuilder b(fbb);
  b.add_version(proto::kProtocolVersion);
  b.add_max_message_size(proto::kMaxMessageSize);
  b.add_max_inline_size(proto::kMaxInlineSize);
  fbb.Finish(b.Finish());
  return Encode(proto::ReplyType(MsgType::kHello), fbb, 1);
}

// A create reply for the client's frames of 4096 and 100 bytes (or of `first_size`), in host
// segment 1 of `segment_size` bytes, whose fd rides along.
Bytes ClientCreateReply(uint64_t first_size = 4096, uint64_t segment_size = 1 << 20) {
  fb::FlatBufferBuilder fbb;
  wire::Guid g = G(1);
  std::vector<wire::FrameLocation> frames = {{0, first_size, 1, 0}, {8192, 100, 1, 0}};
  std::vector<fb::Offset<wire::SegmentInfo>> segments = {
      wire::CreateSegmentInfo(fbb, 1, segment_size, false, 0)};
  fbb.Finish(wire::CreateCreateReplyDirect(fbb, &g, &frames, &segments));
  return Encode(proto::ReplyType(MsgType::kCreate), fbb, 2);
}

Bytes ClientPutReply() {
  fb::FlatBufferBuilder fbb;
  wire::Guid g = G(2);
  fbb.Finish(wire::CreateCreateReplyDirect(fbb, &g));
  return Encode(proto::ReplyType(MsgType::kCreate), fbb, 4);
}

// A get reply for the client's GUIDs 1 and 2 (or `first` and 2): the first in segment 1, which
// the client has already, the second not sealed in time.
Bytes ClientGetReply(uint64_t first = 1) {
  fb::FlatBufferBuilder fbb;
  std::vector<wire::FrameLocation> frames = {{0, 4096, 1, 0}};
  Bytes metadata = {1, 2, 3};
  wire::Guid a = G(first), b = G(2);
  std::vector<fb::Offset<wire::GetResult>> results = {
      wire::CreateGetResultDirect(fbb, &a, wire::Code::Ok, nullptr, 9, &frames, &metadata),
      wire::CreateGetResultDirect(fbb, &b, wire::Code::Timeout, "not sealed in time")};
  fbb.Finish(wire::CreateGetReplyDirect(fbb, &results));
  return Encode(proto::ReplyType(MsgType::kGet), fbb, 5);
}

void WriteClientCorpus(const std::filesystem::path& dir) {
  fb::FlatBufferBuilder fbb;
  fbb.Finish(wire::CreateEmptyReply(fbb));
  Bytes seal = Encode(proto::ReplyType(MsgType::kSeal), fbb, 3);
  auto session = [&](const Bytes& create, std::vector<uint32_t> fds, const Bytes& get) {
    return Records()
        .Send(ClientHelloReply())
        .Send(create, std::move(fds))
        .Send(seal)
        .Send(ClientPutReply())
        .Send(get)
        .bytes();
  };
  Write(dir, "session", session(ClientCreateReply(), {1 << 20}, ClientGetReply()));
  // Each lie the client must refuse with ProtocolError.
  Write(dir, "frame-larger-than-asked",
        session(ClientCreateReply(64 << 10), {1 << 20}, ClientGetReply()));
  Write(dir, "memfd-shorter-than-claimed", session(ClientCreateReply(), {4096}, ClientGetReply()));
  Write(dir, "fd-missing", session(ClientCreateReply(), {}, ClientGetReply()));
  Write(dir, "get-of-another-guid", session(ClientCreateReply(), {1 << 20}, ClientGetReply(7)));
  Write(dir, "stray-fd",
        Records().Send(ClientHelloReply(), {0}).Send(ClientCreateReply(), {1 << 20}).bytes());
  Write(dir, "errors",
        Records()
            .Send(ClientHelloReply())
            .Send(proto::EncodeError(2, wire::Code::StoreFull, "full"))
            .Send(proto::EncodeError(3, wire::Code::QuotaExceeded, "quota"))
            .Send(proto::EncodeError(4, wire::Code::Timeout, "late"))
            .bytes());
}
// fuzz_index: a sets byte, the index's bytes (entries, then a 512-byte arena), slot words.
struct IndexInput {
  explicit IndexInput(uint8_t log2_sets)
      : sets(uint64_t{1} << log2_sets),
        words(sets * index::kSetWords + 512 / 8, 0),
        head(log2_sets) {}
  // An entry for object `id` of `frames` frames: its frame in the entry when it is one and there
  // is no metadata (unless `flags` say otherwise), else its record at `record` in the arena.
  IndexInput& Entry(uint64_t way, uint64_t id, uint64_t frames, uint64_t metadata, uint64_t record,
                    std::optional<uint64_t> flags = std::nullopt) {
    Guid g{0x1000 + id, id};
    uint64_t n = index::SetOf(g, sets) * index::kWays + way;
    uint64_t* e = words.data() + index::EntryWord(n) - index::kEntriesWord;
    uint64_t* tag = words.data() + index::TagWord(n) - index::kEntriesWord;
    bool inlined = index::Inlined(frames, metadata);
    e[index::kSeq] = 2;
    tag[0] = g.hi;
    tag[1] = g.lo;
    e[index::kId] = id;
    e[index::kShape] = index::Shape(
        frames, flags.value_or(index::kHasChecksum | (inlined ? index::kInline : 0)), metadata);
    uint64_t* r = e + index::kRecord;
    if (!inlined) {
      e[index::kRecord] = record;
      r = words.data() + sets * index::kSetWords + record / 8;
    }
    for (uint64_t f = 0; f < frames && r + 3 <= words.data() + words.size(); ++f, r += 3) {
      r[0] = f * 4096;
      r[1] = 100;
      r[2] = 1;
    }
    return *this;
  }
  Bytes bytes(std::vector<uint64_t> slots = {}) const {
    Bytes out{head};
    auto* w = reinterpret_cast<const uint8_t*>(words.data());
    out.insert(out.end(), w, w + words.size() * 8);
    auto* s = reinterpret_cast<const uint8_t*>(slots.data());
    out.insert(out.end(), s, s + slots.size() * 8);
    return out;
  }
  uint64_t sets;
  std::vector<uint64_t> words;
  uint8_t head;
};

void WriteIndexCorpus(const std::filesystem::path& dir) {
  Write(dir, "empty", IndexInput(0).bytes());
  Write(dir, "two-entries", IndexInput(1).Entry(0, 7, 2, 5, 0).Entry(1, 8, 1, 0, 64).bytes());
  Write(dir, "record-past-the-arena", IndexInput(0).Entry(0, 7, 3, 0, 480).bytes());
  Write(dir, "too-many-frames", IndexInput(2).Entry(3, 9, 65, 0, 0).bytes());
  Write(dir, "inline-entry-of-two-frames",
        IndexInput(1).Entry(2, 10, 2, 0, 0, index::kInline).Entry(0, 11, 1, 0, 0).bytes());
  Write(dir, "slots-hold-every-object", IndexInput(0).bytes({1, 2, 3, 4, 5, 6, 7, 8}));
  Write(dir, "slots-hold-some-and-garbage",
        IndexInput(0).bytes({0, 2, ~uint64_t{0}, 6, 0x8000000000000000ull, 2, 2}));
}

// fuzz_lease: operations of fuzz/lease_driver.h. Control bytes: operation * 2 + client slot.
// A frame's pick byte: anchor (0 start, 1 cursor, 2 end, 3 last frame) | size << 3 (1: 1 byte,
// 2: 64, 3: 100, 5: to the lease's end, 6: the whole lease) | 0x40 unaligned | 0x80 next segment.
void WriteLeaseCorpus(const std::filesystem::path& dir) {
  constexpr uint8_t kLease = 0, kPut = 2, kRingPut = 4, kDelete = 6, kPressure = 8, kClose = 10,
                    kCheck = 12;
  constexpr uint8_t kWhole = 6 << 3, k64 = 2 << 3, k100 = 3 << 3, kToEnd = 5 << 3;
  Write(dir, "whole-lease-then-past-start",
        {kLease, 5, kPut, 0, kWhole, 0, kPut, 0, k64, 1, kCheck});
  Write(dir, "whole-lease-then-same-offset",
        {kLease, 5, kPut, 0, kWhole, 0, kPut, 0, k64, 0, kCheck, kDelete, 0, kCheck});
  Write(dir, "ring-whole-lease-then-past-start",
        {kLease, 5, kRingPut, 0, kWhole, 0, 0, kRingPut, 0, k64, 1, 1, kCheck});
  Write(dir, "puts-at-the-cursor-deleted-under-pressure",
        {kLease,    3,      kRingPut, 1, k100 | 1,   0,       k64 | 1, 0,       1,
         kPut,      0,      k100 | 1, 0, kCheck,     kDelete, 0,       kDelete, 1,
         kPressure, kCheck, kRingPut, 0, kToEnd | 1, 0,       1,       kClose,  kCheck});
  Write(dir, "two-clients-gaps-and-strays",
        {kLease,      4,       kLease + 1,   4,     kPut,       0, k64, 4,    kPut + 1, 0,
         k100 | 0x40, 2,       kRingPut + 1, 0,     k64 | 0x80, 0, 1,   kPut, 2,        k64 | 1,
         0,           k64 | 1, 0xff,         kCheck});
}

}  // namespace
}  // namespace depot::fuzz

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR (fuzz/corpus)\n", argv[0]);
    return 2;
  }
  std::filesystem::path root(argv[1]);
  depot::fuzz::WriteFrameCorpus(root / "fuzz_frame");
  depot::fuzz::WriteStoreCorpus(root / "fuzz_store");
  depot::fuzz::WriteClientCorpus(root / "fuzz_client");
  depot::fuzz::WriteIndexCorpus(root / "fuzz_index");
  depot::fuzz::WriteLeaseCorpus(root / "fuzz_lease");
  return 0;
}
