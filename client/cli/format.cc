#include "client/cli/format.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

namespace depotctl {
namespace {

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

int Fail(const depot::Status& st, std::string_view what) {
  std::fprintf(stderr, "depotctl: %.*s: %s\n", static_cast<int>(what.size()), what.data(),
               st.message().c_str());
  if (st.IsNotFound()) return kNotFound;
  if (st.IsUnavailable() || st.IsDisconnected()) return kNoDaemon;
  return kError;
}

int Usage(std::string_view why) {
  std::fprintf(stderr, "depotctl: %.*s (see depotctl --help)\n", static_cast<int>(why.size()),
               why.data());
  return kUsageError;
}

std::string Json(std::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      out += fmt::format("\\u{:04x}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

// "42s", "5m", "3h", "2d": how long ago.
std::string Age(int64_t unix_ns) {
  int64_t s = std::max<int64_t>(0, (NowNs() - unix_ns) / 1'000'000'000);
  if (s < 60) return fmt::format("{}s", s);
  if (s < 3600) return fmt::format("{}m", s / 60);
  if (s < 86400) return fmt::format("{}h", s / 3600);
  return fmt::format("{}d", s / 86400);
}

}  // namespace depotctl
