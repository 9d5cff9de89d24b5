// Test support for integration tests: a real depotd on a temporary socket, child processes, and
// bounded waits (never a fixed sleep).
#ifndef DEPOT_TESTS_DAEMON_FIXTURE_H_
#define DEPOT_TESTS_DAEMON_FIXTURE_H_

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "depot/client.h"

namespace depot::test {

// A depotd process started for one test, on a socket in a fresh temporary directory, its stderr
// captured to a log file. The constructor returns once the socket accepts connections (or fails
// the test after 10 s); the destructor stops it with SIGTERM.
class Daemon {
 public:
  // `args` are passed to depotd after --socket; the default capacity is 256MiB.
  explicit Daemon(std::vector<std::string> args = {"--capacity", "256MiB"});
  // Starts depotd (or `binary`, a daemon built from the same code) on the given socket;
  // `wrapper` (e.g. {"unshare", "-m", ...}) runs it.
  Daemon(std::string socket, std::vector<std::string> args, std::vector<std::string> wrapper = {},
         std::string binary = "");
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  const std::string& socket() const { return socket_; }
  const std::string& dir() const { return dir_; }
  pid_t pid() const { return pid_; }

  // A connected client; fails the test when it cannot connect.
  Client Connect() const;

  // Sends `sig` and waits for the process: at most 120 s, then it is killed with SIGKILL and
  // its log printed on stderr. Returns its wait status.
  int Stop(int sig = SIGTERM);

  // Everything depotd wrote to stderr so far.
  std::string Log() const;

 private:
  void Launch(std::vector<std::string> args, std::vector<std::string> wrapper, std::string binary);

  std::string dir_;
  std::string socket_;
  pid_t pid_ = -1;
};

// The segments (memfds) that process `pid` holds whose names start with `prefix`, by name, each
// with a path that opens it (/proc/PID/fd/N); a daemon's segments have no other name.
std::map<std::string, std::string> SegmentsOf(pid_t pid, const std::string& prefix);

// Makes a fresh temporary directory and returns its path.
std::string TempDir();

// Ends this test as skipped: prints the reason and exits 77, which ctest reports as skipped
// (SKIP_RETURN_CODE), never as passed.
[[noreturn]] void Skip(const std::string& why);

// Runs `fn` in a forked child process and returns its pid. The child exits with fn's result.
pid_t Spawn(std::function<int()> fn);

// Waits for a child and returns its wait status.
int Wait(pid_t pid);

// A child process that put one owner-scoped object and keeps its connection until it is killed.
struct ScopedMaker {
  pid_t pid;
  Guid guid;
};
// Spawns a ScopedMaker on `socket` that puts `bytes` (it does not reconnect if its daemon goes);
// fails the test when no GUID comes back within 10 s.
ScopedMaker SpawnScopedMaker(const std::string& socket, const std::vector<std::byte>& bytes);

// Runs `fn` in a child process and returns its exit code (or 128 + signal).
int RunChild(std::function<int()> fn);

// Runs a command line, capturing stdout and stderr; returns the exit code.
int Run(const std::vector<std::string>& argv, std::string* out = nullptr,
        std::string* err = nullptr, const std::string& input = "");

// Polls `ready` every few milliseconds until it is true or `limit` passes.
bool WaitFor(const std::function<bool()>& ready,
             std::chrono::milliseconds limit = std::chrono::seconds(10));

// Bytes of a recognisable pattern derived from `seed`.
std::vector<std::byte> Pattern(size_t size, uint32_t seed);

// The daemon's status as `c` sees it; fails the test when it cannot be read.
StoreStatus StatusOf(Client& c);

// Whether `o` is one frame holding exactly `bytes`.
bool Holds(const Object& o, const std::vector<std::byte>& bytes);

// The requests the daemon has counted for this process's connection named `name` (Client::Clients);
// fails the test when there is none.
uint64_t Requests(Client& c, const std::string& name);

// Resident bytes of process `pid` (VmRSS); 0 when it cannot be read.
uint64_t ResidentOf(pid_t pid);

// Runs depotctl against `d`; stdout and stderr both land in `out`.
int Ctl(const Daemon& d, std::vector<std::string> args, std::string* out);

// Create options with a name, and evictable or not.
CreateOptions Named(std::string name, bool evictable = false);

// A pipe for a child to tell its parent something (a GUID, "ready").
class Channel {
 public:
  Channel();
  ~Channel();
  void Send(const std::string& line);  // in one process
  std::string Receive();               // in the other; "" at end of stream
 private:
  int fds_[2];
};

// Resident set size of this process in bytes.
uint64_t ResidentBytes();

// The /proc/self/maps line of the mapping holding `p`, or "".
std::string MappingOf(const void* p);

}  // namespace depot::test

#endif  // DEPOT_TESTS_DAEMON_FIXTURE_H_
