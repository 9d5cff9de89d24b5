// Tests for ParkedCreates against its contract (daemon/parked_creates.h): the creates waiting for
// the disk are bounded per connection in count (max_pending) and bytes (max_pending_bytes) and
// per user in bytes (max_parked_bytes_per_user); a refusal names its limit and counts nothing;
// a release gives the room back.
#include "daemon/parked_creates.h"

#include <catch2/catch.hpp>

namespace depot {
namespace {

using Catch::Matchers::Contains;

TEST_CASE("ParkedCreates counts what waits and bounds it per connection and per user",
          "[parked_creates]") {
  ParkedCreates parked({.per_session = 2, .bytes_per_session = 1000, .bytes_per_user = 1500});
  REQUIRE(parked.Admit(1, 7, 400).ok());
  REQUIRE(parked.Admit(1, 7, 400).ok());
  CHECK(parked.bytes() == 800);
  CHECK(parked.bytes_by_user().at(7) == 800);
  // A third create of the connection: max_pending.
  Status st = parked.Admit(1, 7, 1);
  CHECK(st.IsQuotaExceeded());
  CHECK_THAT(st.message(), Contains("(max_pending)"));
  CHECK(parked.bytes() == 800);
  // Another connection of the user: its own count, the user's bytes.
  REQUIRE(parked.Admit(2, 7, 600).ok());
  st = parked.Admit(2, 7, 200);
  CHECK_THAT(st.message(), Contains("(max_parked_bytes_per_user)"));
  CHECK(parked.bytes_by_user().at(7) == 1400);
  // Past the connection's bytes: max_pending_bytes.
  st = parked.Admit(3, 8, 1001);
  CHECK(st.IsQuotaExceeded());
  CHECK_THAT(st.message(), Contains("(max_pending_bytes)"));
  CHECK_FALSE(parked.bytes_by_user().contains(8));
  // Released creates give their room back, to the connection and to the user.
  parked.Release(1, 7, 400);
  REQUIRE(parked.Admit(1, 7, 100).ok());
  parked.Release(1, 7, 400);
  parked.Release(1, 7, 100);
  parked.Release(2, 7, 600);
  CHECK(parked.bytes() == 0);
  CHECK_FALSE(parked.bytes_by_user().contains(7));
  REQUIRE(parked.Admit(2, 7, 1000).ok());
}

}  // namespace
}  // namespace depot
