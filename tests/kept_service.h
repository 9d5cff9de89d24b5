// Test support for memory kept across restarts: depotd under the descriptor store's stand-in
// (tests/fd_store_stand_in.h), objects put and checked byte for byte, and processes that stay
// connected to it.
#ifndef DEPOT_TESTS_KEPT_SERVICE_H_
#define DEPOT_TESTS_KEPT_SERVICE_H_

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "tests/daemon_fixture.h"
#include "tests/fd_store_stand_in.h"

namespace depot::test {

using namespace std::chrono_literals;

// depotd under the stand-in: NOTIFY_SOCKET set, what the store kept passed to it. `binary`: the
// daemon to run (the stand-in GPUs' memfd_depotd, say); by default the one Daemon runs
// ($DEPOT_TEST_DEPOTD where the GPU kit sets it, else the build's).
struct Service {
  Service(const std::string& dir, FdStoreStandIn& store, std::vector<std::string> args = {},
          std::string binary = "")
      : socket(dir + "/depot.sock"), log(dir + "/depotd.log") {
    if (binary.empty()) {
      const char* kit = std::getenv("DEPOT_TEST_DEPOTD");
      binary = kit != nullptr ? kit : DEPOTD_PATH;
    }
    store.Drain();
    pid = Spawn([&]() {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      ::dup2(out, STDERR_FILENO);
      ::setenv("NOTIFY_SOCKET", store.path().c_str(), 1);
      store.PassToChild();
      std::vector<std::string> argv{binary, "--socket", socket, "--capacity", "256MiB"};
      argv.insert(argv.end(), args.begin(), args.end());
      std::vector<char*> c;
      for (auto& a : argv) c.push_back(a.data());
      c.push_back(nullptr);
      ::execv(c[0], c.data());
      return 127;
    });
  }
  ~Service() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      Wait(pid);
    }
  }
  // `reconnect_wait` 0: a client that never connects again after the daemon went.
  Client Connect(std::chrono::milliseconds reconnect_wait = std::chrono::seconds(10)) {
    std::optional<Client> client;
    bool up = WaitFor([&] {
      auto c = Client::Connect({.socket_path = socket,
                                .client_name = "kept_memory_test",
                                .reconnect_wait = reconnect_wait});
      if (c.ok()) client.emplace(std::move(*c));
      return c.ok();
    });
    INFO("log:\n" << Log());
    REQUIRE(up);
    return std::move(*client);
  }
  void Kill(int signo = SIGKILL) {  // SIGTERM: a clean stop, as systemctl restart makes
    ::kill(pid, signo);
    Wait(pid);
    pid = -1;
  }
  std::string Log() const {
    std::ifstream in(log);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  std::string socket, log;
  pid_t pid = -1;
};

struct Put {
  Guid guid;
  std::vector<std::vector<std::byte>> frames;
};

inline Put PutFrames(Client& c, std::vector<size_t> sizes, uint32_t seed,
                     const CreateOptions& o = {}) {
  Put p;
  std::vector<std::span<const std::byte>> spans;
  for (size_t i = 0; i < sizes.size(); ++i) p.frames.push_back(Pattern(sizes[i], seed + i));
  for (auto& f : p.frames) spans.emplace_back(f);
  auto id = c.Put(std::span<const std::span<const std::byte>>(spans), o);
  INFO(id.status().ToString());
  REQUIRE(id.ok());
  p.guid = *id;
  return p;
}

// Kills `service` once the descriptor store has everything it handed over so far: a status
// through `c` first makes the daemon handle all that `c` sent before it.
inline void Crash(Service& service, Client& c, FdStoreStandIn& store) {
  StatusOf(c);
  store.Drain(1s);
  service.Kill();
}

inline void CheckSame(Client& c, const Put& p) {
  auto o = c.Get(p.guid);
  INFO(p.guid.ToString() << ": " << o.status().ToString());
  REQUIRE(o.ok());
  REQUIRE(o->frame_count() == p.frames.size());
  for (size_t i = 0; i < p.frames.size(); ++i) {
    REQUIRE(o->frame(i).size() == p.frames[i].size());
    if (p.frames[i].empty()) continue;  // an empty frame may have no address at all
    CHECK(std::memcmp(o->frame(i).data(), p.frames[i].data(), p.frames[i].size()) == 0);
  }
}

// Every one of `puts` was adopted by `service`, none dropped, and reads back the same through `c`.
inline void CheckAllAdopted(Client& c, const Service& service, const std::vector<Put>& puts) {
  auto st = StatusOf(c);
  INFO(service.Log());
  CHECK(st.adopted_objects == puts.size());
  CHECK(st.adoption_dropped == 0);
  for (const Put& p : puts) CheckSame(c, p);
}

// A process with `clients` connections to `socket` (none reconnects), alive until killed.
inline pid_t SpawnConnected(const std::string& socket, int clients) {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  pid_t pid = Spawn([&] {
    std::vector<Client> held;
    for (int i = 0; i < clients; ++i) {
      auto c = Client::Connect({.socket_path = socket,
                                .client_name = "connected",
                                .reconnect_wait = std::chrono::milliseconds(0)});
      if (!c.ok()) return 1;
      held.push_back(std::move(*c));
    }
    char ready = 1;
    if (::write(fds[1], &ready, 1) != 1) return 2;
    ::pause();
    return 0;
  });
  ::close(fds[1]);
  pollfd p{fds[0], POLLIN, 0};
  char ready = 0;
  bool up = ::poll(&p, 1, 10000) == 1 && ::read(fds[0], &ready, 1) == 1;
  ::close(fds[0]);
  REQUIRE(up);
  return pid;
}

// One object put into `service` through a connection closed since, whose ring has left the store.
inline Put PutAndLeave(Service& service, FdStoreStandIn& store) {
  Put kept;
  {
    Client c = service.Connect();
    kept = PutFrames(c, {4096}, 3);
  }
  REQUIRE(WaitFor([&] { return store.Count("depot.ring.") == 0; }, 10s));
  return kept;
}

}  // namespace depot::test

#endif  // DEPOT_TESTS_KEPT_SERVICE_H_
