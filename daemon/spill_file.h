// The on-disk form of one spilled object, version 1: a header of whole 4 KiB pages, then the
// object's frames back to back (so the data is read and written in large, aligned runs).
//
//   offset  0  "DEPOTSPL"            offset 56  creator uid (u32), pid (i32)
//           8  version (u32)                64  flags (u32): see below
//          12  header size (u32)            68  frame count, name size, metadata size (u32 each)
//          16  GUID (hi, lo: u64)           80  data size (u64)
//          32  checksum (u64)               88  XXH3-64 of the header with this field zero
//          40  created, sealed (ns, i64)    96  frame sizes (u64 each), name, metadata, zeros
//
// Flags: 1 evictable, 2 checksum recorded, 4 owner-scoped. Flag 4 came after the first files of
// version 1: a file written before it reads as not owner-scoped, as it was served then, so it
// needed no new version.
//
// Numbers are little-endian. A file is believed only when every field agrees with the others,
// with the protocol's limits and with the file's length: a file from an older or hostile process
// is an error, never a crash. Files are written to a temporary name, fsynced and renamed, so a
// file with the final name is always complete.
//
// Free functions of no state: called on the spill I/O threads.
#ifndef DEPOT_DAEMON_SPILL_FILE_H_
#define DEPOT_DAEMON_SPILL_FILE_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "daemon/object_table.h"
#include "depot/guid.h"
#include "depot/status.h"

namespace depot {

inline constexpr uint32_t kSpillFormatVersion = 1;
inline constexpr const char* kSpillSuffix = ".obj";
inline constexpr const char* kSpillTempPrefix = ".tmp.";

// What the header says about the object.
struct SpillHeader {
  Guid guid;
  std::string name;
  std::vector<uint8_t> metadata;
  std::vector<uint64_t> frame_sizes;
  uint64_t checksum = 0;
  bool has_checksum = false;
  bool evictable = false;
  bool owner_scoped = false;  // lives no longer than its creator (an orphan once read back)
  uint32_t creator_uid = 0;
  int32_t creator_pid = 0;
  int64_t created_ns = 0;
  int64_t sealed_ns = 0;

  uint64_t data_size() const;
};

// The size of the file that holds an object under `h`.
uint64_t SpillFileSize(const SpillHeader& h);

// The header of a spill file for sealed object `o`.
SpillHeader SpillHeaderOf(const StoredObject& o);

// The header's bytes, padded to whole pages.
std::vector<uint8_t> EncodeSpillHeader(const SpillHeader& h);

// The header in `bytes` (the file's first bytes, at least the whole header) of a file of
// `file_size` bytes. DataLoss saying what does not agree.
Result<SpillHeader> DecodeSpillHeader(std::span<const uint8_t> bytes, uint64_t file_size);

// Writes `frames` (the object's bytes) under `header` as `name` in the directory `dir_fd`:
// a temporary file (mode 0600), fsync, rename, fsync of the directory. On failure nothing is
// left behind; the status carries errno's text (ENOSPC: StoreFull).
Status WriteSpillFile(int dir_fd, const std::string& name, const SpillHeader& header,
                      std::span<const std::span<const uint8_t>> frames);

// Removes the files `names` from the directory `dir_fd`, then fsyncs the directory once: until
// then a crash may bring a removed file back, and the next start would adopt its object again.
// A name already gone is no error. Unavailable naming the first failure (every name is tried,
// and the directory synced, whatever failed before).
Status RemoveSpillFiles(int dir_fd, std::span<const std::string> names);

// Reads and checks the header of `name` in `dir_fd`.
Result<SpillHeader> ReadSpillHeader(int dir_fd, const std::string& name);

// Reads the bytes of `name` into `frames` (sized as the header says), checking that the file is
// the object `expected` describes and, when a checksum was recorded, that the bytes match it.
// DataLoss when they do not, or the file is missing or unreadable.
Status ReadSpillFile(int dir_fd, const std::string& name, const SpillHeader& expected,
                     std::span<const std::span<uint8_t>> frames);

}  // namespace depot

#endif  // DEPOT_DAEMON_SPILL_FILE_H_
