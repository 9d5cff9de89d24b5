#include "daemon/kept_memory.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <optional>
#include <set>

#include "common/wall_clock.h"
#include "daemon/put_ring.h"
#include "daemon/request_limits.h"
#include "depot/units.h"
#include "proto/wire.h"

namespace depot {

namespace {

std::string SegmentName(uint32_t key, uint32_t pool, uint32_t id, uint32_t owner, bool large,
                        uint64_t size) {
  if (pool == 0) return fmt::format("depot.seg.{}.{}.{}.{}", key, id, owner, large ? 1 : 0);
  return fmt::format("depot.dev.{}.{}.{}.{}.{}.{}", key, pool, id, owner, large ? 1 : 0, size);
}

// The entry that says which GPU device pool `pool` is on (its descriptor, an empty memfd, holds
// nothing: the store keeps descriptors only).
std::string GpuName(uint32_t pool, const std::string& uuid) {
  return fmt::format("depot.gpu.{}.{}", pool, uuid);
}

}  // namespace

// The keeper of one pool of one namespace: stores each segment under its name, and forgets it.
class KeptMemory::Keeper : public SegmentKeeper {
 public:
  Keeper(KeptMemory* kept, uint32_t key, uint32_t pool) : kept_(kept), key_(key), pool_(pool) {}
  void Keep(uint32_t id, int fd, uint32_t owner, bool large, uint64_t size) override {
    std::string name = SegmentName(key_, pool_, id, owner, large, size);
    // A segment being adopted is in the store already.
    if (!kept_->store_.Has(name)) kept_->store_.Keep(name, fd);
    names_[id] = std::move(name);
  }
  void Forget(uint32_t id) override {
    auto it = names_.find(id);
    if (it == names_.end()) return;
    if (!kept_->stopping_) kept_->store_.Forget(it->second);
    names_.erase(it);
  }

