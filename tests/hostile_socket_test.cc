// A hostile local user against the socket's home: a directory made first where a victim's daemon
// would serve, a daemon of its own answering the victim's clients, a link planted for the lock
// file. Real daemons and clients run under throwaway uids; the tests need root to switch uids and
// skip, saying so, elsewhere. Which daemons a client does trust is checked here too.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "client/src/daemon_trust.h"
#include "common/socket_path.h"
#include "common/unix_socket.h"
#include "daemon/peer.h"
#include "tests/other_users.h"

using namespace depot;
using namespace depot::test;
using Catch::Matchers::Contains;

namespace {

constexpr int kDenied = static_cast<int>(Status::Code::kPermissionDenied);

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A fresh temporary directory, removed with everything in it when the test ends.
struct Scratch {
  explicit Scratch(mode_t mode) : path(TempDir()) { REQUIRE(::chmod(path.c_str(), mode) == 0); }
  ~Scratch() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  std::string path;
};

// Makes `dir` as `uid`, with `mode` whatever the umask.
void MakeDirAs(uid_t uid, const std::string& dir, mode_t mode) {
  REQUIRE(RunAs(uid, uid, {}, [&] {
            return ::mkdir(dir.c_str(), mode) == 0 && ::chmod(dir.c_str(), mode) == 0 ? 0 : 1;
          }) == 0);
}

// Starts depotd as `uid` (primary group `uid`, no other group) with `args`, its stderr in `log`.
pid_t StartDaemonAs(uid_t uid, const std::vector<std::string>& args, const std::string& log) {
  return Spawn([&] {
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    gid_t gid = uid;
    if (fd < 0 || ::dup2(fd, STDERR_FILENO) < 0 || ::setgroups(0, nullptr) != 0 ||
        ::setresgid(gid, gid, gid) != 0 || ::setresuid(uid, uid, uid) != 0) {
      return 100;
    }
    ::unsetenv("XDG_RUNTIME_DIR");  // the default socket is the one without it
    std::vector<std::string> argv{DEPOTD_PATH};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<char*> cargv;
    for (auto& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    ::execv(cargv[0], cargv.data());
    return 127;
  });
}

// A depotd serving as `uid`, on `socket`; stopped when the test ends.
class DaemonAs {
 public:
  DaemonAs(uid_t uid, std::string socket, std::vector<std::string> args)
      : log_(logs_.path + "/depotd.log"), socket_(std::move(socket)) {
    args.insert(args.begin(), {"--socket", socket_, "--capacity", "64MiB"});
    pid_ = StartDaemonAs(uid, args, log_);
    bool up = WaitFor([&] {
      int status;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return true;
      }
      return ConnectUnix(socket_).valid();
    });
    INFO("depotd log:\n" << ReadFile(log_));
    REQUIRE(pid_ > 0);
    REQUIRE(up);
  }
  ~DaemonAs() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      Wait(pid_);
    }
  }
  DaemonAs(const DaemonAs&) = delete;
  DaemonAs& operator=(const DaemonAs&) = delete;

  std::string Log() const { return ReadFile(log_); }

 private:
  Scratch logs_{0700};
  std::string log_;
  std::string socket_;
  pid_t pid_ = -1;
};

// Runs depotd as `uid` with `args` until it exits (10 s at most; then it is killed and -1
// returned) and returns its exit code; `log` receives what it wrote.
int RunDaemonAs(uid_t uid, const std::vector<std::string>& args, std::string* log) {
  Scratch logs(0700);
  std::string path = logs.path + "/depotd.log";
  pid_t pid = StartDaemonAs(uid, args, path);
  int status = 0;
  bool exited = WaitFor([&] { return ::waitpid(pid, &status, WNOHANG) == pid; });
  if (!exited) {
    ::kill(pid, SIGKILL);
    Wait(pid);
  }
  *log = ReadFile(path);
  return exited && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Connects as `uid` to `socket` (with `options`); the status code (0: connected and answered).
// The message of a refusal must contain every one of `expected`, else 2.
int ConnectAs(uid_t uid, const std::string& socket, ConnectOptions options = {},
              std::vector<std::string> expected = {}) {
  return RunAs(uid, uid, {}, [&] {
    options.socket_path = socket;
    auto c = Client::Connect(options);
    if (c.ok()) return c->Ping().ok() ? 0 : 99;
    std::fprintf(stderr, "uid %u: %s\n", uid, c.status().ToString().c_str());
    for (const auto& e : expected) {
      if (c.status().message().find(e) == std::string::npos) return 2;
    }
    return static_cast<int>(c.status().code());
  });
}

}  // namespace

