// Fuzz target for the daemon's request handling: a real Store with a small real host pool, fed
// a sequence of messages cut from the input across up to three sessions, as Session::Parse feeds
// it (header check, body verification, then Store::Handle; a session that breaks the protocol is
// closed). Between messages the input may greet a session, close it, stall its peer (so events
// are dropped) and run the timers of parked gets.
//
// Input: a sequence of operations, each one control byte then its operands:
//   control % 3          the session slot (a closed slot opens a fresh session on first use)
//   (control / 3) % 9    0-3: a message, a Header then `length` body bytes
//                        4: a valid hello from the slot's session
//                        5: close the session
//                        6: run ready timers; an odd next byte first sleeps 1 ms (3 per input)
//                        7: the peer stops (or starts again) reading: Backlog() reports it full
//                        8: a record written into the session's put ring, as a client would:
//                           a flags byte (its low two bits the header's kHeld and kTaken; bit 2:
//                           the head moves by the body's length alone, unaligned), a 16-bit
//                           length L, then L body bytes; the store takes it with the session's
//                           next message, a miss, a poll or a close. With bit 3 of the flags, no
//                           record: the ring's lease word is set to the flags' high four bits
//                           (idle, writing, revoked or garbage), and leases are taken back from
//                           sessions whose word is idle whenever an allocation finds no room
//
// DEPOT_FUZZ_TRACE=1 in the environment prints every message the store sends.
//
// Checks, besides the sanitizers: every message the store sends is a valid frame, and once every
// session is closed and every object deleted, status says the pool has no byte in use.
//
// At scale: with DEPOT_FUZZ_STORE_OBJECTS=N in the environment, every input runs against one
// store, made once, that holds N sealed objects of 64 B besides what the inputs put (put by a
// session of its own as a client puts them, not evictable, their GUIDs random: no input can name
// them), so that the index, the object table and the allocator work at a million objects. A
// hidden session watches the store's events and records every object an input creates; after
// the input, its sessions close and those objects are deleted, and status must give back the
// counts and bytes it gave before the input. State other than objects (fragmentation, counters)
// carries over from input to input, as in a daemon that runs for weeks: a failure found at scale
// may need the inputs before it to recur.
#include <fmt/format.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <array>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "common/shared_mapping.h"
#include "daemon/store.h"
#include "depot/guid.h"
#include "proto/index_layout.h"
#include "proto/put_ring_layout.h"
#include "proto/wire.h"

namespace depot::fuzz {
namespace {

using proto::MsgType;

constexpr int kSlots = 3;
constexpr int kHidden = kSlots;  // at scale: the session that puts the objects, then watches
constexpr int kMaxSleeps = 3;
constexpr uint32_t kMaxMessage = 1u << 20;

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "fuzz_store: %s\n", what.c_str());
  std::abort();
}

