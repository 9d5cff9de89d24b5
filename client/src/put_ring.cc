#include "client/src/put_ring.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "proto/index_layout.h"
#include "proto/put_ring_layout.h"

namespace depot::internal {

Result<PutRing> PutRing::Map(const UniqueFd& fd, uint64_t bytes) {
  struct stat st {};
  if (bytes != put_ring::kRingFileBytes || ::fstat(fd.get(), &st) != 0 ||
      static_cast<uint64_t>(st.st_size) < bytes) {
    return Status::ProtocolError(fmt::format(
        "depotd sent a put ring of {} bytes ({} in the file), not the {} this library knows", bytes,
        st.st_size, put_ring::kRingFileBytes));
  }
  auto map = SharedMapping::Map(fd.get(), bytes, true, "put ring");
  if (!map.ok()) return map.status();
  if (Status words = layout::Check(map->words(), put_ring::kPutRingLayout); !words.ok()) {
    return words;
  }
  return PutRing(std::move(*map));
}

std::optional<uint64_t> PutRing::Append(std::span<const uint8_t> body) {
  uint64_t tail = index::Load(map_.words() + put_ring::kTail, std::memory_order_acquire);
  uint64_t span = put_ring::RecordSpan(body.size());
  if (body.empty() || tail > head_ || head_ + span - tail > put_ring::kRecordBytes) {
    return std::nullopt;
  }
  auto* records = reinterpret_cast<uint8_t*>(map_.words() + put_ring::kRecordsWord);
  index::Store(map_.words() + put_ring::kRecordsWord + (head_ % put_ring::kRecordBytes) / 8,
               body.size());
  uint64_t at = (head_ + put_ring::kHeaderBytes) % put_ring::kRecordBytes;
  uint64_t first = std::min<uint64_t>(body.size(), put_ring::kRecordBytes - at);
  std::memcpy(records + at, body.data(), first);
  std::memcpy(records, body.data() + first, body.size() - first);
  uint64_t position = head_;
  head_ += span;
  index::Store(map_.words() + put_ring::kHead, head_, std::memory_order_release);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return position;
}

bool PutRing::Hold(uint64_t position, uint64_t length) {
  // Taken, and maybe its space written again by a later record: not this one's header any more.
  // (Only this connection's puts write records, under the same lock as this call.)
  if (index::Load(map_.words() + put_ring::kTail, std::memory_order_acquire) > position)
    return false;
  uint64_t* header =
      map_.words() + put_ring::kRecordsWord + (position % put_ring::kRecordBytes) / 8;
  uint64_t expected = length;
  return std::atomic_ref<uint64_t>(*header).compare_exchange_strong(expected,
                                                                    length | put_ring::kHeld);
}

bool PutRing::NeedsDoorbell() {
  uint64_t word = index::Load(map_.words() + put_ring::kPolled);
  uint64_t state = word & put_ring::kStateMask;
  if (state == put_ring::kPolling || (state == put_ring::kIdle && word == rang_)) return false;
  rang_ = word;
  return true;
}

void PutRing::TakeReturns(std::vector<Block>& out) {
  uint64_t head = index::Load(map_.words() + put_ring::kReturnHead, std::memory_order_acquire);
  if (head < returns_ || head - returns_ > put_ring::kReturnSlots) {
    returns_ = head;  // the daemon's count makes no sense: take none of them
  }
  for (; returns_ < head; ++returns_) {
    const uint64_t* entry = map_.words() + put_ring::kReturnsWord +
                            (returns_ % put_ring::kReturnSlots) * put_ring::kReturnWords;
    out.push_back({static_cast<uint32_t>(index::Load(entry + 2)), index::Load(entry),
                   index::Load(entry + 1)});
  }
  index::Store(map_.words() + put_ring::kReturnTail, returns_, std::memory_order_release);
}

bool PutRing::BeginWrite() {
  uint64_t idle = put_ring::kLeaseIdle;
  return std::atomic_ref<uint64_t>(map_.words()[put_ring::kLease])
      .compare_exchange_strong(idle, put_ring::kLeaseWriting);
}

void PutRing::EndWrite() {
  index::Store(map_.words() + put_ring::kLease, put_ring::kLeaseIdle, std::memory_order_release);
}

void PutRing::SkipReturns() {
  returns_ = index::Load(map_.words() + put_ring::kReturnHead, std::memory_order_acquire);
  index::Store(map_.words() + put_ring::kReturnTail, returns_, std::memory_order_release);
}

}  // namespace depot::internal