TEST_CASE(
    "a /tmp/depot-$UID another user made first serves nobody: the victim's client and its "
    "daemon refuse it",
    "[hostile]") {
  NeedRoot();
  // Alice's default socket, as no XDG_RUNTIME_DIR and no /run/user/41001 leave it.
  const std::string squat = "/tmp/depot-" + std::to_string(kAlice);
  const std::string socket = squat + "/depot.sock";
  REQUIRE(DefaultSocketPathFor("", kAlice) == socket);
  std::filesystem::remove_all(squat);  // left by an earlier run that was killed
  // Mallory makes it first (0755: Alice can reach the socket) and serves there, welcoming her.
  MakeDirAs(kMallory, squat, 0755);
  {
    DaemonAs mallory(kMallory, socket,
                     {"--socket-mode", "0666", "--allow-users", std::to_string(kAlice)});
    // Alice's client, on its default socket, refuses the daemon, naming its uid.
    int rc = RunAs(kAlice, kAlice, {}, [&] {
      ::unsetenv("XDG_RUNTIME_DIR");
      ::unsetenv("DEPOT_SOCKET");
      ::unsetenv("DEPOT_DAEMON_UID");
      auto c = Client::Connect();
      if (c.ok()) return 1;  // it would hand Mallory its data
      std::fprintf(stderr, "%s\n", c.status().ToString().c_str());
      const std::string m = c.status().message();
      bool says_why = m.find(socket) != std::string::npos &&
                      m.find("uid 41003") != std::string::npos &&
                      m.find("DEPOT_DAEMON_UID=41003") != std::string::npos;
      return c.status().IsPermissionDenied() && says_why ? kDenied : 2;
    });
    CHECK(rc == kDenied);
    // Alice never said hello to Mallory's daemon.
    CHECK(mallory.Log().find(" uid 41001 gid ") == std::string::npos);
    // Alice's own daemon, on its default socket, refuses the directory and says whose it is.
    std::string log;
    CHECK(RunDaemonAs(kAlice, {"--capacity", "64MiB"}, &log) == 1);
    INFO(log);
    CHECK_THAT(log, Contains("refusing to serve from the socket directory " + squat +
                             " (owned by uid 41003, mode 0755)") &&
                        Contains("remove it"));
  }
  std::filesystem::remove_all(squat);
}

TEST_CASE("depotd follows no link planted for its lock file", "[hostile]") {
  NeedRoot();
  Scratch scratch(01777);  // as /tmp
  const std::string& tmp = scratch.path;
  // A file of Alice's that a link will point at.
  const std::string notes = tmp + "/alice-notes";
  REQUIRE(RunAs(kAlice, kAlice, {}, [&] {
            std::ofstream(notes) << "precious";
            return ::chmod(notes.c_str(), 0600);
          }) == 0);
  std::string log;

  SECTION("in a directory another user made for the victim's daemon") {
    // Mallory's directory, writable by all, with the link where Alice's daemon keeps its lock.
    const std::string squat = tmp + "/depot-" + std::to_string(kAlice);
    MakeDirAs(kMallory, squat, 0777);
    REQUIRE(RunAs(kMallory, kMallory, {}, [&] {
              return ::symlink(notes.c_str(), (squat + "/depot.sock.lock").c_str());
            }) == 0);
    CHECK(RunDaemonAs(kAlice, {"--socket", squat + "/depot.sock", "--capacity", "64MiB"}, &log) ==
          1);
    CHECK_THAT(log, Contains("refusing to serve from the socket directory " + squat +
                             " (owned by uid 41003, mode 0777)"));
  }
  SECTION("in the daemon's own directory") {
    const std::string own = tmp + "/alice";
    MakeDirAs(kAlice, own, 0700);
    REQUIRE(::symlink(notes.c_str(), (own + "/depot.sock.lock").c_str()) == 0);
    CHECK(RunDaemonAs(kAlice, {"--socket", own + "/depot.sock", "--capacity", "64MiB"}, &log) == 1);
    CHECK_THAT(log, Contains("the lock file " + own + "/depot.sock.lock is a symbolic link"));
  }
  INFO(log);
  CHECK(ReadFile(notes) == "precious");
}

TEST_CASE("depotd replaces only a stale socket of its own", "[hostile]") {
  NeedRoot();
  Scratch dir(0700);
  const std::string socket = dir.path + "/depot.sock";
  // A regular file where the socket goes is somebody's: it stays.
  std::ofstream(socket) << "not a socket";
  std::string log;
  CHECK(RunDaemonAs(0, {"--socket", socket, "--capacity", "64MiB"}, &log) == 1);
  CHECK_THAT(log, Contains(socket + " is a regular file owned by uid 0"));
  CHECK(ReadFile(socket) == "not a socket");
}

