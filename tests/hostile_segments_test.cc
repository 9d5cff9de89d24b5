// A hostile local user against depot's shared memory: each test runs the attack from a real client
// process under a throwaway uid against a real daemon, on the descriptors the daemon really sent
// it, then checks that the daemon still serves everyone and that every victim's object is intact,
// byte for byte. They need root to switch uids; they skip, saying so, elsewhere.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "daemon/shm_source.h"
#include "tests/other_users.h"

using namespace depot;
using namespace depot::test;

namespace {

constexpr size_t kSize = 100000;

// A daemon that Alice, Bob and Mallory may all use, in the shared namespace. Each uid creates in
// segments of its own, so they are made smaller than the 64 MiB capacity.
Daemon StartShared(std::vector<std::string> extra = {"--segment-size", "8MiB"}) {
  std::vector<std::string> args = {
      "--allow-users",
      std::to_string(kAlice) + "," + std::to_string(kBob) + "," + std::to_string(kMallory)};
  args.insert(args.end(), extra.begin(), extra.end());
  return StartOpen(std::move(args));
}

// The object's bytes are still what Pattern(size, seed) wrote, as `uid` reads them.
bool IntactFor(const Daemon& d, uid_t uid, const Guid& guid, size_t size, uint32_t seed) {
  return RunAs(uid, uid, {}, [&] {
           auto obj = d.Connect().Get(guid);
           if (!obj.ok() || obj->size() != size) return 1;
           auto want = Pattern(size, seed);
           return std::equal(want.begin(), want.end(), obj->frame(0).begin()) ? 0 : 2;
         }) == 0;
}

// The descriptors of depot segments this process holds: whatever the daemon sent it, found as an
// attacker would, by what they link to (a memfd, or a file in /dev/shm, named depot-…).
std::vector<int> SegmentFds() {
  std::vector<int> fds;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    std::string target = std::filesystem::read_symlink(e.path(), ec).string();
    if (target.starts_with("/memfd:depot-") || target.starts_with("/dev/shm/depot-")) {
      fds.push_back(std::stoi(e.path().filename().string()));
    }
  }
  return fds;
}

