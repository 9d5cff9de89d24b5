// The put ring's shared words, between the daemon's side (daemon/put_ring) and the client's
// (client/src/put_ring) over one memfd, in one process so that ThreadSanitizer sees both: records
// that wrap around the ring's end, a record that lies about its length, and the lease word, by
// which the daemon takes back an idle lease only while its client writes nothing into it
// (docs/design.md, "Puts without a message").
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "client/src/put_ring.h"
#include "daemon/put_ring.h"
#include "proto/put_ring_layout.h"

namespace depot {
namespace {

// One ring as the daemon and a client of the library see it, and its words as any client may
// write them.
struct Rings {
  std::unique_ptr<PutRing> daemon;
  std::optional<internal::PutRing> client;
  uint64_t* words = nullptr;

  Rings() {
    auto made = PutRing::Create("put ring test");
    REQUIRE(made.ok());
    daemon = std::move(*made);
    UniqueFd fd(::dup(daemon->fd()));
    auto mapped = internal::PutRing::Map(fd, put_ring::kRingFileBytes);
    REQUIRE(mapped.ok());
    client.emplace(std::move(*mapped));
    void* m = ::mmap(nullptr, put_ring::kRingFileBytes, PROT_READ | PROT_WRITE, MAP_SHARED,
                     daemon->fd(), 0);
    REQUIRE(m != MAP_FAILED);
    words = static_cast<uint64_t*>(m);
  }
  ~Rings() { ::munmap(words, put_ring::kRingFileBytes); }
  Rings(const Rings&) = delete;
  Rings& operator=(const Rings&) = delete;

  std::atomic_ref<uint64_t> Word(uint64_t index) { return std::atomic_ref<uint64_t>(words[index]); }

  // Takes what the client published; the bodies in `out`.
  Status Take(std::vector<std::vector<uint8_t>>& out) {
    return daemon->Take([&](std::span<const uint8_t> body, bool) {
      out.emplace_back(body.begin(), body.end());
      return Status::OK();
    });
  }
};

std::vector<uint8_t> Body(size_t size, uint32_t seed) {
  std::vector<uint8_t> b(size);
  for (size_t i = 0; i < size; ++i) b[i] = static_cast<uint8_t>(seed * 31 + i * 7);
  return b;
}

TEST_CASE("records that wrap around the ring's end are taken whole and in order", "[ring]") {
  Rings r;
  std::vector<std::vector<uint8_t>> written, taken;
  uint64_t position = 0;
  int wrapped = 0;
  // Three times round the ring, in bodies of sizes that do not divide it.
  for (uint32_t n = 0; position < 3 * put_ring::kRecordBytes; ++n) {
    std::vector<uint8_t> body = Body(1 + (n * 977) % 5000, n);
    auto at = r.client->Append(body);
    if (!at) {  // full: the daemon takes, and the put is written again
      REQUIRE(r.Take(taken).ok());
      at = r.client->Append(body);
      REQUIRE(at);
    }
    uint64_t start = *at % put_ring::kRecordBytes;
    wrapped += start + put_ring::RecordSpan(body.size()) > put_ring::kRecordBytes;
    position = *at + put_ring::RecordSpan(body.size());
    written.push_back(std::move(body));
  }
  REQUIRE(r.Take(taken).ok());
  CHECK(wrapped >= 2);
  CHECK(taken == written);
}

TEST_CASE("a record longer than what is published breaks the ring for good", "[ring]") {
  Rings r;
  // A header of 1000 bytes with only 16 published.
  r.Word(put_ring::kRecordsWord).store(1000);
  r.Word(put_ring::kHead).store(16, std::memory_order_release);
  std::vector<std::vector<uint8_t>> taken;
  Status st = r.Take(taken);
  CHECK(st.IsProtocolError());
  CHECK(taken.empty());
  // Broken: it takes nothing more, and its lease cannot be taken back through it.
  r.Word(put_ring::kHead).store(0, std::memory_order_release);
  CHECK(r.Take(taken).ok());
  CHECK_FALSE(r.daemon->Revoke());
}

TEST_CASE("the lease word: a lease is taken back only while its client writes nothing into it",
          "[ring][stress]") {
  Rings r;
  // Nothing taken from the ring yet: a client that never wrote into it keeps its lease.
  CHECK_FALSE(r.daemon->Revoke());
  std::atomic<bool> writing{false};  // the client is between BeginWrite and EndWrite
  std::atomic<bool> revoked{false};  // the daemon took the lease back and has not granted anew
  std::atomic<bool> asks{false};     // the client asks for a new lease
  std::atomic<bool> done{false};
  std::atomic<uint64_t> violations{0};
  std::atomic<uint64_t> puts{0};
  std::thread client([&] {
    std::vector<uint8_t> body = Body(200, 1);
    // At least 0.8 s and 20 leases taken back, at most 10 s (a loaded machine, ThreadSanitizer).
    auto start = std::chrono::steady_clock::now();
    int seen = 0;
    for (uint64_t n = 1;; ++n) {
      auto ran = std::chrono::steady_clock::now() - start;
      if (ran > std::chrono::seconds(10) || (ran > std::chrono::milliseconds(800) && seen >= 20)) {
        break;
      }
      if (!r.client->BeginWrite()) {
        ++seen;
        asks = true;  // taken back: a new lease, as Lease::Renew asks for one
        while (asks) std::this_thread::yield();
        continue;
      }
      writing = true;
      violations += revoked.load();
      while (!r.client->Append(body)) std::this_thread::yield();  // full: the daemon takes
      violations += revoked.load();
      writing = false;
      r.client->EndWrite();
      ++puts;
      // Idle now and then, as a client between puts: the daemon's chance to take the lease back
      // (between back-to-back puts there is hardly a moment with nothing pending).
      if (n % 8 == 0) std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    done = true;
  });
  // The daemon's loop: takes the ring, takes the lease back whenever it can, grants when asked.
  uint64_t taken = 0;
  uint64_t revocations = 0;
  auto count = [&](std::span<const uint8_t>, bool) {
    ++taken;
    violations += revoked.load();  // a record written after the lease was taken back
    return Status::OK();
  };
  auto take = [&] { REQUIRE(r.daemon->Take(count).ok()); };
  while (!done) {
    take();
    if (!revoked && r.daemon->Revoke()) {
      revoked = true;
      ++revocations;
      violations += writing.load();
    }
    if (asks) {
      revoked = false;
      r.daemon->LeaseGranted();
      asks = false;
    }
  }
  client.join();
  take();
  INFO(puts.load() << " puts, " << revocations << " revocations");
  CHECK(violations == 0);
  CHECK(taken == puts);
  CHECK(revocations >= 20);
  // A client that claims to write forever, or writes garbage, keeps its lease.
  r.daemon->LeaseGranted();
  REQUIRE(r.client->BeginWrite());
  CHECK_FALSE(r.daemon->Revoke());
  r.client->EndWrite();
  CHECK(r.daemon->Revoke());
  r.daemon->LeaseGranted();
  r.Word(put_ring::kLease).store(12345);
  CHECK_FALSE(r.daemon->Revoke());
}

}  // namespace
}  // namespace depot
