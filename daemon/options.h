// depotd's command line: what it accepts, its defaults, and the text of --help.
#ifndef DEPOT_DAEMON_OPTIONS_H_
#define DEPOT_DAEMON_OPTIONS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "depot/status.h"

namespace depot {

struct DaemonOptions {
  std::string socket_path;
  uint64_t capacity = 0;
  uint64_t segment_size = 64ull << 20;
  bool prefault = false;
  std::string log_level = "info";
  bool help = false;
  bool version = false;
};

// The per-user default socket: $XDG_RUNTIME_DIR/depot/depot.sock, else /tmp/depot-$UID/depot.sock.
std::string DefaultSocketPath();

// Parses argv (without argv[0]). `physical_memory` and `shm_available` size the defaults and
// percentages. InvalidArgument naming the flag for anything it cannot accept.
Result<DaemonOptions> ParseOptions(const std::vector<std::string>& args, uint64_t physical_memory,
                                   uint64_t shm_available);

extern const char kUsage[];

}  // namespace depot

#endif  // DEPOT_DAEMON_OPTIONS_H_