 private:
  KeptMemory* kept_;
  uint32_t key_;
  uint32_t pool_;
  std::map<uint32_t, std::string> names_;
};

namespace {

double MillisecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

std::string CatalogName(uint32_t key, uint64_t generation) {
  return fmt::format("depot.catalog.{}.{}", key, generation);
}

// The rest of a ring's name after its generation: ".<pid>", or nothing (a daemon before pids
// were named).
bool RingPid(const char* rest, int32_t& pid) {
  int end = 0;
  if (rest[0] == '\0') return true;
  return std::sscanf(rest, ".%" SCNd32 "%n", &pid, &end) == 1 && rest[end] == '\0';
}

}  // namespace

// What the last daemon kept, sorted by namespace, until it is adopted.
struct KeptMemory::Taken {
  struct Segment {
    uint32_t pool = 0;  // the last daemon's number
    uint32_t id = 0;
    uint32_t owner = 0;
    bool large = false;
    uint64_t size = 0;  // a device chunk's, from its name
    KeptFd kept;
  };
  struct Space {
    std::vector<Segment> segments;
    std::vector<KeptRing> rings;
    std::map<uint64_t, KeptFd> catalogs;  // by generation
  };
  std::map<uint32_t, Space> found;
  // The last daemon's census, when it kept one: read and forgotten before any ring is, so that a
  // crash during this adoption leaves the next daemon no census that the rings taken since would
  // make wrong (without one it runs its grace period out).
  std::optional<bool> census;
  std::vector<SessionCensus::Kept> sessions;  // those its kept rings name
  std::map<uint32_t, std::string> gpus;       // the UUID of each of its device pools
};

KeptMemory::KeptMemory(boost::asio::io_context& io, bool wanted, std::chrono::milliseconds grace)
    : io_(io), store_(wanted), grace_(grace), grace_timer_(io), census_(io) {}

KeptMemory::~KeptMemory() = default;

SegmentKeeper* KeptMemory::KeeperFor(uint32_t key, uint32_t pool, const std::string& uuid) {
  if (!on()) return nullptr;
  if (pool != 0 && !store_.Has(GpuName(pool, uuid))) {
    UniqueFd says(::memfd_create("depot-gpu", MFD_CLOEXEC));
    if (says.valid()) store_.Keep(GpuName(pool, uuid), says.get());
  }
  auto& keeper = keepers_[{key, pool}];
  if (!keeper) keeper = std::make_unique<Keeper>(this, key, pool);
  return keeper.get();
}

Status KeptMemory::Attach(Namespace& ns) {
  if (!on()) return Status::OK();
  auto catalog = Catalog::Create(ns.key());
  if (!catalog.ok()) return catalog.status();
  Place& place = places_[ns.key()];
  place.catalog = std::move(*catalog);
  place.ns = &ns;
  if (auto it = adopting_.find(ns.key()); it != adopting_.end()) {
    place.generation = it->second + 1;  // stored once the last daemon's is adopted
  } else {
    StoreCatalog(ns.key(), place);
  }
  return Status::OK();
}

void KeptMemory::StoreCatalog(uint32_t key, Place& place) {
  store_.Keep(CatalogName(key, place.generation), place.catalog->fd());
  place.stored = true;
}

void KeptMemory::Adopted(uint32_t key, const std::optional<KeptFd>& last) {
  adopting_.erase(key);
  // This daemon's catalog is stored before the last one's goes: a crash in between leaves both.
  if (auto it = places_.find(key); it != places_.end()) StoreCatalog(key, it->second);
  if (last) store_.Forget(last->name);
}

void KeptMemory::Detach(const Namespace& ns) {
  auto it = places_.find(ns.key());
  if (it == places_.end()) return;
  if (it->second.stored && !stopping_) store_.Forget(CatalogName(ns.key(), it->second.generation));
  places_.erase(it);
}

void KeptMemory::Note(const Namespace& ns, TableEvent e, const StoredObject& o) {
  auto it = places_.find(ns.key());
  if (it == places_.end()) return;
  Catalog& catalog = *it->second.catalog;
  auto slot = static_cast<uint32_t>(o.id);
  switch (e) {
    case TableEvent::kSealed:
    case TableEvent::kRestored:
      if (o.residence == Residence::kMemory) catalog.Record(slot, o);
      break;
    case TableEvent::kCreated:
      break;
    default:  // deleted, evicted, spilled, aborted, freed: no longer an object in memory
      catalog.Erase(slot);
      break;
  }
}

void KeptMemory::Take(std::vector<KeptFd> kept) {
  auto start = std::chrono::steady_clock::now();
  report_ = {};
  report_.ran = !kept.empty();
  taken_ = std::make_unique<Taken>();
  auto& [found, census, sessions, gpus] = *taken_;
  for (KeptFd& k : kept) {
    store_.Passed(k.name);
    if (k.name == SessionCensus::kName) {
      census = SessionCensus::Complete(k.fd);
      store_.Forget(k.name);
      continue;
    }
    uint32_t key = 0, pool = 0, id = 0, owner = 0, large = 0;
    uint64_t generation = 0, size = 0;
    int end = 0;
    const char* name = k.name.c_str();
    if (std::sscanf(name, "depot.seg.%" SCNu32 ".%" SCNu32 ".%" SCNu32 ".%" SCNu32 "%n", &key, &id,
                    &owner, &large, &end) == 4 &&
        name[end] == '\0') {
      found[key].segments.push_back({0, id, owner, large != 0, 0, std::move(k)});
    } else if (std::sscanf(name,
                           "depot.dev.%" SCNu32 ".%" SCNu32 ".%" SCNu32 ".%" SCNu32 ".%" SCNu32
                           ".%" SCNu64 "%n",
                           &key, &pool, &id, &owner, &large, &size, &end) == 6 &&
               name[end] == '\0' && pool != 0) {
      found[key].segments.push_back({pool, id, owner, large != 0, size, std::move(k)});
    } else if (std::sscanf(name, "depot.gpu.%" SCNu32 ".%n", &pool, &end) == 1 && end > 0 &&
               pool != 0 && name[end] != '\0') {
      gpus[pool] = name + end;  // stays in the store while this daemon has that pool there
    } else if (int32_t pid = 0;
               std::sscanf(name, "depot.ring.%" SCNu32 ".%" SCNu32 ".%" SCNu64 "%n", &key, &owner,
                           &generation, &end) == 3 &&
               RingPid(name + end, pid)) {
      sessions.push_back({generation, pid, owner});
      last_session_ = std::max(last_session_, generation);
      found[key].rings.push_back({owner, pid, std::move(k)});
    } else if (std::sscanf(name, "depot.catalog.%" SCNu32 ".%" SCNu64 "%n", &key, &generation,
                           &end) == 2 &&
               name[end] == '\0') {
      found[key].catalogs[generation] = std::move(k);
    } else {
      spdlog::warn("kept memory: {} is no descriptor of depotd's; dropped", k.name);
      store_.Forget(k.name);
    }
  }
  // A namespace made from here on stores its catalog after the last one's.
  for (auto& [key, space] : found) {
    adopting_[key] = space.catalogs.empty() ? 0 : space.catalogs.rbegin()->first;
  }
  report_.milliseconds = MillisecondsSince(start);
}

AdoptionReport KeptMemory::Adopt(const NamespaceFor& ns_for, const PoolOfGpu& pool_of_gpu,
                                 const proto::ObjectLimits& limits) {
  auto start = std::chrono::steady_clock::now();
  if (!taken_) taken_ = std::make_unique<Taken>();
  auto& [found, census, sessions, gpus] = *taken_;
  // The last daemon's device pools by this one's numbers: the same GPU may have another (a GPU
  // gone, or configured out), or none.
  std::map<uint32_t, uint32_t> renumbered;
  for (const auto& [pool, uuid] : gpus) {
    std::optional<uint32_t> now = pool_of_gpu(uuid);
    if (now) renumbered[pool] = *now;
    if (now != pool) store_.Forget(GpuName(pool, uuid));
  }
  for (auto& [key, kn] : found) {
    // The newest catalog is the complete one (see the class comment); older ones are done with.
    std::optional<KeptFd> newest;
    if (!kn.catalogs.empty()) {
      newest = std::move(kn.catalogs.rbegin()->second);
      kn.catalogs.erase(std::prev(kn.catalogs.end()));
    }
    for (auto& [gen, old] : kn.catalogs) store_.Forget(old.name);
    Namespace* ns = ns_for(key);
    std::unique_ptr<Catalog> last;
    if (ns != nullptr && newest) {
      auto opened = Catalog::Open(std::move(newest->fd), key);
      if (opened.ok()) {
        last = std::move(*opened);
      } else {
        ++report_.refused;
        spdlog::error("kept memory of namespace {}: {}; its objects are lost", key,
                      opened.status().message());
      }
    }
    if (ns == nullptr) {
      for (Taken::Segment& s : kn.segments) store_.Forget(s.kept.name);
      for (KeptRing& r : kn.rings) store_.Forget(r.kept.name);
      Adopted(key, newest);
      continue;
    }
    for (Taken::Segment& s : kn.segments) {
      std::string name = s.kept.name;
      uint32_t pool = 0;  // this daemon's number for it (0 for a device chunk: none)
      if (auto it = renumbered.find(s.pool); s.pool != 0 && it != renumbered.end()) {
        pool = it->second < ns->pools() ? it->second : 0;
      }
      Status st = s.pool != 0 && pool == 0
                      ? Status::NotFound("this depotd has no device pool on its GPU")
                      : ns->pool(pool).AdoptKept(s.id, s.owner, s.large, std::move(s.kept.fd),
                                                 s.size, name);
      // Adopted under another pool's number, it is stored again under its name here (AdoptKept).
      if (!st.ok() || pool != s.pool) store_.Forget(name);
      if (!st.ok()) {
        spdlog::warn("kept memory: {}: {}; dropped", name, st.message());
        continue;
      }
      ++report_.segments;
    }
    uint64_t torn = 0;
    std::vector<CatalogObject> objects = last ? last->Read(&torn) : std::vector<CatalogObject>();
    report_.dropped += torn;
    for (CatalogObject& c : objects) {
      if (!AdoptObject(*ns, std::move(c.object), c.facts, renumbered)) ++report_.dropped;
    }
    // Then the puts the last daemon had not taken: their bytes are in blocks it had leased.
    for (KeptRing& ring : kn.rings) AdoptRing(*ns, ring, limits);
    for (uint32_t n = 0; n < ns->pools(); ++n) {
      auto before = ns->pool(n).closed().first;
      ns->pool(n).ReleaseEmptyKept();
      report_.released += before - ns->pool(n).closed().first;
    }
    Adopted(key, newest);
  }
  // This daemon's census, counting from the start the grace period about to begin.
  census_.Start(store_, report_.ran ? 1 : 0);
  report_.milliseconds += MillisecondsSince(start);
  if (report_.ran) {
    spdlog::info(
        "kept memory: {} objects ({}) served again from {} segments in {:.1f} ms, {} dropped{}; "
        "kept segments take no new objects for {} s, or until the {} processes connected to the "
        "last depotd have exited or resumed",
        report_.objects, FormatBytes(report_.bytes), report_.segments - report_.released,
        report_.milliseconds, report_.dropped,
        report_.refused > 0 ? fmt::format(", {} catalogs refused", report_.refused) : "",
        grace_.count() / 1000.0, sessions.size());
    BeginGrace();
    if (census.value_or(false)) {
      census_.Watch(sessions, [this](const std::string& why) { EndGrace(why); });
    } else {
      spdlog::info("kept memory: the last depotd {}: the grace period runs out",
                   census ? "counted sessions it kept no ring for" : "kept no census of sessions");
    }
  }
  taken_.reset();
  return report_;
}

void KeptMemory::BeginGrace() {
  if (grace_begun_) return;
  grace_begun_ = true;
  grace_timer_.expires_after(grace_);
  grace_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) EndGrace(fmt::format("{} s passed", grace_.count() / 1000.0));
  });
}