// A session's far end. Replies are checked and dropped (fds close at once); only the last one is
// kept, when asked for, so memory stays bounded however long the input.
class FakePeer : public Peer {
 public:
  void Send(std::vector<uint8_t> message, std::vector<UniqueFd> fds) override {
    if (message.size() < sizeof(proto::Header)) Fail("a message shorter than its header");
    proto::Header h;
    std::memcpy(&h, message.data(), sizeof h);
    if (std::string err = proto::CheckHeader(h); !err.empty()) Fail("sent a bad header: " + err);
    if (message.size() != sizeof h + h.length) Fail("a message whose length is not its header's");
    std::span<const uint8_t> body(message.data() + sizeof h, h.length);
    if (!proto::VerifyBody(h.type, body)) {
      Fail("sent a body that does not verify: " + proto::TypeName(h.type));
    }
    // The hello reply's last fd is the session's put ring: kept, for operation 8.
    if (h.type == proto::ReplyType(MsgType::kHello) &&
        proto::Body<wire::HelloReply>(body)->put_ring_bytes() == put_ring::kRingFileBytes &&
        !fds.empty()) {
      auto map = SharedMapping::Map(fds.back().get(), put_ring::kRingFileBytes, true, "put ring");
      if (!map.ok()) Fail("cannot map the put ring: " + map.status().ToString());
      ring_ = std::move(*map);
    }
    fds.clear();
    if (created_ != nullptr && h.type == static_cast<uint16_t>(MsgType::kEvent)) {
      const auto* e = proto::Body<wire::Event>(body);
      if (e->kind() == wire::EventKind::Created && e->guid() != nullptr) {
        created_->push_back(*e->guid());
      }
    }
    if (trace_) {
      std::string what = proto::TypeName(h.type);
      if (h.type == static_cast<uint16_t>(MsgType::kError)) {
        what += ": " + proto::Body<wire::ErrorReply>(body)->message()->str();
      }
      std::fprintf(stderr, "  -> %p request %llu: %s\n", static_cast<void*>(this),
                   static_cast<unsigned long long>(h.request_id), what.c_str());
    }
    if (keep_last_) {
      last_type_ = h.type;
      last_.assign(body.begin(), body.end());
    }
  }
  size_t Backlog() const override { return stalled_ ? size_t{1} << 20 : 0; }

  // Writes one record into the put ring (operation 8); nothing before hello.
  void WriteRecord(std::span<const uint8_t> body, uint8_t flags) {
    if (!ring_.valid()) return;
    uint64_t* words = ring_.words();
    if (flags & 8) return index::Store(words + put_ring::kLease, flags >> 4);
    if (body.empty()) return;
    uint64_t head = index::Load(words + put_ring::kHead);
    auto* records = reinterpret_cast<uint8_t*>(words + put_ring::kRecordsWord);
    index::Store(words + put_ring::kRecordsWord + (head % put_ring::kRecordBytes) / 8,
                 body.size() | uint64_t{flags & 3u} << 32);
    uint64_t at = (head + put_ring::kHeaderBytes) % put_ring::kRecordBytes;
    uint64_t first = std::min<uint64_t>(body.size(), put_ring::kRecordBytes - at);
    std::memcpy(records + at, body.data(), first);
    std::memcpy(records, body.data() + first, body.size() - first);
    head += (flags & 4) ? body.size() : put_ring::RecordSpan(body.size());
    index::Store(words + put_ring::kHead, head, std::memory_order_release);
  }

  bool stalled_ = false;
  bool keep_last_ = false;
  bool trace_ = std::getenv("DEPOT_FUZZ_TRACE") != nullptr;  // print what the store sends
  std::vector<wire::Guid>* created_ = nullptr;  // where Created events go, when subscribed
  uint16_t last_type_ = 0;
  std::vector<uint8_t> last_;
  SharedMapping ring_;
};

std::vector<uint8_t> Hello() {
  flatbuffers::FlatBufferBuilder fbb;
  fbb.Finish(wire::CreateHelloRequestDirect(fbb, proto::kProtocolVersion, "fuzz"));
  return proto::Encode(static_cast<uint16_t>(MsgType::kHello), 1, fbb);
}

bool Init() {
  spdlog::set_level(spdlog::level::off);
  return true;
}

// What status says of the objects and the pool.
struct Counts {
  uint64_t used = 0, sealed = 0, creating = 0, deleted = 0;
  bool operator==(const Counts&) const = default;
  std::string ToString() const {
    return fmt::format("{} bytes used, {} sealed, {} creating, {} deleted objects", used, sealed,
                       creating, deleted);
  }
};

