// depotd as a systemd service: the unit files pass systemd's own checks, the sysusers and tmpfiles
// snippets make the user and the directory, socket activation serves the socket it is given
// (with the real systemd-socket-activate), and readiness is told over NOTIFY_SOCKET only when
// clients can connect.
//
// No systemd runs as PID 1 here, so the units themselves are never started: what needs PID 1
// (the sandboxing, User=, RuntimeDirectory=) is checked by systemd-analyze, not exercised.
#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "daemon/shm_source.h"
#include "proto/fd_passing.h"
#include "tests/daemon_fixture.h"

using namespace depot;
using namespace depot::test;
using namespace std::chrono_literals;

namespace {

// Skips the test, naming the tool, when `tool` cannot be run here.
void RequireTool(const std::string& tool, const std::string& package) {
  if (Run({tool, "--version"}) == 127) {
    Skip(tool + " is not installed (Debian package " + package + "; scripts/deps installs it)");
  }
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteFile(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

// The text with every `from` replaced by `to`; fails the test when there is none.
std::string ReplaceAll(std::string text, const std::string& from, const std::string& to) {
  size_t at = text.find(from);
  REQUIRE(at != std::string::npos);
  for (; at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
  return text;
}

bool IsSocketFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
}

sockaddr_un Address(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  REQUIRE(path.size() < sizeof addr.sun_path);
  std::memcpy(addr.sun_path, path.data(), path.size());  // an abstract name starts with '\0'
  return addr;
}

// A Unix socket of `type` bound to `path`; listening when `listen` is set.
UniqueFd BoundSocket(int type, const std::string& path, bool listen) {
  UniqueFd fd(::socket(AF_UNIX, type | SOCK_CLOEXEC, 0));
  REQUIRE(fd.valid());
  sockaddr_un addr = Address(path);
  socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size());
  REQUIRE(::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), len) == 0);
  if (listen) REQUIRE(::listen(fd.get(), 16) == 0);
  return fd;
}

// True when a plain connect(2) to `path` succeeds now.
bool Connects(const std::string& path) {
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr = Address(path);
  return ::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
}

// Runs `argv` (searched on PATH) in a child whose stderr goes to `log`; `prepare` runs in the
// child just before exec. The child dies with the test (PR_SET_PDEATHSIG).
pid_t Start(std::vector<std::string> argv, const std::string& log,
            std::function<void()> prepare = {}) {
  return Spawn([argv, log, prepare]() mutable {
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    ::dup2(fd, STDERR_FILENO);
    ::dup2(fd, STDOUT_FILENO);
    if (fd > STDERR_FILENO) ::close(fd);
    if (prepare) prepare();
    std::vector<char*> cargv;
    for (auto& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    ::execvp(cargv[0], cargv.data());
    return 127;
  });
}

// In a child about to exec: hands `fds` over the way systemd does (fds 3, 4, ... with LISTEN_FDS
// and LISTEN_PID), for cases systemd-socket-activate cannot make.
void PassFds(const std::vector<int>& fds) {
  std::vector<int> high;
  for (int fd : fds) high.push_back(::fcntl(fd, F_DUPFD_CLOEXEC, 100));
  for (size_t i = 0; i < high.size(); ++i)
    ::dup2(high[i], 3 + static_cast<int>(i));  // clears CLOEXEC
  ::setenv("LISTEN_FDS", std::to_string(fds.size()).c_str(), 1);
  ::setenv("LISTEN_PID", std::to_string(::getpid()).c_str(), 1);
}

// Waits (bounded) for `pid` to exit; kills it and fails the test when it does not.
int ExitCode(pid_t pid, std::chrono::milliseconds limit = 10s) {
  int status = 0;
  bool exited = WaitFor([&] { return ::waitpid(pid, &status, WNOHANG) == pid; }, limit);
  if (!exited) {
    ::kill(pid, SIGKILL);
    Wait(pid);
    FAIL("process " << pid << " did not exit within " << limit.count() << " ms");
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Stops a test's daemon on the way out, however the test ends.
struct Reaper {
  pid_t pid = -1;
  ~Reaper() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      Wait(pid);
    }
  }
};

// The receiving end of NOTIFY_SOCKET: a Unix datagram socket, as systemd listens on.
class NotifyListener {
 public:
  explicit NotifyListener(std::string path)
      : path_(std::move(path)), fd_(BoundSocket(SOCK_DGRAM, path_, false)) {}

  const std::string& path() const { return path_; }

  // Receives datagrams until one holds the line `line` (returned whole), or "" after `limit`.
  std::string WaitForLine(const std::string& line, std::chrono::milliseconds limit = 10s) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (true) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return "";
      pollfd p{fd_.get(), POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char buf[4096];
      ssize_t n = ::recv(fd_.get(), buf, sizeof buf, 0);
      if (n <= 0) continue;
      std::string message(buf, static_cast<size_t>(n));
      received_.push_back(message);
      std::istringstream lines(message);
      for (std::string l; std::getline(lines, l);) {
        if (l == line) return message;
      }
    }
  }

  // Every datagram received so far, for failure messages.
  std::string Received() const {
    std::string all;
    for (const auto& m : received_) all += "[" + m + "]\n";
    return all;
  }

 private:
  std::string path_;
  UniqueFd fd_;
  std::vector<std::string> received_;
};

