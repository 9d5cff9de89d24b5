// The grace period after a restart ends as soon as no process connected to the last depotd can
// still use its memory (SessionCensus): each such process has exited. A real daemon under the
// descriptor store's stand-in, killed (or stopped) and started again, with real client processes.
#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <optional>
#include <thread>

#include "daemon/kept_memory.h"
#include "tests/kept_service.h"

using namespace depot;
using namespace depot::test;
using namespace std::chrono_literals;

TEST_CASE("Kept segments open at once when no process connected to the last daemon lives",
          "[kept][census]") {
  std::string dir = TempDir();
  FdStoreStandIn store(dir + "/notify");
  std::optional<Service> first(std::in_place, dir, store);
  Put kept = PutAndLeave(*first, store);
  REQUIRE(store.Count("depot.sessions") == 1);
  first->Kill();
  first.reset();
  store.Drain();
  Service second(dir, store, {"--restart-grace-ms", "600000"});
  Client c = second.Connect();
  CHECK(WaitFor([&] { return StatusOf(c).kept_closed_bytes == 0; }, 10s));
  INFO(second.Log());
  CHECK(second.Log().find("every process connected to the last depotd exited") !=
        std::string::npos);
  CheckSame(c, kept);
  CHECK(store.Count("depot.sessions") == 1);  // the new daemon's census took the last one's place
  std::filesystem::remove_all(dir);
}

TEST_CASE("The grace period lasts while a process connected to the last daemon lives",
          "[kept][census]") {
  // A kill -9, or a clean stop: that closes the session, but the process carries on.
  int signo = GENERATE(SIGKILL, SIGTERM);
  INFO("the last daemon ended by signal " << signo);
  std::string dir = TempDir();
  FdStoreStandIn store(dir + "/notify");
  std::optional<Service> first(std::in_place, dir, store);
  Put kept = PutAndLeave(*first, store);
  pid_t other = SpawnConnected(first->socket, 1);
  REQUIRE(WaitFor([&] { return store.Count("depot.ring.") == 1; }, 10s));
  first->Kill(signo);
  first.reset();
  store.Drain();
  CHECK(store.Count("depot.ring.") == 1);
  Service second(dir, store, {"--restart-grace-ms", "600000"});
  Client c = second.Connect();
  std::this_thread::sleep_for(1s);
  INFO(second.Log());
  CHECK(StatusOf(c).kept_closed_bytes > 0);  // it may still read the kept segments, or write
  ::kill(other, SIGKILL);
  Wait(other);
  CHECK(WaitFor([&] { return StatusOf(c).kept_closed_bytes == 0; }, 10s));
  CheckSame(c, kept);
  std::filesystem::remove_all(dir);
}

TEST_CASE("Sessions the last daemon kept no ring for keep the grace period to its end",
          "[kept][census]") {
  std::string dir = TempDir();
  FdStoreStandIn store(dir + "/notify");
  std::optional<Service> first(std::in_place, dir, store);
  PutAndLeave(*first, store);
  // One session more than a user's kept rings: the next daemon cannot know of the last one.
  pid_t other = SpawnConnected(first->socket, KeptMemory::kRingsPerUser + 1);
  REQUIRE(WaitFor([&] { return store.Count("depot.ring.") == KeptMemory::kRingsPerUser; }, 10s));
  first->Kill();
  first.reset();
  ::kill(other, SIGKILL);
  Wait(other);
  store.Drain();
  Service second(dir, store, {"--restart-grace-ms", "600000"});
  Client c = second.Connect();
  std::this_thread::sleep_for(1s);
  INFO(second.Log());
  CHECK(StatusOf(c).kept_closed_bytes > 0);
  CHECK(second.Log().find("counted sessions it kept no ring for") != std::string::npos);
  std::filesystem::remove_all(dir);
}
