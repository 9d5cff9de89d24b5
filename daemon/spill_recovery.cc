#include "daemon/spill_recovery.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "daemon/spill_file.h"
#include "depot/units.h"

namespace depot {

Result<UniqueFd> OpenSpillDirectory(int at, const std::string& name, const std::string& path) {
  if (::mkdirat(at, name.c_str(), 0700) != 0 && errno != EEXIST) {
    return Status::Unavailable(
        fmt::format("cannot create the spill directory {}: {}", path, std::strerror(errno)));
  }
  UniqueFd fd(::openat(at, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  struct stat st {};
  if (!fd.valid() || ::fstat(fd.get(), &st) != 0) {
    return Status::PermissionDenied(
        fmt::format("cannot open the spill directory {} (it must be a directory, not a link): {}",
                    path, std::strerror(errno)));
  }
  if (st.st_uid != ::geteuid() || (st.st_mode & 077) != 0) {
    return Status::PermissionDenied(fmt::format(
        "refusing to spill into {} (owner uid {}, mode {:04o}): spilled objects hold users' "
        "bytes, so it must belong to depotd's user (uid {}) and be closed to everyone else; "
        "`chmod 0700` it, or choose another spill_dir",
        path, st.st_uid, st.st_mode & 07777, ::geteuid()));
  }
  return fd;
}

void ForEachSpillEntry(int dir, const std::function<void(const std::string&)>& each) {
  DIR* d = ::fdopendir(::dup(dir));
  if (d == nullptr) return;
  ::rewinddir(d);
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name != "." && name != "..") each(name);
  }
  ::closedir(d);
}

SpillRecords RecoverSpilled(int dir, const std::string& path, ObjectTable& table,
                            std::optional<SpillManifest::Entry> expected,
                            std::optional<SpillManifest::Entry> census, bool memory_kept) {
  SpillRecords records;
  uint64_t bytes = 0, bad = 0;
  ForEachSpillEntry(dir, [&](const std::string& file) {
    if (file.starts_with(kSpillTempPrefix)) {
      ::unlinkat(dir, file.c_str(), 0);
      return;
    }
    if (!file.ends_with(kSpillSuffix)) return;
    auto h = ReadSpillHeader(dir, file);
    Result<const StoredObject*> adopted = h.status();
    if (h.ok()) {
      NewObject n;
      n.guid = h->guid;
      n.metadata = h->metadata;
      n.name = h->name;
      n.evictable = h->evictable;
      n.owner_scoped = h->owner_scoped;
      n.creator_pid = h->creator_pid;
      n.creator_uid = h->creator_uid;
      for (uint64_t size : h->frame_sizes) n.frames.push_back(Location{.size = size});
      adopted =
          table.Adopt(std::move(n), {h->checksum, h->has_checksum, h->created_ns, h->sealed_ns});
    }
    if (!adopted.ok()) {
      ++bad;
      spdlog::error("{}/{}: {}; set aside as {}.bad", path, file, adopted.status().message(), file);
      ::renameat(dir, file.c_str(), dir, (file + ".bad").c_str());
      return;
    }
    records[(*adopted)->id] = {file, SpillFileSize(*h)};
    bytes += h->data_size();
  });
  uint64_t objects = records.size();
  if (!expected) {
    uint64_t counted = census ? census->objects : 0;
    if (objects + bad + counted > 0) {
      // Those in memory only come back with the memory it kept, where there is some.
      std::string fate =
          memory_kept ? "come from the memory it kept (see kept memory)" : "are lost";
      spdlog::warn(
          "{}: the last depotd did not stop cleanly (no manifest): the {} objects ({}) it had "
          "on disk are served; {}",
          path, objects, FormatBytes(bytes),
          census ? fmt::format("{} objects it held in memory only {} (of {} it last counted)",
                               counted > objects ? counted - objects : 0, fate, counted)
                 : "objects it held in memory only " + fate);
    }
  } else {
    spdlog::info(
        "{}: {} of the {} objects ({}) written at the last clean stop are served{}", path, objects,
        expected->objects, FormatBytes(bytes),
        objects < expected->objects
            ? fmt::format("; {} are missing or unreadable and lost", expected->objects - objects)
            : "");
  }
  return records;
}

}  // namespace depot
