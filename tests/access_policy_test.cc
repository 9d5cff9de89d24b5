// Tests for AccessPolicy: who may use the daemon, decided at hello from the peer's credentials.
#include "daemon/access_policy.h"

#include <catch2/catch.hpp>

namespace depot {
namespace {

using Catch::Matchers::Contains;

PeerCredentials Peer(uid_t uid, gid_t gid, std::vector<gid_t> groups = {}) {
  return {.pid = 42, .uid = uid, .gid = gid, .groups = std::move(groups)};
}

TEST_CASE("AccessPolicy with no lists admits root, its own user and the socket's group",
          "[access]") {
  AccessPolicy policy({.users = {}, .groups = {}, .daemon_uid = 500, .socket_gid = 600});
  CHECK(policy.Refusal(Peer(0, 0)).empty());
  CHECK(policy.Refusal(Peer(500, 1)).empty());
  CHECK(policy.Refusal(Peer(1000, 600)).empty());
  CHECK(policy.Refusal(Peer(1000, 1, {7, 600})).empty());  // a supplementary group
  std::string why = policy.Refusal(Peer(1000, 1000));
  CHECK_THAT(why, Contains("uid 1000") && Contains("gid 600") && Contains("allow_users"));
  policy.set_socket_gid(1000);
  CHECK(policy.Refusal(Peer(1000, 1000)).empty());
}

TEST_CASE("AccessPolicy with lists admits those listed, and no longer the socket's group",
          "[access]") {
  AccessPolicy policy({.users = {1001}, .groups = {700}, .daemon_uid = 500, .socket_gid = 600});
  CHECK(policy.Refusal(Peer(1001, 1)).empty());
  CHECK(policy.Refusal(Peer(1002, 700)).empty());
  CHECK(policy.Refusal(Peer(1003, 1, {700})).empty());
  CHECK(policy.Refusal(Peer(500, 1)).empty());
  CHECK_THAT(policy.Refusal(Peer(1004, 600)), Contains("not in allow_users"));
}

TEST_CASE("AccessPolicy lets only the creator's user, root and the daemon's user delete",
          "[access]") {
  AccessPolicy policy({.users = {}, .groups = {}, .daemon_uid = 500, .socket_gid = 600});
  CHECK(policy.MayDelete(Peer(1000, 600), 1000));
  CHECK_FALSE(policy.MayDelete(Peer(1001, 600), 1000));
  CHECK(policy.MayDelete(Peer(0, 0), 1000));
  CHECK(policy.MayDelete(Peer(500, 500), 1000));
}

}  // namespace
}  // namespace depot
