// A process that forks while connected (a data loader's workers, multiprocessing's default start
// method on Linux): the child uses nothing of its parent's connection and undoes nothing of it.
// Its calls say it must connect its own client; dropping the objects it inherited and the
// client itself neither releases the parent's references nor waits for the parent's threads.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <functional>
#include <optional>
#include <thread>

#include "tests/daemon_fixture.h"

using namespace depot;
using namespace depot::test;
using namespace std::chrono_literals;

namespace {

// What the child found wrong (exit codes), so that the parent can say it.
enum ChildResult { kFine = 0, kGetServed = 10, kPutServed, kPingServed, kWrongError, kNewClient };

bool SaysForked(const Status& st) {
  return st.IsDisconnected() && st.message().find("forked") != std::string::npos;
}

}  // namespace

namespace {

// A daemon with the index off (every get is a round trip, held by a handle that the batcher
// releases) or on (a get is held by a reference slot in shared memory), and a client holding
// one object and whose batcher's flusher thread runs, waiting for releases.
struct Parent {
  explicit Parent(const std::string& index_entries)
      : d({"--capacity", "256MiB", "--index-entries", index_entries}), client(d.Connect()) {
    auto id = client.Put(bytes);
    REQUIRE(id.ok());
    held_id = *id;
    auto got = client.Get(held_id);
    REQUIRE(got.ok());
    held = std::move(*got);
    auto dropped = client.Put(Pattern(1000, 8));
    REQUIRE(dropped.ok());
    other = *dropped;
    REQUIRE(client.Get(other).ok());
    // The release goes with this ping, and the flusher, idle again, waits on its condition
    // variable when the test forks: a thread of the parent's allocating at the fork would leave
    // AddressSanitizer's allocator locked in the child (GCC 12's takes no lock around fork, as
    // glibc's malloc does), and the child's own threads would wait for it forever.
    REQUIRE(client.Ping().ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }

  // Runs `fn` in a forked child and returns its exit code; fails the test if it hangs.
  int InChild(std::function<int()> fn) {
    pid_t child = Spawn(std::move(fn));
    int status = 0;
    bool exited = WaitFor([&] { return ::waitpid(child, &status, WNOHANG) == child; }, 60s);
    if (!exited) {
      ::kill(child, SIGKILL);
      ::waitpid(child, &status, 0);
      FAIL(
          "the forked child hung (joining its parent's flusher thread, or on a lock the "
          "parent held)");
    }
    REQUIRE(WIFEXITED(status));
    return WEXITSTATUS(status);
  }

  // The parent's connection works, and its object stays held: deleted by another client and its
  // space asked for again, its bytes do not change.
  void CheckUntouched() {
    REQUIRE(client.Ping().ok());
    Client deleter = d.Connect();
    REQUIRE(deleter.Delete(held_id).ok());
    CHECK(StatusOf(deleter).objects_deleted == 1);  // kept for its holder
    for (uint32_t i = 0; i < 64; ++i) REQUIRE(deleter.Put(Pattern(64 << 10, 100 + i)).ok());
    CHECK(Holds(*held, bytes));
    auto still = client.Get(other);
    REQUIRE(still.ok());
    CHECK(Holds(*still, Pattern(1000, 8)));
  }

  Daemon d;
  Client client;
  const std::vector<std::byte> bytes = Pattern(64 << 10, 7);
  Guid held_id, other;
  std::optional<Object> held;
};

}  // namespace

TEST_CASE("a child forked from a connected process is told to connect its own client", "[fork]") {
  const std::string entries = GENERATE("0", "65536");
  INFO("index_entries " << entries);
  Parent p(entries);
  int result = p.InChild([&] {
    auto again = p.client.Get(p.held_id);
    if (again.ok()) return kGetServed;
    if (!SaysForked(again.status())) return kWrongError;
    const Guid both[] = {p.held_id, p.other};
    auto many = p.client.Get(both);
    if (many[0].ok() || many[1].ok()) return kGetServed;
    if (!SaysForked(many[0].status())) return kWrongError;
    if (p.client.Put(Pattern(100, 9)).ok()) return kPutServed;
    Status ping = p.client.Ping();
    if (ping.ok()) return kPingServed;
    if (!SaysForked(ping)) return kWrongError;
    Client own = p.d.Connect();  // one of its own works
    if (!own.Get(p.other).ok()) return kNewClient;
    return kFine;
  });
  CHECK(result == kFine);
  p.CheckUntouched();
}

TEST_CASE("a forked child that drops what it inherited releases none of its parent's references",
          "[fork]") {
  const std::string entries = GENERATE("0", "65536");
  INFO("index_entries " << entries);
  Parent p(entries);
  int result = p.InChild([&] {
    p.held.reset();  // the parent's reference: not the child's to release
    { Client gone = std::move(p.client); }
    return kFine;
  });
  CHECK(result == kFine);
  p.CheckUntouched();
}