// Waits until a client connects on `socket` while `pid` runs; fails the test otherwise.
Client ConnectWhenUp(const std::string& socket, pid_t pid, const std::string& log) {
  std::optional<Client> client;
  bool exited = false;
  bool up = WaitFor([&] {
    int status;
    if (::waitpid(pid, &status, WNOHANG) == pid) return exited = true;
    auto c = Client::Connect({socket, "systemd_test"});
    if (c.ok()) client.emplace(std::move(*c));
    return c.ok();
  });
  INFO("log:\n" << ReadFile(log));
  REQUIRE_FALSE(exited);
  REQUIRE(up);
  return std::move(*client);
}

// Puts bytes and gets them back through `c`.
void CheckPutGet(Client& c) {
  auto data = Pattern(1 << 20, 7);
  auto id = c.Put(data);
  INFO(id.status().ToString());
  REQUIRE(id.ok());
  auto obj = c.Get(*id);
  INFO(obj.status().ToString());
  REQUIRE(obj.ok());
  REQUIRE(obj->frame(0).size() == data.size());
  CHECK(std::memcmp(obj->frame(0).data(), data.data(), data.size()) == 0);
}

const std::string kSource = DEPOT_SOURCE_DIR;

}  // namespace

TEST_CASE("systemd-analyze verify accepts depotd.service and depotd.socket", "[systemd]") {
  RequireTool("systemd-analyze", "systemd");
  std::string dir = TempDir();
  std::string service = ReadFile(kSource + "/systemd/depotd.service");
  std::string socket = ReadFile(kSource + "/systemd/depotd.socket");
  // The service and the socket name the same path, and so does the default configuration.
  CHECK(service.find("--socket /run/depot/depot.sock") != std::string::npos);
  CHECK(socket.find("\nListenStream=/run/depot/depot.sock\n") != std::string::npos);
  CHECK(ReadFile(kSource + "/config/depotd.conf").find("/run/depot/depot.sock") !=
        std::string::npos);
  // verify checks that ExecStart= can be executed: point it at the depotd just built.
  WriteFile(dir + "/depotd.service", ReplaceAll(service, "/usr/bin/depotd", DEPOTD_PATH));
  WriteFile(dir + "/depotd.socket", socket);
  std::string out, err;
  int rc = Run(
      {"systemd-analyze", "verify", "--man=no", dir + "/depotd.service", dir + "/depotd.socket"},
      &out, &err);
  INFO("systemd-analyze verify said:\n" << out << err);
  CHECK(rc == 0);
  // Unknown keys and values it cannot parse are only warned about (exit 0): there must be none.
  CHECK(out + err == "");
  std::filesystem::remove_all(dir);
}