void KeptMemory::EndGrace(const std::string& why) {
  if (!grace_begun_ || grace_ended_) return;
  grace_ended_ = true;
  grace_timer_.cancel();
  census_.StopWatching();
  CountUnkept();
  if (report_.ran) OpenAll(why);
  if (on_grace_end_) on_grace_end_();
}

void KeptMemory::Report(StoreStatus& st) const {
  st.keep_memory = on();
  st.kept_descriptors = store_.stored();
  st.adopted_objects = report_.objects;
  st.adopted_bytes = report_.bytes;
  st.adoption_dropped = report_.dropped;
  st.adoption_refused = report_.refused;
  st.adoption_us = static_cast<uint64_t>(report_.milliseconds * 1000);
  for (const auto& [key, place] : places_) {
    for (uint32_t n = 0; n < place.ns->pools(); ++n) {
      st.kept_closed_bytes += place.ns->pool(n).closed().second;
    }
  }
  st.grace_waiting = census_.waiting();
  st.grace_resumed = census_.resumed();
}

bool KeptMemory::AdoptObject(Namespace& ns, NewObject n, const SpilledFacts& facts,
                             const std::map<uint32_t, uint32_t>& pools) {
  std::vector<Location> taken;
  auto give_back = [&] {
    for (const Location& t : taken) ns.pool(t.pool).UnreserveKept(t);
    return false;
  };
  uint64_t size = 0;
  for (Location& f : n.frames) {
    if (f.pool != 0) {
      auto it = pools.find(f.pool);
      if (it == pools.end() || it->second >= ns.pools()) return give_back();
      f.pool = it->second;
    }
    if (f.size == 0) continue;
    if (!ns.pool(f.pool).ReserveKept(f, n.creator_uid)) return give_back();
    taken.push_back(f);
    size += f.size;
  }
  if (const StoredObject* there = ns.table().Find(n.guid)) {
    // Read back from spill_dir before the crash, it kept its file, and the spill directory has
    // brought it back already: these frames are its copy, as if read back again.
    auto sizes = [](const Location& a, const Location& b) { return a.size == b.size; };
    if (there->residence != Residence::kDisk ||
        !std::equal(n.frames.begin(), n.frames.end(), there->frames().begin(),
                    there->frames().end(), sizes)) {
      return give_back();
    }
    ObjectId id = there->id;
    ns.table().StartRestore(id);
    ns.table().FinishRestore(id, n.frames, Status::OK());
  } else if (!ns.table().Adopt(std::move(n), facts, true).ok()) {
    return give_back();
  }
  ++report_.objects;
  report_.bytes += size;
  return true;
}