class Harness {
 public:
  // A store with a 2 MiB pool, or (at scale) one that holds `background` objects of 64 B and has
  // about 8 MiB of room besides.
  explicit Harness(uint64_t background = 0) {
    StoreOptions o = StoreOptionsFrom(DefaultOptions(8ull << 30, 8ull << 30), "/fuzz/depot.sock",
                                      nullptr, "the fuzzer has no GPUs");
    o.namespaces.host.capacity = 2u << 20;
    o.namespaces.host.segment_size = 256u << 10;
    if (background > 0) {
      o.namespaces.host.segment_size = 4u << 20;
      o.namespaces.host.capacity =
          (background * 64 / o.namespaces.host.segment_size + 2) * o.namespaces.host.segment_size;
    }
    o.namespaces.host.name_prefix = fmt::format("depot-fuzz-{}-", ::getpid());
    o.lease_idle = std::chrono::milliseconds(0);  // any lease may be taken back, not after 1 s
    o.version = "fuzz";
    o.max_message_size = kMaxMessage;
    o.max_frames = 8;
    o.max_metadata = 1024;
    auto store = Store::Create(io_, o);
    if (!store.ok()) Fail("cannot create the store: " + store.status().ToString());
    store_ = std::move(*store);
    if (background > 0) Fill(background);
  }

  void Run(std::span<const uint8_t> in) {
    int sleeps = 0;
    while (!in.empty()) {
      uint8_t control = in[0];
      in = in.subspan(1);
      int slot = control % kSlots;
      switch ((control / kSlots) % 9) {
        case 4:
          Deliver(slot, Hello());
          break;
        case 5:
          CloseSlot(slot);
          break;
        case 6:
          if (!in.empty() && (in[0] & 1) && sleeps < kMaxSleeps) {
            ++sleeps;
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
          }
          if (!in.empty()) in = in.subspan(1);
          io_.poll();
          io_.restart();
          break;
        case 7:
          peers_[slot].stalled_ = !peers_[slot].stalled_;
          break;
        case 8: {
          if (in.size() < 3) return;
          uint8_t flags = in[0];
          size_t length = in[1] | size_t{in[2]} << 8;
          in = in.subspan(3);
          std::span<const uint8_t> body = in.first(std::min(length, in.size()));
          in = in.subspan(body.size());
          if (sessions_[slot] != 0) peers_[slot].WriteRecord(body, flags);
          break;
        }
        default: {
          if (in.size() < sizeof(proto::Header)) return;
          proto::Header h;
          std::memcpy(&h, in.data(), sizeof h);
          size_t total = sizeof h + h.length;
          // A length past the input is a message that never completes: the session waits.
          if (proto::CheckHeader(h, kMaxMessage).empty() && total > in.size()) return;
          std::span<const uint8_t> m = in.first(std::min(total, in.size()));
          in = in.subspan(m.size());
          Deliver(slot, m);
        }
      }
    }
  }

  // At scale: every session of the input goes, then every object it created; the store must be
  // as it was before the input.
  void Restore() {
    for (int slot = 0; slot < kSlots; ++slot) CloseSlot(slot);
    io_.poll();
    if (store_->sessions() != 1) Fail("sessions left after every one closed");
    while (!created_.empty()) {
      size_t n = std::min<size_t>(created_.size(), proto::kMaxGuidsPerRequest);
      std::vector<wire::Guid> batch(created_.end() - n, created_.end());
      created_.resize(created_.size() - n);
      flatbuffers::FlatBufferBuilder fbb;
      fbb.Finish(wire::CreateGuidsRequest(fbb, fbb.CreateVectorOfStructs(batch)));
      Deliver(kHidden, proto::Encode(static_cast<uint16_t>(MsgType::kDelete), 3, fbb));
    }
    if (Counts now = Tally(kHidden); now != before_) {
      Fail("after deleting what the input put: " + now.ToString() + ", against " +
           before_.ToString() + " before it");
    }
  }

