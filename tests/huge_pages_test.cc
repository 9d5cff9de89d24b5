// Huge pages for depotd's shared memory: the object index always asks for them, the segments when
// `hugepages` is on, and the kernel gives them where transparent_hugepage/shmem_enabled allows.
// Each case runs with that policy at "advise" (set for its run, as root, where it says "never",
// and restored), and says SKIPPED where it cannot be. Not beside daemon_config_test, which checks
// what depotd logs of the policy (a RESOURCE_LOCK in tests/CMakeLists.txt).
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "client/src/index_reader.h"
#include "common/shared_mapping.h"
#include "common/system_memory.h"
#include "daemon/object_index.h"
#include "daemon/shm_source.h"

namespace depot {
namespace {

using internal::IndexReader;

// Sets the kernel's policy for huge pages in shared memory; restores it when done.
class ShmemHugePolicy {
 public:
  // Sets `policy` when the current one is `from`; false when it could not.
  bool SetFrom(const std::string& from, const std::string& policy) {
    if (ShmemHugePagePolicy() != from) return false;
    std::ofstream(kShmemHugePagesPath) << policy;
    if (ShmemHugePagePolicy() != policy) return false;
    restore_ = from;
    return true;
  }
  ~ShmemHugePolicy() {
    if (!restore_.empty()) std::ofstream(kShmemHugePagesPath) << restore_;
  }

 private:
  std::string restore_;
};

// The bytes of this process's mappings of the memfd `name` that are mapped through 2 MiB
// entries, and the resident bytes of those mappings.
std::pair<uint64_t, uint64_t> PmdMapped(const std::string& name) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool ours = false;
  uint64_t pmd = 0, rss = 0;
  while (std::getline(smaps, line)) {
    if (!line.empty() && std::isxdigit(static_cast<unsigned char>(line[0])) &&
        line.find('-') < line.find(' ')) {
      ours = line.find("/memfd:" + name) != std::string::npos;
    } else if (ours && line.starts_with("ShmemPmdMapped:")) {
      pmd += std::stoull(line.substr(15)) * 1024;
    } else if (ours && line.starts_with("Rss:")) {
      rss += std::stoull(line.substr(4)) * 1024;
    }
  }
  return {pmd, rss};
}

// As root, sets "advise" for the case's run where the policy is "never"; exits 77 (ctest's
// SKIP_RETURN_CODE), saying why, where the kernel gives shared memory no huge pages even so.
void AllowHugePages(ShmemHugePolicy& policy) {
  if (ShmemHugePagesAllowed() || policy.SetFrom("never", "advise")) return;
  std::printf(
      "SKIPPED: %s says \"%s\" and cannot be set to \"advise\" here (not root?): huge "
      "pages are NOT tested by this run\n",
      kShmemHugePagesPath, ShmemHugePagePolicy().c_str());
  std::fflush(stdout);
  std::_Exit(77);
}

TEST_CASE("the index lies on huge pages where the kernel gives them to shared memory that asks",
          "[index]") {
  ShmemHugePolicy policy;
  AllowHugePages(policy);
  auto index = ObjectIndex::Create(262144, "index-test-huge");  // 28 MiB
  REQUIRE(index.ok());
  auto [pmd, rss] = PmdMapped("index-test-huge");
  INFO("policy " << ShmemHugePagePolicy() << ", rss " << rss << ", through 2 MiB " << pmd);
  CHECK(rss >= 28 * (uint64_t{1} << 20));  // reserved in full
  // Most of it, where memory is not too fragmented for the kernel to find 2 MiB pages; at least
  // one anyway (before the index asked, none: its pages were reserved before the mapping asked).
  CHECK(pmd >= 2 * (uint64_t{1} << 20));
  // A reader finds what the index holds, through the same pages.
  std::vector<Location> frames{{.segment = 1, .offset = 0, .size = 64}};
  StoredObject o(frames, "", {});
  o.id = 9;
  o.guid = Guid{0x5009, 64};
  REQUIRE((*index)->Insert(o));
  auto reader = IndexReader::Map(UniqueFd(::fcntl((*index)->read_only_fd(), F_DUPFD_CLOEXEC, 0)),
                                 (*index)->sets(), (*index)->arena_bytes());
  REQUIRE(reader.ok());
  CHECK(reader->Find(o.guid));
}

TEST_CASE("a segment made with huge pages asked lies on them, and one made without does not",
          "[hugepages]") {
  ShmemHugePolicy policy;
  AllowHugePages(policy);
  constexpr uint64_t kSize = 16 << 20;
  for (bool huge : {true, false}) {
    std::string name = huge ? "huge-pages-test-segment" : "huge-pages-test-small";
    auto segment = SealedMemfd(name, kSize, std::nullopt, huge);
    REQUIRE(segment.ok());
    // A client's mapping of it, read-only as gets map segments, every page read.
    auto map = SharedMapping::Map(segment->read_only_fd.get(), kSize, false, "segment");
    REQUIRE(map.ok());
    REQUIRE(::madvise(map->words(), kSize, MADV_POPULATE_READ) == 0);
    auto [pmd, rss] = PmdMapped(name);
    INFO("huge " << huge << ", policy " << ShmemHugePagePolicy() << ", rss " << rss
                 << ", through 2 MiB " << pmd);
    CHECK(rss == kSize);
    if (huge) {
      CHECK(pmd >= 2 * (uint64_t{1} << 20));  // see the index's case
    } else {
      CHECK(pmd == 0);
    }
  }
}

}  // namespace
}  // namespace depot
