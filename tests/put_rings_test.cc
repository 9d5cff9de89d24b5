// Tests for the daemon's put rings against their contracts: PutRing (daemon/put_ring.h), one
// session's ring, and PutRings (daemon/put_rings.h), when the daemon reads them. The client's
// side is played here by writing the ring's words as any client may (proto/put_ring_layout.h);
// put_ring_words_test runs the library's writer against the same memory.
#include "daemon/put_rings.h"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "daemon/put_ring.h"
#include "proto/put_ring_layout.h"

namespace depot {
namespace {

using Catch::Matchers::Contains;

// A ring's memory as its client maps it: read-write, every word free to write.
class ClientSide {
 public:
  explicit ClientSide(int fd) {
    void* m = ::mmap(nullptr, put_ring::kRingFileBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    REQUIRE(m != MAP_FAILED);
    words_ = static_cast<uint64_t*>(m);
  }
  ~ClientSide() { ::munmap(words_, put_ring::kRingFileBytes); }
  ClientSide(const ClientSide&) = delete;
  ClientSide& operator=(const ClientSide&) = delete;

  std::atomic_ref<uint64_t> Word(uint64_t n) { return std::atomic_ref<uint64_t>(words_[n]); }
  // Writes a record of `body` with header flags `flags` at the head and publishes it.
  void Append(const std::string& body, uint64_t flags = 0) {
    Word(put_ring::kRecordsWord + (head_ % put_ring::kRecordBytes) / 8).store(body.size() | flags);
    auto* records = reinterpret_cast<uint8_t*>(words_ + put_ring::kRecordsWord);
    for (size_t i = 0; i < body.size(); ++i) {
      records[(head_ + put_ring::kHeaderBytes + i) % put_ring::kRecordBytes] =
          static_cast<uint8_t>(body[i]);
    }
    head_ += put_ring::RecordSpan(body.size());
    Word(put_ring::kHead).store(head_, std::memory_order_release);
  }
  // The header word of the record at `position`.
  uint64_t Header(uint64_t position) {
    return Word(put_ring::kRecordsWord + (position % put_ring::kRecordBytes) / 8).load();
  }
  uint64_t head() const { return head_; }

 private:
  uint64_t* words_ = nullptr;
  uint64_t head_ = 0;
};

struct Taken {
  std::string body;
  bool held;
  bool operator==(const Taken&) const = default;
};

std::unique_ptr<PutRing> NewRing() {
  auto ring = PutRing::Create("put-rings-test");
  REQUIRE(ring.ok());
  return std::move(*ring);
}

// Takes `ring`'s records into `out`.
Status TakeInto(PutRing& ring, std::vector<Taken>& out) {
  return ring.Take([&](std::span<const uint8_t> body, bool held) {
    out.push_back({std::string(body.begin(), body.end()), held});
    return Status::OK();
  });
}

TEST_CASE(
    "PutRing hands over what was published, in order, with the held flag, and marks each "
    "record taken",
    "[put_rings]") {
  auto ring = NewRing();
  ClientSide c(ring->fd());
  CHECK_FALSE(ring->Pending());
  c.Append("first");
  c.Append("second", put_ring::kHeld);
  uint64_t second_at = put_ring::RecordSpan(5);
  CHECK(ring->Pending());
  std::vector<Taken> taken;
  REQUIRE(TakeInto(*ring, taken).ok());
  CHECK(taken == std::vector<Taken>{{"first", false}, {"second", true}});
  CHECK_FALSE(ring->Pending());
  // The tail the client reads is past both; each header says the daemon took it (a client's
  // later kHeld fails).
  CHECK(c.Word(put_ring::kTail).load() == c.head());
  CHECK((c.Header(0) & put_ring::kTaken) != 0);
  CHECK((c.Header(second_at) & put_ring::kTaken) != 0);
  // Only what was published when Take began: nothing more now.
  taken.clear();
  REQUIRE(TakeInto(*ring, taken).ok());
  CHECK(taken.empty());
}

TEST_CASE("PutRing: positions that make no sense break the ring for good", "[put_rings]") {
  auto ring = NewRing();
  ClientSide c(ring->fd());
  SECTION("a head past the ring's size") {
    c.Word(put_ring::kHead).store(put_ring::kRecordBytes + 8);
  }
  SECTION("a head inside a word") { c.Word(put_ring::kHead).store(12); }
  SECTION("a record of no bytes") { c.Word(put_ring::kHead).store(put_ring::kHeaderBytes); }
  SECTION("a head behind the tail") {
    c.Append("one");
    std::vector<Taken> taken;
    REQUIRE(TakeInto(*ring, taken).ok());
    c.Word(put_ring::kHead).store(0);
  }
  std::vector<Taken> taken;
  Status st = TakeInto(*ring, taken);
  CHECK(st.IsProtocolError());
  CHECK_THAT(st.message(), Contains("put ring"));
  // Broken: nothing pending, nothing taken, even once the words look right again.
  c.Word(put_ring::kHead).store(c.Word(put_ring::kTail).load());
  c.Append("later");
  CHECK_FALSE(ring->Pending());
  taken.clear();
  CHECK(TakeInto(*ring, taken).ok());
  CHECK(taken.empty());
}

TEST_CASE("PutRing stops at the first record its taker refuses and breaks", "[put_rings]") {
  auto ring = NewRing();
  ClientSide c(ring->fd());
  c.Append("good");
  c.Append("bad");
  c.Append("never");
  std::vector<std::string> seen;
  Status st = ring->Take([&](std::span<const uint8_t> body, bool) {
    seen.emplace_back(body.begin(), body.end());
    return seen.back() == "bad" ? Status::ProtocolError("refused") : Status::OK();
  });
  CHECK(st.IsProtocolError());
  CHECK(st.message() == "refused");
  CHECK(seen == std::vector<std::string>{"good", "bad"});
  CHECK_FALSE(ring->Pending());
  CHECK_FALSE(ring->Revoke());
}

TEST_CASE("PutRing::Revoke takes a lease only from a client idle with nothing pending",
          "[put_rings]") {
  auto ring = NewRing();
  ClientSide c(ring->fd());
  // A client that never wrote into its ring (its puts are messages) keeps its lease.
  CHECK_FALSE(ring->Revoke());
  c.Append("a put");
  std::vector<Taken> taken;
  REQUIRE(TakeInto(*ring, taken).ok());
  // Writing into its lease now: kept.
  c.Word(put_ring::kLease).store(put_ring::kLeaseWriting);
  CHECK_FALSE(ring->Revoke());
  CHECK(c.Word(put_ring::kLease).load() == put_ring::kLeaseWriting);
  // Idle, but with a record published and not taken: kept, the word idle again.
  c.Word(put_ring::kLease).store(put_ring::kLeaseIdle);
  c.Append("pending");
  CHECK_FALSE(ring->Revoke());
  CHECK(c.Word(put_ring::kLease).load() == put_ring::kLeaseIdle);
  // Idle with nothing pending: taken back, and the client sees it so.
  REQUIRE(TakeInto(*ring, taken).ok());
  CHECK(ring->Revoke());
  CHECK(c.Word(put_ring::kLease).load() == put_ring::kLeaseRevoked);
  // A new lease makes the word idle.
  ring->LeaseGranted();
  CHECK(c.Word(put_ring::kLease).load() == put_ring::kLeaseIdle);
}

TEST_CASE("PutRing writes returns while the client keeps up, and no more", "[put_rings]") {
  auto ring = NewRing();
  ClientSide c(ring->fd());
  for (uint64_t i = 0; i < put_ring::kReturnSlots; ++i) {
    REQUIRE(ring->CanReturn());
    ring->Return(Location{.segment = 3, .offset = 64 * i, .size = 128});
  }
  CHECK(c.Word(put_ring::kReturnHead).load() == put_ring::kReturnSlots);
  // Each return is its block's offset, size and segment.
  constexpr uint64_t kSixth = put_ring::kReturnsWord + 5 * put_ring::kReturnWords;
  CHECK(c.Word(kSixth).load() == 64 * 5);
  CHECK(c.Word(kSixth + 1).load() == 128);
  CHECK(c.Word(kSixth + 2).load() == 3);
  // Every slot unread: no more.
  CHECK_FALSE(ring->CanReturn());
  c.Word(put_ring::kReturnTail).store(1);
  CHECK(ring->CanReturn());
  ring->Return(Location{.segment = 4, .offset = 4096, .size = 64});
  // The 65th return goes where the first was.
  CHECK(c.Word(put_ring::kReturnsWord).load() == 4096);
  // A client that says it took more than were written gets none.
  c.Word(put_ring::kReturnTail).store(~uint64_t{0});
  CHECK_FALSE(ring->CanReturn());
}

TEST_CASE("PutRing::SetPolled writes the doorbell word", "[put_rings]") {
  auto ring = NewRing();
  ClientSide c(ring->fd());
  ring->SetPolled(7 << 2 | put_ring::kUrgent);
  CHECK(c.Word(put_ring::kPolled).load() == (7 << 2 | put_ring::kUrgent));
}

// PutRings over a real io_context; takes go into `taken`, failures into `failed`.
struct Rings {
  Rings()
      : rings(
            io,
            [this](SessionId s, std::span<const uint8_t> body, bool held) {
              std::string b(body.begin(), body.end());
              if (b == "throw") throw std::runtime_error("a bug some input reached");
              if (b == "refuse") return Status::ProtocolError("refused");
              taken[s].push_back({b, held});
              return Status::OK();
            },
            [this](SessionId s, const Status& st) { failed[s] = st.message(); },
            [this](uid_t uid) { return waiting.contains(uid); }) {}

