// AccessPolicy decides who may use the daemon, once per connection at hello, from the peer's
// credentials. Root and the daemon's own user always may; so may the users listed and the
// members of the groups listed. With both lists empty, the members of the socket's group may.
// It also decides who may delete an object: the user who created it, and root and the daemon's
// own user, who administer the store.
//
// Not thread-safe: the daemon's single loop owns it.
#ifndef DEPOT_DAEMON_ACCESS_POLICY_H_
#define DEPOT_DAEMON_ACCESS_POLICY_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "daemon/peer.h"

namespace depot {

struct AccessOptions {
  std::vector<uid_t> users;
  std::vector<gid_t> groups;
  uid_t daemon_uid = 0;
  gid_t socket_gid = 0;
};

class AccessPolicy {
 public:
  explicit AccessPolicy(AccessOptions options) : options_(std::move(options)) {}

  // Why this peer may not connect, naming the config keys to change; "" when it may.
  std::string Refusal(const PeerCredentials& peer) const;

  // True when `peer` may delete an object created by user `creator`.
  bool MayDelete(const PeerCredentials& peer, uid_t creator) const {
    return peer.uid == creator || peer.uid == 0 || peer.uid == options_.daemon_uid;
  }

  // The socket's group is known only once the socket exists (systemd may have made it).
  void set_socket_gid(gid_t gid) { options_.socket_gid = gid; }

 private:
  AccessOptions options_;
};

}  // namespace depot

#endif  // DEPOT_DAEMON_ACCESS_POLICY_H_
