#include "common/socket_path.h"

#include <unistd.h>

#include <cstdlib>

#include <fmt/format.h>

namespace depot {

std::string DefaultSocketPath() {
  const char* xdg = std::getenv("XDG_RUNTIME_DIR");
  if (xdg != nullptr && *xdg != '\0') return std::string(xdg) + "/depot/depot.sock";
  return fmt::format("/tmp/depot-{}/depot.sock", ::getuid());
}

}  // namespace depot