  std::unique_ptr<ClientSide> Join(SessionId s, uid_t uid) {
    auto joined = rings.Join(s, uid);
    REQUIRE(joined.ok());
    return std::make_unique<ClientSide>((*joined)->fd());
  }
  // Runs the loop until `done` or 5 s.
  template <typename Fn>
  bool RunUntil(Fn&& done, std::chrono::milliseconds limit = std::chrono::seconds(5)) {
    auto until = std::chrono::steady_clock::now() + limit;
    while (!done() && std::chrono::steady_clock::now() < until) {
      io.run_one_for(std::chrono::milliseconds(10));
      if (io.stopped()) io.restart();
    }
    return done();
  }

  boost::asio::io_context io;
  std::map<SessionId, std::vector<Taken>> taken;
  std::map<SessionId, std::string> failed;
  std::set<uid_t> waiting;
  PutRings rings;
};

TEST_CASE("PutRings::Take takes one session's ring, TakeAll every ring and fails the broken",
          "[put_rings]") {
  Rings r;
  auto a = r.Join(1, 1000);
  auto b = r.Join(2, 1000);
  auto c = r.Join(3, 1001);
  CHECK(r.rings.Find(1) != nullptr);
  CHECK(r.rings.Find(9) == nullptr);
  CHECK(r.rings.Take(9).ok());  // no ring: nothing to take
  a->Append("a1");
  b->Append("b1");
  REQUIRE(r.rings.Take(1).ok());
  CHECK(r.taken[1] == std::vector<Taken>{{"a1", false}});
  CHECK(r.taken[2].empty());
  // TakeAll: every ring with a put, a refused one to the FailFn, the others taken all the same.
  b->Append("refuse");
  b->Append("b2");
  c->Append("c1", put_ring::kHeld);
  a->Append("throw");
  r.rings.TakeAll();
  CHECK(r.taken[2] == std::vector<Taken>{{"b1", false}});
  CHECK(r.taken[3] == std::vector<Taken>{{"c1", true}});
  CHECK(r.failed[2] == "refused");
  // An exception while taking is that session's protocol error, not the loop's.
  CHECK_THAT(r.failed[1], Contains("a bug some input reached"));
  CHECK_FALSE(r.failed.contains(3));
  // A session that left has no ring.
  r.rings.Leave(3);
  CHECK(r.rings.Find(3) == nullptr);
}

TEST_CASE("PutRings polls a ring while puts come to it, then stops and tells its client to ring",
          "[put_rings]") {
  Rings r;
  auto a = r.Join(1, 1000);
  auto b = r.Join(2, 1000);
  uint64_t idle = a->Word(put_ring::kPolled).load();
  CHECK((idle & put_ring::kStateMask) == put_ring::kIdle);
  // a's doorbell: a is polled from now on, and a put written meanwhile is taken by the timer.
  r.rings.Poll(1);
  CHECK((a->Word(put_ring::kPolled).load() & put_ring::kStateMask) == put_ring::kPolling);
  a->Append("polled");
  CHECK(r.RunUntil([&] { return r.taken[1].size() == 1; }));
  // b rang no doorbell: it is not polled, and the timer does not look at it (a client that
  // does not ring waits for its own next request).
  CHECK((b->Word(put_ring::kPolled).load() & put_ring::kStateMask) == put_ring::kIdle);
  b->Append("unrung");
  CHECK_FALSE(r.RunUntil([&] { return !r.taken[2].empty(); }, std::chrono::milliseconds(50)));
  REQUIRE(r.rings.Take(2).ok());
  CHECK(r.taken[2].size() == 1);
  // With nothing more, a's polling stops after kIdlePolls, in a new epoch: its client's next
  // put rings the doorbell once more.
  CHECK(r.RunUntil([&] {
    return (a->Word(put_ring::kPolled).load() & put_ring::kStateMask) == put_ring::kIdle;
  }));
  uint64_t stopped = a->Word(put_ring::kPolled).load();
  CHECK(stopped >> 2 == (idle >> 2) + 1);
  CHECK(b->Word(put_ring::kPolled).load() == idle);
}

TEST_CASE("PutRings: the timer takes the rings in turns, with the loop's other work between them",
          "[put_rings]") {
  Rings r;
  auto a = r.Join(1, 1000);
  auto b = r.Join(2, 1000);
  r.rings.Poll(1);
  r.rings.Poll(2);
  constexpr size_t kEach = 500;  // ~8 KiB of records a ring: a few milliseconds of real puts
  for (size_t i = 0; i < kEach; ++i) {
    a->Append("a" + std::to_string(i));
    b->Append("b" + std::to_string(i));
  }
  auto taken = [&] { return r.taken[1].size() + r.taken[2].size(); };
  REQUIRE(r.RunUntil([&] { return taken() > 0; }));
  // The first turn took at most kTurnRecords of each ring.
  CHECK(taken() <= 2 * PutRings::kTurnRecords);
  // A handler posted now (a request that came meanwhile) runs before the rings are empty.
  size_t taken_when_it_ran = 0;
  boost::asio::post(r.io, [&] { taken_when_it_ran = taken(); });
  REQUIRE(r.RunUntil([&] { return taken() == 2 * kEach; }));
  CHECK(taken_when_it_ran > 0);
  CHECK(taken_when_it_ran < 2 * kEach);
  // Each ring's records in the order they were written, none twice.
  for (size_t i = 0; i < kEach; ++i) {
    REQUIRE(r.taken[1][i].body == "a" + std::to_string(i));
    REQUIRE(r.taken[2][i].body == "b" + std::to_string(i));
  }
  CHECK(r.failed.empty());
}

TEST_CASE("PutRings: a waiting get makes its own user's puts ring, no other user's",
          "[put_rings]") {
  Rings r;
  auto alice = r.Join(1, 1000);
  auto bob = r.Join(2, 1001);
  r.waiting.insert(1000);
  r.rings.NoteParkedGet(1000);
  CHECK((alice->Word(put_ring::kPolled).load() & put_ring::kStateMask) == put_ring::kUrgent);
  CHECK((bob->Word(put_ring::kPolled).load() & put_ring::kStateMask) == put_ring::kIdle);
  // A ring the user joins later is urgent too.
  auto alice2 = r.Join(3, 1000);
  CHECK((alice2->Word(put_ring::kPolled).load() & put_ring::kStateMask) == put_ring::kUrgent);
  // Once no get of hers waits, a poll finds it so and her rings are merely polled.
  r.waiting.clear();
  r.rings.Poll(1);
  CHECK(r.RunUntil([&] {
    return (alice->Word(put_ring::kPolled).load() & put_ring::kStateMask) != put_ring::kUrgent;
  }));
  CHECK((bob->Word(put_ring::kPolled).load() & put_ring::kStateMask) != put_ring::kUrgent);
}

TEST_CASE("PutRings: after a hand-off the rings are taken in a spin, with no poll or doorbell",
          "[put_rings]") {
  Rings r;
  auto a = r.Join(1, 1000);
  // Before: a put waits for a request, the timer or a doorbell (none here).
  a->Append("waits");
  r.io.poll();
  CHECK(r.taken[1].empty());
  // A drain found it (a get of another session missed it): a hand-off. The ring that held a
  // put is polled from now on.
  CHECK(r.rings.TakeAll());
  CHECK_FALSE(r.rings.TakeAll());  // nothing held any more
  CHECK((a->Word(put_ring::kPolled).load() & put_ring::kStateMask) == put_ring::kPolling);
  r.rings.NoteHandOff();
  // The next put is taken by the loop alone: the spin, or the timer that polls the ring now.
  a->Append("spun");
  r.io.restart();
  auto start = std::chrono::steady_clock::now();
  while (r.taken[1].size() < 2 &&
         std::chrono::steady_clock::now() - start < std::chrono::seconds(1)) {
    if (r.io.poll_one() == 0 && r.io.stopped()) r.io.restart();
  }
  CHECK(r.taken[1].size() == 2);
  // With no put for a while the spin ends and the ring stops being polled: a later put waits
  // again for a request, the timer or a doorbell.
  CHECK(r.RunUntil([&] {
    return (a->Word(put_ring::kPolled).load() & put_ring::kStateMask) == put_ring::kIdle;
  }));
  r.io.restart();
  r.io.poll();
  a->Append("waits again");
  r.io.restart();
  r.io.poll();
  CHECK(r.taken[1].size() == 2);
}

}  // namespace
}  // namespace depot