  // Every session goes, then every object: nothing may stay allocated. Seen as a client sees it
  // (list, delete, status), so that the check needs nothing of the store's insides.
  void Finish() {
    for (int slot = 0; slot < kSlots; ++slot) CloseSlot(slot);
    io_.poll();
    if (store_->sessions() != 0) Fail("sessions left after every one closed");
    const int slot = 0;
    Deliver(slot, Hello());
    peers_[slot].keep_last_ = true;
    for (int round = 0;; ++round) {
      if (round == 100) Fail("objects stay after 100 rounds of deleting");
      flatbuffers::FlatBufferBuilder fbb;
      fbb.Finish(wire::CreateListRequest(fbb, nullptr, proto::kMaxListLimit));
      Deliver(slot, proto::Encode(static_cast<uint16_t>(MsgType::kList), 2, fbb));
      const auto* list = Expect<wire::ListReply>(slot, MsgType::kList);
      if (list->objects() == nullptr || list->objects()->size() == 0) break;
      std::vector<wire::Guid> guids;
      for (const wire::ObjectInfo* o : *list->objects()) {
        if (o->state() == wire::State::Creating)
          Fail("an object is still being created by no session");
        guids.push_back(*o->guid());
      }
      fbb.Clear();
      fbb.Finish(wire::CreateGuidsRequest(fbb, fbb.CreateVectorOfStructs(guids)));
      Deliver(slot, proto::Encode(static_cast<uint16_t>(MsgType::kDelete), 3, fbb));
    }
    if (Counts now = Tally(slot); now != Counts{}) {
      Fail("after deleting everything: " + now.ToString());
    }
    CloseSlot(slot);
  }

