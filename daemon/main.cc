// depotd: parses the command line, claims the socket, builds the store and serves until SIGINT
// or SIGTERM. Everything else lives in the daemon library so that tests run the same code.
#include <unistd.h>

#include <cstdio>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "common/units.h"
#include "daemon/host_pool.h"
#include "daemon/options.h"
#include "daemon/server.h"
#include "daemon/store.h"

namespace {

int Run(const depot::DaemonOptions& opts) {
  using namespace depot;
  auto claim = SocketClaim::Acquire(opts.socket_path);
  if (!claim.ok()) {
    spdlog::critical("{}", claim.status().message());
    return 1;
  }
  std::string prefix = HostPool::NamePrefix(opts.socket_path);
  if (int stale = HostPool::RemoveStale(prefix); stale > 0) {
    spdlog::warn("removed {} shared-memory segment(s) left by a previous depotd on {}", stale,
                 opts.socket_path);
  }
  uint64_t shm_free = HostPool::ShmAvailable();
  if (shm_free < opts.capacity) {
    spdlog::warn(
        "/dev/shm has {} free but the capacity is {}: creates will fail with StoreFull once "
        "/dev/shm is full; enlarge it (mount -o remount,size=... /dev/shm) or lower --capacity",
        FormatBytes(shm_free), FormatBytes(opts.capacity));
  }

  boost::asio::io_context io;
  StoreOptions so;
  so.pool = {opts.capacity, opts.segment_size, opts.prefault, prefix};
  so.socket_path = opts.socket_path;
  so.version = DEPOT_VERSION;
  auto store = Store::Create(io, so);
  if (!store.ok()) {
    spdlog::critical("cannot create the host pool: {}", store.status().message());
    return 1;
  }
  auto server = Server::Start(io, std::move(*claim), **store);
  if (!server.ok()) {
    spdlog::critical("{}", server.status().message());
    return 1;
  }
  spdlog::info("depotd {} serving {} (pid {}): host pool {}{}, segments of {}, /dev/shm free {}",
               DEPOT_VERSION, opts.socket_path, ::getpid(), FormatBytes(opts.capacity),
               opts.prefault ? " (prefaulted)" : "", FormatBytes(opts.segment_size),
               FormatBytes(HostPool::ShmAvailable()));

  boost::asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](const boost::system::error_code& ec, int signo) {
    if (ec) return;
    spdlog::info("received {}, shutting down", signo == SIGINT ? "SIGINT" : "SIGTERM");
    server->reset();  // closes every session: waiting clients see the connection end
    io.stop();
  });
  io.run();
  server->reset();
  store->reset();
  spdlog::info("depotd stopped; shared-memory segments removed");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  auto opts = depot::ParseOptions(args, depot::PhysicalMemory(), depot::HostPool::ShmAvailable());
  if (!opts.ok()) {
    std::fprintf(stderr, "depotd: %s\n", opts.status().message().c_str());
    return 2;
  }
  if (opts->help) {
    std::fputs(depot::kUsage, stdout);
    return 0;
  }
  if (opts->version) {
    std::printf("depotd %s\n", DEPOT_VERSION);
    return 0;
  }
  auto logger = spdlog::stderr_color_mt("depotd");
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::from_str(opts->log_level));
  spdlog::set_pattern("%Y-%m-%d %H:%M:%S.%e %^%l%$ %v");
  return Run(*opts);
}
