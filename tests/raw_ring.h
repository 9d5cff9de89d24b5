// Test support: a raw connection's put ring mapped read-write, as a client library maps it, for
// tests that write into it what no client of the library would (tests/raw_connection.h).
#ifndef DEPOT_TESTS_RAW_RING_H_
#define DEPOT_TESTS_RAW_RING_H_

#include <sys/mman.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "proto/put_ring_layout.h"
#include "proto/wire.h"
#include "tests/raw_connection.h"

namespace depot::test {

// Mallory's raw connection with its put ring mapped read-write, as a client library maps it.
class RawRing {
 public:
  explicit RawRing(Raw& raw) {
    std::vector<uint8_t> reply;
    std::vector<UniqueFd> fds = raw.HelloWithFds(reply);
    REQUIRE(proto::Body<wire::HelloReply>(reply)->put_ring_bytes() == put_ring::kRingFileBytes);
    REQUIRE(!fds.empty());
    void* p = ::mmap(nullptr, put_ring::kRingFileBytes, PROT_READ | PROT_WRITE, MAP_SHARED,
                     fds.back().get(), 0);
    REQUIRE(p != MAP_FAILED);
    words_ = static_cast<uint64_t*>(p);
  }
  ~RawRing() { ::munmap(words_, put_ring::kRingFileBytes); }
  RawRing(const RawRing&) = delete;
  RawRing& operator=(const RawRing&) = delete;

  std::atomic_ref<uint64_t> Word(uint64_t word) { return std::atomic_ref<uint64_t>(words_[word]); }
  // Writes a record at `position` whose header is `header` and whose body is `body`.
  void Write(uint64_t position, uint64_t header, std::span<const uint8_t> body) {
    Word(put_ring::kRecordsWord + (position % put_ring::kRecordBytes) / 8).store(header);
    auto* records = reinterpret_cast<uint8_t*>(words_ + put_ring::kRecordsWord);
    if (body.empty()) return;
    std::memcpy(records + (position + put_ring::kHeaderBytes) % put_ring::kRecordBytes, body.data(),
                body.size());
  }
  void Publish(uint64_t head) { Word(put_ring::kHead).store(head, std::memory_order_release); }
  // Writes `body` as the record after the last one Append wrote (the first at the ring's start),
  // and publishes it.
  void Append(std::span<const uint8_t> body, uint64_t flags = 0) {
    Write(appended_, body.size() | flags, body);
    appended_ += put_ring::RecordSpan(body.size());
    Publish(appended_);
  }

 private:
  uint64_t* words_ = nullptr;
  uint64_t appended_ = 0;
};

// The body of a put (no message header) of `frames` named `guid`.
inline std::vector<uint8_t> PutBody(const Guid& guid,
                                    const std::vector<wire::FrameLocation>& frames) {
  flatbuffers::FlatBufferBuilder fbb(256);
  BuildPut(fbb, guid, frames);
  return {fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize()};
}

}  // namespace depot::test

#endif  // DEPOT_TESTS_RAW_RING_H_
