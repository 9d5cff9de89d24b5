// Fuzz target for the frame decoder: the input is a byte stream as a peer would send it. It goes
// through what both ends do before they trust a body: proto::FrameReader cuts it into messages
// (checking each header), fed in reads of varying sizes so that headers and bodies straddle
// reads and the buffer is compacted and grown; then proto::VerifyBody checks each body for its
// type, requests and replies alike, and every verified body has every field read, as the daemon
// reads requests and the client reads replies. The verifier is what stands between a hostile
// peer and those reads: under AddressSanitizer a read that leaves the body is a finding.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "proto/frame_reader.h"
#include "proto/wire.h"

namespace depot::fuzz {
namespace {

namespace fb = flatbuffers;
using proto::MsgType;

// Folds everything read into one value, so that no read can be optimised away.
class Sink {
 public:
  template <typename T>
  requires std::is_arithmetic_v<T> || std::is_enum_v<T>
  void Add(T v) { h_ = h_ * 1099511628211ull + static_cast<uint64_t>(v); }
  void Add(const fb::String* s) {
    if (s == nullptr) return;
    Add(s->size());
    for (char c : s->string_view()) Add(c);
  }
  void Add(const wire::Guid* g) {
    if (g == nullptr) return;
    Add(g->hi());
    Add(g->lo());
  }
  template <typename T>
  void Add(const flatbuffers::Optional<T>& v) {
    Add(v.has_value());
    if (v) Add(*v);
  }
  void Add(const wire::UserUsage* u) {
    if (u == nullptr) return;
    Add(u->uid());
    Add(u->objects());
    Add(u->bytes());
  }
  void Add(const wire::FrameLocation* f) {
    if (f == nullptr) return;
    Add(f->offset());
    Add(f->size());
    Add(f->segment());
    Add(f->pool());
  }
  template <typename T>
  void Add(const fb::Vector<T>* v) {
    if (v == nullptr) return;
    Add(v->size());
    for (fb::uoffset_t i = 0; i < v->size(); ++i) Add(v->Get(i));
  }

