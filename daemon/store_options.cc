#include "daemon/store_options.h"

#include <unistd.h>

#include "daemon/shm_source.h"

namespace depot {

StoreOptions StoreOptionsFrom(const DaemonOptions& o, const std::string& socket_path,
                              DeviceBackend* backend, std::string devices_unavailable) {
  StoreOptions so;
  so.namespaces.host = {.capacity = o.capacity,
                        .segment_size = o.segment_size,
                        .prefault = o.prefault,
                        .hugepages = o.hugepages,
                        .keep_warm = o.keep_warm,
                        .name_prefix = ShmSource::NamePrefix(socket_path)};
  so.namespaces.per_user = o.per_user_namespaces;
  so.namespaces.eviction = o.eviction;
  so.namespaces.index_entries = o.index_entries;
  so.namespaces.index_max_entries = o.index_max_entries;
  so.namespaces.max_slots_per_user = o.max_slots_per_user;
  so.namespaces.spill = {.dir = o.spill_dir,
                         .capacity = o.spill_capacity,
                         .max_parked = o.max_pending,
                         .max_parked_bytes = o.max_pending_bytes,
                         .max_parked_bytes_per_user = o.max_parked_bytes_per_user};
  so.namespaces.keep_memory = o.keep_memory;
  so.namespaces.restart_grace = std::chrono::milliseconds(o.restart_grace_ms);
  so.devices = {.backend = backend,
                .unavailable = std::move(devices_unavailable),
                .all = o.all_devices,
                .uuids = o.device_uuids,
                .capacity = o.device_capacity,
                .chunk_size = o.device_chunk_size};
  so.access = {o.allow_users, o.allow_groups, ::geteuid(), ::getegid()};
  so.user_quota = {o.user_quota_bytes, o.user_quota_objects};
  so.client_quota = {o.client_quota_bytes, o.client_quota_objects};
  so.socket_path = socket_path;
  so.version = DEPOT_VERSION;
  so.max_message_size = o.max_message_size;
  so.max_frames = o.max_frames;
  so.max_metadata = o.max_metadata;
  so.hugepages = o.hugepages;
  so.max_pending = o.max_pending;
  so.max_pending_bytes = o.max_pending_bytes;
  so.get_waits = {.gets_per_session = o.max_pending,
                  .guids_per_session = o.max_pending_guids,
                  .guids_per_user = o.max_pending_guids_per_user};
  so.max_sessions_per_user = o.max_sessions_per_user;
  so.max_handshakes_per_user = o.max_handshakes_per_user;
  so.max_references_per_user = o.max_references_per_user;
  so.handshake_timeout = std::chrono::milliseconds(o.handshake_timeout_ms);
  return so;
}

}  // namespace depot
