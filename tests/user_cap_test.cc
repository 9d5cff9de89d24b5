// Tests for depot::UserCap (daemon/user_cap.h): a count bounded per user.
#include "daemon/user_cap.h"

#include <catch2/catch.hpp>

namespace depot {
namespace {

TEST_CASE("UserCap bounds each user's count apart, and names its key", "[user_cap]") {
  UserCap cap(2, "connections that have not said hello", "max_handshakes_per_user");
  REQUIRE(cap.Take(1000).ok());
  REQUIRE(cap.Take(1000).ok());
  Status refused = cap.Take(1000);
  CHECK(refused.IsQuotaExceeded());
  CHECK(refused.message() ==
        "user 1000 already has 2 connections that have not said hello, its limit "
        "(max_handshakes_per_user)");
  CHECK(cap.refused() == 1);
  // Another user is not held back by the first.
  REQUIRE(cap.Take(1001).ok());
  CHECK(cap.top_user() == 2);
  // One given back makes room for one more; what was refused was never counted.
  cap.Give(1000);
  REQUIRE(cap.Take(1000).ok());
  CHECK_FALSE(cap.Take(1000).ok());
  CHECK(cap.refused() == 2);
  cap.Give(1000, 2);
  cap.Give(1001);
  CHECK(cap.top_user() == 0);
  // Giving back more than a user holds, or for a user with none, leaves nothing counted.
  REQUIRE(cap.Take(1002).ok());
  cap.Give(1002, 5);
  cap.Give(1003);
  CHECK(cap.top_user() == 0);
  REQUIRE(cap.Take(1002).ok());
  CHECK(cap.top_user() == 1);
}

}  // namespace
}  // namespace depot
