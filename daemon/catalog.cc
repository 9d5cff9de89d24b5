#include "daemon/catalog.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

// Inline: the system's libxxhash is not linked.
#define XXH_INLINE_ALL
#include <xxhash.h>

namespace depot {
namespace {

constexpr uint64_t kMagic = 0x474c544354504544ull;  // "DEPTCTLG"
constexpr uint32_t kLive = 0x4556494c;              // "LIVE": an entry in use
constexpr uint64_t kHeaderBytes = 4096;
constexpr uint64_t kEntryBytes = 128;
constexpr uint64_t kExtraUnit = 32;
constexpr uint64_t kEntriesAt = kHeaderBytes;
constexpr uint64_t kExtraAt = kEntriesAt + Catalog::kMaxEntries * kEntryBytes;
constexpr uint64_t kFileBytes = kExtraAt + Catalog::kExtraBytes;

struct Header {
  uint64_t magic;
  uint32_t version;
  uint32_t key;
  uint64_t seed;
  uint64_t file_bytes;
  uint64_t high;  // entries below this may be in use: raised before an entry is written
};

// The bytes of frames past the first that an entry with `frames` frames keeps among its extra.
uint64_t MoreFrames(uint64_t frames) { return frames == 0 ? 0 : (frames - 1) * sizeof(Location); }

constexpr uint32_t kEvictable = 1;
constexpr uint32_t kHasChecksum = 2;
constexpr uint32_t kOwnerScoped = 4;

}  // namespace

// 128 bytes. Everything after `check` is covered by it, with the entry's extra bytes.
struct Catalog::Entry {
  uint32_t state;  // kLive, or 0; written last, cleared first (atomically)
  uint32_t frame_count;
  uint64_t check;
  Guid guid;
  uint32_t creator_uid;
  uint32_t flags;
  int64_t created_ns;
  int64_t sealed_ns;
  uint64_t checksum;
  uint64_t extra_offset;  // from kExtraAt: frames past the first, the name, then the metadata
  uint32_t extra_size;    // in bytes asked for (the block is rounded up to kExtraUnit)
  uint32_t metadata_size;
  uint16_t name_size;
  uint16_t pad;
  int32_t creator_pid;
  Location first;
  uint8_t spare[16];
};

static_assert(sizeof(Catalog::Entry) == kEntryBytes);  // NOLINT: checked where it is defined

Catalog::Catalog(UniqueFd fd, uint8_t* base, uint32_t key, uint64_t seed)
    : fd_(std::move(fd)), base_(base), key_(key), seed_(seed), extra_(kExtraBytes, kExtraUnit) {}

Catalog::~Catalog() { ::munmap(base_, kFileBytes); }

namespace {

Result<uint8_t*> MapCatalog(int fd) {
  // Sparse and reserved nowhere: only the pages written take memory.
  void* p = ::mmap(nullptr, kFileBytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
  if (p == MAP_FAILED) {
    return Status::Unavailable(fmt::format("cannot map the catalog: {}", std::strerror(errno)));
  }
  return static_cast<uint8_t*>(p);
}

}  // namespace

Result<std::unique_ptr<Catalog>> Catalog::Create(uint32_t key) {
  UniqueFd fd(::memfd_create("depot-catalog", MFD_CLOEXEC));
  if (!fd.valid() || ::fchmod(fd.get(), 0600) != 0 ||
      ::ftruncate(fd.get(), static_cast<off_t>(kFileBytes)) != 0) {
    return Status::Unavailable(
        fmt::format("cannot make the catalog of kept objects: {}", std::strerror(errno)));
  }
  auto base = MapCatalog(fd.get());
  if (!base.ok()) return base.status();
  uint64_t seed = 0;
  if (::getrandom(&seed, sizeof seed, 0) != sizeof seed) seed = 0x9e3779b97f4a7c15ull;
  Header h{kMagic, kVersion, key, seed, kFileBytes, 0};
  std::memcpy(*base, &h, sizeof h);
  return std::unique_ptr<Catalog>(new Catalog(std::move(fd), *base, key, seed));
}

Result<std::unique_ptr<Catalog>> Catalog::Open(UniqueFd fd, uint32_t key) {
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || static_cast<uint64_t>(st.st_size) != kFileBytes) {
    return Status::InvalidArgument(
        fmt::format("the catalog left is {} bytes, not the {} of version {}", st.st_size,
                    kFileBytes, kVersion));
  }
  auto base = MapCatalog(fd.get());
  if (!base.ok()) return base.status();
  Header h{};
  std::memcpy(&h, *base, sizeof h);
  std::string why;
  if (h.magic != kMagic) {
    why = "it is not a catalog";
  } else if (h.version != kVersion) {
    why = fmt::format("it is of version {}, this depotd reads version {}", h.version, kVersion);
  } else if (h.key != key || h.file_bytes != kFileBytes) {
    why = "its header does not match its name";
  }
  if (!why.empty()) {
    ::munmap(*base, kFileBytes);
    return Status::InvalidArgument("the catalog left by the last depotd is refused: " + why);
  }
  return std::unique_ptr<Catalog>(new Catalog(std::move(fd), *base, key, h.seed));
}

Catalog::Entry& Catalog::EntryAt(uint32_t slot) const {
  return *reinterpret_cast<Entry*>(base_ + kEntriesAt + uint64_t{slot} * kEntryBytes);
}

std::span<const uint8_t> Catalog::Extra(const Entry& e) const {
  return {base_ + kExtraAt + e.extra_offset, e.extra_size};
}

uint64_t Catalog::Hash(const Entry& e) const {
  const auto* bytes = reinterpret_cast<const uint8_t*>(&e);
  uint64_t h = XXH3_64bits_withSeed(bytes + 16, kEntryBytes - 16, seed_);
  // The extra bytes are hashed seeded with the entry's hash: one chain over both.
  if (e.extra_size > 0) h = XXH3_64bits_withSeed(Extra(e).data(), e.extra_size, h);
  return h;
}

bool Catalog::Record(uint32_t slot, const StoredObject& o) {
  if (slot >= kMaxEntries) return false;
  auto frames = o.frames();
  Erase(slot);
  auto* header = reinterpret_cast<Header*>(base_);
  if (slot >= header->high) {
    std::atomic_ref<uint64_t>(header->high).store(slot + 1, std::memory_order_release);
  }
  Entry& e = EntryAt(slot);
  uint64_t more = MoreFrames(frames.size());
  uint64_t extra_size = more + o.name().size() + o.metadata().size();
  uint64_t extra_offset = 0;
  if (extra_size > 0) {
    auto got = extra_.Allocate(extra_size);
    if (!got) return false;
    extra_offset = *got;
    uint8_t* to = base_ + kExtraAt + extra_offset;
    if (more > 0) std::memcpy(to, frames.data() + 1, more);
    std::memcpy(to + more, o.name().data(), o.name().size());
    std::memcpy(to + more + o.name().size(), o.metadata().data(), o.metadata().size());
  }
  e.frame_count = static_cast<uint32_t>(frames.size());
  e.guid = o.guid;
  e.creator_uid = o.creator_uid;
  e.flags = (o.evictable ? kEvictable : 0) | (o.has_checksum ? kHasChecksum : 0) |
            (o.owner_scoped ? kOwnerScoped : 0);
  e.created_ns = o.created_ns;
  e.sealed_ns = o.sealed_ns;
  e.checksum = o.checksum;
  e.extra_offset = extra_offset;
  e.extra_size = static_cast<uint32_t>(extra_size);
  e.metadata_size = static_cast<uint32_t>(o.metadata().size());
  e.name_size = static_cast<uint16_t>(o.name().size());
  e.pad = 0;
  e.creator_pid = o.creator_pid;
  e.first = frames.empty() ? Location{} : frames[0];
  std::memset(e.spare, 0, sizeof e.spare);
  e.check = Hash(e);
  // Last: a daemon killed before this store leaves an entry that reads as free.
  std::atomic_ref<uint32_t>(e.state).store(kLive, std::memory_order_release);
  ++entries_;
  return true;
}

void Catalog::Erase(uint32_t slot) {
  if (slot >= kMaxEntries) return;
  Entry& e = EntryAt(slot);
  std::atomic_ref<uint32_t> state(e.state);
  if (state.load(std::memory_order_relaxed) != kLive) return;
  // First: from here on a daemon killed at any point leaves no object behind.
  state.store(0, std::memory_order_release);
  if (e.extra_size > 0) extra_.Free(e.extra_offset, e.extra_size);
  --entries_;
}

std::vector<CatalogObject> Catalog::Read(uint64_t* torn) const {
  std::vector<CatalogObject> out;
  *torn = 0;
  // Only entries below the high-water mark were ever written: reading past it would fault in
  // pages of the sparse file for nothing.
  uint64_t high = std::atomic_ref<uint64_t>(reinterpret_cast<Header*>(base_)->high).load();
  for (uint64_t slot = 0; slot < std::min(high, kMaxEntries); ++slot) {
    const Entry& e = EntryAt(static_cast<uint32_t>(slot));
    uint32_t state = std::atomic_ref<uint32_t>(const_cast<uint32_t&>(e.state)).load();
    if (state != kLive) continue;
    // Everything it says is checked before it is believed: bounds first, then the hash.
    bool sane = e.extra_offset <= kExtraBytes && e.extra_size <= kExtraBytes - e.extra_offset &&
                MoreFrames(e.frame_count) + e.name_size + e.metadata_size == e.extra_size;
    if (!sane || Hash(e) != e.check) {
      ++*torn;
      continue;
    }
    CatalogObject c;
    NewObject& n = c.object;
    n.guid = e.guid;
    n.creator_uid = e.creator_uid;
    n.creator_pid = e.creator_pid;
    n.evictable = (e.flags & kEvictable) != 0;
    n.owner_scoped = (e.flags & kOwnerScoped) != 0;
    if (e.frame_count > 0) n.frames.push_back(e.first);
    auto extra = Extra(e);
    for (uint32_t i = 1; i < e.frame_count; ++i) {
      Location f;
      std::memcpy(&f, extra.data() + (i - 1) * sizeof(Location), sizeof f);
      n.frames.push_back(f);
    }
    auto rest = extra.subspan(MoreFrames(e.frame_count));
    n.name.assign(reinterpret_cast<const char*>(rest.data()), e.name_size);
    n.metadata.assign(rest.begin() + e.name_size, rest.end());
    c.facts = {e.checksum, (e.flags & kHasChecksum) != 0, e.created_ns, e.sealed_ns};
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace depot
