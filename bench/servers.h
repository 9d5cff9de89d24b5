// The servers a benchmark measures through, each started as a child of the benchmark on
// kServerCpu and stopped (SIGTERM or SIGKILL, then reaped) when the object is destroyed:
//   DepotDaemon  depotd, built in this tree (DEPOTD_PATH), on a socket in a temporary directory
//   SocketPeer   a bare process that answers a request for n bytes with n bytes over a
//                socketpair: the floor under any request/response (n = 16), and a socket
//                transfer of n bytes.
// redis-server is started by RedisServer (redis.h). LaunchServer and StopServer are shared.
#ifndef DEPOT_BENCH_SERVERS_H_
#define DEPOT_BENCH_SERVERS_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "bench/harness.h"
#include "depot/client.h"

namespace depot::bench {

struct DaemonConfig {
  uint64_t capacity = 256ull << 20;
  bool prefault = false;
  uint64_t segment_size = 64ull << 20;  // depotd's default
  std::string spill_dir;                // empty: no spilling
  std::string binary{};                 // empty: the depotd built in this tree
  std::vector<std::string> args{};      // more of depotd's command line
  std::function<void()> prepare{};      // runs in the child just before exec
};

class DepotDaemon {
 public:
  // Starts depotd on DIR/NAME.sock and returns once it accepts connections (BenchError after
  // 30 s; a prefaulted pool is reserved before the socket opens).
  DepotDaemon(const std::string& dir, const std::string& name, DaemonConfig config);
  ~DepotDaemon();
  DepotDaemon(const DepotDaemon&) = delete;
  DepotDaemon& operator=(const DepotDaemon&) = delete;

  // A new connection (BenchError when it fails).
  Client Connect(const std::string& client_name = "bench") const;
  const std::string& socket() const { return socket_; }
  pid_t pid() const { return pid_; }
  const DaemonConfig& config() const { return config_; }
  // SIGKILL, then reaps: a crash.
  void Kill();
  // "prefaulted 1.3 GiB pool" / "1.3 GiB pool, 64 MiB segments made on demand"
  std::string Describe() const;

 private:
  std::string socket_;
  DaemonConfig config_;
  pid_t pid_ = -1;
};

// Forks and execs `argv` (PATH searched) on kServerCpu, stdout to /dev/null and stderr to `log`;
// the server gets SIGTERM when the benchmark dies.
// `prepare` runs in the child just before exec.
pid_t LaunchServer(const std::vector<std::string>& argv, const std::string& log,
                   const std::function<void()>& prepare = {});
// Waits up to 30 s for `ready` (polled); BenchError, with the log, when the server exits first or
// the time runs out.
void AwaitServer(pid_t pid, const std::string& what, const std::string& log,
                 const std::function<bool()>& ready);
// SIGTERM, then reaps.
void StopServer(pid_t pid);

class SocketPeer {
 public:
  // Starts the peer on kServerCpu with a touched buffer of `max_bytes` to send from.
  explicit SocketPeer(uint64_t max_bytes);
  // Sends a 16-byte request for `into.size()` bytes and reads them all into `into`. Returns when
  // the last byte has arrived.
  void Fetch(std::span<std::byte> into);

 private:
  Child child_;
};

}  // namespace depot::bench

#endif  // DEPOT_BENCH_SERVERS_H_