  void Add(const wire::SegmentInfo* t) {
    if (t == nullptr) return;
    Add(t->id());
    Add(t->size());
    Add(t->dedicated());
    Add(t->pool());
  }
  void Add(const wire::DevicePoolInfo* t) {
    if (t == nullptr) return;
    Add(t->pool());
    Add(t->uuid());
    Add(t->name());
    Add(t->kind());
    Add(t->capacity());
    Add(t->chunk_size());
    Add(t->reserved());
    Add(t->used());
    Add(t->chunks());
  }
  void Add(const wire::ErrorReply* t) {
    if (t == nullptr) return;
    Add(t->code());
    Add(t->message());
  }
  void Add(const wire::HelloRequest* t) {
    if (t == nullptr) return;
    Add(t->version());
    Add(t->client_name());
  }
  void Add(const wire::HelloReply* t) {
    if (t == nullptr) return;
    Add(t->version());
    Add(t->daemon_version());
    Add(t->session_id());
    Add(t->daemon_pid());
    Add(t->max_message_size());
    Add(t->max_inline_size());
    Add(t->hugepages());
    Add(t->device_pools());
    Add(t->devices_unavailable());
    Add(t->index_sets());
    Add(t->index_arena());
    Add(t->slot_count());
    Add(t->leases());
    Add(t->index_generation());
    Add(t->resumes());
  }
  void Add(const wire::CreateRequest* t) {
    if (t == nullptr) return;
    Add(t->frame_sizes());
    Add(t->metadata());
    Add(t->name());
    Add(t->guid());
    Add(t->evictable());
    Add(t->inline_data());
    Add(t->seal());
    Add(t->checksum());
    Add(t->frame_pools());
  }
  void Add(const wire::CreateReply* t) {
    if (t == nullptr) return;
    Add(t->guid());
    Add(t->frames());
    Add(t->segments());
  }
  void Add(const wire::GuidRequest* t) {
    if (t == nullptr) return;
    Add(t->guid());
    Add(t->checksum());
  }
  void Add(const wire::EmptyReply*) {}
  void Add(const wire::GetRequest* t) {
    if (t == nullptr) return;
    Add(t->guids());
    Add(t->timeout_ms());
  }
  void Add(const wire::GetResult* t) {
    if (t == nullptr) return;
    Add(t->guid());
    Add(t->code());
    Add(t->message());
    Add(t->handle());
    Add(t->frames());
    Add(t->metadata());
    Add(t->checksum());
  }
  void Add(const wire::GetReply* t) {
    if (t == nullptr) return;
    Add(t->results());
    Add(t->segments());
  }
  void Add(const wire::GuidsRequest* t) {
    if (t != nullptr) Add(t->guids());
  }
  void Add(const wire::ReleaseRequest* t) {
    if (t != nullptr) Add(t->handles());
  }
  void Add(const wire::GuidResult* t) {
    if (t == nullptr) return;
    Add(t->guid());
    Add(t->code());
    Add(t->message());
  }
  void Add(const wire::GuidsReply* t) {
    if (t != nullptr) Add(t->results());
  }
  void Add(const wire::ObjectInfo* t) {
    if (t == nullptr) return;
    Add(t->guid());
    Add(t->name());
    Add(t->state());
    Add(t->size());
    Add(t->frames());
    Add(t->refcount());
    Add(t->evictable());
    Add(t->created_unix_ns());
    Add(t->sealed_unix_ns());
    Add(t->creator_pid());
    Add(t->creator_uid());
    Add(t->metadata_size());
    Add(t->metadata());
    Add(t->checksum());
    Add(t->holders());
    Add(t->creator_session());
    Add(t->creator_process());
  }
  void Add(const wire::HolderInfo* t) {
    if (t == nullptr) return;
    Add(t->session_id());
    Add(t->pid());
    Add(t->uid());
    Add(t->process());
    Add(t->name());
    Add(t->references());
  }
  void Add(const wire::StatReply* t) {
    if (t != nullptr) Add(t->info());
  }
  void Add(const wire::ListRequest* t) {
    if (t == nullptr) return;
    Add(t->after());
    Add(t->limit());
    Add(t->holder_pid());
  }
  void Add(const wire::ListReply* t) {
    if (t == nullptr) return;
    Add(t->objects());
    Add(t->more());
  }
  void Add(const wire::StatusReply* t) {
    if (t == nullptr) return;
    Add(t->daemon_version());
    Add(t->daemon_pid());
    Add(t->uptime_ms());
    Add(t->socket_path());
    Add(t->capacity());
    Add(t->reserved());
    Add(t->used());
    Add(t->largest_free());
    Add(t->segments());
    Add(t->objects_creating());
    Add(t->objects_sealed());
    Add(t->objects_deleted());
    Add(t->clients());
    Add(t->evictions());
    Add(t->evicted_bytes());
    Add(t->prefault());
    Add(t->gets_waiting());
    Add(t->free_in_segments());
    Add(t->largest_free_block());
    Add(t->requests());
    Add(t->errors());
    Add(t->connections());
    Add(t->users());
    Add(t->user_quota_bytes());
    Add(t->user_quota_objects());
    Add(t->client_quota_bytes());
    Add(t->client_quota_objects());
    Add(t->per_user_namespaces());
    Add(t->namespaces());
    Add(t->device_pools());
    Add(t->devices_unavailable());
    Add(t->warm());
    Add(t->keep_warm());
    Add(t->leased());
  }
  void Add(const wire::LeaseRequest* t) {
    if (t == nullptr) return;
    Add(t->size());
    Add(t->at_least());
  }
  void Add(const wire::IndexRequest* t) {
    if (t == nullptr) return;
    Add(t->slots());
    Add(t->index_generation());
  }
  void Add(const wire::ResumeRequest* t) {
    if (t == nullptr) return;
    Add(t->session_id());
  }
  void Add(const wire::IndexReply* t) {
    if (t == nullptr) return;
    Add(t->slot_count());
    Add(t->index_sets());
    Add(t->index_arena());
    Add(t->index_generation());
    Add(t->index_fd());
  }
  void Add(const wire::PutRequest* t) {
    if (t == nullptr) return;
    Add(t->guid());
    Add(t->frames());
    Add(t->metadata());
    Add(t->name());
    Add(t->evictable());
    Add(t->owner_scoped());
    Add(t->checksum());
  }
  void Add(const wire::ClientInfo* t) {
    if (t == nullptr) return;
    Add(t->session_id());
    Add(t->pid());
    Add(t->uid());
    Add(t->gid());
    Add(t->name());
    Add(t->process());
    Add(t->references());
    Add(t->bytes_held());
    Add(t->creating());
    Add(t->requests());
    Add(t->connected_unix_ns());
    Add(t->subscribed());
    Add(t->created_objects());
    Add(t->created_bytes());
  }
  void Add(const wire::ClientsReply* t) {
    if (t != nullptr) Add(t->clients());
  }
  void Add(const wire::MetricsReply* t) {
    if (t != nullptr) Add(t->text());
  }
  void Add(const wire::Event* t) {
    if (t == nullptr) return;
    Add(t->kind());
    Add(t->unix_ns());
    Add(t->guid());
    Add(t->name());
    Add(t->size());
    Add(t->session_id());
    Add(t->pid());
    Add(t->uid());
    Add(t->dropped());
  }
  void Add(const wire::SegmentsRetired* t) {
    if (t == nullptr) return;
    Add(t->ids());
    Add(t->pool());
  }