TEST_CASE("systemd-analyze security rates the depotd.service sandbox at most 4.0", "[systemd]") {
  RequireTool("systemd-analyze", "systemd");
  std::string dir = TempDir();
  std::string service = ReadFile(kSource + "/systemd/depotd.service");
  WriteFile(dir + "/depotd.service", ReplaceAll(service, "/usr/bin/depotd", DEPOTD_PATH));
  std::string out, err;
  // --offline reads the unit file itself, so no running systemd is needed; --threshold is on
  // systemd's 0..100 scale (4.0 shows as 40).
  int rc = Run({"systemd-analyze", "security", "--offline=yes", "--threshold=40", "--no-pager",
                dir + "/depotd.service"},
               &out, &err);
  if (err.find("--offline") != std::string::npos || err.find("--threshold") != std::string::npos) {
    Skip("this systemd-analyze has no security --offline/--threshold (systemd 250 or later): " +
         err);
  }
  INFO(out << err);
  CHECK(rc == 0);
  std::filesystem::remove_all(dir);
}

TEST_CASE("systemd sysusers and tmpfiles snippets make the depot user and /run/depot",
          "[systemd]") {
  RequireTool("systemd-sysusers", "systemd");
  RequireTool("systemd-tmpfiles", "systemd");
  if (::getuid() != 0) Skip("needs root: systemd-tmpfiles gives /run/depot to the depot user");
  // A scratch root: the host's users and /run are left alone.
  std::string root = TempDir();
  std::filesystem::create_directories(root + "/etc");
  std::string out, err;
  int rc =
      Run({"systemd-sysusers", "--root=" + root, kSource + "/systemd/depot.sysusers"}, &out, &err);
  INFO(out << err);
  REQUIRE(rc == 0);
  std::string passwd = ReadFile(root + "/etc/passwd");
  INFO("passwd:\n" << passwd << "group:\n" << ReadFile(root + "/etc/group"));
  REQUIRE(passwd.starts_with("depot:x:"));
  CHECK(passwd.find(":depot object store:/nonexistent:") != std::string::npos);
  std::string group = ReadFile(root + "/etc/group");
  REQUIRE(group.starts_with("depot:x:"));
  unsigned uid = 0, user_gid = 0, gid = 0;
  REQUIRE(std::sscanf(passwd.c_str(), "depot:x:%u:%u:", &uid, &user_gid) == 2);
  REQUIRE(std::sscanf(group.c_str(), "depot:x:%u:", &gid) == 1);
  CHECK(user_gid == gid);  // the user's primary group is depot

  rc = Run({"systemd-tmpfiles", "--root=" + root, "--create", kSource + "/systemd/depot.tmpfiles"},
           &out, &err);
  INFO(out << err);
  REQUIRE(rc == 0);
  struct stat st;
  REQUIRE(::stat((root + "/run/depot").c_str(), &st) == 0);
  CHECK(S_ISDIR(st.st_mode));
  CHECK((st.st_mode & 07777) == 0750);
  CHECK(st.st_uid == uid);
  CHECK(st.st_gid == gid);
  std::filesystem::remove_all(root);
}

TEST_CASE("socket activation: depotd serves the socket systemd-socket-activate passes",
          "[systemd]") {
  RequireTool("systemd-socket-activate", "systemd");
  std::string dir = TempDir();
  std::string socket = dir + "/depot.sock", log = dir + "/depotd.log";
  // No --socket: the passed socket is the only one. systemd-socket-activate execs depotd in its
  // own process once a client knocks, so the pid is depotd's.
  Reaper daemon{Start({"systemd-socket-activate", "-l", socket, DEPOTD_PATH, "--capacity", "64MiB",
                       "--segment-size", "8MiB"},
                      log)};
  std::optional<Client> c = ConnectWhenUp(socket, daemon.pid, log);
  INFO("log:\n" << ReadFile(log));
  CheckPutGet(*c);
  auto status = c->GetStatus();
  REQUIRE(status.ok());
  CHECK(status->socket_path == socket);
  CHECK(status->daemon_pid == daemon.pid);
  CHECK(ReadFile(log).find("serving the socket systemd passed, " + socket) != std::string::npos);
  // Segment names and the lock file derive from the passed socket's path.
  std::string prefix = ShmSource::NamePrefix(socket);
  CHECK_FALSE(SegmentsOf(daemon.pid, prefix).empty());
  CHECK(std::filesystem::exists(socket + ".lock"));

  // The single-daemon lock still holds: a second depotd on that path is refused, naming the first.
  std::string out, err;
  int rc =
      Run({"timeout", "10", DEPOTD_PATH, "--socket", socket, "--capacity", "64MiB"}, &out, &err);
  INFO(err);
  CHECK(rc == 1);
  CHECK(err.find("another depotd (pid " + std::to_string(daemon.pid) + ") is already serving " +
                 socket) != std::string::npos);

  c.reset();  // disconnect before the daemon goes
  ::kill(daemon.pid, SIGTERM);
  CHECK(ExitCode(std::exchange(daemon.pid, -1)) == 0);
  // The socket file is the activator's, not depotd's: it stays. The segments had no file.
  CHECK(IsSocketFile(socket));
  std::filesystem::remove_all(dir);
}

