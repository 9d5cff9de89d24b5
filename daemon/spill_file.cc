#include "daemon/spill_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

// The hash is compiled in, as in the client library (checksum.h).
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "common/unique_fd.h"
#include "proto/wire.h"

namespace depot {
namespace {

constexpr char kMagic[8] = {'D', 'E', 'P', 'O', 'T', 'S', 'P', 'L'};
constexpr size_t kFixedSize = 96;
constexpr size_t kPage = 4096;
constexpr size_t kHashAt = 88;
// The largest header: every limit at its most, rounded up to pages.
constexpr size_t kMaxHeaderSize = (kFixedSize + proto::kMaxFrames * 8 + proto::kMaxNameSize +
                                   proto::kMaxMetadataSize + kPage - 1) /
                                  kPage * kPage;

template <typename T>
void Put(std::vector<uint8_t>& b, size_t at, T v) {
  std::memcpy(b.data() + at, &v, sizeof v);
}

template <typename T>
T Take(std::span<const uint8_t> b, size_t at) {
  T v;
  std::memcpy(&v, b.data() + at, sizeof v);
  return v;
}

uint64_t HeaderHash(std::span<const uint8_t> header) {
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  const uint64_t zero = 0;
  XXH3_64bits_update(&state, header.data(), kHashAt);
  XXH3_64bits_update(&state, &zero, sizeof zero);
  XXH3_64bits_update(&state, header.data() + kHashAt + 8, header.size() - kHashAt - 8);
  return XXH3_64bits_digest(&state);
}

Status Errno(const std::string& what, const std::string& name) {
  int e = errno;
  std::string msg = fmt::format("cannot {} {}: {}", what, name, std::strerror(e));
  return e == ENOSPC || e == EDQUOT ? Status::StoreFull(msg) : Status::Unavailable(msg);
}

// Writes or reads all of `len` bytes at `off`; false with errno set (0: the file ended).
template <typename Io, typename Ptr>
bool Whole(Io io, int fd, Ptr p, size_t len, off_t off) {
  while (len > 0) {
    ssize_t n = io(fd, p, len, off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = 0;
      return false;
    }
    p += n;
    len -= static_cast<size_t>(n);
    off += n;
  }
  return true;
}

}  // namespace

uint64_t SpillHeader::data_size() const {
  uint64_t total = 0;
  for (uint64_t s : frame_sizes) total += s;
  return total;
}

namespace {

// Whole pages: the data starts page-aligned.
size_t HeaderSize(const SpillHeader& h) {
  size_t used = kFixedSize + h.frame_sizes.size() * 8 + h.name.size() + h.metadata.size();
  return (used + kPage - 1) / kPage * kPage;
}

}  // namespace

uint64_t SpillFileSize(const SpillHeader& h) { return HeaderSize(h) + h.data_size(); }

std::vector<uint8_t> EncodeSpillHeader(const SpillHeader& h) {
  std::vector<uint8_t> b(HeaderSize(h), 0);
  std::memcpy(b.data(), kMagic, sizeof kMagic);
  Put<uint32_t>(b, 8, kSpillFormatVersion);
  Put<uint32_t>(b, 12, static_cast<uint32_t>(b.size()));
  Put(b, 16, h.guid.hi);
  Put(b, 24, h.guid.lo);
  Put(b, 32, h.checksum);
  Put(b, 40, h.created_ns);
  Put(b, 48, h.sealed_ns);
  Put(b, 56, h.creator_uid);
  Put(b, 60, h.creator_pid);
  Put<uint32_t>(b, 64,
                (h.evictable ? 1u : 0u) | (h.has_checksum ? 2u : 0u) | (h.owner_scoped ? 4u : 0u));
  Put<uint32_t>(b, 68, static_cast<uint32_t>(h.frame_sizes.size()));
  Put<uint32_t>(b, 72, static_cast<uint32_t>(h.name.size()));
  Put<uint32_t>(b, 76, static_cast<uint32_t>(h.metadata.size()));
  Put(b, 80, h.data_size());
  size_t at = kFixedSize;
  for (uint64_t s : h.frame_sizes) Put(b, (at += 8) - 8, s);
  std::memcpy(b.data() + at, h.name.data(), h.name.size());
  if (!h.metadata.empty()) {
    std::memcpy(b.data() + at + h.name.size(), h.metadata.data(), h.metadata.size());
  }
  Put(b, kHashAt, HeaderHash(b));
  return b;
}

Result<SpillHeader> DecodeSpillHeader(std::span<const uint8_t> b, uint64_t file_size) {
  auto bad = [](std::string why) { return Status::DataLoss("not a spill file of depot: " + why); };
  if (b.size() < kFixedSize || std::memcmp(b.data(), kMagic, sizeof kMagic) != 0) {
    return bad("no DEPOTSPL header");
  }
  if (uint32_t v = Take<uint32_t>(b, 8); v != kSpillFormatVersion) {
    return bad(
        fmt::format("format version {}, this depotd reads version {}", v, kSpillFormatVersion));
  }
  uint32_t header_size = Take<uint32_t>(b, 12);
  if (header_size == 0 || header_size % kPage != 0 || header_size > kMaxHeaderSize ||
      header_size > b.size()) {
    return bad(fmt::format("header size {}", header_size));
  }
  b = b.first(header_size);
  if (Take<uint64_t>(b, kHashAt) != HeaderHash(b)) return bad("the header's hash does not match");
  SpillHeader h;
  uint32_t frames = Take<uint32_t>(b, 68), name = Take<uint32_t>(b, 72);
  uint32_t metadata = Take<uint32_t>(b, 76);
  if (frames == 0 || frames > proto::kMaxFrames || name > proto::kMaxNameSize ||
      metadata > proto::kMaxMetadataSize ||
      kFixedSize + uint64_t{frames} * 8 + name + metadata > header_size) {
    return bad(
        fmt::format("{} frames, a name of {} bytes, metadata of {} bytes", frames, name, metadata));
  }
  h.guid = Guid{Take<uint64_t>(b, 16), Take<uint64_t>(b, 24)};
  h.checksum = Take<uint64_t>(b, 32);
  h.created_ns = Take<int64_t>(b, 40);
  h.sealed_ns = Take<int64_t>(b, 48);
  h.creator_uid = Take<uint32_t>(b, 56);
  h.creator_pid = Take<int32_t>(b, 60);
  uint32_t flags = Take<uint32_t>(b, 64);
  h.evictable = (flags & 1) != 0;
  h.has_checksum = (flags & 2) != 0;
  h.owner_scoped = (flags & 4) != 0;
  size_t at = kFixedSize;
  uint64_t total = 0;
  for (uint32_t i = 0; i < frames; ++i, at += 8) {
    uint64_t s = Take<uint64_t>(b, at);
    if (s > (uint64_t{1} << 50)) return bad(fmt::format("a frame of {} bytes", s));
    h.frame_sizes.push_back(s);
    total += s;
  }
  h.name.assign(reinterpret_cast<const char*>(b.data() + at), name);
  h.metadata.assign(b.data() + at + name, b.data() + at + name + metadata);
  if (total != Take<uint64_t>(b, 80) || header_size + total != file_size) {
    return bad(fmt::format("{} bytes of frames in a file of {} bytes", total, file_size));
  }
  if (h.guid.is_nil()) return bad("the nil GUID");
  return h;
}

Status WriteSpillFile(int dir_fd, const std::string& name, const SpillHeader& header,
                      std::span<const std::span<const uint8_t>> frames) {
  std::string temp = kSpillTempPrefix + name;
  UniqueFd fd(
      ::openat(dir_fd, temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd.valid()) return Errno("create", temp);
  std::vector<uint8_t> head = EncodeSpillHeader(header);
  // Reserving the whole file first turns a full disk into one clear error before any write.
  off_t total = static_cast<off_t>(head.size() + header.data_size());
  int reserved = ::posix_fallocate(fd.get(), 0, total);
  bool ok = reserved == 0 || reserved == EOPNOTSUPP || reserved == EINVAL;
  if (!ok) errno = reserved;
  off_t off = 0;
  if (ok) ok = Whole(::pwrite, fd.get(), head.data(), head.size(), off);
  off += static_cast<off_t>(head.size());
  for (size_t i = 0; ok && i < frames.size(); ++i) {
    ok = Whole(::pwrite, fd.get(), frames[i].data(), frames[i].size(), off);
    off += static_cast<off_t>(frames[i].size());
  }
  if (ok) ok = ::fdatasync(fd.get()) == 0;
  if (ok) ok = ::renameat(dir_fd, temp.c_str(), dir_fd, name.c_str()) == 0;
  if (!ok) {
    Status st = Errno("write", temp);
    ::unlinkat(dir_fd, temp.c_str(), 0);
    return st;
  }
  // The rename itself survives a crash once the directory is on disk.
  if (::fsync(dir_fd) != 0) return Errno("sync the directory of", name);
  return Status::OK();
}

Status RemoveSpillFiles(int dir_fd, std::span<const std::string> names) {
  Status first = Status::OK();
  for (const std::string& name : names) {
    if (::unlinkat(dir_fd, name.c_str(), 0) != 0 && errno != ENOENT && first.ok()) {
      first = Errno("remove", name);
    }
  }
  // One sync for the batch: the removals are on disk together.
  if (::fsync(dir_fd) != 0 && first.ok()) {
    first = Errno("sync the directory after removing", fmt::format("{} files", names.size()));
  }
  return first;
}

Result<SpillHeader> ReadSpillHeader(int dir_fd, const std::string& name) {
  UniqueFd fd(::openat(dir_fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  struct stat st {};
  if (!fd.valid() || ::fstat(fd.get(), &st) != 0) {
    return Status::DataLoss(fmt::format("cannot open {}: {}", name, std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) return Status::DataLoss(fmt::format("{} is not a plain file", name));
  std::vector<uint8_t> head(std::min<uint64_t>(kMaxHeaderSize, st.st_size));
  if (!Whole(::pread, fd.get(), head.data(), head.size(), 0)) {
    return Status::DataLoss(fmt::format("cannot read {}: {}", name, std::strerror(errno)));
  }
  return DecodeSpillHeader(head, static_cast<uint64_t>(st.st_size));
}

Status ReadSpillFile(int dir_fd, const std::string& name, const SpillHeader& expected,
                     std::span<const std::span<uint8_t>> frames) {
  auto header = ReadSpillHeader(dir_fd, name);
  if (!header.ok()) return header.status();
  if (header->guid != expected.guid || header->frame_sizes != expected.frame_sizes ||
      header->checksum != expected.checksum) {
    return Status::DataLoss(fmt::format("{} holds another object than the one spilled", name));
  }
  UniqueFd fd(::openat(dir_fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) return Status::DataLoss(fmt::format("cannot open {}", name));
  ::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_SEQUENTIAL);
  off_t off = static_cast<off_t>(HeaderSize(*header));
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  for (std::span<uint8_t> f : frames) {
    if (!Whole(::pread, fd.get(), f.data(), f.size(), off)) {
      return Status::DataLoss(fmt::format("cannot read {}: {}", name,
                                          errno ? std::strerror(errno) : "the file is short"));
    }
    off += static_cast<off_t>(f.size());
    if (expected.has_checksum) XXH3_64bits_update(&state, f.data(), f.size());
  }
  if (expected.has_checksum && XXH3_64bits_digest(&state) != expected.checksum) {
    return Status::DataLoss(
        fmt::format("the bytes of {} do not match the checksum recorded at seal", name));
  }
  return Status::OK();
}

SpillHeader SpillHeaderOf(const StoredObject& o) {
  SpillHeader h;
  h.guid = o.guid;
  h.name = o.name();
  h.metadata.assign(o.metadata().begin(), o.metadata().end());
  for (const Location& f : o.frames()) h.frame_sizes.push_back(f.size);
  h.checksum = o.checksum;
  h.has_checksum = o.has_checksum;
  h.evictable = o.evictable;
  h.owner_scoped = o.owner_scoped;
  h.creator_uid = o.creator_uid;
  h.creator_pid = o.creator_pid;
  h.created_ns = o.created_ns;
  h.sealed_ns = o.sealed_ns;
  return h;
}

}  // namespace depot
