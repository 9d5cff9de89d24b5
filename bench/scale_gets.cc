// Section 9, gets at scale: the first get of an object this process does not hold yet, and a
// multi-GUID get of 1,000 such objects (beside 1,000 single gets of others in the same round, and
// their ratio), measured first in a small store (10,000 objects stored, 1,000 held by the getting
// process) and then, in the same daemon, at scale (1,000,000 stored, 100,000 held; a tenth of
// each with --quick), at 64 B and 64 MiB, against the bare socket round trip of the same run.
// depotd runs with its defaults (nothing sized for the scale). Every object got is distinct and got
// for the first time by this connection, whose segments are already mapped (the puts' first gets
// brought them); each object timed is let go after its get, so that the holding stays at the row's
// count; the 64 MiB objects are got again and again. A get that missed the shared index is a round
// trip: the column "through the index" counts how many did not (Client::index_gets). Beside the
// multi-get, its memory floor (MemoryFloor): the lines its lookups must wait on, in the same
// memory, with no work of depot's, so that a missed target says whether the host's memory or the
// code stands between.
#include <fmt/format.h>

#include <chrono>
#include <optional>
#include <thread>
#include <vector>

#include "bench/memory_floor.h"
#include "bench/sections.h"

namespace depot::bench {
namespace {

constexpr uint64_t kSmall = 64;
constexpr uint64_t kLarge = 64ull << 20;
constexpr int kLargeCount = 4;

struct Counts {
  uint64_t stored;
  uint64_t held;
};

struct Row {
  std::string where;
  Summary floor, get, large, multi, singles, memory;
  double indexed = 0;  // share of the timed gets served through the index
  double stored = 0;   // objects in the store
};

// The objects put so far and what the reader holds.
class Store {
 public:
  explicit Store(const Context& ctx)
      : daemon_(ctx.dir, "scale-gets", {.capacity = 1ull << 30, .spill_dir = {}}),
        putter_(daemon_.Connect("putter")),
        reader_(daemon_.Connect("reader")) {}
  std::string Describe() const { return daemon_.Describe(); }

  void PutLarge() {
    std::vector<std::byte> value(kLarge, std::byte{0x6b});
    for (int i = 0; i < kLargeCount; ++i) {
      large_.push_back(Check(putter_.Put(value), "put"));
      KeepAlive(Check(reader_.Get(large_.back()), "first get").size());  // maps its segment
    }
  }
  // Puts 64-byte objects until `count` are stored.
  void PutUntil(uint64_t count) {
    std::vector<std::byte> value(kSmall, std::byte{0x5a});
    if (small_.empty()) {  // its segment mapped by the reader, untimed
      small_.push_back(Check(putter_.Put(value), "put"));
      held_.push_back(Check(reader_.Get(small_.back()), "first get"));
    }
    while (small_.size() < count) small_.push_back(Check(putter_.Put(value), "put"));
    StoreStatus st = Check(putter_.GetStatus(), "status");  // every put taken
    if (st.objects_sealed < count) {
      throw BenchError(fmt::format("depotd holds {} objects, not {}", st.objects_sealed, count));
    }
    // An index that grew during the puts may still be moving: the reader would meet the new
    // one during the timed gets (one refresh, then the first touches of its pages).
    while (st.index_moving > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      st = Check(putter_.GetStatus(), "status");
    }
  }
  // Gets objects not held yet until the reader holds `count`.
  void HoldUntil(uint64_t count) {
    while (held_.size() < count) held_.push_back(Check(reader_.Get(Next()), "get"));
  }
  // One timed get of an object not held yet, let go after: the holding stays as it is.
  double FirstGet() {
    Guid id = Next();
    auto t0 = Clock::now();
    Object o = Check(reader_.Get(id), "get");
    double t = Since(t0);
    KeepAlive(o.size());
    return t;
  }
  // One timed get of a 64 MiB object, let go after.
  double LargeGet() {
    Guid id = large_[large_next_++ % large_.size()];
    auto t0 = Clock::now();
    Object o = Check(reader_.Get(id), "get");
    double t = Since(t0);
    KeepAlive(o.size());
    return t;
  }
  // One timed multi-GUID get of `n` objects not held yet, let go after.
  double MultiGet(size_t n) {
    std::vector<Guid> ids;
    for (size_t i = 0; i < n; ++i) ids.push_back(Next());
    auto t0 = Clock::now();
    std::vector<Result<Object>> got = reader_.Get(ids);
    double t = Since(t0);
    for (auto& r : got) KeepAlive(Check(std::move(r), "multi-get").size());
    return t;
  }
  uint64_t index_gets() const { return reader_.index_gets(); }
  uint64_t stored() const { return small_.size(); }

 private:
  Guid Next() {
    if (next_ >= small_.size()) throw BenchError("the bench ran out of objects not held");
    return small_[next_++];
  }

