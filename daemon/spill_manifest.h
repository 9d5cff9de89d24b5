// The spill manifest: written last at a clean stop, it says how many objects (and bytes) each
// namespace's directory holds, so that the next daemon can tell a clean stop from a crash and
// count what is missing. Plain text, one `<directory> <objects> <bytes>` line per namespace after
// a versioned first line; written to a temporary name, fsynced and renamed like a spill file.
//
// Free functions of no state; used at start-up and at stop, on the loop's thread.
#ifndef DEPOT_DAEMON_SPILL_MANIFEST_H_
#define DEPOT_DAEMON_SPILL_MANIFEST_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "depot/status.h"

namespace depot {

inline constexpr const char* kSpillManifestName = "MANIFEST";
// The same format, rewritten at most once a second while the daemon runs: how many sealed
// objects each namespace had (in memory or on disk), so that the start after a crash can say how
// many were lost.
inline constexpr const char* kSpillCensusName = "CENSUS";

struct SpillManifest {
  struct Entry {
    uint64_t objects = 0;
    uint64_t bytes = 0;
  };
  std::map<std::string, Entry> directories;  // by namespace directory name
};

// Writes the manifest (or the census, by `name`) into the spill directory `dir_fd`.
Status WriteSpillManifest(int dir_fd, const SpillManifest& manifest,
                          const char* name = kSpillManifestName);

// The manifest in `dir_fd`, nullopt when there is none (the last daemon did not stop cleanly, or
// none ran); DataLoss when it cannot be read or parsed. Removes it once read: from now on the
// directory changes, and a later crash must not pass for a clean stop.
// `name` kSpillCensusName reads the census, which stays.
Result<std::optional<SpillManifest>> TakeSpillManifest(int dir_fd,
                                                       const char* name = kSpillManifestName);

}  // namespace depot

#endif  // DEPOT_DAEMON_SPILL_MANIFEST_H_