void KeptMemory::AdoptRing(Namespace& ns, KeptRing& ring, const proto::ObjectLimits& limits) {
  std::string name = ring.kept.name;
  auto adopted = PutRing::Adopt(std::move(ring.kept.fd));
  if (!adopted.ok()) {
    spdlog::warn("kept memory: {}: {}; dropped", name, adopted.status().message());
    store_.Forget(name);
    return;
  }
  (*adopted)->Close();
  // Each record is checked as the last daemon would have (it is the client's to write, and its
  // client may have written it after that daemon died): by the put path's own check, then its
  // frames against the segments of the ring's user. A record that fails is dropped and the next
  // is read, as the record boundaries are the ring's and not the record's; a put of an object
  // that exists already was taken just before the crash, and its record is done with.
  uint64_t refused = 0;
  auto refuse = [&](const std::string& why) {
    // One line a ring: a hostile client can write thousands of records.
    if (refused++ == 0) spdlog::warn("kept memory: {}: a put refused: {}", name, why);
    ++report_.dropped;
    return Status::OK();
  };
  Status taken = (*adopted)->Take([&](std::span<const uint8_t> body, bool) {
    if (!proto::VerifyBody(static_cast<uint16_t>(proto::MsgType::kPut), body)) {
      return refuse("it does not verify as a put");
    }
    const wire::PutRequest& req = *proto::Body<wire::PutRequest>(body);
    if (Status invalid = CheckPut(req, limits); !invalid.ok()) return refuse(invalid.message());
    NewObject n;
    n.guid = proto::FromWire(*req.guid());
    // An owner-scoped put becomes an orphan of its process (OwnerScopes), which needs the pid: a
    // ring of an older daemon's, whose name does not say it, drops it as its session is gone.
    if ((req.owner_scoped() && ring.pid == 0) || ns.table().Find(n.guid) != nullptr) {
      return Status::OK();
    }
    for (const wire::FrameLocation* f : *req.frames()) {
      n.frames.push_back(
          {.segment = f->segment(), .pool = f->pool(), .offset = f->offset(), .size = f->size()});
    }
    if (req.metadata()) n.metadata.assign(req.metadata()->begin(), req.metadata()->end());
    if (req.name()) n.name = req.name()->str();
    n.evictable = req.evictable();
    n.owner_scoped = req.owner_scoped();
    n.creator_uid = ring.uid;
    n.creator_pid = ring.pid;
    int64_t now = WallClockNs();
    SpilledFacts facts{req.checksum().value_or(0), req.checksum().has_value(), now, now};
    if (!AdoptObject(ns, std::move(n), facts)) ++report_.dropped;
    return Status::OK();
  });
  if (refused > 1) spdlog::warn("kept memory: {}: {} puts refused in all", name, refused);
  if (!taken.ok()) {
    ++report_.dropped;
    spdlog::warn("kept memory: {}: {}; the rest of it is dropped", name, taken.message());
  }
  store_.Forget(name);
}

