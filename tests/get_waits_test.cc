// Tests for GetWaits against its contract (daemon/get_waits.h): a get with nothing missing is
// answered at once; a parked one is answered in full when its last object is sealed (in its own
// table only), with an error for an object that will not come, or at its timeout with what it
// has; a session's gets are forgotten when it ends; and what waits is bounded per connection in
// gets and GUIDs and per user in GUIDs, each refusal naming its limit and changing nothing.
#include "daemon/get_waits.h"

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <vector>

namespace depot {
namespace {

using Catch::Matchers::Contains;

Guid G(uint64_t n) { return Guid{0x6000 + n, n}; }

struct Waits {
  Waits()
      : waits(io, limits, [this](GetWait& w) {
          answered.push_back({w.request_id, {}, {}});
          for (size_t i = 0; i < w.guids.size(); ++i) {
            answered.back().found.push_back(w.acquired[i] != nullptr);
            answered.back().errors.push_back(w.errors[i]);
          }
          w.ReleaseAll();
        }) {}

  // Creates object `n` in `t` (sealed when `seal`), by session 100.
  void Make(ObjectTable& t, uint64_t n, bool seal = true) {
    NewObject o;
    o.guid = G(n);
    o.frames = {{.segment = 1, .offset = n * 64, .size = 64}};
    o.creator = 100;
    REQUIRE(t.Create(std::move(o)).ok());
    if (seal) REQUIRE(t.Seal(100, G(n)).ok());
  }
  // A get by `session` of `uid` of objects `ns` in `t`, as the store builds it: each sealed one
  // acquired, the rest missing.
  GetWait Get(uint64_t request, SessionId session, uid_t uid, ObjectTable& t,
              std::vector<uint64_t> ns) {
    GetWait w;
    w.session = session;
    w.uid = uid;
    w.request_id = request;
    w.table = &t;
    for (uint64_t n : ns) {
      w.guids.push_back(G(n));
      auto got = t.Acquire(session, G(n));
      w.acquired.push_back(got.ok() ? *got : nullptr);
      w.errors.emplace_back();
      w.missing += got.ok() ? 0 : 1;
    }
    return w;
  }
  void Run(std::chrono::milliseconds for_) {
    io.run_for(for_);
    io.restart();
  }