TEST_CASE("socket activation: the passed socket wins over a different --socket", "[systemd]") {
  RequireTool("systemd-socket-activate", "systemd");
  std::string dir = TempDir();
  std::string socket = dir + "/depot.sock", other = dir + "/other.sock", log = dir + "/depotd.log";
  Reaper daemon{Start({"systemd-socket-activate", "-l", socket, DEPOTD_PATH, "--socket", other,
                       "--capacity", "64MiB", "--segment-size", "8MiB"},
                      log)};
  std::optional<Client> c = ConnectWhenUp(socket, daemon.pid, log);
  INFO("log:\n" << ReadFile(log));
  CheckPutGet(*c);
  auto status = c->GetStatus();
  REQUIRE(status.ok());
  CHECK(status->socket_path == socket);
  CHECK(ReadFile(log).find("warning systemd passed a socket bound to " + socket +
                           " but the configuration names " + other) != std::string::npos);
  // Nothing was made at the path the configuration named.
  CHECK_FALSE(std::filesystem::exists(other));
  CHECK_FALSE(std::filesystem::exists(other + ".lock"));
  c.reset();
  ::kill(daemon.pid, SIGTERM);
  CHECK(ExitCode(std::exchange(daemon.pid, -1)) == 0);
  CHECK(IsSocketFile(socket));
  std::filesystem::remove_all(dir);
}

