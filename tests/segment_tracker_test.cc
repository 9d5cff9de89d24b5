// Tests for SegmentTracker against its contract (daemon/segment_tracker.h): each shared segment's
// descriptor travels once per session and access mode (read-only for gets, read-write for
// creates), a duplicate each time; a retired segment is named to the sessions that have it, who
// hold it until each drops it or leaves, and the last to let go releases it; a session can let
// go only of its own hold. The segments are a real namespace's (tests/namespace_fixture.h).
#include "daemon/segment_tracker.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <tuple>
#include <vector>

#include "tests/namespace_fixture.h"

namespace depot {
namespace {

struct Tracker : test::TestNamespace {
  Tracker()
      : tracker([this](Namespace& ns, uint32_t pool, uint32_t id) {
          released.emplace_back(&ns, pool, id);
        }) {}

  // What a reply naming `frames` would carry to `session`.
  struct Sent {
    std::vector<uint64_t> keys;
    std::vector<UniqueFd> fds;
  };
  Sent Collect(SessionId session, const std::vector<Location>& frames, bool writable) {
    Sent out;
    REQUIRE(tracker.Collect(session, frames, writable, out.keys, out.fds).ok());
    return out;
  }
  static std::vector<uint8_t> Dropped(uint32_t pool, std::vector<uint32_t> ids) {
    flatbuffers::FlatBufferBuilder fbb(64);
    fbb.Finish(wire::CreateSegmentsRetired(fbb, fbb.CreateVector(ids), pool));
    return {fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize()};
  }
  void Drop(SessionId session, uint32_t pool, std::vector<uint32_t> ids) {
    std::vector<uint8_t> body = Dropped(pool, std::move(ids));
    tracker.Dropped(session, *flatbuffers::GetRoot<wire::SegmentsRetired>(body.data()));
  }

  std::vector<std::tuple<Namespace*, uint32_t, uint32_t>> released;
  SegmentTracker tracker;
};

int AccessMode(const UniqueFd& fd) { return ::fcntl(fd.get(), F_GETFL) & O_ACCMODE; }

TEST_CASE("SegmentTracker sends each segment's descriptor once per session and access mode",
          "[segment_tracker]") {
  Tracker t;
  t.tracker.Join(1, &t.ns());
  t.tracker.Join(2, &t.ns());
  Location a = t.Allocate(100);
  Location b = t.Allocate(100);  // the same segment
  REQUIRE(a.segment == b.segment);
  uint64_t key = SegmentTracker::Key(0, a.segment);
  // A get: the read-only descriptor, once for the two frames of one segment.
  auto first = t.Collect(1, {a, b}, false);
  CHECK(first.keys == std::vector<uint64_t>{key});
  REQUIRE(first.fds.size() == 1);
  CHECK(AccessMode(first.fds[0]) == O_RDONLY);
  // Not again for that session; empty frames name no segment.
  auto again = t.Collect(1, {b, Location{}}, false);
  CHECK(again.keys.empty());
  CHECK(again.fds.empty());
  // A create reply: the read-write one, once.
  auto create = t.Collect(1, {a}, true);
  CHECK(create.keys == std::vector<uint64_t>{key});
  REQUIRE(create.fds.size() == 1);
  CHECK(AccessMode(create.fds[0]) == O_RDWR);
  CHECK(t.Collect(1, {a}, true).fds.empty());
  // Another session is sent its own.
  CHECK(t.Collect(2, {a}, false).fds.size() == 1);
  // Each is a duplicate, not the pool's own descriptor: closing it closes nothing of the pool's.
  CHECK(first.fds[0].get() != t.ns().SegmentOf(0, a.segment).read_only_fd);
  t.Free({a, b});
}

TEST_CASE("SegmentTracker holds a retired segment until every session told of it lets go",
          "[segment_tracker]") {
  Tracker t;
  for (SessionId s : {1, 2, 3}) t.tracker.Join(s, &t.ns());
  Location a = t.Allocate(100);
  t.Collect(1, {a}, false);
  t.Collect(2, {a}, true);
  // Session 3 never had it: it is not told, and holds nothing.
  auto holders = t.tracker.Retire(&t.ns(), 0, a.segment);
  std::sort(holders.begin(), holders.end());
  CHECK(holders == std::vector<SessionId>{1, 2});
  // Each forgot the descriptor: told again, it would be sent again; retired again, nobody has it.
  CHECK(t.tracker.Retire(&t.ns(), 0, a.segment).empty());
  // A drop of segments it does not hold changes nothing (session 3; another id; another pool).
  t.Drop(3, 0, {a.segment});
  t.Drop(1, 0, {a.segment + 1});
  t.Drop(1, 1, {a.segment});
  CHECK(t.released.empty());
  t.Drop(1, 0, {a.segment});
  t.Drop(1, 0, {a.segment});  // twice: the second is ignored
  CHECK(t.released.empty());
  // The last holder leaves without a drop: released then, once.
  t.tracker.Leave(2);
  REQUIRE(t.released.size() == 1);
  CHECK(t.released[0] == std::make_tuple(&t.ns(), uint32_t{0}, a.segment));
  t.tracker.Leave(1);
  t.tracker.Leave(3);
  CHECK(t.released.size() == 1);
  // The retired segment's descriptor was forgotten: a session that meets it again is sent it.
  t.tracker.Join(4, &t.ns());
  CHECK(t.Collect(4, {a}, false).fds.size() == 1);
  t.Free({a});
}

TEST_CASE("SegmentTracker: a segment retired while no session had it is held by none",
          "[segment_tracker]") {
  Tracker t;
  t.tracker.Join(1, &t.ns());
  Location a = t.Allocate(100);
  CHECK(t.tracker.Retire(&t.ns(), 0, a.segment).empty());
  // Nobody holds it, so nobody's leaving releases it: the pool needs no word from the tracker.
  t.tracker.Leave(1);
  CHECK(t.released.empty());
  t.Free({a});
}

}  // namespace
}  // namespace depot
