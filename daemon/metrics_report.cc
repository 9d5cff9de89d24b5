#include "daemon/metrics_report.h"

#include <fmt/format.h>
#include <unistd.h>

#include <fstream>

#include "daemon/prometheus_text.h"
#include "proto/wire.h"

namespace depot {
namespace {

// The daemon's resident memory in bytes, or 0 when /proc does not say.
uint64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  uint64_t pages_total = 0, pages_resident = 0;
  if (!(statm >> pages_total >> pages_resident)) return 0;
  return pages_resident * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
}

void Pools(PrometheusText& t, std::span<const PoolReport> pools) {
  struct Gauge {
    const char* name;
    const char* help;
    uint64_t (*value)(const PoolReport&);
  };
  static const Gauge kGauges[] = {
      {"depot_pool_capacity_bytes", "Bytes the pool may hold.",
       [](const PoolReport& p) { return p.stats.capacity; }},
      {"depot_pool_reserved_bytes", "Bytes the pool holds in segments (host) or chunks (GPU).",
       [](const PoolReport& p) { return p.stats.reserved; }},
      {"depot_pool_used_bytes", "Bytes allocated to objects' frames.",
       [](const PoolReport& p) { return p.stats.used; }},
      {"depot_pool_peak_used_bytes", "The most bytes allocated at once since the daemon started.",
       [](const PoolReport& p) { return p.peak_used; }},
      {"depot_pool_free_in_segments_bytes", "Free bytes inside the segments that exist now.",
       [](const PoolReport& p) { return p.stats.free_in_segments; }},
      {"depot_pool_largest_free_block_bytes",
       "The largest free block inside the segments that exist now.",
       [](const PoolReport& p) { return p.stats.largest_block; }},
      {"depot_pool_largest_free_bytes",
       "The largest object that fits without eviction, counting segments not made yet.",
       [](const PoolReport& p) { return p.stats.largest_free; }},
      {"depot_pool_segments", "Segments (host) or chunks (GPU) that exist now.",
       [](const PoolReport& p) { return uint64_t{p.stats.segments}; }},
  };
  for (const Gauge& g : kGauges) {
    t.Family(g.name, "gauge", g.help);
    for (const PoolReport& p : pools) {
      t.Sample(g.name, {{"pool", p.pool}, {"kind", p.kind}}, g.value(p));
    }
  }
  t.Family("depot_pool_fragmentation_ratio", "gauge",
           "1 - largest free block / free bytes in segments: 0 when the free space is one block.");
  for (const PoolReport& p : pools) {
    double free = static_cast<double>(p.stats.free_in_segments);
    double ratio = free == 0 ? 0.0 : 1.0 - static_cast<double>(p.stats.largest_block) / free;
    t.Sample("depot_pool_fragmentation_ratio", {{"pool", p.pool}, {"kind", p.kind}}, ratio);
  }
}

void Objects(PrometheusText& t, const MetricsSnapshot& m) {
  const ObjectCounts& c = m.objects;
  // One row per state an object can be in.
  struct State {
    const char* name;
    uint64_t objects, bytes;
  };
  // Sealed objects whose bytes are on disk only are counted as spilled, not as sealed.
  const State kStates[] = {{"creating", c.creating, c.creating_bytes},
                           {"sealed", c.sealed - c.spilled, c.sealed_bytes - c.spilled_bytes},
                           {"spilled", c.spilled, c.spilled_bytes},
                           {"deleted", c.deleted, c.deleted_bytes}};
  t.Family("depot_objects", "gauge",
           "Objects by state (spilled: sealed, on disk only; deleted: gone from the index, still "
           "referenced).");
  for (const State& s : kStates) t.Sample("depot_objects", {{"state", s.name}}, s.objects);
  t.Family("depot_object_bytes", "gauge", "Bytes of objects by state.");
  for (const State& s : kStates) t.Sample("depot_object_bytes", {{"state", s.name}}, s.bytes);
  t.Family("depot_evictable_objects", "gauge",
           "Sealed objects that eviction may drop: evictable and referenced by nobody (reference "
           "slots included).");
  t.Sample("depot_evictable_objects", {}, c.evictable);
  t.Family("depot_evictable_bytes", "gauge", "Bytes of those evictable objects.");
  t.Sample("depot_evictable_bytes", {}, c.evictable_bytes);
  t.Family("depot_pinned_objects", "gauge",
           "Sealed objects eviction may not drop: not evictable, or referenced (reference slots "
           "included).");
  t.Sample("depot_pinned_objects", {}, c.sealed - c.spilled - c.evictable);
  t.Family("depot_pinned_bytes", "gauge", "Bytes of those pinned objects.");
  t.Sample("depot_pinned_bytes", {}, c.sealed_bytes - c.spilled_bytes - c.evictable_bytes);
  t.Family("depot_object_size_bytes", "histogram", "Sizes of the objects created since start.");
  t.Histogram("depot_object_size_bytes", {}, m.counters.object_sizes(), 1.0);
  t.Family("depot_evictions_total", "counter", "Objects evicted to make room.");
  t.Sample("depot_evictions_total", {}, c.evictions);
  t.Family("depot_evicted_bytes_total", "counter", "Bytes those evictions gave back.");
  t.Sample("depot_evicted_bytes_total", {}, c.evicted_bytes);
}

// Spilling to disk (spill_dir): all zero when it is off.
void Spills(PrometheusText& t, const MetricsSnapshot& m) {
  const StoreStatus& s = m.status;
  struct Counter {
    const char* name;
    const char* help;
    double value;
  };
  const Counter kCounters[] = {
      {"depot_spills_total", "Objects written to disk to make room, or at a clean stop.",
       static_cast<double>(s.spills)},
      {"depot_spilled_bytes_total", "Bytes of the objects written to disk.",
       static_cast<double>(s.spill_bytes)},
      {"depot_spill_seconds_total", "Seconds the I/O threads spent writing them.",
       static_cast<double>(s.spill_ms) / 1e3},
      {"depot_restores_total", "Objects read back from disk at a get.",
       static_cast<double>(s.restores)},
      {"depot_restored_bytes_total", "Bytes of the objects read back.",
       static_cast<double>(s.restore_bytes)},
      {"depot_restore_seconds_total", "Seconds the I/O threads spent reading them.",
       static_cast<double>(s.restore_ms) / 1e3},
      {"depot_spill_failures_total", "Spills that failed: a full disk, an I/O error.",
       static_cast<double>(s.spill_failures)},
  };
  for (const Counter& c : kCounters) {
    t.Family(c.name, "counter", c.help);
    t.Sample(c.name, {}, c.value);
  }
  t.Family(
      "depot_objects_lost", "gauge",
      "Objects whose spill file could not be read back (DataLoss at every get until deleted).");
  t.Sample("depot_objects_lost", {}, m.objects.lost);
}

void Requests(PrometheusText& t, const MetricsSnapshot& m) {
  t.Family("depot_request_duration_seconds", "histogram",
           "Time the daemon spent answering requests, by type (a get's wait for a seal is not "
           "counted); _count is the number of requests.");
  for (const proto::MessageRow& row : proto::kMessages) {
    if (row.sender != proto::Sender::kClient) continue;
    t.Histogram("depot_request_duration_seconds", {{"type", std::string(row.name)}},
                m.counters.latency(static_cast<uint16_t>(row.type)), 1e9);
  }
  t.Family("depot_errors_total", "counter",
           "Error replies by code (StoreFull: a create that did not fit even after eviction).");
  for (size_t code = 1; code < m.status.errors.size(); ++code) {
    t.Sample("depot_errors_total", {{"code", Status::CodeName(static_cast<Status::Code>(code))}},
             m.status.errors[code]);
  }
}

void Daemon(PrometheusText& t, const MetricsSnapshot& m) {
  const StoreStatus& s = m.status;
  t.Family("depot_clients", "gauge", "Connections open now.");
  t.Sample("depot_clients", {}, uint64_t{s.clients});
  t.Family("depot_connections_total", "counter", "Connections accepted since start.");
  t.Sample("depot_connections_total", {}, s.connections);
  t.Family("depot_gets_waiting", "gauge", "Gets parked until their objects are sealed.");
  t.Sample("depot_gets_waiting", {}, uint64_t{s.gets_waiting});
  t.Family("depot_leased_bytes", "gauge",
           "Bytes leased to clients for puts, with blocks handed back, not used yet.");
  t.Sample("depot_leased_bytes", {}, s.leased);
  t.Family("depot_indexed_objects", "gauge", "Objects in the shared indexes.");
  t.Sample("depot_indexed_objects", {}, s.indexed);
  t.Family("depot_index_entries", "gauge", "Entries of the shared indexes.");
  t.Sample("depot_index_entries", {}, s.index_entries);
  t.Family("depot_index_over_share_total", "counter",
           "Objects left out of a shared index because their user had its equal part of it.");
  t.Sample("depot_index_over_share_total", {}, s.index_over_share);
  t.Family("depot_index_taken_back_total", "counter",
           "Index entries taken back from a user over its part, for another user's object.");
  t.Sample("depot_index_taken_back_total", {}, s.index_taken_back);
  t.Family("depot_index_left_out_total", "counter",
           "Objects left out of a shared index because their set or its records were full.");
  t.Sample("depot_index_left_out_total", {}, s.index_left_out);
  t.Family("depot_kept_descriptors", "gauge",
           "Descriptors of host memory handed to systemd's descriptor store (keep_memory).");
  t.Sample("depot_kept_descriptors", {}, s.kept_descriptors);
  t.Family("depot_adopted_objects", "gauge",
           "Objects served again at start from the memory the last depotd kept.");
  t.Sample("depot_adopted_objects", {}, s.adopted_objects);
  t.Family("depot_adopted_bytes", "gauge", "Bytes of those objects.");
  t.Sample("depot_adopted_bytes", {}, s.adopted_bytes);
  t.Family("depot_adoption_dropped", "gauge",
           "Kept entries dropped at start: torn, or not matching the kept segments.");
  t.Sample("depot_adoption_dropped", {}, s.adoption_dropped);
  t.Family("depot_adoption_seconds", "gauge", "How long the adoption of kept memory took.");
  t.Sample("depot_adoption_seconds", {}, static_cast<double>(s.adoption_us) / 1e6);
  t.Family("depot_grace_sessions_waiting", "gauge",
           "Sessions of the last depotd the grace period still waits for (exit or resume).");
  t.Sample("depot_grace_sessions_waiting", {}, s.grace_waiting);
  t.Family("depot_grace_sessions_resumed", "gauge",
           "Sessions of the last depotd that their processes resumed after the start.");
  t.Sample("depot_grace_sessions_resumed", {}, s.grace_resumed);
  t.Family("depot_index_growths_total", "counter",
           "Times a shared index moved to one twice as big.");
  t.Sample("depot_index_growths_total", {}, s.index_growths);
  t.Family("depot_index_moving", "gauge",
           "Shared indexes moving to one twice as big now (made or filled).");
  t.Sample("depot_index_moving", {}, uint64_t{s.index_moving});
  t.Family("depot_slots_granted", "gauge",
           "Reference slots granted past the first 1024 of each connection.");
  t.Sample("depot_slots_granted", {}, s.slots_granted);
  t.Family("depot_handshakes_refused_total", "counter",
           "Connections refused: their user had max_handshakes_per_user yet to say hello.");
  t.Sample("depot_handshakes_refused_total", {}, s.handshakes_refused);
  t.Family("depot_references_refused_total", "counter",
           "Gets and holds refused: their user held max_references_per_user objects already.");
  t.Sample("depot_references_refused_total", {}, s.references_refused);
  t.Family("depot_slot_grants_refused_total", "counter",
           "Asks for more reference slots refused: the user's part was spent.");
  t.Sample("depot_slot_grants_refused_total", {}, s.slot_grants_refused);
  t.Family("depot_slot_reads_total", "counter",
           "Reads of every connection's reference slots for objects leaving memory.");
  t.Sample("depot_slot_reads_total", {}, s.slot_reads);
  t.Family("depot_leases_revoked_total", "counter",
           "Idle leases taken back because memory ran short.");
  t.Sample("depot_leases_revoked_total", {}, s.leases_revoked);
  t.Family("depot_namespaces", "gauge", "Namespaces that exist now.");
  t.Sample("depot_namespaces", {}, uint64_t{s.namespaces});
  if (s.user_quota_bytes != 0 || s.user_quota_objects != 0) {
    t.Family("depot_user_quota_used_bytes", "gauge",
             "Bytes each user has created and not freed (only when user quotas are set).");
    for (const auto& u : s.users) {
      t.Sample("depot_user_quota_used_bytes", {{"uid", fmt::format("{}", u.uid)}}, u.bytes);
    }
    t.Family("depot_user_quota_used_objects", "gauge",
             "Objects each user has created and not freed (only when user quotas are set).");
    for (const auto& u : s.users) {
      t.Sample("depot_user_quota_used_objects", {{"uid", fmt::format("{}", u.uid)}}, u.objects);
    }
    t.Family("depot_user_quota_limit_bytes", "gauge", "Bytes one user may hold; 0: no limit.");
    t.Sample("depot_user_quota_limit_bytes", {}, s.user_quota_bytes);
    t.Family("depot_user_quota_limit_objects", "gauge", "Objects one user may hold; 0: no limit.");
    t.Sample("depot_user_quota_limit_objects", {}, s.user_quota_objects);
  }
  t.Family("depot_resident_memory_bytes", "gauge", "The daemon's own resident memory.");
  t.Sample("depot_resident_memory_bytes", {}, ResidentBytes());
  t.Family("depot_uptime_seconds", "gauge", "Seconds since the daemon started.");
  t.Sample("depot_uptime_seconds", {}, static_cast<double>(s.uptime_ms) / 1e3);
  t.Family("depot_build_info", "gauge", "Always 1; the daemon's version is its label.");
  t.Sample("depot_build_info", {{"version", s.daemon_version}}, uint64_t{1});
}

// What users hold that the per-user limits bound, by user, and the limits: a user near its
// limit is about to be refused (QuotaExceeded naming the limit).
void Limits(PrometheusText& t, const MetricsSnapshot& m) {
  const StoreStatus& s = m.status;
  t.Family("depot_pending_guids", "gauge", "GUIDs the gets waiting name.");
  t.Sample("depot_pending_guids", {}, s.pending_guids);
  t.Family("depot_parked_create_bytes", "gauge",
           "Bytes of create requests waiting for objects to be written to disk.");
  t.Sample("depot_parked_create_bytes", {}, s.parked_create_bytes);
  struct PerUser {
    const char* name;
    const char* help;
    uint64_t UserLoad::*value;
  };
  const PerUser kPerUser[] = {
      {"depot_user_pending_guids", "GUIDs the gets waiting of each user name.",
       &UserLoad::pending_guids},
      {"depot_user_parked_create_bytes",
       "Bytes of each user's creates waiting for objects to be written to disk.",
       &UserLoad::parked_create_bytes},
  };
  for (const PerUser& p : kPerUser) {
    t.Family(p.name, "gauge", p.help);
    for (const UserLoad& u : m.users) {
      t.Sample(p.name, {{"uid", fmt::format("{}", u.uid)}}, u.*p.value);
    }
  }
  t.Family("depot_user_sessions", "gauge", "Connections each user has open.");
  for (const UserLoad& u : m.users) {
    t.Sample("depot_user_sessions", {{"uid", fmt::format("{}", u.uid)}}, uint64_t{u.sessions});
  }
  t.Family("depot_limit", "gauge",
           "The configured limits on what one connection or one user may hold, by key.");
  t.Sample("depot_limit", {{"key", "max_pending_guids"}}, uint64_t{s.max_pending_guids});
  t.Sample("depot_limit", {{"key", "max_pending_guids_per_user"}},
           uint64_t{s.max_pending_guids_per_user});
  t.Sample("depot_limit", {{"key", "max_parked_bytes_per_user"}}, s.max_parked_bytes_per_user);
  t.Sample("depot_limit", {{"key", "max_sessions_per_user"}}, uint64_t{s.max_sessions_per_user});
  t.Sample("depot_limit", {{"key", "max_handshakes_per_user"}},
           uint64_t{s.max_handshakes_per_user});
  t.Sample("depot_limit", {{"key", "max_references_per_user"}}, s.max_references_per_user);
  t.Sample("depot_limit", {{"key", "max_slots_per_user"}}, s.max_slots_per_user);
}

}  // namespace

std::string RenderMetrics(const MetricsSnapshot& m) {
  PrometheusText t;
  Pools(t, m.pools);
  Objects(t, m);
  Spills(t, m);
  Requests(t, m);
  Daemon(t, m);
  Limits(t, m);
  return t.text();
}

}  // namespace depot
