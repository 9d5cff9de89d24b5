// spill_bench: spilling to disk against the disk itself, each compared with its baseline measured
// in the same run, on the same file system, in alternating rounds:
//   1. spill write throughput: the bytes depotd writes out per second while puts of twice the
//      pool push them through the disk, against a plain sequential write of the same bytes in
//      files of the same size (write, fdatasync, rename: what a spill does);
//   2. restore of a 64 MiB object (a get of an object on disk, its pages dropped from the page
//      cache) against a plain read of a 64 MiB file (dropped likewise);
//   3. a get of an object in memory, alone and while another process makes depotd spill;
//   4. a clean stop of a full pool (SIGTERM until exit: every object written) and the restart
//      (until the socket serves, and until its first get), against the plain write of the same
//      bytes;
//   5. the same pool kept in memory across a kill -9 (keep_memory), against section 4's path.
//
//   spill_bench [--quick] [--dir DIR] [--restart-pool SIZE]
//   DIR: where to measure (default /var/tmp); SIZE: the pool of sections 4 and 5 (default 1GiB,
//   256MiB with --quick)
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench/harness.h"
#include "bench/servers.h"
#include "depot/client.h"
#include "depot/units.h"
#include "tests/fd_store_stand_in.h"

namespace depot::bench {
namespace {

constexpr uint64_t kMiB = 1 << 20;
namespace fs = std::filesystem;

// Drops the page cache's copy of every file under `dir` (the files are clean: fsynced).
void DropCache(const std::string& dir) {
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    int fd = ::open(e.path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

// Writes `count` files of `size` bytes into `dir` as a spill does, one after another; returns
// the seconds it took.
double PlainWrite(const std::string& dir, int count, uint64_t size) {
  std::vector<std::byte> buf(size, std::byte{0x5a});
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  auto t0 = Clock::now();
  for (int i = 0; i < count; ++i) {
    std::string tmp = fmt::format("{}/.tmp.{}", dir, i), name = fmt::format("{}/{}.obj", dir, i);
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) throw BenchError(fmt::format("open {}: {}", tmp, std::strerror(errno)));
    ::posix_fallocate(fd, 0, static_cast<off_t>(size));
    for (uint64_t off = 0; off < size;) {
      ssize_t n = ::pwrite(fd, buf.data() + off, size - off, static_cast<off_t>(off));
      if (n <= 0) throw BenchError(fmt::format("write {}: {}", tmp, std::strerror(errno)));
      off += static_cast<uint64_t>(n);
    }
    ::fdatasync(fd);
    ::close(fd);
    ::rename(tmp.c_str(), name.c_str());
    ::fsync(dfd);
  }
  double took = Since(t0);
  ::close(dfd);
  for (int i = 0; i < count; ++i) fs::remove(fmt::format("{}/{}.obj", dir, i));
  return took;
}

StoreStatus StatusOf(Client& c) { return Check(c.GetStatus(), "status"); }

// 1. Spill write throughput against a plain write of the same bytes.
void SpillThroughput(const std::string& dir, bool quick, Targets& targets) {
  const uint64_t capacity = (quick ? 256 : 1024) * kMiB, size = 16 * kMiB;
  const int extra = static_cast<int>(2 * capacity / size);
  Say(fmt::format(
      "\n## Spill write throughput\n\nA {} pool is filled with objects of {}, then {} more are "
      "put: each put waits until as many bytes are written out. Spill: the bytes written during "
      "those puts over their wall time. Plain: {} files of {} written one after another (write, "
      "fdatasync, rename). Three rounds, alternating.\n",
      Bytes(capacity), Bytes(size), extra, extra, Bytes(size)));
  Series spill, plain;
  std::vector<std::byte> data(size, std::byte{0x33});
  for (int round = 0; round < 3; ++round) {
    spill.NextRound();
    plain.NextRound();
    plain.Add(static_cast<double>(extra * size) / PlainWrite(dir, extra, size));
    std::string spill_dir = fmt::format("{}/spill-{}", dir, round);
    {
      TempDir logs;
      DepotDaemon d(logs.path(), "depotd",
                    {.capacity = capacity, .segment_size = 64 * kMiB, .spill_dir = spill_dir});
      Client c = d.Connect();
      for (uint64_t put = 0; put + size <= capacity; put += size) Check(c.Put(data), "put");
      uint64_t before = StatusOf(c).spill_bytes;
      auto t0 = Clock::now();
      for (int i = 0; i < extra; ++i) Check(c.Put(data), "put");
      double took = Since(t0);
      spill.Add(static_cast<double>(StatusOf(c).spill_bytes - before) / took);
    }
    fs::remove_all(spill_dir);
  }
  Summary s = spill.Summarize(), p = plain.Summarize();
  double ratio = s.p50 / p.p50;
  Table t({"", "throughput (median)", "rounds", "spill / plain", "target"}, "lrrrl");
  t.Row({"plain sequential write", Rate(p.p50),
         fmt::format("{}–{}", Rate(p.round_lo), Rate(p.round_hi)), "", ""});
  t.Row({"depotd spilling", Rate(s.p50), fmt::format("{}–{}", Rate(s.round_lo), Rate(s.round_hi)),
         Ratio(ratio),
         targets.Check("spill write ≥ 80% of a plain write", "spill throughput",
                       fmt::format("{:.0f}%", 100 * ratio), ratio >= 0.8)});
  t.Print();
}

// 2. Restore of a 64 MiB object against a plain read of a 64 MiB file, caches dropped.
void Restore(const std::string& dir, bool quick, Targets& targets) {
  const uint64_t size = 64 * kMiB;
  const int reps = quick ? 5 : 15;
  Say(fmt::format(
      "\n## Restore of a {} object\n\nThree objects of {} in a pool that holds two: each get "
      "reads the one on disk back (and writes nothing: the other's file is kept). The page cache "
      "is dropped for the files before each get and each plain read. Plain: read a {} file into "
      "a buffer already touched. {} of each, alternating.\n",
      Bytes(size), Bytes(size), Bytes(size), reps));
  std::string spill_dir = dir + "/spill-restore";
  std::string file = dir + "/plain-64MiB";
  {
    std::vector<std::byte> data(size, std::byte{0x44});
    int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || ::write(fd, data.data(), size) != static_cast<ssize_t>(size)) {
      throw BenchError("cannot write the plain file");
    }
    ::fsync(fd);
    ::close(fd);
  }
  Series restore, plain;
  {
    TempDir logs;
    DepotDaemon d(logs.path(), "depotd",
                  {.capacity = 2 * size + 16 * kMiB, .segment_size = size, .spill_dir = spill_dir});
    Client c = d.Connect();
    std::vector<std::byte> data(size, std::byte{0x55});
    std::vector<Guid> guids;
    for (int i = 0; i < 3; ++i) guids.push_back(Check(c.Put(data), "put"));
    std::vector<std::byte> buf(size, std::byte{1});
    for (int i = 0; i <= reps; ++i) {
      Guid on_disk;
      for (const Guid& g : guids) {
        if (Check(c.Stat(g), "stat").residence == ObjectInfo::Residence::kDisk) on_disk = g;
      }
      DropCache(spill_dir);
      auto t0 = Clock::now();
      {
        Object o = Check(c.Get(on_disk, std::chrono::seconds(30)), "get");
        KeepAlive(o.size());
      }
      double got = Since(t0);
      int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
      ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
      auto t1 = Clock::now();
      for (uint64_t off = 0; off < size;) {
        ssize_t n = ::pread(fd, buf.data() + off, size - off, static_cast<off_t>(off));
        if (n <= 0) throw BenchError("read of the plain file");
        off += static_cast<uint64_t>(n);
      }
      double read = Since(t1);
      ::close(fd);
      if (i == 0) continue;  // warm-up: the first spill wrote the files
      restore.Add(got);
      plain.Add(read);
      // The release reaches the daemon within a millisecond; the next get needs its room.
      WaitUntil(
          [&] {
            return StatusOf(c).spilled_objects == 1 && Check(c.Stat(on_disk), "stat").refcount == 0;
          },
          std::chrono::seconds(5));
    }
  }
  fs::remove_all(spill_dir);
  fs::remove(file);
  Summary r = restore.Summarize(), p = plain.Summarize();
  double ratio = r.p50 / p.p50;
  Table t({"", "time (median)", "min–max", "restore / plain", "target"}, "lrrrl");
  t.Row({"plain read of 64 MiB", Time(p.p50), fmt::format("{}–{}", Time(p.min), Time(p.max)), "",
         ""});
  t.Row({"get of a 64 MiB object on disk", Time(r.p50),
         fmt::format("{}–{}", Time(r.min), Time(r.max)), Ratio(ratio),
         targets.Check("restore ≤ 1.3× a plain read", "restore of 64 MiB", Ratio(ratio),
                       ratio <= 1.3)});
  t.Print();
}

// 3. Gets of an object in memory, alone and while another client makes depotd spill.
void GetsWhileSpilling(const std::string& dir, bool quick) {
  const uint64_t capacity = (quick ? 256 : 512) * kMiB;
  Say(fmt::format(
      "\n## Gets of an object in memory while spilling runs\n\nA {} pool; a 1 MiB object is got "
      "(and released) in a loop, first alone, then while another thread puts objects of 16 MiB "
      "without end, each of which makes depotd write one out.\n",
      Bytes(capacity)));
  std::string spill_dir = dir + "/spill-gets";
  Series idle, busy;
  {
    TempDir logs;
    DepotDaemon d(logs.path(), "depotd",
                  {.capacity = capacity, .segment_size = 64 * kMiB, .spill_dir = spill_dir});
    Client c = d.Connect();
    Guid small = Check(c.Put(std::vector<std::byte>(kMiB, std::byte{1})), "put");
    auto measure = [&](Series& s) {
      s.NextRound();
      for (int i = 0; i < 2000; ++i) {
        auto t0 = Clock::now();
        Object o = Check(c.Get(small), "get");
        s.Add(Since(t0));
      }
    };
    measure(idle);
    std::atomic<bool> stop{false};
    std::thread writer([&] {
      Client w = d.Connect("writer");
      std::vector<std::byte> data(16 * kMiB, std::byte{2});
      while (!stop) Check(w.Put(data), "put");
    });
    WaitUntil([&] { return StatusOf(c).spills > 4; }, std::chrono::seconds(30));
    measure(busy);
    stop = true;
    writer.join();
  }
  fs::remove_all(spill_dir);
  Summary i = idle.Summarize(), b = busy.Summarize();
  Table t({"get of a 1 MiB object in memory", "median", "p99", "busy / idle (median)"}, "lrrr");
  t.Row({"alone", Time(i.p50), Time(i.p99), ""});
  t.Row({"while depotd spills", Time(b.p50), Time(b.p99), Ratio(b.p50 / i.p50)});
  t.Print();
}

// Puts `count` objects of `size` bytes into `d`'s pool; returns the first one's GUID.
Guid FillPool(const DepotDaemon& d, int count, uint64_t size) {
  Client c = d.Connect();
  std::vector<std::byte> data(size, std::byte{3});
  Guid first = Check(c.Put(data), "put");
  for (int i = 1; i < count; ++i) Check(c.Put(data), "put");
  return first;
}

// 4. A clean stop of a full pool and the restart, against the plain write of the same bytes.
// Returns the time from the stop to the first get served by the new daemon (a restore).
double StopAndRestart(const std::string& dir, uint64_t capacity) {
  const uint64_t size = 16 * kMiB;
  const int count = static_cast<int>(capacity / size * 85 / 100);  // under the 90% spill mark
  Say(fmt::format(
      "\n## Clean stop and restart with a full pool\n\n{} objects of {} in a {} pool, none on "
      "disk yet. Stop: SIGTERM until depotd exits (it writes them all). Restart: a new depotd "
      "on the same spill_dir, until it serves. Plain: the same files written one after "
      "another.\n",
      count, Bytes(size), Bytes(capacity)));
  std::string spill_dir = dir + "/spill-restart";
  TempDir logs;
  DaemonConfig config{.capacity = capacity, .segment_size = 64 * kMiB, .spill_dir = spill_dir};
  auto d = std::make_unique<DepotDaemon>(logs.path(), "depotd", config);
  Guid first = FillPool(*d, count, size);
  auto t0 = Clock::now();
  d.reset();  // SIGTERM, then waits for the exit
  double stop = Since(t0);
  auto t1 = Clock::now();
  d = std::make_unique<DepotDaemon>(logs.path(), "depotd", config);
  double start = Since(t1);
  Client c = d->Connect();
  uint64_t listed = StatusOf(c).spilled_objects;
  Check(c.Get(first), "the first get after the restart");
  double first_get = Since(t0);
  d.reset();
  fs::remove_all(spill_dir);
  double plain = PlainWrite(dir, count, size);
  Table t({"", "time", "throughput", "against the plain write"}, "lrrr");
  double bytes = static_cast<double>(count) * size;
  t.Row({"plain write of the same files", Time(plain), Rate(bytes / plain), ""});
  t.Row({fmt::format("clean stop ({} objects written)", count), Time(stop), Rate(bytes / stop),
         Ratio(stop / plain)});
  t.Row({fmt::format("restart ({} objects served from disk)", listed), Time(start), "", ""});
  t.Row({"stop to the first get served (a restore)", Time(first_get), "", ""});
  t.Print();
  return first_get;
}

// 5. The same pool kept in memory across a kill -9 (keep_memory, with the descriptor store of
// systemd played by tests/fd_store_stand_in.h), against the spill path of section 4.
void KeptRestart(const std::string& dir, uint64_t capacity, double spill_path) {
  const uint64_t size = 16 * kMiB;
  const int count = static_cast<int>(capacity / size * 85 / 100);
  Say(fmt::format(
      "\n## Restart with the memory kept\n\nThe pool of section 4 ({} objects of {}, plus 10,000 "
      "of 4 KiB), no spill_dir, under a stand-in for systemd's descriptor store. depotd is killed "
      "(SIGKILL) and a new one started with what the store kept, until its first get is served; "
      "against the clean stop and restart through spill_dir of section 4 (same run).\n",
      count, Bytes(size)));
  TempDir logs;
  test::FdStoreStandIn store(logs.path() + "/notify");
  DaemonConfig config{.capacity = capacity + 64 * kMiB, .segment_size = 64 * kMiB};
  config.prepare = [&store] {
    ::setenv("NOTIFY_SOCKET", store.path().c_str(), 1);
    store.PassToChild();
  };
  auto d = std::make_unique<DepotDaemon>(logs.path(), "depotd", config);
  Guid first = FillPool(*d, count, size);
  // A client holds the 10,000 small objects across the kill, making no call: its library
  // reconnects and has the next daemon hold them again.
  Client holder = d->Connect();
  std::vector<Result<Object>> held;
  {
    Client c = d->Connect();
    std::vector<std::byte> small(4096, std::byte{5});
    std::vector<Guid> guids;
    for (int i = 0; i < 10000; ++i) guids.push_back(Check(c.Put(small), "put"));
    StatusOf(c);
    held = holder.Get(guids);
  }
  store.Drain(std::chrono::milliseconds(500));
  auto t0 = Clock::now();
  d->Kill();
  store.Drain();
  d = std::make_unique<DepotDaemon>(logs.path(), "depotd", config);
  Client c = d->Connect();
  Check(c.Get(first), "the first get after the restart");
  double kept = Since(t0);
  Check(holder.Ping(), "the holder's first call after the restart");
  double carried = Since(t0);
  StoreStatus st = StatusOf(c);
  uint64_t references = 0;
  for (const ClientInfo& info : Check(c.Clients(), "clients")) references += info.references;
  held.clear();
  d.reset();
  Table t({"", "time", "against the spill path"}, "lrr");
  t.Row(
      {fmt::format("spill path: clean stop to the first get ({} objects written and read)", count),
       Time(spill_path), ""});
  t.Row({fmt::format("kept memory: kill -9 to the first get ({} objects adopted, {} dropped)",
                     st.adopted_objects, st.adoption_dropped),
         Time(kept), Ratio(kept / spill_path)});
  t.Row({"of which the adoption itself", Time(static_cast<double>(st.adoption_us) / 1e6),
         Ratio(static_cast<double>(st.adoption_us) / 1e6 / spill_path)});
  t.Row({fmt::format("kill -9 to the first call of a client that held 10,000 objects across it "
                     "({} held again)",
                     references),
         Time(carried), Ratio(carried / spill_path)});
  t.Print();
}

int Main(int argc, char** argv) {
  bool quick = false;
  std::string dir = "/var/tmp";
  uint64_t restart_pool = 0;  // sections 4 and 5; 0: 256 MiB quick, else 1 GiB
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--quick") {
      quick = true;
    } else if (a == "--dir" && i + 1 < argc) {
      dir = argv[++i];
    } else if (a == "--restart-pool" && i + 1 < argc && ParseSize(argv[i + 1], 0)) {
      restart_pool = *ParseSize(argv[++i], 0);
    } else {
      std::fprintf(stderr, "usage: spill_bench [--quick] [--dir DIR] [--restart-pool SIZE]\n");
      return 2;
    }
  }
  std::string work = fmt::format("{}/spill-bench-{}", dir, ::getpid());
  fs::create_directories(work);
  ::chmod(work.c_str(), 0700);
  Say(fmt::format("# Spilling to disk\n\n{}\n\nMeasured in {} (load average {}).",
                  MachineDescription(), dir, LoadAverage()));
  Targets targets;
  try {
    SpillThroughput(work, quick, targets);
    Restore(work, quick, targets);
    GetsWhileSpilling(work, quick);
    if (restart_pool == 0) restart_pool = (quick ? 256 : 1024) * kMiB;
    double spill_path = StopAndRestart(work, restart_pool);
    KeptRestart(work, restart_pool, spill_path);
  } catch (const BenchError& e) {
    Say(fmt::format("\n**failed: {}**", e.what()));
    fs::remove_all(work);
    return 1;
  }
  fs::remove_all(work);
  targets.Print();
  return 0;
}

}  // namespace
}  // namespace depot::bench

int main(int argc, char** argv) { return depot::bench::Main(argc, argv); }
