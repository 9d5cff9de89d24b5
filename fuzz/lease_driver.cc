#include "fuzz/lease_driver.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <tuple>

#include "proto/index_layout.h"
#include "proto/object_rules.h"
#include "proto/put_ring_layout.h"
#include "proto/wire.h"

namespace depot::fuzz {

using proto::MsgType;

// A session's far end: keeps the last message and its session's put ring, whether the store
// aborted the session (a ring it refused), and, when `created` is set, the GUIDs of the objects
// the store's events say were created.
class LeaseDriver::Peer : public depot::Peer {
 public:
  void Send(std::vector<uint8_t> message, std::vector<UniqueFd> fds) override {
    proto::Header h;
    std::memcpy(&h, message.data(), sizeof h);
    type = h.type;
    body.assign(message.begin() + sizeof h, message.end());
    if (h.type == static_cast<uint16_t>(MsgType::kSegmentsRetired)) retired.push_back(body);
    if (created != nullptr && h.type == static_cast<uint16_t>(MsgType::kEvent)) {
      const auto* e = proto::Body<wire::Event>(body);
      if (e->kind() == wire::EventKind::Created && e->guid() != nullptr) {
        created->push_back(*e->guid());
      }
    }
    if (h.type == proto::ReplyType(MsgType::kHello) &&
        proto::Body<wire::HelloReply>(body)->put_ring_bytes() == put_ring::kRingFileBytes &&
        !fds.empty()) {
      auto map = SharedMapping::Map(fds.back().get(), put_ring::kRingFileBytes, true, "put ring");
      if (map.ok()) ring = std::move(*map);
    }
  }
  size_t Backlog() const override { return 0; }
  void Abort(const Status&) override { aborted = true; }

  // Writes a put-ring record as the client library does, and publishes it.
  void WriteRecord(std::span<const uint8_t> record) {
    if (!ring.valid()) return;
    uint64_t* words = ring.words();
    uint64_t head = index::Load(words + put_ring::kHead);
    auto* records = reinterpret_cast<uint8_t*>(words + put_ring::kRecordsWord);
    index::Store(words + put_ring::kRecordsWord + (head % put_ring::kRecordBytes) / 8,
                 record.size());
    uint64_t at = (head + put_ring::kHeaderBytes) % put_ring::kRecordBytes;
    uint64_t first = std::min<uint64_t>(record.size(), put_ring::kRecordBytes - at);
    std::memcpy(records + at, record.data(), first);
    std::memcpy(records, record.data() + first, record.size() - first);
    index::Store(words + put_ring::kHead, head + put_ring::RecordSpan(record.size()),
                 std::memory_order_release);
  }

  template <typename T>
  const T* Reply(MsgType asked) const {
    return type == proto::ReplyType(asked) ? proto::Body<T>(body) : nullptr;
  }

