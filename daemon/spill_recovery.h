// Recovery at start-up: the spill directories, opened and checked, and what a previous daemon
// left in them, which becomes objects of the namespace again (on disk, restored at their first
// get). Temporary files (a write a killed daemon never finished) are removed, since they are never
// objects; a file whose header does not check out is logged and set aside as `<name>.bad`, never
// parsed further; what was found is compared with the manifest of the last clean stop, and what is
// missing is logged as lost.
//
// Free functions; called on the loop's thread at start-up (and when a per-user namespace is
// made), before anything of the namespace is served.
#ifndef DEPOT_DAEMON_SPILL_RECOVERY_H_
#define DEPOT_DAEMON_SPILL_RECOVERY_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>

#include "common/unique_fd.h"
#include "daemon/object_table.h"
#include "daemon/spill_manifest.h"

namespace depot {

// A complete spill file of an object.
struct SpillRecord {
  std::string name;
  uint64_t bytes = 0;  // the file's size
};
using SpillRecords = std::unordered_map<ObjectId, SpillRecord>;

// Opens (making it 0700 when missing) the directory `name` in `at` (shown as `path`), which must
// be a directory, not a link, of the daemon's user that nobody else may read or write: spilled
// objects hold users' bytes. PermissionDenied saying what to do, or Unavailable.
Result<UniqueFd> OpenSpillDirectory(int at, const std::string& name, const std::string& path);

// Calls `each` with every name in the directory `dir` but `.` and `..`.
void ForEachSpillEntry(int dir, const std::function<void(const std::string&)>& each);

// Adopts every good spill file in `dir` (shown as `path`) into `table`; `expected` is what the
// last clean stop's manifest says about this directory (nullopt: no manifest, a crash), `census`
// what the last daemon last counted there (for a crash: how many objects are lost, unless
// `memory_kept`: the last daemon's memory came back, and they with it). Returns the files of the
// objects adopted.
SpillRecords RecoverSpilled(int dir, const std::string& path, ObjectTable& table,
                            std::optional<SpillManifest::Entry> expected,
                            std::optional<SpillManifest::Entry> census, bool memory_kept);

}  // namespace depot

#endif  // DEPOT_DAEMON_SPILL_RECOVERY_H_
