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
#include "proto/index_layout.h"
#include "proto/put_ring_layout.h"
#include "proto/wire.h"

namespace depot::fuzz {
namespace {

using proto::MsgType;

constexpr int kSlots = 3;
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

class Harness {
 public:
  Harness() {
    StoreOptions o = StoreOptionsFrom(DefaultOptions(8ull << 30, 8ull << 30), "/fuzz/depot.sock",
                                      nullptr, "the fuzzer has no GPUs");
    o.namespaces.host.capacity = 2u << 20;
    o.namespaces.host.segment_size = 256u << 10;
    o.namespaces.host.name_prefix = fmt::format("depot-fuzz-{}-", ::getpid());
    o.lease_idle = std::chrono::milliseconds(0);  // any lease may be taken back, not after 1 s
    o.version = "fuzz";
    o.max_message_size = kMaxMessage;
    o.max_frames = 8;
    o.max_metadata = 1024;
    auto store = Store::Create(io_, o);
    if (!store.ok()) Fail("cannot create the store: " + store.status().ToString());
    store_ = std::move(*store);
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
    flatbuffers::FlatBufferBuilder fbb;
    fbb.Finish(wire::CreateEmptyReply(fbb));
    Deliver(slot, proto::Encode(static_cast<uint16_t>(MsgType::kStatus), 4, fbb));
    const auto* st = Expect<wire::StatusReply>(slot, MsgType::kStatus);
    if (st->used() != 0 || st->objects_sealed() != 0 || st->objects_creating() != 0 ||
        st->objects_deleted() != 0) {
      Fail(fmt::format(
          "after deleting everything: {} bytes used, {} sealed, {} creating, {} "
          "deleted objects",
          st->used(), st->objects_sealed(), st->objects_creating(), st->objects_deleted()));
    }
    CloseSlot(slot);
  }

 private:
  SessionId& Open(int slot) {
    if (sessions_[slot] == 0) {
      peers_[slot] = FakePeer{};
      PeerCredentials creds;
      creds.pid = ::getpid();
      creds.uid = ::getuid();
      creds.gid = ::getgid();
      sessions_[slot] = store_->Open(&peers_[slot], creds);
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
  std::array<FakePeer, kSlots> peers_;
  std::array<SessionId, kSlots> sessions_{};
};

}  // namespace
}  // namespace depot::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static bool ready = depot::fuzz::Init();
  (void)ready;
  depot::fuzz::Harness harness;
  harness.Run({data, size});
  harness.Finish();
  return 0;
}
