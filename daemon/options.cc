#include "daemon/options.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include <fmt/format.h>

#include "common/units.h"

namespace depot {

const char kUsage[] = R"(usage: depotd [OPTIONS]

The depot daemon: a shared-memory object store for the processes of this node.

  --socket PATH        Unix socket to serve (default: $XDG_RUNTIME_DIR/depot/depot.sock,
                       else /tmp/depot-$UID/depot.sock)
  --capacity SIZE      host pool size: bytes, 512MiB, 8GiB, or 25% of RAM
                       (default: 25% of RAM, at most what /dev/shm has free)
  --segment-size SIZE  size of each shared-memory segment (default: 64MiB); larger objects
                       get a segment of their own
  --prefault           reserve the whole capacity at start-up and keep it
  --log-level LEVEL    trace, debug, info, warn, error, critical or off (default: info)
  --version            print the version and exit
  --help               print this text and exit
)";

std::string DefaultSocketPath() {
  const char* xdg = std::getenv("XDG_RUNTIME_DIR");
  if (xdg != nullptr && *xdg != '\0') return std::string(xdg) + "/depot/depot.sock";
  return fmt::format("/tmp/depot-{}/depot.sock", ::getuid());
}

Result<DaemonOptions> ParseOptions(const std::vector<std::string>& args, uint64_t physical_memory,
                                   uint64_t shm_available) {
  DaemonOptions o;
  o.socket_path = DefaultSocketPath();
  o.capacity = std::min(physical_memory / 4, shm_available);
  for (size_t i = 0; i < args.size(); ++i) {
    std::string flag = args[i];
    std::string value;
    bool has_value = false;
    if (auto eq = flag.find('='); flag.starts_with("--") && eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
      has_value = true;
    }
    auto take = [&]() -> Result<std::string> {
      if (has_value) return value;
      if (i + 1 >= args.size()) return Status::InvalidArgument(fmt::format("{} needs a value", flag));
      return args[++i];
    };
    auto size = [&](uint64_t& out) -> Status {
      auto v = take();
      if (!v.ok()) return v.status();
      auto parsed = ParseSize(*v, physical_memory);
      if (!parsed) {
        return Status::InvalidArgument(fmt::format(
            "{} {}: expected a size such as 512MiB, 8GiB or 25%", flag, *v));
      }
      out = *parsed;
      return Status::OK();
    };
    Status st;
    if (flag == "--socket") {
      auto v = take();
      if (!v.ok()) return v.status();
      if (v->empty()) return Status::InvalidArgument("--socket needs a path");
      o.socket_path = *v;
    } else if (flag == "--capacity") {
      st = size(o.capacity);
    } else if (flag == "--segment-size") {
      st = size(o.segment_size);
    } else if (flag == "--prefault" && !has_value) {
      o.prefault = true;
    } else if (flag == "--log-level") {
      auto v = take();
      if (!v.ok()) return v.status();
      static const char* kLevels[] = {"trace", "debug", "info", "warn", "error", "critical", "off"};
      if (std::find(std::begin(kLevels), std::end(kLevels), *v) == std::end(kLevels)) {
        return Status::InvalidArgument(fmt::format(
            "--log-level {}: expected trace, debug, info, warn, error, critical or off", *v));
      }
      o.log_level = *v;
    } else if (flag == "--help" || flag == "-h") {
      o.help = true;
    } else if (flag == "--version") {
      o.version = true;
    } else {
      return Status::InvalidArgument(fmt::format("unknown option {} (see depotd --help)", args[i]));
    }
    if (!st.ok()) return st;
  }
  return o;
}

}  // namespace depot
