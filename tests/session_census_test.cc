// The grace period after a restart ends as soon as no process connected to the last depotd can
// still use its memory unheld (SessionCensus): each such process has exited, or has said so from
// its reconnected library (a resume: it holds again all it maps, and no draft or lease of the old
// session is open). A real daemon under the descriptor store's stand-in, killed (or stopped) and
// started again, with real client processes; a resume naming another process's session, from the
// same user and from another, is refused.
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <optional>
#include <thread>

#include "daemon/kept_memory.h"
#include "tests/kept_service.h"
#include "tests/other_users.h"
#include "tests/raw_connection.h"

using namespace depot;
using namespace depot::test;
using namespace std::chrono_literals;

namespace {

// A resume of `session` sent by this process on a connection of its own to `socket`: the answer.
Status RawResume(const std::string& socket, uint64_t session) {
  Raw raw(socket);
  raw.Hello();  // request 1; its reply's fds are closed as they come
  flatbuffers::FlatBufferBuilder fbb(64);
  fbb.Finish(wire::CreateResumeRequest(fbb, session));
  raw.Write(proto::Encode(static_cast<uint16_t>(proto::MsgType::kResume), 2, fbb));
  proto::Header h{};
  std::vector<uint8_t> body;
  while (raw.Read(h, body)) {
    if (h.request_id == 1 && h.type == proto::ReplyType(proto::MsgType::kHello)) continue;
    if (h.type == proto::ReplyType(proto::MsgType::kResume)) return Status::OK();
    if (h.type != static_cast<uint16_t>(proto::MsgType::kError)) break;
    const auto* e = proto::Body<wire::ErrorReply>(body);
    return Status(static_cast<Status::Code>(e->code()), e->message()->str());
  }
  return Status::ProtocolError("no answer to the resume");
}

// The session the one ring kept in `store` names (depot.ring.KEY.UID.SESSION.PID).
uint64_t KeptSession(const FdStoreStandIn& store) {
  auto names = store.Names("depot.ring.");
  REQUIRE(names.size() == 1);
  uint32_t key = 0, uid = 0;
  uint64_t session = 0;
  int32_t pid = 0;
  REQUIRE(std::sscanf(names[0].c_str(), "depot.ring.%u.%u.%lu.%d", &key, &uid, &session, &pid) ==
          4);
  return session;
}

// Stops `first` by `signo` once the store has what it handed over through `c`, and starts the
// next daemon with a grace period too long for any test to see the end of.
Service Restart(std::optional<Service>& first, Client& c, FdStoreStandIn& store,
                const std::string& dir, int signo = SIGKILL) {
  StatusOf(c);
  store.Drain(1s);
  first->Kill(signo);
  first.reset();
  store.Drain();
  return Service(dir, store, {"--restart-grace-ms", "600000"});
}

bool Closed(Client& c) { return StatusOf(c).kept_closed_bytes > 0; }

}  // namespace

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

TEST_CASE("A process that holds again all it maps ends the grace period as it reconnects",
          "[kept][census][resume]") {
  int signo = GENERATE(SIGKILL, SIGTERM);
  INFO("the last daemon ended by signal " << signo);
  std::string dir = TempDir();
  FdStoreStandIn store(dir + "/notify");
  std::optional<Service> first(std::in_place, dir, store);
  Client c = first->Connect();
  Put held = PutFrames(c, {1 << 20}, 9);
  auto view = c.Get(held.guid);
  REQUIRE(view.ok());
  Service second = Restart(first, c, store, dir, signo);
  Client d = second.Connect();
  INFO(second.Log());
  // `c` makes no call: its watcher reconnected, held `held` again and resumed.
  CHECK(WaitFor([&] { return !Closed(d); }, 10s));
  CHECK(StatusOf(d).grace_resumed == 1);
  CHECK(StatusOf(d).grace_waiting == 0);
  CHECK(second.Log().find("1 resumed and 0 ended with their process") != std::string::npos);
  // The next daemon holds it for `c`: deleted, its bytes stay, whatever is put.
  REQUIRE(d.Delete(held.guid).ok());
  for (int i = 0; i < 150; ++i) PutFrames(d, {1 << 20}, 1000 + i);
  CHECK(std::memcmp(view->frame(0).data(), held.frames[0].data(), held.frames[0].size()) == 0);
  std::filesystem::remove_all(dir);
}

