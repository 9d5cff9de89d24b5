#include "daemon/access_policy.h"

#include <fmt/format.h>

#include <algorithm>

namespace depot {

std::string AccessPolicy::Refusal(const PeerCredentials& c) const {
  const AccessOptions& a = options_;
  auto has = [](const auto& list, auto id) {
    return std::find(list.begin(), list.end(), id) != list.end();
  };
  auto member = [&](gid_t g) { return c.gid == g || has(c.groups, g); };
  if (c.uid == 0 || c.uid == a.daemon_uid || has(a.users, c.uid)) return "";
  if (a.users.empty() && a.groups.empty()) {
    if (member(a.socket_gid)) return "";
    return fmt::format(
        "uid {} may not use this depotd: it admits root, its own user (uid {}) and the members "
        "of the socket's group (gid {}); see allow_users and allow_groups in its config",
        c.uid, a.daemon_uid, a.socket_gid);
  }
  for (gid_t g : a.groups) {
    if (member(g)) return "";
  }
  return fmt::format(
      "uid {} may not use this depotd: it is not in allow_users and none of its groups is in "
      "allow_groups",
      c.uid);
}

}  // namespace depot