  struct Answer {
    uint64_t request;
    std::vector<bool> found;
    std::vector<Status> errors;
  };
  boost::asio::io_context io;
  GetWaitLimits limits{.gets_per_session = 3, .guids_per_session = 6, .guids_per_user = 8};
  std::vector<Answer> answered;
  GetWaits waits;
  ObjectTable table{[](const StoredObject&) {}, [] { return int64_t{0}; }};
  ObjectTable other{[](const StoredObject&) {}, [] { return int64_t{0}; }};
};

TEST_CASE("GetWaits answers a get with nothing missing at once, parking nothing", "[get_waits]") {
  Waits w;
  w.Make(w.table, 1);
  GetWait get = w.Get(7, 1, 1000, w.table, {1});
  REQUIRE(w.waits.Park(get, -1).ok());
  REQUIRE(w.answered.size() == 1);
  CHECK(w.answered[0].request == 7);
  CHECK(w.answered[0].found == std::vector<bool>{true});
  CHECK(w.waits.size() == 0);
  CHECK(w.waits.guids() == 0);
}

TEST_CASE("GetWaits answers a parked get in full once its last object is sealed in its table",
          "[get_waits]") {
  Waits w;
  w.Make(w.table, 1);
  w.Make(w.table, 3, /*seal=*/false);
  GetWait get = w.Get(7, 1, 1000, w.table, {1, 2, 3});
  REQUIRE(w.waits.Park(get, -1).ok());
  CHECK(w.answered.empty());
  CHECK(w.waits.size() == 1);
  CHECK(w.waits.guids() == 3);
  CHECK(w.waits.guids_by_user().at(1000) == 3);
  // The same GUID sealed in another namespace's table is another object.
  w.Make(w.other, 2);
  w.waits.Wake(w.other, G(2));
  CHECK(w.answered.empty());
  w.Make(w.table, 2);
  w.waits.Wake(w.table, G(2));
  CHECK(w.answered.empty());  // 3 is still missing
  REQUIRE(w.table.Seal(100, G(3)).ok());
  w.waits.Wake(w.table, G(3));
  REQUIRE(w.answered.size() == 1);
  CHECK(w.answered[0].found == std::vector<bool>{true, true, true});
  CHECK(w.waits.size() == 0);
  CHECK(w.waits.guids() == 0);
  CHECK(w.waits.guids_by_user().empty());
}

TEST_CASE("GetWaits: a seal in another namespace's table answers no get of this one",
          "[get_waits]") {
  Waits w;
  GetWait get = w.Get(7, 1, 1000, w.table, {2});
  REQUIRE(w.waits.Park(get, -1).ok());
  w.Make(w.other, 2);
  w.waits.Wake(w.other, G(2));
  CHECK(w.answered.empty());
  CHECK(w.waits.size() == 1);
  CHECK(w.other.Find(G(2))->refcount == 0);  // no reference taken there
  w.Make(w.table, 2);
  w.waits.Wake(w.table, G(2));
  REQUIRE(w.answered.size() == 1);
  CHECK(w.answered[0].found == std::vector<bool>{true});
}

TEST_CASE("GetWaits gives a parked get the error of an object that will not come", "[get_waits]") {
  Waits w;
  GetWait get = w.Get(7, 1, 1000, w.table, {1, 2});
  REQUIRE(w.waits.Park(get, -1).ok());
  w.waits.Fail(w.table, G(1), Status::DataLoss("the file is gone"));
  CHECK(w.answered.empty());
  w.waits.Fail(w.table, G(2), Status::StoreFull("no room"));
  REQUIRE(w.answered.size() == 1);
  CHECK(w.answered[0].found == std::vector<bool>{false, false});
  CHECK(w.answered[0].errors[0].IsDataLoss());
  CHECK(w.answered[0].errors[1].IsStoreFull());
}

TEST_CASE("GetWaits answers a get at its timeout with what it has, and -1 waits on",
          "[get_waits]") {
  Waits w;
  w.Make(w.table, 1);
  GetWait timed = w.Get(7, 1, 1000, w.table, {1, 2});
  GetWait forever = w.Get(8, 1, 1000, w.table, {3});
  REQUIRE(w.waits.Park(timed, 20).ok());
  REQUIRE(w.waits.Park(forever, -1).ok());
  w.Run(std::chrono::milliseconds(200));
  REQUIRE(w.answered.size() == 1);
  CHECK(w.answered[0].request == 7);
  CHECK(w.answered[0].found == std::vector<bool>{true, false});
  CHECK(w.waits.size() == 1);
  // A seal after the timeout answers nothing more.
  w.Make(w.table, 2);
  w.waits.Wake(w.table, G(2));
  CHECK(w.answered.size() == 1);
}

TEST_CASE("GetWaits forgets a session's gets when it ends, unanswered", "[get_waits]") {
  Waits w;
  GetWait a = w.Get(7, 1, 1000, w.table, {1});
  GetWait b = w.Get(8, 2, 1000, w.table, {1});
  REQUIRE(w.waits.Park(a, 50).ok());
  REQUIRE(w.waits.Park(b, -1).ok());
  w.waits.DropSession(1);
  CHECK(w.waits.size() == 1);
  CHECK(w.waits.guids() == 1);
  w.Run(std::chrono::milliseconds(150));  // its timer fires into nothing
  CHECK(w.answered.empty());
  w.Make(w.table, 1);
  w.waits.Wake(w.table, G(1));
  REQUIRE(w.answered.size() == 1);
  CHECK(w.answered[0].request == 8);
}

TEST_CASE("GetWaits bounds what waits per connection and per user, naming the limit",
          "[get_waits]") {
  Waits w;
  // max_pending: three gets per connection.
  for (uint64_t r = 1; r <= 3; ++r) {
    GetWait g = w.Get(r, 1, 1000, w.table, {r});
    REQUIRE(w.waits.Park(g, -1).ok());
  }
  GetWait fourth = w.Get(4, 1, 1000, w.table, {4});
  Status st = w.waits.Park(fourth, -1);
  CHECK(st.IsQuotaExceeded());
  CHECK_THAT(st.message(), Contains("(max_pending)"));
  CHECK(fourth.guids.size() == 1);  // untouched: the caller still has it
  CHECK(w.waits.size() == 3);
  // max_pending_guids: six GUIDs per connection.
  GetWait many = w.Get(5, 2, 1001, w.table, {1, 2, 3, 4, 5, 6, 7});
  st = w.waits.Park(many, -1);
  CHECK_THAT(st.message(), Contains("(max_pending_guids)"));
  // max_pending_guids_per_user: eight GUIDs per user, over its connections (3 + 6 > 8).
  GetWait six = w.Get(6, 2, 1000, w.table, {1, 2, 3, 4, 5, 6});
  st = w.waits.Park(six, -1);
  CHECK(st.IsQuotaExceeded());
  CHECK_THAT(st.message(), Contains("(max_pending_guids_per_user)") && Contains("user 1000"));
  CHECK(w.waits.guids_by_user().at(1000) == 3);
  GetWait five = w.Get(6, 2, 1000, w.table, {1, 2, 3, 4, 5});
  REQUIRE(w.waits.Park(five, -1).ok());
  CHECK(w.waits.guids_by_user().at(1000) == 8);
  // Answered gets give their room back: object 1 completes the first get (one GUID).
  w.Make(w.table, 1);
  w.waits.Wake(w.table, G(1));
  REQUIRE(w.answered.size() == 1);
  CHECK(w.waits.guids_by_user().at(1000) == 7);
  GetWait again = w.Get(9, 1, 1000, w.table, {9});
  CHECK(w.waits.Park(again, -1).ok());
}

}  // namespace
}  // namespace depot