  uint64_t value() const { return h_; }

 private:
  uint64_t h_ = 0;
};

template <typename T>
void Read(Sink& sink, std::span<const uint8_t> body) {
  sink.Add(proto::Body<T>(body));
}

// Reads the table of a body that verified as `type`: the same mapping as proto::VerifyBody.
void ReadBody(Sink& sink, uint16_t type, std::span<const uint8_t> body) {
  bool reply = type & proto::kReplyBit;
  switch (static_cast<MsgType>(type & ~proto::kReplyBit)) {
    case MsgType::kHello:
      return reply ? Read<wire::HelloReply>(sink, body) : Read<wire::HelloRequest>(sink, body);
    case MsgType::kCreate:
      return reply ? Read<wire::CreateReply>(sink, body) : Read<wire::CreateRequest>(sink, body);
    case MsgType::kSeal:
    case MsgType::kAbort:
      return reply ? Read<wire::EmptyReply>(sink, body) : Read<wire::GuidRequest>(sink, body);
    case MsgType::kGet:
      return reply ? Read<wire::GetReply>(sink, body) : Read<wire::GetRequest>(sink, body);
    case MsgType::kRelease:
      return Read<wire::ReleaseRequest>(sink, body);
    case MsgType::kDelete:
    case MsgType::kContains:
    case MsgType::kHold:
      return reply ? Read<wire::GuidsReply>(sink, body) : Read<wire::GuidsRequest>(sink, body);
    case MsgType::kList:
      return reply ? Read<wire::ListReply>(sink, body) : Read<wire::ListRequest>(sink, body);
    case MsgType::kStat:
      return reply ? Read<wire::StatReply>(sink, body) : Read<wire::GuidRequest>(sink, body);
    case MsgType::kStatus:
      return reply ? Read<wire::StatusReply>(sink, body) : Read<wire::EmptyReply>(sink, body);
    case MsgType::kPing:
    case MsgType::kSubscribe:
    case MsgType::kPutsWritten:
      return Read<wire::EmptyReply>(sink, body);
    case MsgType::kClients:
      return reply ? Read<wire::ClientsReply>(sink, body) : Read<wire::EmptyReply>(sink, body);
    case MsgType::kMetrics:
      return reply ? Read<wire::MetricsReply>(sink, body) : Read<wire::EmptyReply>(sink, body);
    case MsgType::kSegmentsRetired:
    case MsgType::kSegmentsDropped:
      return Read<wire::SegmentsRetired>(sink, body);
    case MsgType::kLease:
      return reply ? Read<wire::CreateReply>(sink, body) : Read<wire::LeaseRequest>(sink, body);
    case MsgType::kPut:
      return Read<wire::PutRequest>(sink, body);
    case MsgType::kIndex:
      return reply ? Read<wire::IndexReply>(sink, body) : Read<wire::IndexRequest>(sink, body);
    case MsgType::kResume:
      return reply ? Read<wire::EmptyReply>(sink, body) : Read<wire::ResumeRequest>(sink, body);
    case MsgType::kEvent:
      return Read<wire::Event>(sink, body);
    case MsgType::kError:
      return Read<wire::ErrorReply>(sink, body);
  }
  __builtin_trap();  // VerifyBody accepted a type it does not know
}

volatile uint64_t g_sink;

}  // namespace
}  // namespace depot::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace depot;
  using Cut = proto::FrameReader::Cut;
  // Sizes of the successive reads, in a cycle: a byte at a time up to more than a read chunk.
  static constexpr size_t kReadSizes[] = {1, 7, 24, 61, 509, 4093, 70001};
  fuzz::Sink sink;
  proto::FrameReader reader;
  std::span<const uint8_t> in(data, size);
  size_t reads = 0;
  proto::FrameReader::Frame frame;
  std::string error;
  while (true) {
    Cut cut = reader.Next(frame, error);
    if (cut == Cut::kPartial) {
      if (in.empty()) break;  // a peer would wait for the rest
      std::span<uint8_t> space = reader.Space();
      size_t n = std::min({space.size(), in.size(), kReadSizes[reads++ % std::size(kReadSizes)]});
      std::memcpy(space.data(), in.data(), n);
      reader.Filled(n);
      in = in.subspan(n);
      continue;
    }
    sink.Add(proto::TypeName(frame.header.type).size());
    // Both ends stop reading a connection at the first bad header.
    if (cut == Cut::kBadHeader) break;
    // The body alone in an allocation of its own, so that any read past its end is caught.
    std::vector<uint8_t> body(frame.body.begin(), frame.body.end());
    if (!proto::VerifyBody(frame.header.type, body)) continue;
    fuzz::ReadBody(sink, frame.header.type, body);
  }
  fuzz::g_sink = sink.value();
  return 0;
}