 private:
  // The hidden session puts `count` objects of 64 B, as a client puts them into its lease, then
  // subscribes to the store's events.
  void Fill(uint64_t count) {
    Deliver(kHidden, Hello());
    peers_[kHidden].keep_last_ = true;
    uint64_t at = 0, end = 0;
    uint32_t segment = 0;
    for (uint64_t i = 0; i < count; ++i) {
      if (i % 1024 == 0) {  // as the daemon's loop runs between requests: the index's moves
        io_.poll();
        io_.restart();
      }
      if (at + 64 > end) {
        flatbuffers::FlatBufferBuilder fbb;
        fbb.Finish(wire::CreateLeaseRequest(fbb, 1u << 20, 64));
        Deliver(kHidden, proto::Encode(static_cast<uint16_t>(MsgType::kLease), 5, fbb));
        const auto* lease = Expect<wire::CreateReply>(kHidden, MsgType::kLease);
        if (lease->frames() == nullptr || lease->frames()->size() != 1) Fail("a lease of no frame");
        const wire::FrameLocation* f = lease->frames()->Get(0);
        at = f->offset();
        end = at + f->size();
        segment = f->segment();
      }
      flatbuffers::FlatBufferBuilder fbb;
      wire::Guid guid = proto::ToWire(Guid::Random());
      wire::FrameLocation frame(at, 64, segment, 0);
      auto frames = fbb.CreateVectorOfStructs(&frame, 1);
      wire::PutRequestBuilder put(fbb);
      put.add_guid(&guid);
      put.add_frames(frames);
      put.add_evictable(false);
      fbb.Finish(put.Finish());
      Deliver(kHidden, proto::Encode(static_cast<uint16_t>(MsgType::kPut), 6, fbb));
      if (sessions_[kHidden] == 0) Fail(fmt::format("the store refused background put {}", i));
      at += 64;
    }
    // The index moves to bigger ones in steps posted to the loop: they all run before the check.
    for (int round = 0; round < 100'000 && io_.poll() > 0; ++round) io_.restart();
    io_.restart();
    flatbuffers::FlatBufferBuilder fbb;
    fbb.Finish(wire::CreateEmptyReply(fbb));
    Deliver(kHidden, proto::Encode(static_cast<uint16_t>(MsgType::kSubscribe), 7, fbb));
    peers_[kHidden].created_ = &created_;
    before_ = Tally(kHidden);
    if (before_.sealed != count) {
      Fail(fmt::format("{} objects put, {} sealed", count, before_.sealed));
    }
    // The index grew to hold them (all but the few that crowded sets leave out): otherwise the
    // inputs would meet round trips, not an index at scale.
    const auto* st = Expect<wire::StatusReply>(kHidden, MsgType::kStatus);
    if (st->indexed() < count - count / 100) {
      Fail(fmt::format("{} objects put, {} in the index", count, st->indexed()));
    }
  }

  // What status says now, asked through `slot`.
  Counts Tally(int slot) {
    flatbuffers::FlatBufferBuilder fbb;
    fbb.Finish(wire::CreateEmptyReply(fbb));
    Deliver(slot, proto::Encode(static_cast<uint16_t>(MsgType::kStatus), 4, fbb));
    const auto* st = Expect<wire::StatusReply>(slot, MsgType::kStatus);
    return {st->used(), st->objects_sealed(), st->objects_creating(), st->objects_deleted()};
  }

  SessionId& Open(int slot) {
    if (sessions_[slot] == 0) {
      peers_[slot] = FakePeer{};
      PeerCredentials creds;
      creds.pid = ::getpid();
      creds.uid = ::getuid();
      creds.gid = ::getgid();
      // Three slots of one user: far below the handshakes it may have.
      sessions_[slot] = *store_->Open(&peers_[slot], creds);
    }
    return sessions_[slot];
  }

  void CloseSlot(int slot) {
    if (sessions_[slot] == 0) return;
    store_->Close(sessions_[slot]);
    sessions_[slot] = 0;
  }

  // The last message the slot's peer received, which must be the reply of `type`.
  template <typename T>
  const T* Expect(int slot, MsgType type) {
    if (sessions_[slot] == 0 || peers_[slot].last_type_ != proto::ReplyType(type)) {
      Fail("no " + proto::TypeName(proto::ReplyType(type)) + " came");
    }
    return proto::Body<T>(peers_[slot].last_);
  }

  // What Session::Parse does with one complete message (or a header it rejects).
  void Deliver(int slot, std::span<const uint8_t> m) {
    SessionId s = Open(slot);
    proto::Header h;
    std::memcpy(&h, m.data(), sizeof h);
    if (!proto::CheckHeader(h, kMaxMessage).empty()) {
      store_->NoteProtocolError();
      return CloseSlot(slot);
    }
    // The body alone in an allocation of its own, so that any read past its end is caught.
    std::vector<uint8_t> body(m.begin() + sizeof h, m.end());
    if ((h.type & proto::kReplyBit) || !proto::VerifyBody(h.type, body)) {
      store_->NoteProtocolError();
      return CloseSlot(slot);
    }
    Status st = store_->Handle(s, h, body);
    if (!st.ok()) CloseSlot(slot);
  }

  // Declared first: it outlives the store, whose timers it holds.
  boost::asio::io_context io_;
  std::unique_ptr<Store> store_;
  std::array<FakePeer, kSlots + 1> peers_;
  std::array<SessionId, kSlots + 1> sessions_{};
  std::vector<wire::Guid> created_;  // at scale: by the input's sessions
  Counts before_;                    // at scale: before the input
};

// The store at scale, when DEPOT_FUZZ_STORE_OBJECTS asks for one (null otherwise): made before
// the first input, so that making it counts against no input's time.
Harness* AtScale() {
  static Harness* harness = [] {
    const char* objects = std::getenv("DEPOT_FUZZ_STORE_OBJECTS");
    return objects == nullptr ? nullptr : new Harness(std::strtoull(objects, nullptr, 10));
  }();
  return harness;
}

}  // namespace
}  // namespace depot::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  depot::fuzz::Init();
  depot::fuzz::AtScale();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static bool ready = depot::fuzz::Init();
  (void)ready;
  if (depot::fuzz::Harness* at_scale = depot::fuzz::AtScale()) {
    at_scale->Run({data, size});
    at_scale->Restore();
    return 0;
  }
  depot::fuzz::Harness harness;
  harness.Run({data, size});
  harness.Finish();
  return 0;
}
