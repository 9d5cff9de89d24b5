#include "daemon/put_ring.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "daemon/shm_source.h"
#include "proto/index_layout.h"
#include "proto/put_ring_layout.h"

namespace depot {

Result<std::unique_ptr<PutRing>> PutRing::Create(const std::string& name) {
  auto memory = SealedMemfd(name, put_ring::kRingFileBytes);
  if (!memory.ok()) return memory.status();
  auto map = SharedMapping::Map(memory->fd.get(), memory->size, true, "put ring");
  if (!map.ok()) return map.status();
  layout::Write(map->words(), put_ring::kPutRingLayout);
  return std::unique_ptr<PutRing>(new PutRing(std::move(memory->fd), std::move(*map)));
}

Result<std::unique_ptr<PutRing>> PutRing::Adopt(UniqueFd fd) {
  struct stat st {};
  int seals = ::fcntl(fd.get(), F_GET_SEALS);
  if (::fstat(fd.get(), &st) != 0 ||
      static_cast<uint64_t>(st.st_size) != put_ring::kRingFileBytes || seals < 0 ||
      (seals & F_SEAL_SHRINK) == 0) {
    return Status::InvalidArgument("not a put ring");
  }
  auto map = SharedMapping::Map(fd.get(), put_ring::kRingFileBytes, true, "kept put ring");
  if (!map.ok()) return map.status();
  std::unique_ptr<PutRing> ring(new PutRing(std::move(fd), std::move(*map)));
  // Where the last daemon had taken it to: it stores the tail only once a record is handled.
  ring->tail_ = index::Load(ring->map_.words() + put_ring::kTail, std::memory_order_acquire);
  return ring;
}

bool PutRing::Intact() const { return layout::Intact(map_.words(), put_ring::kPutRingLayout); }

bool PutRing::Pending() const {
  // A ring whose layout words were overwritten is pending: its Take closes the session.
  return !broken_ &&
         (index::Load(map_.words() + put_ring::kHead, std::memory_order_acquire) != tail_ ||
          !Intact());
}

Status PutRing::Take(const std::function<Status(std::span<const uint8_t>, bool)>& take,
                     uint64_t most) {
  if (broken_) return Status::OK();
  auto fail = [this](std::string why) {
    broken_ = true;
    return Status::ProtocolError("put ring: " + why);
  };
  // The layout words, read once: what the message shows is what was checked.
  uint64_t magic = index::Load(map_.words() + layout::kMagic, std::memory_order_acquire);
  uint64_t version = index::Load(map_.words() + layout::kVersion, std::memory_order_acquire);
  if (magic != put_ring::kPutRingLayout.magic || version != put_ring::kPutRingLayout.version) {
    return fail(fmt::format(
        "its layout words were overwritten ({:#018x}, version {}): a client must not write them",
        magic, version));
  }
  uint64_t head = index::Load(map_.words() + put_ring::kHead, std::memory_order_acquire);
  if (head - tail_ > put_ring::kRecordBytes || head % 8 != 0) {
    return fail(fmt::format("head at {} while the tail is at {}", head, tail_));
  }
  const auto* records = reinterpret_cast<const uint8_t*>(map_.words() + put_ring::kRecordsWord);
  for (uint64_t taken = 0; tail_ != head && taken < most; ++taken) {
    uint64_t* word = map_.words() + put_ring::kRecordsWord + (tail_ % put_ring::kRecordBytes) / 8;
    uint64_t header = std::atomic_ref<uint64_t>(*word).fetch_or(put_ring::kTaken);
    uint64_t length = header & put_ring::kLengthMask;
    if (length == 0 || put_ring::RecordSpan(length) > head - tail_) {
      return fail(fmt::format("a record of {} bytes at {}, with {} bytes published", length, tail_,
                              head - tail_));
    }
    // The body may wrap: copied in at most two parts, as atomics are not needed for bytes that
    // the client may still scribble on (whatever it writes, the copy is checked as a message).
    body_.resize(length);
    uint64_t at = (tail_ + put_ring::kHeaderBytes) % put_ring::kRecordBytes;
    uint64_t first = std::min(length, put_ring::kRecordBytes - at);
    std::atomic_thread_fence(std::memory_order_acquire);
    std::memcpy(body_.data(), records + at, first);
    std::memcpy(body_.data() + first, records, length - first);
    tail_ += put_ring::RecordSpan(length);
    if (Status st = take(body_, (header & put_ring::kHeld) != 0); !st.ok()) {
      broken_ = true;
      return st;
    }
    // Only now, the put handled (and its object recorded where memory is kept): a daemon killed
    // before this store leaves the record to the next one (KeptMemory).
    index::Store(map_.words() + put_ring::kTail, tail_, std::memory_order_release);
  }
  return Status::OK();
}

void PutRing::SetPolled(uint64_t word) {
  index::Store(map_.words() + put_ring::kPolled, word, std::memory_order_seq_cst);
}

void PutRing::Close() {
  // The lease goes first: a client that is not writing into it now takes a new one (a request,
  // on a socket no one reads) before its next put, rather than write where the bytes may be
  // another object's once the grace period ends. One writing now finds its put's doorbell fail.
  uint64_t idle = put_ring::kLeaseIdle;
  std::atomic_ref<uint64_t>(map_.words()[put_ring::kLease])
      .compare_exchange_strong(idle, put_ring::kLeaseRevoked);
  uint64_t epoch = index::Load(map_.words() + put_ring::kPolled, std::memory_order_acquire) >> 2;
  SetPolled((epoch + 1) << 2 | put_ring::kUrgent);
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

void PutRing::LeaseGranted() {
  index::Store(map_.words() + put_ring::kLease, put_ring::kLeaseIdle, std::memory_order_release);
}

bool PutRing::Revoke() {
  if (broken_ || tail_ == 0 || !Intact()) return false;
  std::atomic_ref<uint64_t> word(map_.words()[put_ring::kLease]);
  uint64_t idle = put_ring::kLeaseIdle;
  if (!word.compare_exchange_strong(idle, put_ring::kLeaseRevoked)) return false;
  // The client publishes a put's record before it makes the word idle again (release), and this
  // compare and swap read that: a record still pending here was published before it.
  if (!Pending()) return true;
  uint64_t revoked = put_ring::kLeaseRevoked;
  word.compare_exchange_strong(revoked, put_ring::kLeaseIdle);  // the client may see either
  return false;
}

bool PutRing::CanReturn() const {
  if (!Intact()) return false;
  uint64_t taken = index::Load(map_.words() + put_ring::kReturnTail, std::memory_order_acquire);
  return taken <= returns_ && returns_ - taken < put_ring::kReturnSlots;
}

void PutRing::Return(const Location& block) {
  uint64_t* entry = map_.words() + put_ring::kReturnsWord +
                    (returns_ % put_ring::kReturnSlots) * put_ring::kReturnWords;
  index::Store(entry, block.offset);
  index::Store(entry + 1, block.size);
  index::Store(entry + 2, block.segment);
  index::Store(map_.words() + put_ring::kReturnHead, ++returns_, std::memory_order_release);
}

}  // namespace depot
