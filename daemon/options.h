// depotd's configuration: every key, its default, and how it is read from a config file
// (`key = value` lines, `#` comments) and from the command line (`--key-name VALUE`, the key with
// dashes). Command-line flags override the file; the file overrides the defaults.
#ifndef DEPOT_DAEMON_OPTIONS_H_
#define DEPOT_DAEMON_OPTIONS_H_

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/socket_path.h"
#include "depot/status.h"

namespace depot {

// Every setting of the daemon. The defaults are written once, in the key table (option_keys.cc),
// and applied by DefaultOptions: the members here start empty.
struct DaemonOptions {
  std::string socket_path;
  uint32_t socket_mode = 0;
  std::string socket_group;  // empty: the daemon's own group
  uint64_t capacity = 0;
  uint64_t segment_size = 0;
  bool hugepages = false;
  bool prefault = false;
  uint64_t keep_warm = 0;  // bytes of empty segments kept for the next objects
  bool eviction = false;
  uint32_t index_entries = 0;       // entries of each namespace's shared index (0: off)
  uint32_t index_max_entries = 0;   // ... up to which it grows
  uint32_t max_slots_per_user = 0;  // reference slots past the first 1024 of each session
  std::string log_level;
  uint32_t max_clients = 0;
  uint32_t max_message_size = 0;
  uint32_t max_frames = 0;
  uint32_t max_metadata = 0;
  std::string device_capacity;  // per GPU: bytes or a % of its memory
  uint64_t device_chunk_size = 0;
  bool all_devices = false;               // pool every GPU found; else only device_uuids
  std::vector<std::string> device_uuids;  // empty too: no device pools (devices = none)
  std::vector<uid_t> allow_users;         // resolved from names or numbers
  std::vector<gid_t> allow_groups;
  bool per_user_namespaces = false;
  uint64_t user_quota_bytes = 0;  // 0: no limit
  uint64_t user_quota_objects = 0;
  uint64_t client_quota_bytes = 0;
  uint64_t client_quota_objects = 0;
  uint32_t max_pending = 0;
  uint64_t max_pending_bytes = 0;
  uint32_t max_pending_guids = 0;
  uint32_t max_pending_guids_per_user = 0;
  uint64_t max_parked_bytes_per_user = 0;
  uint32_t max_sessions_per_user = 0;
  uint32_t max_handshakes_per_user = 0;
  uint32_t max_references_per_user = 0;
  uint32_t handshake_timeout_ms = 0;
  std::string metrics_listen;  // empty: no HTTP metrics endpoint
  std::string spill_dir;       // empty: no spilling
  std::string spill_capacity;  // bytes, or a % of the spill directory's file system
  bool keep_memory = false;    // in systemd's descriptor store, across restarts
  uint32_t restart_grace_ms = 0;

  // What to do rather than serve.
  std::string config_path;
  bool check_config = false;
  bool print_config = false;
  bool help = false;
  bool version = false;
};

// One configuration key, as documented in config/depotd.conf.
struct ConfigKey {
  const char* name;          // "segment_size"; the flag is --segment-size
  const char* default_text;  // as written in the config file
  const char* help;          // one line
};
const std::vector<ConfigKey>& ConfigKeys();

// Every key at its default: `physical_memory` sizes percentages; the capacity is 25% of it, at
// most `memory_available`; the socket is DefaultSocketPath().
DaemonOptions DefaultOptions(uint64_t physical_memory, uint64_t memory_available);

// True when `key` has its default value in `o`.
bool HasDefault(const DaemonOptions& o, std::string_view key);

// Builds the configuration from argv (without argv[0]): the defaults, then the file named by
// --config, then the flags. `physical_memory` sizes percentages; the default capacity is 25% of
// it, at most `memory_available`. InvalidArgument naming the flag, or the file, line and key, for
// anything it cannot accept.
Result<DaemonOptions> ParseOptions(const std::vector<std::string>& args, uint64_t physical_memory,
                                   uint64_t memory_available);

// Checks what single keys cannot: keys that cannot go together, and what the configuration
// names on this machine (the socket's group). InvalidArgument saying what to change.
Status Validate(const DaemonOptions& o);

// Reads only the log level from a config file (for SIGHUP). The level, or the error.
Result<std::string> ReadLogLevel(const std::string& config_path);

// The effective configuration in the config file's format, one `key = value` a line.
std::string FormatConfig(const DaemonOptions& o);

// The text of depotd --help, every key included.
std::string Usage();

}  // namespace depot

#endif  // DEPOT_DAEMON_OPTIONS_H_
