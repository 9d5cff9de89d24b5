#include "bench/servers.h"

#include <fmt/format.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

namespace depot::bench {
pid_t LaunchServer(const std::vector<std::string>& argv, const std::string& log,
                   const std::function<void()>& prepare) {
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = ::fork();
  if (pid < 0) throw BenchError(fmt::format("fork: {}", std::strerror(errno)));
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    PinTo(kServerCpu);
    if (FILE* f = std::freopen(log.c_str(), "w", stderr)) (void)f;
    if (FILE* f = std::freopen("/dev/null", "w", stdout)) (void)f;
    if (prepare) prepare();
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    std::_Exit(127);
  }
  return pid;
}

void StopServer(pid_t pid) {
  if (pid <= 0) return;
  ::kill(pid, SIGTERM);
  ::waitpid(pid, nullptr, 0);
}

void AwaitServer(pid_t pid, const std::string& what, const std::string& log,
                 const std::function<bool()>& ready) {
  auto log_text = [&] {
    std::string text;
    if (FILE* f = std::fopen(log.c_str(), "r")) {
      char buf[4096];
      text.assign(buf, std::fread(buf, 1, sizeof buf, f));
      std::fclose(f);
    }
    return text;
  };
  bool up = WaitUntil(
      [&] {
        int status = 0;
        if (::waitpid(pid, &status, WNOHANG) == pid) {
          throw BenchError(fmt::format("{} exited (wait status {}): {}", what, status, log_text()));
        }
        return ready();
      },
      std::chrono::seconds(30));
  if (!up) throw BenchError(fmt::format("{} was not ready within 30 s: {}", what, log_text()));
}

DepotDaemon::DepotDaemon(const std::string& dir, const std::string& name, DaemonConfig config)
    : socket_(fmt::format("{}/{}.sock", dir, name)), config_(config) {
  std::vector<std::string> argv = {config.binary.empty() ? DEPOTD_PATH : config.binary,
                                   "--socket",
                                   socket_,
                                   "--capacity",
                                   std::to_string(config.capacity),
                                   "--segment-size",
                                   std::to_string(config.segment_size),
                                   "--devices",
                                   "none",
                                   "--log-level",
                                   "warn"};
  if (config.prefault) argv.push_back("--prefault");
  if (!config.spill_dir.empty()) argv.insert(argv.end(), {"--spill-dir", config.spill_dir});
  argv.insert(argv.end(), config.args.begin(), config.args.end());
  std::string log = fmt::format("{}/{}.log", dir, name);
  pid_ = LaunchServer(argv, log, config.prepare);
  AwaitServer(pid_, "depotd", log, [&] { return Client::Connect({socket_, "probe"}).ok(); });
}

DepotDaemon::~DepotDaemon() { StopServer(pid_); }

void DepotDaemon::Kill() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

Client DepotDaemon::Connect(const std::string& client_name) const {
  return Check(Client::Connect({socket_, client_name}), "connect to depotd");
}

std::string DepotDaemon::Describe() const {
  std::string which = config_.binary.empty() ? "" : fmt::format(" (`{}`)", config_.binary);
  if (config_.prefault) return fmt::format("prefaulted {} pool{}", Bytes(config_.capacity), which);
  return fmt::format("{} pool, {} segments made on demand{}", Bytes(config_.capacity),
                     Bytes(config_.segment_size), which);
}

namespace {
struct PeerRequest {
  uint64_t bytes;
  uint64_t pad;  // a 16-byte request, as the floor's ping
};
}  // namespace

SocketPeer::SocketPeer(uint64_t max_bytes)
    : child_(Child::Spawn([max_bytes](Channel& ch) {
        PinTo(kServerCpu);
        std::vector<std::byte> buf(std::max<uint64_t>(max_bytes, 16), std::byte{0x5a});
        while (true) {
          PeerRequest r;
          try {
            r = ch.Recv<PeerRequest>();
          } catch (const BenchError&) {
            return;  // the benchmark is done with us
          }
          ch.SendBytes(buf.data(), std::min<uint64_t>(r.bytes, buf.size()));
        }
      })) {}

void SocketPeer::Fetch(std::span<std::byte> into) {
  child_.channel().Send(PeerRequest{into.size(), 0});
  child_.channel().RecvBytes(into.data(), into.size());
}

}  // namespace depot::bench
