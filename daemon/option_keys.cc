#include "daemon/option_keys.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <grp.h>
#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <cassert>
#include <charconv>
#include <cstdlib>
#include <fstream>

#include "daemon/metrics_server.h"
#include "daemon/option_values.h"
#include "depot/units.h"
#include "proto/wire.h"

namespace depot {

const std::vector<OptionKey>& OptionKeys() {
  using namespace option_values;  // NOLINT: the setters the key table is written with
  using O = DaemonOptions;
  static const std::vector<OptionKey> keys = {
      {{"socket",
        "$XDG_RUNTIME_DIR/depot/depot.sock, else /run/user/$UID/depot/depot.sock, else "
        "/tmp/depot-$UID/depot.sock",
        "Unix socket the daemon serves (in a directory of its own that nobody else may write)"},
       [](O& o, const std::string& v, uint64_t) -> std::string {
         if (v.empty()) return "needs a path";
         o.socket_path = v;
         return "";
       },
       [](const O& o) { return o.socket_path; }},
      {{"socket_mode", "0660", "permissions of the socket file (octal)"},
       [](O& o, const std::string& v, uint64_t) { return SetUint(o.socket_mode, v, 0, 0777, 8); },
       [](const O& o) { return fmt::format("{:04o}", o.socket_mode); }},
      {{"socket_group", "", "group that owns the socket file (empty: the daemon's own group)"},
       [](O& o, const std::string& v, uint64_t) -> std::string {
         o.socket_group = v;
         return "";
       },
       [](const O& o) { return o.socket_group; }},
      {{"capacity", "25%",
        "host pool size: bytes, 512MiB, 8GiB, or a % of RAM (default at most the memory available, "
        "within the cgroup's limit)"},
       [](O& o, const std::string& v, uint64_t phys) {
         return SetSize(o.capacity, v, phys, 1 << 20, uint64_t{1} << 50);
       },
       [](const O& o) { return std::to_string(o.capacity); }},
      {{"segment_size", "64MiB",
        "shared-memory segments are made this size; larger objects go to segments of large "
        "objects, made to their size"},
       [](O& o, const std::string& v, uint64_t phys) {
         return SetSize(o.segment_size, v, phys, 1 << 20, uint64_t{1} << 40);
       },
       [](const O& o) { return std::to_string(o.segment_size); }},
      {{"hugepages", "off",
        "make segments of transparent huge pages (needs shmem_enabled = advise or more); the "
        "object index asks for them whatever this says"},
       [](O& o, const std::string& v, uint64_t) { return SetBool(o.hugepages, v); },
       [](const O& o) { return OnOff(o.hugepages); }},
      {{"prefault", "off", "reserve the whole capacity at start-up and keep it"},
       [](O& o, const std::string& v, uint64_t) { return SetBool(o.prefault, v); },
       [](const O& o) { return OnOff(o.prefault); }},
      {{"keep_warm", "2GiB",
        "empty segments kept, mapped and faulted in, for the next objects, up to this many bytes "
        "(at most the capacity; 0: give each back)"},
       [](O& o, const std::string& v, uint64_t phys) { return SetLimit(o.keep_warm, v, phys); },
       [](const O& o) { return std::to_string(o.keep_warm); }},
      {{"eviction", "on",
        "drop evictable, unreferenced objects (least recently used first) when full"},
       [](O& o, const std::string& v, uint64_t) { return SetBool(o.eviction, v); },
       [](const O& o) { return OnOff(o.eviction); }},
      {{"index_entries", "65536",
        "entries of each namespace's shared index, through which gets of sealed objects need no "
        "round trip (80 bytes each, and 32 more for records of several frames or with metadata; "
        "0: off); the index starts at this size"},
       [](O& o, const std::string& v, uint64_t) { return SetUint(o.index_entries, v, 0, 1 << 22); },
       [](const O& o) { return std::to_string(o.index_entries); }},
      {{"index_max_entries", "16777216",
        "entries up to which a shared index grows, twice as big each time it is crowded (at "
        "most index_entries: it stays as it is)"},
       [](O& o, const std::string& v, uint64_t) {
         return SetUint(o.index_max_entries, v, 0, 1 << 26);
       },
       [](const O& o) { return std::to_string(o.index_max_entries); }},
      {{"log_level", "info",
        "trace, debug, info, warn, error, critical or off (SIGHUP re-reads it)"},
       [](O& o, const std::string& v, uint64_t) -> std::string {
         static const char* kLevels[] = {"trace", "debug",    "info", "warn",
                                         "error", "critical", "off"};
         if (std::find(std::begin(kLevels), std::end(kLevels), v) == std::end(kLevels)) {
           return "expected trace, debug, info, warn, error, critical or off";
         }
         o.log_level = v;
         return "";
       },
       [](const O& o) { return o.log_level; }},
      {{"max_clients", "4096", "connections served at once; more are refused with Unavailable"},
       // At most 65536, so that the clients reply (a few hundred bytes each) fits in a message.
       [](O& o, const std::string& v, uint64_t) { return SetUint(o.max_clients, v, 1, 1 << 16); },
       [](const O& o) { return std::to_string(o.max_clients); }},
      {{"max_message_size", "64MiB",
        "largest request accepted (a larger one closes its connection) and largest reply built"},
       [](O& o, const std::string& v, uint64_t phys) {
         return SetSize(o.max_message_size, v, phys, 1 << 20, proto::kMaxMessageSize);
       },
       [](const O& o) { return std::to_string(o.max_message_size); }},
      {{"max_frames", "64", "frames per object"},
       [](O& o, const std::string& v, uint64_t) {
         return SetUint(o.max_frames, v, 1, proto::kMaxFrames);
       },
       [](const O& o) { return std::to_string(o.max_frames); }},
      {{"max_metadata", "16KiB", "metadata bytes per object"},
       [](O& o, const std::string& v, uint64_t phys) {
         return SetSize(o.max_metadata, v, phys, 1, proto::kMaxMetadataSize);
       },
       [](const O& o) { return std::to_string(o.max_metadata); }},
      {{"device_capacity", "90%", "device pool size on each GPU: bytes or a % of its memory"},
       [](O& o, const std::string& v, uint64_t) -> std::string {
         // Percentages are of each GPU's memory, known only once the GPU is opened.
         if (!ParseSize(v, v.ends_with('%') ? 100 : 0))
           return "expected a size such as 8GiB or 90%";
         o.device_capacity = v;
         return "";
       },
       [](const O& o) { return o.device_capacity; }},
      {{"device_chunk_size", "1GiB",
        "device memory is reserved from each GPU in chunks of this size"},
       [](O& o, const std::string& v, uint64_t phys) {
         return SetSize(o.device_chunk_size, v, phys, 2 << 20, uint64_t{1} << 40);
       },
       [](const O& o) { return std::to_string(o.device_chunk_size); }},
      {{"devices", "all", "GPUs to pool: all, none, or GPU UUIDs separated by commas"},
       [](O& o, const std::string& v, uint64_t) -> std::string {
         o.device_uuids.clear();
         o.all_devices = v == "all";
         if (o.all_devices || v == "none") return "";
         for (size_t start = 0; start <= v.size();) {
           size_t comma = std::min(v.find(',', start), v.size());
           if (std::string uuid = Trim(std::string_view(v).substr(start, comma - start));
               !uuid.empty()) {
             o.device_uuids.push_back(std::move(uuid));
           }
           start = comma + 1;
         }
         if (o.device_uuids.empty()) return "expected all, none, or GPU UUIDs";
         for (const std::string& uuid : o.device_uuids) {
           if (std::string why = CheckDeviceUuid(uuid); !why.empty()) return why;
         }
         return "";
       },
       [](const O& o) -> std::string {
         if (o.all_devices) return "all";
         return o.device_uuids.empty() ? "none" : fmt::format("{}", fmt::join(o.device_uuids, ","));
       }},
      {{"allow_users", "",
        "users who may connect besides root and the daemon's own user: names or uids, separated by "
        "commas"},
       [](O& o, const std::string& v, uint64_t) {
         return SetIds(o.allow_users, v, "user", [](const char* name) -> std::optional<uid_t> {
           const passwd* pw = ::getpwnam(name);
           return pw ? std::optional<uid_t>(pw->pw_uid) : std::nullopt;
         });
       },
       [](const O& o) { return JoinIds(o.allow_users); }},
      {{"allow_groups", "",
        "groups whose members may connect (names or gids); with both lists empty, the socket's "
        "group"},
       [](O& o, const std::string& v, uint64_t) {
         return SetIds(o.allow_groups, v, "group", [](const char* name) -> std::optional<gid_t> {
           const group* gr = ::getgrnam(name);
           return gr ? std::optional<gid_t>(gr->gr_gid) : std::nullopt;
         });
       },
       [](const O& o) { return JoinIds(o.allow_groups); }},
      {{"namespaces", "shared",
        "shared: one namespace for all users; per_user: each uid has its own objects and segments"},
       [](O& o, const std::string& v, uint64_t) -> std::string {
         if (v != "shared" && v != "per_user") return "expected shared or per_user";
         o.per_user_namespaces = v == "per_user";
         return "";
       },
       [](const O& o) -> std::string { return o.per_user_namespaces ? "per_user" : "shared"; }},
      {{"user_quota_bytes", "0", "bytes of objects one user may have (0: no limit)"},
       [](O& o, const std::string& v, uint64_t phys) {
         return SetLimit(o.user_quota_bytes, v, phys);
       },
       [](const O& o) { return std::to_string(o.user_quota_bytes); }},
      {{"user_quota_objects", "0", "objects one user may have (0: no limit)"},
       [](O& o, const std::string& v, uint64_t) { return SetCount(o.user_quota_objects, v); },
       [](const O& o) { return std::to_string(o.user_quota_objects); }},
      {{"client_quota_bytes", "0",
        "bytes of objects one connection may have created (0: no limit)"},
       [](O& o, const std::string& v, uint64_t phys) {
         return SetLimit(o.client_quota_bytes, v, phys);
       },
       [](const O& o) { return std::to_string(o.client_quota_bytes); }},
      {{"client_quota_objects", "0", "objects one connection may have created (0: no limit)"},
       [](O& o, const std::string& v, uint64_t) { return SetCount(o.client_quota_objects, v); },
       [](const O& o) { return std::to_string(o.client_quota_objects); }},
      {{"max_pending", "1024",
        "gets one connection may have waiting, and replies queued before its requests are left "
        "unread"},
       [](O& o, const std::string& v, uint64_t) { return SetUint(o.max_pending, v, 1, 1 << 20); },
       [](const O& o) { return std::to_string(o.max_pending); }},
      {{"max_pending_bytes", "64MiB",
        "bytes of replies queued for one connection before its requests are left unread, and of "
        "its creates waiting for disk"},
       [](O& o, const std::string& v, uint64_t phys) {
         return SetSize(o.max_pending_bytes, v, phys, 1 << 20, uint64_t{1} << 40);
       },
       [](const O& o) { return std::to_string(o.max_pending_bytes); }},
      {{"max_pending_guids", "16384",
        "GUIDs the gets one connection has waiting may name (each costs the daemon about 128 "
        "bytes)"},
       // At least one get's worth, so that a get naming the most GUIDs may always wait.
       [](O& o, const std::string& v, uint64_t) {
         return SetUint(o.max_pending_guids, v, proto::kMaxGuidsPerRequest, 1 << 24);
       },
       [](const O& o) { return std::to_string(o.max_pending_guids); }},
      {{"max_pending_guids_per_user", "65536",
        "GUIDs the gets all connections of one user have waiting may name"},
       [](O& o, const std::string& v, uint64_t) {
         return SetUint(o.max_pending_guids_per_user, v, proto::kMaxGuidsPerRequest, 1 << 26);
       },
       [](const O& o) { return std::to_string(o.max_pending_guids_per_user); }},
      {{"max_parked_bytes_per_user", "256MiB",
        "bytes of creates all connections of one user may have waiting for objects to go to disk"},
       [](O& o, const std::string& v, uint64_t phys) {
         return SetSize(o.max_parked_bytes_per_user, v, phys, 1 << 20, uint64_t{1} << 40);
       },
       [](const O& o) { return std::to_string(o.max_parked_bytes_per_user); }},
      {{"max_sessions_per_user", "1024",
        "connections one user may have open (the daemon's own user has no limit)"},
       [](O& o, const std::string& v, uint64_t) {
         return SetUint(o.max_sessions_per_user, v, 1, 1 << 16);
       },
       [](const O& o) { return std::to_string(o.max_sessions_per_user); }},
      {{"max_handshakes_per_user", "64",
        "connections one user may have open that have not said hello yet (each is closed at "
        "handshake_timeout_ms); more are refused with QuotaExceeded"},
       [](O& o, const std::string& v, uint64_t) {
         return SetUint(o.max_handshakes_per_user, v, 1, 1 << 16);
       },
       [](const O& o) { return std::to_string(o.max_handshakes_per_user); }},
      {{"max_references_per_user", "2097152",
        "objects one user's connections may hold through depotd at once (gets the daemon answers; "
        "about 48 bytes of its memory each); more are refused with QuotaExceeded"},
       [](O& o, const std::string& v, uint64_t) {
         return SetUint(o.max_references_per_user, v, 1024, uint32_t{1} << 31);
       },
       [](const O& o) { return std::to_string(o.max_references_per_user); }},
      {{"max_slots_per_user", "1048576",
        "reference slots (objects held from the shared index without a round trip) one user may "
        "be granted past the first 1024 of each connection; 8 bytes each"},
       [](O& o, const std::string& v, uint64_t) {
         return SetUint(o.max_slots_per_user, v, 0, uint32_t{1} << 31);
       },
       [](const O& o) { return std::to_string(o.max_slots_per_user); }},
      {{"handshake_timeout_ms", "10000",
        "a connection that does not say hello this soon is closed"},
       [](O& o, const std::string& v, uint64_t) {
         return SetUint(o.handshake_timeout_ms, v, 1, 3600 * 1000);
       },
       [](const O& o) { return std::to_string(o.handshake_timeout_ms); }},
      {{"metrics_listen", "",
        "address:port of the HTTP metrics endpoint (GET /metrics), such as 127.0.0.1:9464; empty: "
        "off"},
       [](O& o, const std::string& v, uint64_t) {
         o.metrics_listen = v;
         return v.empty() ? "" : MetricsServer::CheckAddress(v);
       },
       [](const O& o) { return o.metrics_listen; }},
      {{"keep_memory", "on",
        "under systemd, keep the host pool's memory and its objects across a restart or a crash "
        "of depotd, in the service's file descriptor store (FileDescriptorStoreMax=)"},
       [](O& o, const std::string& v, uint64_t) { return SetBool(o.keep_memory, v); },
       [](const O& o) { return OnOff(o.keep_memory); }},
      {{"restart_grace_ms", "30000",
        "after a restart, segments of kept memory take no new objects for this long (clients "
        "of the last depotd may still use what was free there), and owner-scoped objects "
        "served again wait this long for their processes to reconnect"},
       [](O& o, const std::string& v, uint64_t) {
         return SetUint(o.restart_grace_ms, v, 0, 3600 * 1000);
       },
       [](const O& o) { return std::to_string(o.restart_grace_ms); }},
      {{"spill_dir", "",
        "directory (the daemon's own, 0700) where objects go when the host pool is full, and "
        "across restarts (empty: no spilling)"},
       [](O& o, const std::string& v, uint64_t) -> std::string {
         if (!v.empty() && !v.starts_with('/')) return "needs an absolute path";
         o.spill_dir = v;
         return "";
       },
       [](const O& o) { return o.spill_dir; }},
      {{"spill_capacity", "90%",
        "bytes of spill files at most: bytes, or a % of the spill directory's file system"},
       [](O& o, const std::string& v, uint64_t) -> std::string {
         // Percentages are of the file system, known once the directory is opened.
         if (!ParseSize(v, v.ends_with('%') ? 100 : 0) || v == "0") {
           return "expected a size such as 100GiB or 90%";
         }
         o.spill_capacity = v;
         return "";
       },
       [](const O& o) { return o.spill_capacity; }},
  };
  return keys;
}

}  // namespace depot
