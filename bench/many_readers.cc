// Section 5, many readers of one large object: 8 processes each get the same object (1 GiB; 256
// MiB with --quick) and read every byte, against 8 processes that each receive their own copy
// over a Unix socket from one sender process (which writes to all 8 at once, non-blocking) and
// then read every byte. Reported: the wall time from "go" to the last reader done, and the memory
// of the 8 readers once all have read: the sum of their RSS (/proc/self/statm; a shared page
// counts in full in each) and of their PSS (/proc/self/smaps_rollup; a shared page is divided
// among the processes mapping it), each also before the run, so the growth shows. Readers are
// fresh processes each run and are not pinned; depotd and the sender run on CPU 0. depot and
// socket runs alternate.
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <vector>

#include "bench/sections.h"

namespace depot::bench {
namespace {

constexpr int kReaders = 8;

struct Memory {
  uint64_t rss_before, pss_before, rss_after, pss_after;
};

struct RunFigures {
  double wall;
  Memory sum;
};

// The reader's side of the protocol: ready, go, read (returns), done, measure, exit.
void Report(Channel& ch, Memory m, double seconds) {
  ch.Send(seconds);
  ch.Await();  // every reader has read: PSS now divides shared pages among all of them
  m.rss_after = RssBytes();
  m.pss_after = PssBytes();
  ch.Send(m);
  ch.Await();
}

// Starts `children` (the last `readers` of which are readers), then collects their figures.
RunFigures Collect(std::vector<Child>& children, size_t readers) {
  Clock::time_point go = StartTogether(children);
  size_t first = children.size() - readers;
  for (size_t i = first; i < children.size(); ++i) children[i].channel().Recv<double>();
  RunFigures f{Since(go), {}};
  for (size_t i = first; i < children.size(); ++i) children[i].channel().Signal();
  for (size_t i = first; i < children.size(); ++i) {
    Memory m = children[i].channel().Recv<Memory>();
    f.sum.rss_before += m.rss_before;
    f.sum.pss_before += m.pss_before;
    f.sum.rss_after += m.rss_after;
    f.sum.pss_after += m.pss_after;
  }
  for (size_t i = first; i < children.size(); ++i) children[i].channel().Signal();
  JoinAll(children);
  return f;
}

RunFigures DepotRun(const DepotDaemon& daemon, const Guid& id) {
  std::vector<Child> children;
  for (int i = 0; i < kReaders; ++i) {
    children.push_back(Child::Spawn([&](Channel& ch) {
      Client c = daemon.Connect("reader");
      Memory m{RssBytes(), PssBytes(), 0, 0};
      ch.Signal();
      ch.Await();
      auto t0 = Clock::now();
      Object o = Check(c.Get(id), "get");
      KeepAlive(ReadEveryByte(o.frame(0)));
      Report(ch, m, Since(t0));
    }));
  }
  return Collect(children, kReaders);
}

void SendToAll(const std::vector<int>& fds, std::span<const std::byte> data) {
  std::vector<size_t> sent(fds.size(), 0);
  std::vector<pollfd> p(fds.size());
  size_t done = 0;
  for (int fd : fds) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  while (done < fds.size()) {
    for (size_t i = 0; i < fds.size(); ++i) {
      p[i] = {sent[i] < data.size() ? fds[i] : -1, POLLOUT, 0};
    }
    ::poll(p.data(), p.size(), -1);
    for (size_t i = 0; i < fds.size(); ++i) {
      if (!(p[i].revents & POLLOUT)) continue;
      ssize_t n = ::send(fds[i], data.data() + sent[i], data.size() - sent[i], MSG_NOSIGNAL);
      if (n < 0 && errno != EAGAIN && errno != EINTR) throw BenchError("sender: send failed");
      if (n > 0 && (sent[i] += static_cast<size_t>(n)) == data.size()) ++done;
    }
  }
}

RunFigures SocketRun(uint64_t size) {
  std::vector<int> send_fds, recv_fds;
  for (int i = 0; i < kReaders; ++i) {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
      throw BenchError("socketpair");
    send_fds.push_back(sv[0]);
    recv_fds.push_back(sv[1]);
  }
  std::vector<Child> children;
  children.push_back(Child::Spawn([&](Channel& ch) {
    PinTo(kServerCpu);
    std::vector<std::byte> data(size, std::byte{0x42});  // touched before "ready"
    ch.Signal();
    ch.Await();
    SendToAll(send_fds, data);
  }));
  for (int i = 0; i < kReaders; ++i) {
    children.push_back(Child::Spawn([&, i](Channel& ch) {
      Memory m{RssBytes(), PssBytes(), 0, 0};
      ch.Signal();
      ch.Await();
      auto t0 = Clock::now();
      auto buf = std::make_unique_for_overwrite<std::byte[]>(size);  // its own copy
      for (uint64_t got = 0; got < size;) {
        ssize_t n = ::recv(recv_fds[i], buf.get() + got, size - got, 0);
        if (n <= 0) throw BenchError("reader: recv failed");
        got += static_cast<uint64_t>(n);
      }
      KeepAlive(ReadEveryByte({buf.get(), size}));
      Report(ch, m, Since(t0));
    }));
  }
  for (int fd : send_fds) ::close(fd);
  for (int fd : recv_fds) ::close(fd);
  return Collect(children, kReaders);
}

std::string MemoryCell(uint64_t before, uint64_t after) {
  return fmt::format("{} → {}", Bytes(before), Bytes(after));
}

}  // namespace

void ManyReaders(const Context& ctx) {
  uint64_t size = ctx.quick ? 256ull << 20 : 1ull << 30;
  int rounds = ctx.quick ? 2 : 3;
  DepotDaemon daemon(ctx.dir, "readers", {.capacity = size + (64ull << 20), .prefault = true});
  Guid id;
  {
    // Written through a connection that is then closed, so that no other process maps the pages.
    Client c = daemon.Connect("writer");
    Draft d = Check(c.Create({size}), "create");
    std::memset(d.frame(0).data(), 0x42, size);
    id = d.guid();
    Check(d.Seal(), "seal");
  }
  Say(fmt::format(
      "\n## 5. {} readers of one {} object\n\n"
      "depotd ({}) on CPU {}; the socket sender on CPU {}; readers not pinned, fresh "
      "processes each run. {} rounds, depot and socket alternating. Wall time: from \"go\" to "
      "the last reader done. Memory: sums over the {} readers, before the run → after all have "
      "read. RSS counts a shared page in full in every process that maps it; PSS divides it "
      "among them, so the PSS sum is the memory the readers really use.",
      kReaders, Bytes(size), daemon.Describe(), kServerCpu, kServerCpu, rounds, kReaders));
  Unpin();
  std::vector<RunFigures> depot, socket;
  Series depot_wall, socket_wall;
  for (int r = 0; r < rounds; ++r) {
    fmt::print(stderr, "  many readers: round {}\n", r + 1);
    depot.push_back(DepotRun(daemon, id));
    socket.push_back(SocketRun(size));
    depot_wall.NextRound();
    depot_wall.Add(depot.back().wall);
    socket_wall.NextRound();
    socket_wall.Add(socket.back().wall);
  }
  Summary dw = depot_wall.Summarize(), sw = socket_wall.Summarize();
  // Memory figures vary little from run to run: the run with the median wall time stands for all.
  auto median_run = [](const std::vector<RunFigures>& runs, double p50) {
    for (const auto& f : runs) {
      if (f.wall == p50) return f;
    }
    return runs.front();
  };
  RunFigures d = median_run(depot, dw.p50), s = median_run(socket, sw.p50);
  Table t(
      {"method", "wall time p50 (rounds)", "readers' RSS sum", "readers' PSS sum", "PSS growth"},
      "lrrrr");
  t.Row({"depot: get + read every byte", P50WithSpread(dw),
         MemoryCell(d.sum.rss_before, d.sum.rss_after),
         MemoryCell(d.sum.pss_before, d.sum.pss_after), Bytes(d.sum.pss_after - d.sum.pss_before)});
  t.Row({"socket: own copy + read every byte", P50WithSpread(sw),
         MemoryCell(s.sum.rss_before, s.sum.rss_after),
         MemoryCell(s.sum.pss_before, s.sum.pss_after), Bytes(s.sum.pss_after - s.sum.pss_before)});
  t.Print();
  double mem_ratio = static_cast<double>(s.sum.pss_after - s.sum.pss_before) /
                     static_cast<double>(d.sum.pss_after - d.sum.pss_before);
  Say(
      fmt::format("\nsocket / depot: wall time {}, PSS growth {} (memory figures from the run "
                  "with the median wall time).",
                  Ratio(sw.p50 / dw.p50), Ratio(mem_ratio)));
}

}  // namespace depot::bench