  uint16_t type = 0;
  std::vector<uint8_t> body;
  SharedMapping ring;
  bool aborted = false;
  std::vector<wire::Guid>* created = nullptr;
  std::vector<std::vector<uint8_t>> retired;  // notices not answered yet
};

namespace {

constexpr uint64_t kCapacity = 2u << 20;  // for the input's objects and leases
constexpr uint64_t kSegment = 256u << 10;

}  // namespace

LeaseDriver::LeaseDriver(uint64_t background) {
  StoreOptions o = StoreOptionsFrom(DefaultOptions(8ull << 30, 8ull << 30), "/fuzz/depot.sock",
                                    nullptr, "the fuzzer has no GPUs");
  // The background's blocks and the holes between them (Fill) in whole segments, and one more.
  capacity_ = kCapacity;
  if (background > 0) {
    uint64_t put = background * proto::kBlockAlign / 5 * 6;
    capacity_ += (put + kSegment - 1) / kSegment * kSegment + kSegment;
  }
  o.namespaces.host.capacity = capacity_;
  o.namespaces.host.segment_size = kSegment;
  o.namespaces.host.keep_warm = 0;  // segments that fall empty go back at once
  o.namespaces.host.name_prefix = fmt::format("depot-fuzzlease-{}-", ::getpid());
  o.lease_idle = std::chrono::milliseconds(0);  // any idle lease may be taken back
  o.version = "fuzz";
  o.max_frames = 4;
  auto store = Store::Create(io_, o);
  if (!store.ok()) {
    broken_ = "the store could not be made: " + store.status().ToString();
    return;
  }
  store_ = std::move(*store);
  if (background > 0) broken_ = Fill(background);
}

std::string LeaseDriver::Fill(uint64_t count) {
  // Some of the objects put are deleted after, so that free space lies between live blocks
  // throughout the pool, as in a store that has run for a while: every eighth, and a run of 0 to
  // 63 in each lease.
  auto hole = [](uint64_t i) {
    uint64_t in_lease = i % 4096;
    return i % 8 == 3 || (in_lease >= 1000 && in_lease < 1000 + (i / 4096) % 64);
  };
  std::vector<wire::Guid> holes;
  uint64_t at = 0, end = 0;
  uint32_t segment = 0;
  for (uint64_t i = 0; background_.size() < count; ++i) {
    if (at + proto::kBlockAlign > end) {
      flatbuffers::FlatBufferBuilder fbb;
      fbb.Finish(wire::CreateLeaseRequest(fbb, 1u << 20));
      Deliver(kWatcher, static_cast<uint16_t>(MsgType::kLease), fbb);
      const auto* reply = peers_[kWatcher]->Reply<wire::CreateReply>(MsgType::kLease);
      if (reply == nullptr || reply->frames() == nullptr || reply->frames()->size() != 1) {
        return fmt::format("no lease for background object {}", i);
      }
      const wire::FrameLocation* f = reply->frames()->Get(0);
      at = f->offset();
      end = at + f->size();
      segment = f->segment();
    }
    flatbuffers::FlatBufferBuilder fbb;
    wire::Guid guid = proto::ToWire(Guid::Random());
    wire::FrameLocation frame(at, proto::kBlockAlign, segment, 0);
    auto frames = fbb.CreateVectorOfStructs(&frame, 1);
    wire::PutRequestBuilder put(fbb);
    put.add_guid(&guid);
    put.add_frames(frames);
    put.add_evictable(false);
    fbb.Finish(put.Finish());
    Deliver(kWatcher, static_cast<uint16_t>(MsgType::kPut), fbb);
    if (sessions_[kWatcher] == 0) {  // a put has no reply: one refused closes its session
      return fmt::format("the store refused background object {}", i);
    }
    if (hole(i)) {
      holes.push_back(guid);
    } else {
      background_.emplace_back(segment, at, proto::kBlockAlign);
    }
    at += proto::kBlockAlign;
  }
  CloseSlot(kWatcher);  // its lease's rest goes back; its objects stay
  for (size_t i = 0; i < holes.size(); i += proto::kMaxGuidsPerRequest) {
    size_t n = std::min<size_t>(holes.size() - i, proto::kMaxGuidsPerRequest);
    flatbuffers::FlatBufferBuilder fbb;
    fbb.Finish(wire::CreateGuidsRequest(fbb, fbb.CreateVectorOfStructs(holes.data() + i, n)));
    Deliver(kAdmin, static_cast<uint16_t>(MsgType::kDelete), fbb);
  }
  std::sort(background_.begin(), background_.end());
  uint64_t used = 0, leased = 0;
  if (!Usage(used, leased) || used != background_.size() * proto::kBlockAlign || leased != 0) {
    return fmt::format("{} background objects kept: {} bytes used and {} leased",
                       background_.size(), used, leased);
  }
  background_bytes_ = used;
  fmt::print(stderr,
             "lease driver: {} background objects ({} more deleted), {} bytes of a pool of {}\n",
             count, holes.size(), used, capacity_);
  flatbuffers::FlatBufferBuilder fbb;
  fbb.Finish(wire::CreateEmptyReply(fbb));
  Deliver(kWatcher, static_cast<uint16_t>(MsgType::kSubscribe), fbb);
  peers_[kWatcher]->created = &created_;
  return "";
}

bool LeaseDriver::Usage(uint64_t& used, uint64_t& leased) {
  flatbuffers::FlatBufferBuilder fbb;
  fbb.Finish(wire::CreateEmptyReply(fbb));
  Deliver(kAdmin, static_cast<uint16_t>(MsgType::kStatus), fbb);
  const auto* st = peers_[kAdmin]->Reply<wire::StatusReply>(MsgType::kStatus);
  if (st == nullptr) return false;
  used = st->used();
  leased = st->leased();
  return true;
}

LeaseDriver::~LeaseDriver() {
  for (int slot = 0; slot <= kWatcher; ++slot) CloseSlot(slot);
}

uint64_t LeaseDriver::Open(int slot) {
  if (sessions_[slot] != 0) return sessions_[slot];
  peers_[slot] = std::make_unique<Peer>();
  PeerCredentials creds;
  creds.pid = ::getpid();
  creds.uid = ::getuid();
  creds.gid = ::getgid();
  sessions_[slot] = *store_->Open(peers_[slot].get(), creds);  // said hello at once, below
  flatbuffers::FlatBufferBuilder fbb;
  fbb.Finish(wire::CreateHelloRequestDirect(fbb, proto::kProtocolVersion, "lease driver"));
  Deliver(slot, static_cast<uint16_t>(MsgType::kHello), fbb);
  return sessions_[slot];
}

void LeaseDriver::CloseSlot(int slot) {
  if (sessions_[slot] == 0) return;
  store_->Close(sessions_[slot]);
  sessions_[slot] = 0;
  if (slot < kClients) leases_[slot] = Lease{};
}

void LeaseDriver::Deliver(int slot, uint16_t type, flatbuffers::FlatBufferBuilder& fbb) {
  uint64_t s = Open(slot);
  std::vector<uint8_t> m = proto::Encode(type, request_++, fbb);
  proto::Header h;
  std::memcpy(&h, m.data(), sizeof h);
  std::vector<uint8_t> body(m.begin() + sizeof h, m.end());
  if (!proto::VerifyBody(h.type, body)) return;  // the driver builds every message itself
  if (!store_->Handle(s, h, body).ok()) {
    ++sessions_refused_;
    CloseSlot(slot);
  }
  CloseAborted();
}

void LeaseDriver::CloseAborted() {
  for (int slot = 0; slot <= kAdmin; ++slot) {
    if (sessions_[slot] != 0 && peers_[slot]->aborted) {
      ++sessions_refused_;
      CloseSlot(slot);
    }
  }
}

void LeaseDriver::TakeLease(int slot, uint8_t size_pick) {
  constexpr uint64_t kSizes[] = {64, 3000, 4096, 64u << 10, 256u << 10, 1u << 20};
  flatbuffers::FlatBufferBuilder fbb;
  fbb.Finish(wire::CreateLeaseRequest(fbb, kSizes[size_pick % std::size(kSizes)]));
  Deliver(slot, static_cast<uint16_t>(MsgType::kLease), fbb);
  Lease& lease = leases_[slot];
  lease = Lease{};
  if (sessions_[slot] == 0) return;
  const auto* reply = peers_[slot]->Reply<wire::CreateReply>(MsgType::kLease);
  if (reply == nullptr || reply->frames() == nullptr || reply->frames()->size() != 1) return;
  const wire::FrameLocation* f = reply->frames()->Get(0);
  lease = Lease{.held = true,
                .start = f->offset(),
                .end = f->offset() + f->size(),
                .cursor = f->offset(),
                .last = f->offset(),
                .segment = f->segment()};
}

wire::FrameLocation LeaseDriver::FrameAt(const Lease& lease, uint8_t pick, uint8_t offset) const {
  // Bits 0-2: the anchor; bits 3-5: the size; bit 6: 8 bytes off the alignment; bit 7: the next
  // segment. The offset byte is a signed count of blocks from the anchor.
  const uint64_t anchors[] = {lease.start,
                              lease.cursor,
                              lease.end,
                              lease.last,
                              lease.start + (lease.end - lease.start) / 2,
                              0,
                              0,
                              lease.cursor};
  uint64_t at =
      anchors[pick & 7] + static_cast<uint64_t>(static_cast<int8_t>(offset)) * proto::kBlockAlign;
  if (pick & 0x40) at += 8;
  uint64_t to_end = lease.end - std::min(at, lease.end);
  const uint64_t sizes[] = {0, 1, 64, 100, 4096, to_end, lease.end - lease.start, to_end + 64};
  uint32_t segment = lease.segment + ((pick & 0x80) ? 1 : 0);
  return wire::FrameLocation(at, sizes[(pick >> 3) & 7], segment, 0);
}

bool LeaseDriver::Put(int slot, std::span<const uint8_t>& in, bool ring) {
  if (in.empty()) return false;
  size_t count = 1 + in[0] % 3;
  in = in.subspan(1);
  if (in.size() < 2 * count + (ring ? 1 : 0)) return false;
  Open(slot);
  Lease& lease = leases_[slot];
  std::vector<wire::FrameLocation> frames;
  for (size_t i = 0; i < count; ++i) frames.push_back(FrameAt(lease, in[2 * i], in[2 * i + 1]));
  in = in.subspan(2 * count);
  bool doorbell = ring && (in[0] & 1);
  if (ring) in = in.subspan(1);
  flatbuffers::FlatBufferBuilder fbb;
  wire::Guid g = proto::ToWire(Guid::Random());
  auto locations = fbb.CreateVectorOfStructs(frames);
  wire::PutRequestBuilder b(fbb);
  b.add_guid(&g);
  b.add_frames(locations);
  fbb.Finish(b.Finish());
  if (ring) {
    peers_[slot]->WriteRecord(fbb.GetBufferSpan());
    if (doorbell) {
      flatbuffers::FlatBufferBuilder empty;
      empty.Finish(wire::CreateEmptyReply(empty));
      Deliver(slot, static_cast<uint16_t>(MsgType::kPutsWritten), empty);
    }
  } else {
    Deliver(slot, static_cast<uint16_t>(MsgType::kPut), fbb);
  }
  // Where the client would put its next frame, were this put taken.
  for (const wire::FrameLocation& f : frames) {
    lease.last = f.offset();
    lease.cursor = std::max(lease.cursor, f.offset() + proto::RoundUpToBlock(f.size()));
  }
  return true;
}

std::vector<wire::Guid> LeaseDriver::List(std::vector<wire::FrameLocation>* frames) {
  if (background_bytes_ > 0) {
    uint64_t used = 0, leased = 0;
    (void)Usage(used, leased);  // which takes the rings first, as a list does
    std::vector<wire::Guid> live;
    for (const wire::Guid& g : created_) {
      flatbuffers::FlatBufferBuilder fbb;
      fbb.Finish(wire::CreateGuidRequest(fbb, &g));
      Deliver(kAdmin, static_cast<uint16_t>(MsgType::kStat), fbb);
      const auto* stat = peers_[kAdmin]->Reply<wire::StatReply>(MsgType::kStat);
      if (stat == nullptr || stat->info() == nullptr) continue;  // gone
      live.push_back(g);
      if (frames != nullptr && stat->info()->frames() != nullptr) {
        for (const wire::FrameLocation* f : *stat->info()->frames()) frames->push_back(*f);
      }
    }
    created_ = live;
    return live;
  }
  flatbuffers::FlatBufferBuilder fbb;
  fbb.Finish(wire::CreateListRequest(fbb, nullptr, proto::kMaxListLimit));
  Deliver(kAdmin, static_cast<uint16_t>(MsgType::kList), fbb);
  std::vector<wire::Guid> guids;
  const auto* list = peers_[kAdmin]->Reply<wire::ListReply>(MsgType::kList);
  if (list == nullptr || list->objects() == nullptr) return guids;
  for (const wire::ObjectInfo* o : *list->objects()) {
    guids.push_back(*o->guid());
    if (frames != nullptr && o->frames() != nullptr) {
      for (const wire::FrameLocation* f : *o->frames()) frames->push_back(*f);
    }
  }
  return guids;
}

void LeaseDriver::Delete(uint8_t pick) {
  std::vector<wire::Guid> guids = List(nullptr);
  if (guids.empty()) return;
  flatbuffers::FlatBufferBuilder fbb;
  std::vector<wire::Guid> one{guids[pick % guids.size()]};
  fbb.Finish(wire::CreateGuidsRequest(fbb, fbb.CreateVectorOfStructs(one)));
  Deliver(kAdmin, static_cast<uint16_t>(MsgType::kDelete), fbb);
}

void LeaseDriver::Pressure() {
  flatbuffers::FlatBufferBuilder fbb;
  std::vector<uint64_t> sizes{capacity_ - background_bytes_ - kSegment};
  fbb.Finish(wire::CreateCreateRequest(fbb, fbb.CreateVector(sizes)));
  Open(kAdmin);
  peers_[kAdmin]->type = 0;  // no reply yet
  Deliver(kAdmin, static_cast<uint16_t>(MsgType::kCreate), fbb);
  // A create that finds the pool full while sessions still map retired segments waits for them:
  // the sessions answer their notices, as the client library does when it next reads.
  for (int waited = 0; peers_[kAdmin]->type == 0 && sessions_[kAdmin] != 0 && waited < 100;
       ++waited) {
    DropRetired();
    io_.restart();
    if (io_.poll() == 0) io_.run_for(std::chrono::milliseconds(5));
  }
  const auto* reply = peers_[kAdmin]->Reply<wire::CreateReply>(MsgType::kCreate);
  if (reply == nullptr || reply->guid() == nullptr) return;
  fbb.Clear();
  fbb.Finish(wire::CreateGuidRequest(fbb, reply->guid()));
  Deliver(kAdmin, static_cast<uint16_t>(MsgType::kAbort), fbb);
}

void LeaseDriver::DropRetired() {
  for (int slot = 0; slot <= kAdmin; ++slot) {
    if (sessions_[slot] == 0) continue;
    std::vector<std::vector<uint8_t>> notices = std::exchange(peers_[slot]->retired, {});
    for (const std::vector<uint8_t>& body : notices) {
      const auto* notice = proto::Body<wire::SegmentsRetired>(body);
      std::vector<uint32_t> ids(notice->ids()->begin(), notice->ids()->end());
      flatbuffers::FlatBufferBuilder fbb;
      fbb.Finish(wire::CreateSegmentsRetired(fbb, fbb.CreateVector(ids), notice->pool()));
      if (sessions_[slot] != 0)
        Deliver(slot, static_cast<uint16_t>(MsgType::kSegmentsDropped), fbb);
    }
  }
}

std::string LeaseDriver::Check() {
  std::vector<wire::FrameLocation> frames;
  uint64_t objects = List(&frames).size();
  most_objects_ = std::max(most_objects_, objects);
  // No two live blocks share a byte: by segment, then offset.
  std::vector<Block> blocks;
  uint64_t bytes = 0;
  for (const wire::FrameLocation& f : frames) {
    if (f.size() == 0) continue;
    blocks.emplace_back(f.segment(), f.offset(), proto::RoundUpToBlock(f.size()));
    bytes += proto::RoundUpToBlock(f.size());
  }
  std::sort(blocks.begin(), blocks.end());
  for (size_t i = 1; i < blocks.size(); ++i) {
    auto [segment, offset, size] = blocks[i - 1];
    if (std::get<0>(blocks[i]) == segment && std::get<1>(blocks[i]) < offset + size) {
      return fmt::format("two objects share bytes: segment {}, blocks at {} ({} bytes) and {}",
                         segment, offset, size, std::get<1>(blocks[i]));
    }
  }
  // Nor one with the background: the background block at or before each, and the one after.
  for (const Block& b : blocks) {
    auto after = std::upper_bound(background_.begin(), background_.end(), b);
    bool shares = after != background_.end() && std::get<0>(*after) == std::get<0>(b) &&
                  std::get<1>(*after) < std::get<1>(b) + std::get<2>(b);
    if (after != background_.begin()) {
      const Block& before = *std::prev(after);
      shares = shares || (std::get<0>(before) == std::get<0>(b) &&
                          std::get<1>(before) + std::get<2>(before) > std::get<1>(b));
    }
    if (shares) {
      return fmt::format("an object shares bytes with the background: segment {}, block at {}",
                         std::get<0>(b), std::get<1>(b));
    }
  }
  uint64_t used = 0, leased = 0;
  if (!Usage(used, leased)) return "no status came";
  if (used != bytes + background_bytes_ || leased > capacity_) {
    return fmt::format(
        "{} objects hold {} bytes (and the background {}), but status says {} used "
        "and {} leased",
        objects, bytes, background_bytes_, used, leased);
  }
  return "";
}

std::string LeaseDriver::Run(std::span<const uint8_t> in) {
  if (!broken_.empty()) return broken_;
  while (!in.empty()) {
    uint8_t control = in[0];
    in = in.subspan(1);
    int slot = control % kClients;
    switch ((control / kClients) % 7) {
      case 0:
        if (in.empty()) return "";
        TakeLease(slot, in[0]);
        in = in.subspan(1);
        break;
      case 1:
      case 2:
        if (!Put(slot, in, (control / kClients) % 7 == 2)) return "";
        break;
      case 3:
        if (in.empty()) return "";
        Delete(in[0]);
        in = in.subspan(1);
        break;
      case 4:
        Pressure();
        break;
      case 5:
        CloseSlot(slot);
        break;
      default:
        io_.poll();
        io_.restart();
        CloseAborted();
        if (std::string broken = Check(); !broken.empty()) return broken;
    }
  }
  return "";
}

std::string LeaseDriver::Finish() {
  if (!broken_.empty()) return broken_;
  for (int slot = 0; slot < kClients; ++slot) CloseSlot(slot);
  if (std::string broken = Check(); !broken.empty()) return broken;
  for (int round = 0; round < 100; ++round) {
    std::vector<wire::Guid> left = List(nullptr);
    if (left.empty()) break;
    left.resize(std::min<size_t>(left.size(), proto::kMaxGuidsPerRequest));
    flatbuffers::FlatBufferBuilder fbb;
    fbb.Finish(wire::CreateGuidsRequest(fbb, fbb.CreateVectorOfStructs(left)));
    Deliver(kAdmin, static_cast<uint16_t>(MsgType::kDelete), fbb);
  }
  uint64_t used = 0, leased = 0;
  if (!Usage(used, leased)) return "no status came";
  if (used != background_bytes_ || leased != 0) {
    return fmt::format(
        "after every session closed and every object was deleted: {} bytes used (the "
        "background {}), {} leased",
        used, background_bytes_, leased);
  }
  return "";
}

}  // namespace depot::fuzz
