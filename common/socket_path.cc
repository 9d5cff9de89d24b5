#include "common/socket_path.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

namespace depot {

std::string DefaultSocketPath() {
  const char* xdg = std::getenv("XDG_RUNTIME_DIR");
  return DefaultSocketPathFor(xdg != nullptr ? xdg : "", ::getuid());
}

std::string DefaultSocketPathFor(const std::string& xdg_runtime_dir, uid_t uid,
                                 const std::string& run_user) {
  if (!xdg_runtime_dir.empty()) return xdg_runtime_dir + "/depot/depot.sock";
  std::string runtime = fmt::format("{}/{}", run_user, uid);
  struct stat st {};
  if (::stat(runtime.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == uid) {
    return runtime + "/depot/depot.sock";
  }
  return fmt::format("/tmp/depot-{}/depot.sock", uid);
}

}  // namespace depot