  DepotDaemon daemon_;
  Client putter_, reader_;
  std::vector<Guid> small_, large_;
  std::vector<Object> held_;
  size_t next_ = 0;  // the first of small_ not got yet
  size_t large_next_ = 0;
};

}  // namespace

void ScaleGets(const Context& ctx) {
  const Counts small{10'000, 1'000};
  const Counts large = ctx.quick ? Counts{100'000, 10'000} : Counts{1'000'000, 100'000};
  const int rounds = ctx.quick ? 3 : 5;
  const int per_round = ctx.quick ? 200 : 500;  // single gets per round and method
  const int multis = ctx.quick ? 2 : 4;         // multi-gets of 1,000 per round
  Store store(ctx);
  int cpu = Placements().back();
  Say(fmt::format(
      "\n## 9. Gets at scale\n\n"
      "depotd with a {} and every other setting at its default, this process on CPU {}. The "
      "first get of a 64 B object this process does not hold yet (each object got once, and let go "
      "after: the holding stays at the row's count), a multi-GUID get of 1,000 such objects beside "
      "1,000 single gets of others, and a get of a "
      "64 MiB object whose segment is mapped (let go after), while the node stores and this "
      "process holds the counts of each row; the floor is 16 bytes there and back over a "
      "socketpair. {} rounds; in each the floor and the gets run their samples in turn. "
      "\"Through the index\": the share of these gets that needed no round trip. \"Its memory "
      "floor\": after each multi-get, the cache lines a multi-get of 1,000 must load at random "
      "for 1,000 objects of the index this process maps (the tags of each one's first set, then "
      "those of its second where it lies there, then its entry; and a line in a table the size of "
      "its holdings), touched with no work of depot's (bench/memory_floor.h): what this host's "
      "memory gives the pattern at that moment.",
      store.Describe(), cpu, rounds));
  PinTo(cpu);
  SocketPeer peer(16);
  std::array<std::byte, 16> ping{};
  store.PutLarge();
  std::vector<Row> rows;
  for (const Counts& at : {small, large}) {
    fmt::print(stderr, "  scale gets: {} stored, {} held\n", Grouped(at.stored), Grouped(at.held));
    uint64_t reserve = uint64_t(rounds) * (per_round + multis * 2000 + 1);
    store.PutUntil(at.stored + reserve);
    store.HoldUntil(at.held);
    Series floor, get, big, multi, singles, memory;
    MemoryFloor lines(at.held);
    uint64_t gets = 0, indexed0 = store.index_gets();
    for (int r = 0; r < rounds; ++r) {
      for (Series* s : {&floor, &get, &big, &multi, &singles, &memory}) s->NextRound();
      for (int k = 0; k < 3; ++k) {
        switch ((k + r) % 3) {
          case 0:
            for (int i = 0; i < per_round; ++i) {
              auto t0 = Clock::now();
              peer.Fetch(ping);
              floor.Add(Since(t0));
            }
            break;
          case 1:
            for (int i = 0; i < per_round; ++i, ++gets) get.Add(store.FirstGet());
            for (int i = 0; i < per_round / 4; ++i, ++gets) big.Add(store.LargeGet());
            break;
          case 2:
            for (int i = 0; i < multis; ++i, gets += 2000) {
              multi.Add(store.MultiGet(1000));
              memory.Add(lines.Time1000());
              double t = 0;
              for (int j = 0; j < 1000; ++j) t += store.FirstGet();
              singles.Add(t);
            }
            break;
        }
      }
    }
    Row row{fmt::format("{} stored, {} held", Grouped(store.stored()), Grouped(at.held)),
            floor.Summarize(),
            get.Summarize(),
            big.Summarize(),
            multi.Summarize(),
            singles.Summarize(),
            memory.Summarize()};
    row.indexed = double(store.index_gets() - indexed0) / double(gets);
    row.stored = static_cast<double>(store.stored());
    rows.push_back(row);
  }
  Unpin();

  Table t({"store", "floor p50", "64 B get p50 (rounds)", "p99", "64 MiB get p50", "p99",
           "through the index", "multi-get of 1,000", "1,000 single gets", "multi / singles",
           "its memory floor", "multi / floor", "p50 ≤ 1 µs", "p99 ≤ 5 µs", "multi-get ≤ 100 µs"},
          "lrrrrrrrrrrrlll");
  for (const Row& r : rows) {
    bool scale = &r == &rows.back();
    Plot("scale", "", "64 B get, not held (p50)", r.stored, r.get.p50);
    Plot("scale", "", "64 B get, not held (p99)", r.stored, r.get.p99);
    Plot("scale", "", "64 MiB get, not held (p50)", r.stored, r.large.p50);
    Plot("scale", "", "multi-get of 1,000, per object", r.stored, r.multi.p50 / 1000);
    Plot("scale", "", "socket round trip, 16 B", r.stored, r.floor.p50);
    auto check = [&](std::string target, std::string measured, bool met) {
      return scale ? ctx.targets->Check(std::move(target), r.where, std::move(measured), met)
                   : std::string(met ? "met" : "missed");
    };
    t.Row({r.where, Time(r.floor.p50), P50WithSpread(r.get), Time(r.get.p99), Time(r.large.p50),
           Time(r.large.p99), fmt::format("{:.1f}%", 100 * r.indexed), P50WithSpread(r.multi),
           Time(r.singles.p50), fmt::format("{:.2f}×", r.multi.p50 / r.singles.p50),
           Time(r.memory.p50), fmt::format("{:.2f}×", r.multi.p50 / r.memory.p50),
           check("first get at scale p50 ≤ 1 µs",
                 fmt::format("64 B {}, 64 MiB {}", Time(r.get.p50), Time(r.large.p50)),
                 r.get.p50 <= 1e-6 && r.large.p50 <= 1e-6),
           check("first get at scale p99 ≤ 5 µs",
                 fmt::format("64 B {}, 64 MiB {}", Time(r.get.p99), Time(r.large.p99)),
                 r.get.p99 <= 5e-6 && r.large.p99 <= 5e-6),
           check("multi-get of 1,000 objects ≤ 100 µs", Time(r.multi.p50), r.multi.p50 <= 100e-6)});
  }
  t.Print();
}

}  // namespace depot::bench