TEST_CASE("clients trust root's daemon, their own, one they name, and one root gave a home",
          "[hostile]") {
  NeedRoot();
  const std::string alice = std::to_string(kAlice);
  SECTION("root's daemon") {
    Daemon d = StartOpen({"--allow-users", alice});
    CHECK(ConnectAs(kAlice, d.socket()) == 0);
  }
  SECTION("a daemon of the client's own uid, in a directory it made 0700") {
    Scratch tmp(01777);
    const std::string dir = tmp.path + "/depot-" + alice;
    DaemonAs own(kAlice, dir + "/depot.sock", {});
    struct stat st {};
    REQUIRE(::stat(dir.c_str(), &st) == 0);
    CHECK(st.st_uid == kAlice);
    CHECK((st.st_mode & 07777) == 0700);
    CHECK(ConnectAs(kAlice, dir + "/depot.sock") == 0);
  }
  SECTION("another user's daemon in a directory of a world-writable one: only when named") {
    Scratch tmp(01777);
    const std::string dir = tmp.path + "/alice";
    MakeDirAs(kAlice, dir, 0755);
    const std::string socket = dir + "/depot.sock";
    DaemonAs theirs(kAlice, socket,
                    {"--socket-mode", "0666", "--allow-users", std::to_string(kBob)});
    CHECK(ConnectAs(kBob, socket, {},
                    {"refusing the depotd at " + socket, "runs as uid 41001",
                     "neither you (uid 41002) nor root", "DEPOT_DAEMON_UID=41001"}) == kDenied);
    ConnectOptions named;
    named.trusted_daemon_uid = kAlice;
    CHECK(ConnectAs(kBob, socket, named) == 0);
    named.trusted_daemon_uid = kMallory;  // naming another uid does not help
    CHECK(ConnectAs(kBob, socket, named) == kDenied);
    ::setenv("DEPOT_DAEMON_UID", alice.c_str(), 1);
    CHECK(ConnectAs(kBob, socket) == 0);
    ::setenv("DEPOT_DAEMON_UID", "alice", 1);
    CHECK(ConnectAs(kBob, socket) == static_cast<int>(Status::Code::kInvalidArgument));
    ::unsetenv("DEPOT_DAEMON_UID");
  }
  SECTION("the daemon of the user that root gave the socket's directory (as /run/depot)") {
    Scratch run(0755);  // root's, writable by nobody else, as /run
    const std::string dir = run.path + "/depot";
    REQUIRE(::mkdir(dir.c_str(), 0750) == 0);
    REQUIRE(::chown(dir.c_str(), kAlice, kStaff) == 0);  // RuntimeDirectory= does this
    DaemonAs service(kAlice, dir + "/depot.sock",
                     {"--socket-mode", "0666", "--allow-users", std::to_string(kBob)});
    CHECK(RunAs(kBob, kBob, {kStaff}, [&] {
            ConnectOptions o;
            o.socket_path = dir + "/depot.sock";
            auto c = Client::Connect(o);
            if (!c.ok()) std::fprintf(stderr, "%s\n", c.status().ToString().c_str());
            return c.ok() ? 0 : 1;
          }) == 0);
  }
}

TEST_CASE("TrustDaemon: who a client trusts, and why not", "[hostile]") {
  Scratch run(0755);
  const std::string socket = run.path + "/depot.sock";  // in a directory of this process's uid
  const uid_t me = ::geteuid();
  const uid_t other = me + 1000;
  CHECK(internal::TrustDaemon(socket, me, me, std::nullopt).ok());
  CHECK(internal::TrustDaemon(socket, 0, me, std::nullopt).ok());
  CHECK(internal::TrustDaemon(socket, other, me, other).ok());
  Status st = internal::TrustDaemon(socket, other, me, std::nullopt);
  CHECK(st.IsPermissionDenied());
  CHECK_THAT(st.message(), Contains("uid " + std::to_string(other)) &&
                               Contains("its directory " + run.path + " is not its own"));
}

TEST_CASE("a peer whose credentials the kernel does not tell is refused, never taken for root",
          "[hostile]") {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);  // not a socket: SO_PEERCRED fails
  UniqueFd a(fds[0]), b(fds[1]);
  auto creds = ReadPeerCredentials(a.get());
  CHECK_FALSE(creds.ok());
  CHECK_THAT(creds.status().message(), Contains("SO_PEERCRED"));
  // The client does not trust a daemon it cannot identify.
  Status st = internal::CheckDaemon(a.get(), "/some/depot.sock", std::nullopt);
  CHECK(st.IsPermissionDenied());
  CHECK_THAT(st.message(), Contains("/some/depot.sock") && Contains("SO_PEERCRED"));
  // A socket does tell.
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
  UniqueFd c(fds[0]), d(fds[1]);
  auto mine = ReadPeerCredentials(c.get());
  REQUIRE(mine.ok());
  CHECK(mine->uid == ::geteuid());
  CHECK(mine->pid == ::getpid());
}
