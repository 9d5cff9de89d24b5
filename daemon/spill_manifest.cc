#include "daemon/spill_manifest.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>
#include <string_view>

#include "common/unique_fd.h"

namespace depot {
namespace {

constexpr const char* kFirstLine = "depot spill manifest 1";
constexpr size_t kMaxManifestSize = 1 << 20;

}  // namespace

Status WriteSpillManifest(int dir_fd, const SpillManifest& manifest, const char* name) {
  std::string text = std::string(kFirstLine) + "\n";
  for (const auto& [dir, e] : manifest.directories) {
    text += fmt::format("{} {} {}\n", dir, e.objects, e.bytes);
  }
  std::string temp = std::string(".tmp.") + name;
  UniqueFd fd(
      ::openat(dir_fd, temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600));
  bool ok = fd.valid() &&
            ::write(fd.get(), text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
            ::fsync(fd.get()) == 0 && ::renameat(dir_fd, temp.c_str(), dir_fd, name) == 0 &&
            ::fsync(dir_fd) == 0;
  if (!ok) {
    Status st = Status::Unavailable(
        fmt::format("cannot write the spill {}: {}", name, std::strerror(errno)));
    ::unlinkat(dir_fd, temp.c_str(), 0);
    return st;
  }
  return Status::OK();
}

Result<std::optional<SpillManifest>> TakeSpillManifest(int dir_fd, const char* name) {
  UniqueFd fd(::openat(dir_fd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) {
    if (errno == ENOENT) return std::optional<SpillManifest>();
    return Status::DataLoss(
        fmt::format("cannot open the spill manifest: {}", std::strerror(errno)));
  }
  std::string text(kMaxManifestSize, '\0');
  ssize_t n = ::read(fd.get(), text.data(), text.size());
  if (std::string_view(name) == kSpillManifestName) ::unlinkat(dir_fd, name, 0);
  if (n < 0) return Status::DataLoss("cannot read the spill manifest");
  text.resize(static_cast<size_t>(n));
  std::istringstream in(text);
  std::string line;
  if (!std::getline(in, line) || line != kFirstLine) {
    return Status::DataLoss("the spill manifest is not one this depotd reads");
  }
  SpillManifest m;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string dir;
    SpillManifest::Entry e;
    if (!(fields >> dir >> e.objects >> e.bytes)) {
      return Status::DataLoss(fmt::format("the spill manifest has a bad line: `{}`", line));
    }
    m.directories[dir] = e;
  }
  return std::optional<SpillManifest>(std::move(m));
}

}  // namespace depot