void KeptMemory::KeepRing(uint32_t key, uint32_t uid, int32_t pid, SessionId session, int fd) {
  if (!on()) return;
  std::string name = fmt::format("depot.ring.{}.{}.{}.{}", key, uid, session, pid);
  if (fd < 0 || rings_.size() >= kRings || rings_of_[uid] >= kRingsPerUser ||
      !store_.Keep(name, fd)) {
    unkept_.insert(session);  // the next daemon cannot tell when its process is done
    CountUnkept();
    return;
  }
  rings_[session] = {std::move(name), uid};
  ++rings_of_[uid];
}

void KeptMemory::ForgetRing(SessionId session) {
  // At a stop the sessions close but their processes carry on: the census keeps counting them.
  if (!stopping_ && unkept_.erase(session) > 0) CountUnkept();
  auto it = rings_.find(session);
  if (it == rings_.end()) return;
  if (!stopping_) store_.Forget(it->second.name);
  if (--rings_of_[it->second.uid] == 0) rings_of_.erase(it->second.uid);
  rings_.erase(it);
}

void KeptMemory::CountUnkept() {
  bool inherited = report_.ran && grace_begun_ && !grace_ended_;
  census_.Unkept(unkept_.size() + (inherited ? 1 : 0));
}

bool KeptMemory::Resumed(uint64_t session, int32_t pid, uint32_t uid) {
  return !grace_ended_ && census_.Resumed(session, pid, uid);
}

void KeptMemory::OpenAll(const std::string& why) {
  uint64_t bytes = 0;
  for (auto& [key, place] : places_) {
    for (uint32_t n = 0; n < place.ns->pools(); ++n) {
      bytes += place.ns->pool(n).closed().second;
      place.ns->pool(n).OpenKept();
    }
  }
  spdlog::info("kept memory: the grace period ended ({}); {} of kept segments take new objects",
               why, FormatBytes(bytes));
}

}  // namespace depot
