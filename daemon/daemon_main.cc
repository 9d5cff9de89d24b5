// depotd's main: reads its configuration, claims the socket (or adopts the one systemd passed),
// builds the store, tells systemd it is ready and serves until SIGINT or SIGTERM.
#include "daemon/daemon_main.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <cstdio>
#include <filesystem>

#include "common/system_memory.h"
#include "daemon/journal_sink.h"
#include "daemon/metrics_server.h"
#include "daemon/options.h"
#include "daemon/server.h"
#include "daemon/store.h"
#include "daemon/systemd.h"
#include "depot/units.h"

namespace depot {
namespace {

// Says plainly when the memory this daemon may use cannot give what the configuration asks for,
// and when the kernel gives no huge pages to shared memory.
void WarnAboutMemory(const DaemonOptions& o) {
  uint64_t available = AvailableMemory();
  if (available < o.capacity) {
    spdlog::warn(
        "the capacity is {} but only {} ({}): creates will fail with StoreFull once memory is "
        "short, and a cgroup at its limit may have the daemon killed; lower the capacity or give "
        "the daemon more memory (MemoryMax= of its unit)",
        FormatBytes(o.capacity), FormatBytes(available), DescribeAvailableMemory());
  }
  bool huge = ShmemHugePagesAllowed();
  if (!huge && o.hugepages) {
    spdlog::warn(
        "hugepages = on has no effect: shared-memory huge pages are off "
        "(echo advise > /sys/kernel/mm/transparent_hugepage/shmem_enabled)");
  } else if (!huge && o.index_entries != 0) {
    spdlog::info(
        "the object index is on 4 KiB pages: shared-memory huge pages are off, which makes gets "
        "at a million objects slower (docs/deployment.md, \"Huge pages for the index\")");
  }
}

// True when two spellings of a socket path name the same file ("run/../run/x" and "/run/x").
bool SamePath(const std::string& a, const std::string& b) {
  std::error_code ec;
  auto norm = [&](const std::string& p) {
    return std::filesystem::absolute(p, ec).lexically_normal();
  };
  return norm(a) == norm(b);
}

// Claims the socket to serve: the one systemd passed (socket activation) when there is one,
// since clients already connect there, else opts.socket_path, bound by the server. What else
// systemd passed (the last daemon's kept memory) goes to `kept`.
Result<SocketClaim> ClaimSocket(const DaemonOptions& opts, std::vector<KeptFd>& kept) {
  auto passed = TakePassed();
  if (!passed.ok()) return passed.status();
  kept = std::move(passed->kept);
  if (!passed->socket) return SocketClaim::Acquire(opts.socket_path);
  PassedSocket& socket = *passed->socket;
  if (SamePath(opts.socket_path, socket.path)) {
    spdlog::info("serving the socket systemd passed, {}", socket.path);
  } else if (opts.socket_path == DefaultSocketPath()) {
    // Nothing named a socket (the default is not a choice): the passed one is the only one.
    spdlog::info("serving the socket systemd passed, {} (no --socket given)", socket.path);
  } else {
    spdlog::warn(
        "systemd passed a socket bound to {} but the configuration names {}: serving {}; "
        "make --socket (or socket =) match ListenStream= in depotd.socket",
        socket.path, opts.socket_path, socket.path);
  }
  if (!opts.socket_group.empty() || !HasDefault(opts, "socket_mode")) {
    spdlog::warn(
        "socket_mode and socket_group do not apply to a socket systemd passed; set "
        "SocketMode= and SocketGroup= in depotd.socket instead");
  }
  return SocketClaim::Adopt(socket.path, std::move(socket.fd));
}

// The one line `systemctl status depotd` shows.
std::string StatusLine(const std::string& socket_path, const DaemonOptions& o, size_t clients) {
  return fmt::format("serving {}: host pool {}{}, {} client{}", socket_path,
                     FormatBytes(o.capacity), o.prefault ? " (prefaulted)" : "", clients,
                     clients == 1 ? "" : "s");
}

int Run(const DaemonOptions& opts, const DeviceBackendFactory& make_backend) {
  std::vector<KeptFd> kept;
  auto claim = ClaimSocket(opts, kept);
  if (!claim.ok()) {
    spdlog::critical("{}", claim.status().message());
    return 1;
  }
  // Under socket activation this is the passed socket's path, whatever the configuration says.
  const std::string socket_path = claim->path();
  WarnAboutMemory(opts);

  boost::asio::io_context io;
  std::string devices_unavailable;
  std::unique_ptr<DeviceBackend> backend;
  if (opts.all_devices || !opts.device_uuids.empty()) backend = make_backend(&devices_unavailable);
  StoreOptions so =
      StoreOptionsFrom(opts, socket_path, backend.get(), std::move(devices_unavailable));
  auto store = Store::Create(io, so, std::move(kept));
  if (!store.ok()) {
    spdlog::critical("cannot start the store (the host pool, or spill_dir): {}",
                     store.status().message());
    return 1;
  }
  ServerOptions server_opts{
      opts.socket_mode, opts.socket_group, opts.max_clients,
      [&](size_t clients) { NotifyStatus(StatusLine(socket_path, opts, clients)); }};
  auto server = Server::Start(io, std::move(*claim), **store, server_opts);
  if (!server.ok()) {
    spdlog::critical("{}", server.status().message());
    // The store has taken the spill manifest: give it back, so that the next start knows this
    // one held nothing it lost (it served no client).
    (*store)->Persist();
    return 1;
  }
  std::unique_ptr<MetricsServer> metrics;
  if (!opts.metrics_listen.empty()) {
    Store* served = store->get();
    auto started =
        MetricsServer::Start(io, opts.metrics_listen, [served] { return served->Metrics(); });
    // The endpoint is an extra: one that cannot start (under the shipped unit, which allows no
    // AF_INET) must not take the store down, nor make systemd restart it into its start limit.
    if (started.ok()) {
      metrics = std::move(*started);
      spdlog::info("metrics: http://{}/metrics", metrics->address());
    } else {
      spdlog::error(
          "metrics_listen = {}: {}; serving without the metrics endpoint (under the shipped "
          "unit, enable the network with the drop-in of docs/deployment.md, \"Metrics\")",
          opts.metrics_listen, started.status().message());
    }
  }
  if (struct stat sock{}; ::stat(socket_path.c_str(), &sock) == 0) {
    (*store)->SetSocketGroup(sock.st_gid);
  }
  spdlog::info("depotd {} serving {} (pid {}): host pool {}{}, segments of {}, memory: {}",
               DEPOT_VERSION, socket_path, ::getpid(), FormatBytes(opts.capacity),
               opts.prefault ? " (prefaulted)" : "", FormatBytes(opts.segment_size),
               DescribeAvailableMemory());
  spdlog::info("device pools: {}", (*store)->DeviceSummary());

  // Ready once the loop runs: the socket listens and the pool exists (prefaulted when asked),
  // so a client that connects the moment systemd hears READY=1 is served.
  boost::asio::post(io, [&] { NotifyReady(StatusLine(socket_path, opts, 0)); });

  boost::asio::signal_set stop(io, SIGINT, SIGTERM);
  stop.async_wait([&](const boost::system::error_code& ec, int signo) {
    if (ec) return;
    NotifyStopping();
    spdlog::info("received {}, shutting down", signo == SIGINT ? "SIGINT" : "SIGTERM");
    (*store)->Stopping();
    server->reset();  // closes every session: waiting clients see the connection end
    metrics.reset();
    io.stop();
  });
  // SIGHUP re-reads the log level from the config file, and looks for GPUs again when there
  // are none (their kernel modules may have loaded after the daemon started).
  boost::asio::signal_set hup(io, SIGHUP);
  std::function<void(const boost::system::error_code&, int)> on_hup =
      [&](const boost::system::error_code& ec, int) {
        if (ec) return;
        if (opts.config_path.empty()) {
          spdlog::info("SIGHUP: no config file to re-read (started without --config)");
        } else if (auto level = ReadLogLevel(opts.config_path); !level.ok()) {
          spdlog::error("SIGHUP: {}; log level unchanged", level.status().message());
        } else {
          // Said before the change, at a level the old setting shows (info, or the old level
          // when that is quieter), so that a reload to a quieter level is still confirmed.
          auto old_level = spdlog::get_level();
          auto new_level = spdlog::level::from_str(*level);
          spdlog::log(std::max(old_level, spdlog::level::info), "SIGHUP: log level {} -> {}",
                      spdlog::level::to_string_view(old_level), *level);
          spdlog::set_level(new_level);
          spdlog::info("SIGHUP: log level is now {}", *level);
        }
        (*store)->FindDevices();
        hup.async_wait(on_hup);
      };
  hup.async_wait(on_hup);
  io.run();
  metrics.reset();
  server->reset();
  (*store)->Persist();
  store->reset();
  spdlog::info("depotd stopped; shared-memory segments released");
  return 0;
}

}  // namespace

int DaemonMain(int argc, char** argv, const DeviceBackendFactory& make_backend) {
  std::vector<std::string> args(argv + 1, argv + argc);
  auto opts = ParseOptions(args, PhysicalMemory(), AvailableMemory());
  if (!opts.ok()) {
    std::fprintf(stderr, "depotd: %s\n", opts.status().message().c_str());
    return 2;
  }
  if (opts->help) {
    std::fputs(Usage().c_str(), stdout);
    return 0;
  }
  if (opts->version) {
    std::printf("depotd %s\n", DEPOT_VERSION);
    return 0;
  }
  if (Status valid = Validate(*opts); !valid.ok()) {
    std::fprintf(stderr, "depotd: %s%s\n",
                 opts->config_path.empty() ? "" : (opts->config_path + ": ").c_str(),
                 valid.message().c_str());
    return 2;
  }
  if (opts->print_config) {
    std::fputs(FormatConfig(*opts).c_str(), stdout);
    return 0;
  }
  if (opts->check_config) {
    std::printf("configuration OK\n");
    return 0;
  }
  if (StderrIsJournal()) {
    // Under systemd: records with their priority and fields; the journal stamps the time.
    auto sink = std::make_shared<JournalSink>(opts->socket_path);
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("depotd", std::move(sink)));
  } else {
    spdlog::set_default_logger(spdlog::stderr_color_mt("depotd"));
    spdlog::set_pattern("%Y-%m-%d %H:%M:%S.%e %^%l%$ %v");
  }
  spdlog::set_level(spdlog::level::from_str(opts->log_level));
  // Each connection holds three descriptors (its socket, its put ring, its slots): the soft
  // limit a shell leaves (often 1024) would refuse connections long before max_clients.
  if (rlimit files{}; ::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &files) != 0) spdlog::warn("cannot raise RLIMIT_NOFILE");
  }
  return Run(*opts, make_backend);
}

}  // namespace depot