TEST_CASE("A draft open across a crash keeps the grace period until it is sealed or aborted",
          "[kept][census][resume]") {
  std::string dir = TempDir();
  FdStoreStandIn store(dir + "/notify");
  std::optional<Service> first(std::in_place, dir, store);
  Client c = first->Connect();
  Put held = PutFrames(c, {4096}, 9);
  auto view = c.Get(held.guid);  // the watcher reconnects at once
  REQUIRE(view.ok());
  auto draft = c.Create({1 << 20});
  REQUIRE(draft.ok());
  Service second = Restart(first, c, store, dir);
  Client d = second.Connect();
  INFO(second.Log());
  REQUIRE(WaitFor([&] { return d.Stat(held.guid).ok() && d.Stat(held.guid)->refcount == 1; }, 10s));
  std::this_thread::sleep_for(500ms);
  CHECK(Closed(d));  // `c` may still write into the draft: its bytes are free to the next daemon
  CHECK(StatusOf(d).grace_waiting == 1);
  std::memset(draft->frame(0).data(), 1, draft->frame(0).size());
  draft = Status::NotFound("let go");  // aborted
  CHECK(WaitFor([&] { return !Closed(d); }, 10s));
  CHECK(second.Log().find("1 resumed") != std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST_CASE("An object mapped across a crash that the next daemon lacks keeps the grace period",
          "[kept][census][resume]") {
  std::string dir = TempDir();
  FdStoreStandIn store(dir + "/notify");
  std::optional<Service> first(std::in_place, dir, store);
  Client c = first->Connect();
  Put kept = PutFrames(c, {4096}, 8);
  Put deleted = PutFrames(c, {1 << 20}, 9);
  auto kept_view = c.Get(kept.guid);
  auto view = c.Get(deleted.guid);
  REQUIRE(view.ok());
  REQUIRE(c.Delete(deleted.guid).ok());  // deleted while held: in no catalog
  Service second = Restart(first, c, store, dir);
  Client d = second.Connect();
  INFO(second.Log());
  REQUIRE(WaitFor([&] { return d.Stat(kept.guid).ok() && d.Stat(kept.guid)->refcount == 1; }, 10s));
  std::this_thread::sleep_for(500ms);
  CHECK(Closed(d));  // nothing else holds `deleted`'s bytes for `c`
  CHECK(std::memcmp(view->frame(0).data(), deleted.frames[0].data(), deleted.frames[0].size()) ==
        0);
  view = Status::NotFound("let go");
  CHECK(WaitFor([&] { return !Closed(d); }, 10s));
  CHECK(second.Log().find("1 resumed") != std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST_CASE("A process cannot end the grace period with another process's session",
          "[kept][census][resume][hostile]") {
  NeedRoot();
  std::string dir = TempDir();
  REQUIRE(::chmod(dir.c_str(), 0755) == 0);
  FdStoreStandIn store(dir + "/notify");
  std::vector<std::string> open{"--socket-mode", "0666", "--allow-users", std::to_string(kMallory)};
  std::optional<Service> first(std::in_place, dir, store, open);
  PutAndLeave(*first, store);
  pid_t other = SpawnConnected(first->socket, 1);  // never reconnects
  REQUIRE(WaitFor([&] { return store.Count("depot.ring.") == 1; }, 10s));
  uint64_t session = KeptSession(store);
  first->Kill();
  first.reset();
  store.Drain();
  open.insert(open.end(), {"--restart-grace-ms", "600000"});
  Service second(dir, store, open);
  Client d = second.Connect();
  INFO(second.Log());
  // Another process of the same user, and one of another user, each on a connection of its own.
  Status same_user = RawResume(second.socket, session);
  CHECK(same_user.IsNotFound());
  CHECK(same_user.message().find("not one the grace period waits for") != std::string::npos);
  CHECK(RunAs(kMallory, kMallory, {},
              [&] { return RawResume(second.socket, session).IsNotFound() ? 0 : 1; }) == 0);
  std::this_thread::sleep_for(300ms);
  CHECK(Closed(d));
  auto waiting = StatusOf(d);
  CHECK(waiting.grace_waiting == 1);
  CHECK(waiting.grace_resumed == 0);
  ::kill(other, SIGKILL);
  Wait(other);
  CHECK(WaitFor([&] { return !Closed(d); }, 10s));
  CHECK(second.Log().find("every process connected to the last depotd exited") !=
        std::string::npos);
  std::filesystem::remove_all(dir);
}
