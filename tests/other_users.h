// Helpers for tests that run client processes as other users: throwaway uids (no account needs to
// exist for a process to run as one), a daemon other users can reach, and running a function in a
// child as a given uid. They need root; NeedRoot skips, saying so, elsewhere.
#ifndef DEPOT_TESTS_OTHER_USERS_H_
#define DEPOT_TESTS_OTHER_USERS_H_

#include <grp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <functional>
#include <string>
#include <vector>

#include "tests/daemon_fixture.h"

namespace depot::test {

inline constexpr uid_t kAlice = 41001;
inline constexpr uid_t kBob = 41002;
inline constexpr uid_t kMallory = 41003;
inline constexpr gid_t kStaff = 41100;

inline void NeedRoot() {
  if (::geteuid() != 0) Skip("needs root to run client processes as other uids");
}

// A daemon other users can reach: the socket's directory is searchable and the socket 0666, so
// the daemon's own check is the only one. A capacity of 64 MiB unless `args` names one.
inline Daemon StartOpen(std::vector<std::string> args) {
  std::string dir = TempDir();
  REQUIRE(::chmod(dir.c_str(), 0755) == 0);
  if (std::find(args.begin(), args.end(), "--capacity") == args.end()) {
    args.insert(args.end(), {"--capacity", "64MiB"});
  }
  args.insert(args.end(), {"--socket-mode", "0666"});
  return Daemon(dir + "/depot.sock", std::move(args));
}

// Runs `fn` in a child process as `uid` with primary group `gid` and supplementary `groups`.
inline int RunAs(uid_t uid, gid_t gid, std::vector<gid_t> groups, const std::function<int()>& fn) {
  return RunChild([&] {
    if (::setgroups(groups.size(), groups.data()) != 0 || ::setresgid(gid, gid, gid) != 0 ||
        ::setresuid(uid, uid, uid) != 0) {
      return 100;
    }
    return fn();
  });
}

// `uid` puts Pattern(size, seed) from a process of its own; returns the object's GUID, found in
// the daemon's listing by its creator and size.
inline Guid PutAs(const Daemon& d, uid_t uid, size_t size, uint32_t seed) {
  int rc = RunAs(uid, uid, {}, [&] { return d.Connect().Put(Pattern(size, seed)).ok() ? 0 : 1; });
  REQUIRE(rc == 0);
  Guid out;
  auto page = d.Connect().List();
  REQUIRE(page.ok());
  for (const ObjectInfo& o : page->objects) {
    if (o.creator_uid == uid && o.size == size) out = o.guid;
  }
  REQUIRE_FALSE(out.is_nil());
  return out;
}

// 0 when `uid`'s one object (in the namespace its process sees) holds `bytes`, else why not.
inline int OwnObjectHolds(const Daemon& d, uid_t uid, const std::vector<std::byte>& bytes) {
  Client c = d.Connect();
  auto page = c.List();
  if (!page.ok()) return 1;
  std::vector<Guid> own;
  for (const ObjectInfo& o : page->objects) {
    if (o.creator_uid == uid) own.push_back(o.guid);
  }
  if (own.size() != 1) return 2;
  auto got = c.Get(own[0], kNoWait);
  return got.ok() && Holds(*got, bytes) ? 0 : 3;
}

// Deletes every object `uid` created (in the namespace its process sees); how many.
inline int DeleteOwnObjects(const Daemon& d, uid_t uid) {
  Client c = d.Connect();
  auto page = c.List();
  if (!page.ok()) return -1;
  int deleted = 0;
  for (const ObjectInfo& o : page->objects) {
    if (o.creator_uid == uid && c.Delete(o.guid).ok()) ++deleted;
  }
  return deleted;
}

}  // namespace depot::test

#endif  // DEPOT_TESTS_OTHER_USERS_H_
