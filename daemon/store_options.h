// StoreOptions is what the request handler and its units are built with. It holds no defaults of
// its own: StoreOptionsFrom derives it from the daemon's configuration (whose defaults are the
// key table's), so tests and the fuzzer start from DefaultOptions too.
#ifndef DEPOT_DAEMON_STORE_OPTIONS_H_
#define DEPOT_DAEMON_STORE_OPTIONS_H_

#include <chrono>
#include <cstdint>
#include <string>

#include "daemon/access_policy.h"
#include "daemon/device_set.h"
#include "daemon/get_waits.h"
#include "daemon/namespace_set.h"
#include "daemon/options.h"
#include "daemon/quota_ledger.h"

namespace depot {

struct StoreOptions {
  NamespaceOptions namespaces;
  DeviceOptions devices;
  AccessOptions access;
  Quota user_quota;
  Quota client_quota;
  std::string socket_path;  // reported by status
  std::string version;
  uint32_t max_message_size = 0;  // largest request accepted
  uint32_t max_frames = 0;
  uint32_t max_metadata = 0;
  bool hugepages = false;  // clients ask for huge pages on their mappings
  // Gets a connection may have waiting, and replies queued for it before its requests are no
  // longer read.
  uint32_t max_pending = 0;
  // Bytes of replies queued for a connection before its requests are no longer read.
  uint64_t max_pending_bytes = 0;
  GetWaitLimits get_waits;  // gets and GUIDs parked, per connection and per user
  // Connections one user may have open (the daemon's own user: any number).
  uint32_t max_sessions_per_user = 0;
  // Connections one user may have open that have not said hello yet (Handshakes).
  uint32_t max_handshakes_per_user = 64;
  // Objects one user's connections may hold through the daemon at once (ObjectTable::Join).
  uint64_t max_references_per_user = uint64_t{1} << 21;
  std::chrono::milliseconds handshake_timeout{0};
  // How long a lease must go without a put before memory running short takes it back: a client
  // that puts keeps its lease, and its puts their warm memory.
  std::chrono::milliseconds lease_idle{1000};
};

// The store's options for a daemon configured as `o`, serving `socket_path` (segment names derive
// from it) as the current user. `backend` provides the GPUs, or is null and `devices_unavailable`
// says why.
StoreOptions StoreOptionsFrom(const DaemonOptions& o, const std::string& socket_path,
                              DeviceBackend* backend, std::string devices_unavailable);

}  // namespace depot

#endif  // DEPOT_DAEMON_STORE_OPTIONS_H_