uint64_t FdSize(int fd) {
  struct stat st {};
  return ::fstat(fd, &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

// Writes 0xee over [offset, offset + size) of the memory behind `fd` through a writable shared
// mapping; false when the mapping is refused.
bool Overwrite(int fd, uint64_t offset, uint64_t size) {
  uint64_t len = FdSize(fd);
  if (offset + size > len) return false;
  void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return false;
  std::memset(static_cast<char*>(p) + offset, 0xee, size);
  ::munmap(p, len);
  return true;
}

}  // namespace

TEST_CASE("a reader cannot make its descriptor or mapping writable", "[hostile]") {
  NeedRoot();
  Daemon d = StartShared();
  Guid guid = PutAs(d, kAlice, kSize, 7);
  int mallory = RunAs(kMallory, kMallory, {}, [&] {
    Client c = d.Connect();
    auto obj = c.Get(guid);
    auto info = c.Stat(guid);
    if (!obj.ok() || !info.ok()) return 10;
    const FrameInfo& f = info->frames.at(0);
    std::vector<int> fds = SegmentFds();
    if (fds.empty()) return 11;
    for (int fd : fds) {
      // Map it writable: refused, since the descriptor is read-only.
      errno = 0;
      void* p = ::mmap(nullptr, FdSize(fd), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (p != MAP_FAILED) {
        Overwrite(fd, f.offset, f.size);
        return 1;
      }
      if (errno != EACCES) return 2;
      // Reopen it read-write through /proc: refused, the memory is not this user's.
      int again = ::open(("/proc/self/fd/" + std::to_string(fd)).c_str(), O_RDWR);
      if (again >= 0) {
        Overwrite(again, f.offset, f.size);
        return 3;
      }
    }
    // Make the library's read-only mapping writable: refused.
    auto* page = reinterpret_cast<std::byte*>(reinterpret_cast<uintptr_t>(obj->frame(0).data()) &
                                              ~uintptr_t{4095});
    if (::mprotect(page, 4096, PROT_READ | PROT_WRITE) == 0) {
      std::memset(const_cast<std::byte*>(obj->frame(0).data()), 0xee, 64);
      return 4;
    }
    return 0;
  });
  CHECK(mallory == 0);
  CHECK(IntactFor(d, kBob, guid, kSize, 7));
  CHECK(IntactFor(d, kAlice, guid, kSize, 7));
}

TEST_CASE("a creator's writable descriptor reaches no other user's object", "[hostile]") {
  NeedRoot();
  Daemon d = StartShared();
  Guid guid = PutAs(d, kAlice, kSize, 8);
  int mallory = RunAs(kMallory, kMallory, {}, [&] {
    Client c = d.Connect();
    auto info = c.Stat(guid);
    auto draft = c.Create({4096});  // brings Mallory a read-write descriptor
    if (!info.ok() || !draft.ok()) return 10;
    const FrameInfo& f = info->frames.at(0);
    int written = 0;
    for (int fd : SegmentFds()) {
      if ((::fcntl(fd, F_GETFL) & O_ACCMODE) != O_RDWR) continue;
      // Wherever this descriptor leads, write over the place where Alice's object lies.
      written += Overwrite(fd, f.offset, f.size);
    }
    return written > 0 ? 0 : 11;
  });
  CHECK(mallory == 0);
  CHECK(IntactFor(d, kBob, guid, kSize, 8));
  CHECK(d.Connect().Ping().ok());
}

TEST_CASE("no received descriptor can resize a segment, and the daemon survives a try",
          "[hostile]") {
  NeedRoot();
  Daemon d = StartShared();
  Guid guid = PutAs(d, kAlice, kSize, 9);
  int mallory = RunAs(kMallory, kMallory, {}, [&] {
    Client c = d.Connect();
    auto obj = c.Get(guid);
    auto draft = c.Create({4096});
    if (!obj.ok() || !draft.ok()) return 10;
    std::vector<int> fds = SegmentFds();
    if (fds.empty()) return 11;
    for (int fd : fds) {
      uint64_t size = FdSize(fd);
      bool writable = (::fcntl(fd, F_GETFL) & O_ACCMODE) == O_RDWR;
      for (off_t to : {off_t{0}, static_cast<off_t>(size / 2), static_cast<off_t>(2 * size)}) {
        errno = 0;
        if (::ftruncate(fd, to) == 0) {
          // Shrunk for good: the next small put finds its pages gone.
          if (to == 0) return c.Put(Pattern(100, 1)).ok() ? 1 : 4;
          continue;
        }
        // A writable descriptor is refused by the seals; a read-only one is not writable at all.
        if (writable && errno != EPERM) return 2;
      }
      if (FdSize(fd) != size) return 3;
    }
    // A small put next: the daemon writes small objects itself, through its own mapping.
    return c.Put(Pattern(100, 1)).ok() ? 0 : 12;
  });
  CHECK(mallory == 0);
  // The daemon lives, and serves small puts of everyone.
  Client root = d.Connect();
  auto small = root.Put(Pattern(100, 2));
  REQUIRE(small.ok());
  CHECK(IntactFor(d, kAlice, guid, kSize, 9));
  CHECK(IntactFor(d, kBob, *small, 100, 2));
}

TEST_CASE("files squatting the old segment names in /dev/shm make no create fail", "[hostile]") {
  NeedRoot();
  Daemon d = StartShared({"--segment-size", "4MiB"});
  // The names depot once gave its segments: user, hash of the socket path, sequential id.
  std::string prefix = ShmSource::NamePrefix(d.socket());
  std::vector<std::string> squats;
  for (int id = 1; id <= 32; ++id) squats.push_back("/dev/shm/" + prefix + std::to_string(id));
  int mallory = RunAs(kMallory, kMallory, {}, [&] {
    for (const std::string& path : squats) {
      int fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_RDWR, 0644);
      if (fd < 0) return 1;
      ::close(fd);
    }
    return 0;
  });
  REQUIRE(mallory == 0);
  // Enough puts to make several segments, each under a name Mallory took.
  std::vector<Guid> ids;
  for (uint32_t i = 0; i < 8; ++i) ids.push_back(PutAs(d, kAlice, (3 << 20) + i, 20 + i));
  for (uint32_t i = 0; i < ids.size(); ++i) {
    CHECK(IntactFor(d, kBob, ids[i], (3 << 20) + i, 20 + i));
  }
  for (const std::string& path : squats) ::unlink(path.c_str());
}
