// The daemon's metrics in the Prometheus text format: the one renderer behind both `depotctl
// metrics` (the metrics request) and the HTTP endpoint (metrics_listen). Every family is written
// here, from a snapshot the Store takes on its loop; docs/metrics.md lists them, and a test
// checks that list against this output.
//
// To add a pool (the spill directory, say): one more PoolReport in NamespaceSet::PoolReports,
// with its own `kind`; a new object state: one more row in ObjectStates (metrics_report.cc);
// a new counter: a member of StoreCounters and a Family here.
#ifndef DEPOT_DAEMON_METRICS_REPORT_H_
#define DEPOT_DAEMON_METRICS_REPORT_H_

#include <sys/types.h>

#include <cstdint>
#include <span>
#include <string>

#include "daemon/object_table.h"
#include "daemon/segmented_pool.h"
#include "daemon/store_counters.h"
#include "depot/store_status.h"

namespace depot {

// What one user's connections hold now, against the per-user limits.
struct UserLoad {
  uid_t uid = 0;
  uint32_t sessions = 0;             // greeted connections (max_sessions_per_user)
  uint64_t pending_guids = 0;        // GUIDs its gets waiting name (max_pending_guids_per_user)
  uint64_t parked_create_bytes = 0;  // creates waiting for disk (max_parked_bytes_per_user)
};

// What the metrics are made of, all of it read on the daemon's loop.
struct MetricsSnapshot {
  const StoreStatus& status;  // daemon, clients, gets waiting, errors, users and quotas
  std::span<const PoolReport> pools;
  const ObjectCounts& objects;
  const StoreCounters& counters;
  std::span<const UserLoad> users;  // every user with a connection, a get or a create waiting
};

// The exposition text (text/plain; version=0.0.4). Also reads the daemon's resident memory from
// /proc/self/statm.
std::string RenderMetrics(const MetricsSnapshot& m);

}  // namespace depot

#endif  // DEPOT_DAEMON_METRICS_REPORT_H_