TEST_CASE("socket activation: depotd refuses a passed socket it cannot serve", "[systemd]") {
  std::string dir = TempDir();
  std::string log = dir + "/depotd.log";
  std::vector<UniqueFd> fds;
  std::string expected;
  SECTION("a datagram socket") {
    fds.push_back(BoundSocket(SOCK_DGRAM, dir + "/dgram.sock", false));
    expected = "is not a listening Unix stream socket";
  }
  SECTION("a stream socket that does not listen") {
    fds.push_back(BoundSocket(SOCK_STREAM, dir + "/idle.sock", false));
    expected = "is not a listening Unix stream socket";
  }
  SECTION("two sockets") {
    fds.push_back(BoundSocket(SOCK_STREAM, dir + "/a.sock", true));
    fds.push_back(BoundSocket(SOCK_STREAM, dir + "/b.sock", true));
    expected = "systemd passed 2 sockets but depotd serves one";
  }
  SECTION("a socket in the abstract namespace") {
    fds.push_back(BoundSocket(
        SOCK_STREAM, std::string(1, '\0') + "depot-systemd-test-" + std::to_string(::getpid()),
        true));
    expected = "is in the abstract namespace but depotd needs a socket file";
  }
  std::vector<int> raw;
  for (auto& fd : fds) raw.push_back(fd.get());
  pid_t pid = Start({DEPOTD_PATH, "--socket", dir + "/depot.sock", "--capacity", "64MiB"}, log,
                    [raw] { PassFds(raw); });
  int rc = ExitCode(pid);
  std::string text = ReadFile(log);
  INFO("log:\n" << text);
  CHECK(rc == 1);
  CHECK(text.find(expected) != std::string::npos);
  // Every refusal says what to change in the socket unit.
  CHECK(text.find("ListenStream=") != std::string::npos);
  // It did not fall back to binding the configured path.
  CHECK_FALSE(std::filesystem::exists(dir + "/depot.sock"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("NOTIFY_SOCKET gets READY=1 once clients connect and STOPPING=1 on SIGTERM",
          "[systemd]") {
  std::string dir = TempDir();
  std::string socket = dir + "/depot.sock", log = dir + "/depotd.log";
  NotifyListener notify(dir + "/notify.sock");
  std::string notify_path = notify.path();
  // Prefaulted, so READY=1 must also wait for the whole pool to be reserved.
  Reaper daemon{Start({DEPOTD_PATH, "--socket", socket, "--capacity", "64MiB", "--prefault"}, log,
                      [notify_path] { ::setenv("NOTIFY_SOCKET", notify_path.c_str(), 1); })};

  std::string ready = notify.WaitForLine("READY=1");
  // Right now, with no retry: the socket must already accept and answer a client.
  bool connected = !ready.empty() && Connects(socket);
  auto client = Client::Connect({socket, "after READY=1"});
  INFO("datagrams:\n" << notify.Received() << "log:\n" << ReadFile(log));
  REQUIRE_FALSE(ready.empty());
  CHECK(connected);
  REQUIRE(client.ok());
  // The status line comes with READY=1.
  std::string status = "STATUS=serving " + socket + ": host pool 64.0 MiB (prefaulted), ";
  CHECK(ready.find(status + "0 clients") != std::string::npos);
  // ... and follows the clients as they come and go.
  CHECK(notify.WaitForLine(status + "1 client") != "");

  ::kill(daemon.pid, SIGTERM);
  CHECK(notify.WaitForLine("STOPPING=1") != "");
  CHECK(ExitCode(std::exchange(daemon.pid, -1)) == 0);
  std::filesystem::remove_all(dir);
}

// The journal's native protocol: datagrams of KEY=value lines (a value with a newline comes as
// KEY, a newline, its 64-bit little-endian length and the bytes). The daemon runs in a mount
// namespace whose /run/systemd/journal is a directory where this test listens, with
// JOURNAL_STREAM naming its stderr, as systemd sets it for a service.
TEST_CASE("under systemd, depotd logs to the journal with priorities and fields", "[systemd]") {
  if (::getuid() != 0) Skip("needs root to mount over /run/systemd in a mount namespace");
  if (Run({"unshare", "-m", "true"}) != 0) Skip("unshare -m is not permitted here");
  std::string journal = TempDir();
  int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::string path = journal + "/socket";
  std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  std::string dir = TempDir();
  REQUIRE(::chmod(dir.c_str(), 0755) == 0);  // another uid reaches the socket, and is refused
  std::vector<std::string> records;
  {
    Daemon d(dir + "/depot.sock", {"--capacity", "64MiB", "--socket-mode", "0666"},
             {"unshare", "-m", "sh", "-c",
              "mount --make-rprivate / && mount -t tmpfs tmpfs /run/systemd && "
              "mkdir /run/systemd/journal && mount --bind " +
                  journal +
                  " /run/systemd/journal && "
                  "JOURNAL_STREAM=$(stat -L -c %d:%i /dev/stderr) exec \"$0\" \"$@\""});
    // A refused client is logged as a warning.
    pid_t refused = Spawn([&] {
      if (::setresgid(41002, 41002, 41002) != 0 || ::setresuid(41002, 41002, 41002) != 0) {
        return 100;
      }
      ConnectOptions o;
      o.socket_path = d.socket();
      o.trusted_daemon_uid = 0;
      return Client::Connect(o).ok() ? 1 : 0;
    });
    CHECK(Wait(refused) == 0);
    d.Stop();
    // Nothing goes to stderr: the journal has it all.
    CHECK(d.Log().find("serving") == std::string::npos);
  }
  char buf[65536];
  while (true) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 500) <= 0) break;
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    records.emplace_back(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  std::string all;
  for (const auto& r : records) all += r + "\n--\n";
  INFO(all);
  auto find = [&](const std::string& part) {
    for (const auto& r : records) {
      if (r.find(part) != std::string::npos) return r;
    }
    return std::string();
  };
  std::string serving = find("MESSAGE=depotd " DEPOT_VERSION " serving");
  REQUIRE_FALSE(serving.empty());
  CHECK(serving.find("\nPRIORITY=6\n") != std::string::npos);  // info
  CHECK(serving.find("\nSYSLOG_IDENTIFIER=depotd\n") != std::string::npos);
  CHECK(serving.find("\nDEPOT_SOCKET=" + dir + "/depot.sock\n") != std::string::npos);
  std::string refusal = find("MESSAGE=refused pid");
  REQUIRE_FALSE(refusal.empty());
  CHECK(refusal.find("\nPRIORITY=4\n") != std::string::npos);  // warning
}
