#include "daemon/spill_store.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "common/wall_clock.h"
#include "daemon/spill_manifest.h"
#include "daemon/spill_recovery.h"
#include "depot/units.h"

namespace depot {

// One write or read of one object's file.
struct SpillStore::Job {
  Namespace* ns = nullptr;
  ObjectId id = 0;
  bool restore = false;
  bool gone = false;  // the object was destroyed while the job ran
  int dir = -1;
  std::string file;
  uint64_t file_bytes = 0;
  SpillHeader header;
  std::vector<Location> frames;           // the memory the job reads or fills
  std::vector<std::span<uint8_t>> bytes;  // those frames, in the daemon's mappings
  Status result;                          // set on the I/O thread
  int64_t took_ns = 0;
  std::vector<std::shared_ptr<Waiter>> waiters;
};

namespace {

constexpr int kIoThreads = 4;
// After a spill fails for want of space, creates are refused this long without trying again.
constexpr auto kDiskFullFor = std::chrono::seconds(1);

std::string DirName(uint32_t key) {
  return key == Namespace::kShared ? "shared" : fmt::format("uid-{}", key);
}

// Device frames are not spilled, and an empty object frees nothing.
bool Unspillable(const StoredObject& o) {
  for (const Location& f : o.frames()) {
    if (f.pool != 0) return true;
  }
  return o.size() == 0;
}

}  // namespace

SpillStore::SpillStore(boost::asio::io_context& io, SpillOptions options, Hooks hooks)
    : io_(io),
      options_(std::move(options)),
      hooks_(std::move(hooks)),
      threads_(kIoThreads),
      sequence_(static_cast<uint64_t>(WallClockNs())),
      census_timer_(io),
      parked_({options_.max_parked, options_.max_parked_bytes, options_.max_parked_bytes_per_user}),
      drop_waits_(io) {}

SpillStore::~SpillStore() { threads_.join(); }

Result<std::vector<uint32_t>> SpillStore::Open() {
  std::vector<uint32_t> keys;
  if (!enabled()) return keys;
  std::filesystem::path path(options_.dir);
  std::error_code ec;
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
  auto dir = OpenSpillDirectory(AT_FDCWD, options_.dir, options_.dir);
  if (!dir.ok()) return dir.status();
  dir_ = std::move(*dir);
  struct statvfs fs {};
  if (::fstatvfs(dir_.get(), &fs) != 0) {
    return Status::Unavailable(
        fmt::format("cannot size {}: {}", options_.dir, std::strerror(errno)));
  }
  capacity_ = ParseSize(options_.capacity, uint64_t{fs.f_blocks} * fs.f_frsize).value_or(0);
  auto manifest = TakeSpillManifest(dir_.get());
  if (!manifest.ok()) spdlog::warn("{}", manifest.status().message());
  if (manifest.ok()) expected_ = std::move(*manifest);
  if (auto census = TakeSpillManifest(dir_.get(), kSpillCensusName); census.ok()) {
    census_ = std::move(*census);
  }
  ForEachSpillEntry(dir_.get(), [&](const std::string& name) {
    if (name == "shared") {
      keys.push_back(Namespace::kShared);
    } else if (uint32_t uid = 0; name.starts_with("uid-") &&
                                 std::sscanf(name.c_str(), "uid-%u", &uid) == 1 &&
                                 DirName(uid) == name) {
      keys.push_back(uid);
    }
  });
  spdlog::info("spilling to {}: up to {}", options_.dir, FormatBytes(capacity_));
  return keys;
}

Status SpillStore::Attach(Namespace& ns, bool memory_kept) {
  if (!enabled()) return Status::OK();
  ns.table().set_spilling(true);
  std::string name = DirName(ns.key());
  auto dir = OpenSpillDirectory(dir_.get(), name, options_.dir + "/" + name);
  if (!dir.ok()) return dir.status();
  Place& place = places_[&ns];
  place.dir = std::move(*dir);
  place.path = options_.dir + "/" + name;
  std::optional<SpillManifest::Entry> expected, census;
  if (expected_) expected = expected_->directories[name];
  if (census_) census = census_->directories[name];
  place.files =
      RecoverSpilled(place.dir.get(), place.path, ns.table(), expected, census, memory_kept);
  for (const auto& [id, file] : place.files) on_disk_ += file.bytes;
  return Status::OK();
}

bool SpillStore::Busy(const Namespace& ns) const {
  if (drop_waits_.Waiting(&ns)) return true;
  auto it = jobs_.lower_bound({&ns, 0});
  return it != jobs_.end() && it->first.first == &ns;
}

SpillStore::Place* SpillStore::PlaceOf(const Namespace& ns) {
  auto it = places_.find(&ns);
  return it == places_.end() ? nullptr : &it->second;
}

std::string SpillStore::Describe() const {
  return fmt::format("the spill directory {} ({} of spill_capacity {} used)", options_.dir,
                     FormatBytes(on_disk_ + in_flight_), FormatBytes(capacity_));
}

Status SpillStore::MakeRoom(Namespace& ns, uint64_t bytes, std::function<void()> then) {
  if (!enabled()) return Status::StoreFull("spilling is off (spill_dir is empty)");
  if (!disk_full_.empty()) {
    if (std::chrono::steady_clock::now() - disk_full_at_ < kDiskFullFor) {
      return Status::StoreFull(disk_full_);
    }
    disk_full_.clear();
  }
  auto waiter = std::make_shared<Waiter>();
  waiter->then = std::move(then);
  bool over = false, freed = false;
  for (ObjectId id : ns.table().SpillCandidates(bytes, Unspillable)) {
    if (!StartSpill(ns, *ns.table().Get(id), false)) {
      over = true;
      break;
    }
    if (auto job = jobs_.find({&ns, id}); job != jobs_.end()) {
      ++waiter->remaining;
      job->second->waiters.push_back(waiter);
    } else {
      freed = true;  // its file was there already: its memory went at once
    }
  }
  if (waiter->remaining > 0) return Status::OK();
  if (freed) {
    if (waiter->then) boost::asio::post(io_, std::move(waiter->then));
    return Status::OK();
  }
  // Nothing new to write: a spill already running in this namespace will free memory.
  for (auto it = jobs_.lower_bound({&ns, 0}); it != jobs_.end() && it->first.first == &ns; ++it) {
    if (it->second->restore) continue;
    waiter->remaining = 1;
    it->second->waiters.push_back(waiter);
    return Status::OK();
  }
  return Status::StoreFull(
      over ? fmt::format("{} is full", Describe())
           : fmt::format("nothing more can be spilled to {}: every object left in memory is "
                         "referenced, evictable, being created or on a GPU",
                         options_.dir));
}

Status SpillStore::MakeRoomFor(Namespace& ns, SessionId session, uid_t uid, uint64_t request_bytes,
                               std::span<const uint64_t> sizes, std::span<const uint32_t> pools,
                               const Status& full, std::function<void()> then) {
  if (!enabled() || std::any_of(pools.begin(), pools.end(), [](uint32_t p) { return p != 0; })) {
    return full;
  }
  // Each parked create holds a copy of its request: bounded per connection and per user.
  if (Status admitted = parked_.Admit(session, uid, request_bytes); !admitted.ok()) {
    return admitted;
  }
  uint64_t total = 0;
  for (uint64_t size : sizes) total += size;
  Status room = MakeRoom(ns, total, [this, session, uid, request_bytes, then = std::move(then)] {
    parked_.Release(session, uid, request_bytes);
    then();
  });
  if (room.ok()) return room;
  parked_.Release(session, uid, request_bytes);
  return Status::StoreFull(
      fmt::format("the host pool is full ({}), and {}", full.message(), room.message()));
}

void SpillStore::SpillAhead(Namespace& ns, uint64_t used, uint64_t capacity) {
  if (!enabled() || used * 10 <= capacity * 9) return;
  for (auto it = jobs_.lower_bound({&ns, 0}); it != jobs_.end() && it->first.first == &ns; ++it) {
    if (!it->second->restore) return;  // already under way
  }
  (void)MakeRoom(ns, used - capacity / 10 * 8, nullptr);
}

bool SpillStore::StartSpill(Namespace& ns, const StoredObject& o, bool over_capacity) {
  Place* place = PlaceOf(ns);
  if (place == nullptr) return false;
  if (place->files.contains(o.id)) {
    // A file from an earlier spill (or a previous daemon) still holds these bytes: no write.
    std::vector<Location> frames(o.frames().begin(), o.frames().end());
    ns.table().StartSpill(o.id);
    if (ns.table().FinishSpill(o.id, true)) ns.Free(frames);
    return true;
  }
  auto job = std::make_shared<Job>();
  job->header = SpillHeaderOf(o);
  job->file_bytes = SpillFileSize(job->header);
  if (!over_capacity && !ReclaimCleanCopies(job->file_bytes)) return false;
  for (const Location& f : o.frames()) {
    auto bytes = ns.HostBytes(f);
    if (!bytes.ok()) {
      spdlog::error("cannot spill object {}: {}", o.guid.ToString(), bytes.status().message());
      return false;
    }
    job->bytes.push_back(*bytes);
  }
  job->ns = &ns;
  job->id = o.id;
  job->dir = place->dir.get();
  job->file = fmt::format("{}.{:x}{}", o.guid.ToString(), ++sequence_, kSpillSuffix);
  job->frames.assign(o.frames().begin(), o.frames().end());
  ns.table().StartSpill(o.id);
  in_flight_ += job->file_bytes;
  jobs_[{&ns, o.id}] = job;
  Run(job, &SpillStore::EndSpill);
  return true;
}

void SpillStore::Run(std::shared_ptr<Job> job,
                     void (SpillStore::*end)(const std::shared_ptr<Job>&)) {
  boost::asio::post(threads_, [this, job = std::move(job), end] {
    auto start = std::chrono::steady_clock::now();
    if (job->restore) {
      job->result = ReadSpillFile(job->dir, job->file, job->header, job->bytes);
    } else {
      std::vector<std::span<const uint8_t>> bytes(job->bytes.begin(), job->bytes.end());
      job->result = WriteSpillFile(job->dir, job->file, job->header, bytes);
    }
    job->took_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                       std::chrono::steady_clock::now() - start)
                       .count();
    boost::asio::post(io_, [this, job, end] { (this->*end)(job); });
  });
}

void SpillStore::EndSpill(const std::shared_ptr<Job>& job) {
  jobs_.erase({job->ns, job->id});
  in_flight_ -= job->file_bytes;
  Namespace& ns = *job->ns;
  bool written = job->result.ok();
  if (!written) {
    ++spill_failures_;
    spdlog::warn("spilling object {}: {}", job->header.guid.ToString(), job->result.message());
    if (job->result.IsStoreFull()) {
      disk_full_ = fmt::format("{}: {}", Describe(), job->result.message());
      disk_full_at_ = std::chrono::steady_clock::now();
    }
  }
  bool on_disk = !job->gone && ns.table().FinishSpill(job->id, written);
  if (job->gone || on_disk) ns.Free(job->frames);
  Place& place = *PlaceOf(ns);
  if (written) {
    // Kept even when the object was read again meanwhile: a clean copy makes its next spill,
    // and a crash, cost nothing.
    place.files[job->id] = {job->file, job->file_bytes};
    on_disk_ += job->file_bytes;
    ++spills_;
    spilled_bytes_ += job->header.data_size();
    spill_ns_ += static_cast<uint64_t>(job->took_ns);
  }
  if (job->gone) Unlink(place, job->id);
  Finish(job);
}

Result<const StoredObject*> SpillStore::Acquire(Namespace& ns, SessionId session,
                                                const Guid& guid) {
  auto got = ns.table().Acquire(session, guid);
  if (got.ok() || !enabled() || got.status().IsQuotaExceeded()) return got;
  const StoredObject* o = ns.table().Find(guid);
  if (o != nullptr && o->residence == Residence::kDisk) {
    ns.table().StartRestore(o->id);
    StartRestore(ns, *o);
    if (o->residence == Residence::kDisk) {  // no memory for it, and none to be made
      return Status::StoreFull(fmt::format(
          "object {} is on disk and there is no host memory to restore it into", guid.ToString()));
    }
  }
  return got;
}

void SpillStore::StartRestore(Namespace& ns, const StoredObject& o, bool may_wait) {
  std::vector<uint64_t> sizes;
  for (const Location& f : o.frames()) sizes.push_back(f.size);
  auto frames = hooks_.allocate(ns, sizes, o.creator_uid);
  if (!frames.ok()) {
    ObjectId id = o.id;
    auto again = [this, &ns, id](bool may_wait_again) {
      const StoredObject* now = ns.table().Get(id);
      if (now != nullptr && now->residence == Residence::kRestoring && !jobs_.contains({&ns, id})) {
        StartRestore(ns, *now, may_wait_again);
      }
    };
    Status room = frames.status();
    if (room.IsStoreFull()) room = MakeRoom(ns, o.size(), [again] { again(true); });
    uint64_t held = room.IsStoreFull() ? hooks_.held_by_clients() : 0;
    if (held > 0 && may_wait) {
      drop_waits_.Add(&ns, again);
      return;
    }
    if (!room.ok()) {
      Status why = Status::StoreFull(fmt::format(
          "object {} is on disk and cannot be restored: {}{}", o.guid.ToString(), room.message(),
          held == 0 ? ""
                    : fmt::format("; {} are in retired segments that clients have not unmapped",
                                  FormatBytes(held))));
      ns.table().FinishRestore(id, {}, why);
      hooks_.restored(ns, o.guid, why);
    }
    return;
  }
  auto job = std::make_shared<Job>();
  for (const Location& f : *frames) {
    auto bytes = ns.HostBytes(f);
    if (!bytes.ok()) {
      ns.Free(*frames);
      ns.table().FinishRestore(o.id, {}, bytes.status());
      hooks_.restored(ns, o.guid, bytes.status());
      return;
    }
    job->bytes.push_back(*bytes);
  }
  Place& place = *PlaceOf(ns);
  job->ns = &ns;
  job->id = o.id;
  job->restore = true;
  job->dir = place.dir.get();
  job->file = place.files.at(o.id).name;
  job->header = SpillHeaderOf(o);
  job->frames = std::move(*frames);
  jobs_[{&ns, o.id}] = job;
  Run(job, &SpillStore::EndRestore);
}

void SpillStore::EndRestore(const std::shared_ptr<Job>& job) {
  jobs_.erase({job->ns, job->id});
  Namespace& ns = *job->ns;
  Place& place = *PlaceOf(ns);
  if (job->gone) {
    ns.Free(job->frames);
    Unlink(place, job->id);
  } else if (job->result.ok()) {
    // The file stays, a clean copy of the bytes now in memory (see EndSpill).
    ns.table().FinishRestore(job->id, job->frames, job->result);
    ++restores_;
    restored_bytes_ += job->header.data_size();
    restore_ns_ += static_cast<uint64_t>(job->took_ns);
  } else {
    ns.Free(job->frames);
    ns.table().FinishRestore(job->id, {}, job->result);
    spdlog::error("object {} in {} is lost: {}", job->header.guid.ToString(), place.path,
                  job->result.message());
  }
  if (!job->gone) hooks_.restored(ns, job->header.guid, job->result);
  Finish(job);
}

void SpillStore::Finish(const std::shared_ptr<Job>& job) {
  for (const auto& w : job->waiters) {
    if (--w->remaining == 0 && w->then) w->then();
  }
  hooks_.idle(job->ns);
}

bool SpillStore::ReclaimCleanCopies(uint64_t need) {
  for (auto& [ns, place] : places_) {
    for (auto it = place.files.begin();
         it != place.files.end() && on_disk_ + in_flight_ + need > capacity_;) {
      ObjectId id = (it++)->first;
      const StoredObject* o = ns->table().Get(id);
      // Its bytes are in memory too, and no job reads or writes the file.
      if (o != nullptr && o->residence == Residence::kMemory && !jobs_.contains({ns, id})) {
        Unlink(place, id);
      }
    }
  }
  return on_disk_ + in_flight_ + need <= capacity_;
}

void SpillStore::Unlink(Place& place, ObjectId id) {
  auto it = place.files.find(id);
  if (it == place.files.end()) return;
  on_disk_ -= it->second.bytes;
  disk_full_.clear();
  // A descriptor of its own: the namespace (and its directory) may go before the thread runs.
  if (!place.removals_dir) place.removals_dir = std::make_shared<UniqueFd>(::dup(place.dir.get()));
  removals_.Remove(place.removals_dir, it->second.name);
  place.files.erase(it);
}

void SpillStore::Forget(Namespace& ns, const StoredObject& o) {
  if (!enabled()) return;
  if (o.residence == Residence::kRestoring) {
    hooks_.restored(ns, o.guid,
                    Status::NotFound(fmt::format(
                        "object {} was deleted while it was being restored", o.guid.ToString())));
  }
  if (auto job = jobs_.find({&ns, o.id}); job != jobs_.end()) {
    job->second->gone = true;
  } else if (Place* place = PlaceOf(ns)) {
    Unlink(*place, o.id);
  }
}

void SpillStore::PersistAll(std::span<Namespace* const> namespaces) {
  if (!enabled()) return;
  auto start = std::chrono::steady_clock::now();
  io_.restart();
  while (!jobs_.empty()) io_.run_one();  // restores under way end first
  uint64_t failures = spill_failures_, skipped = 0;
  for (Namespace* ns : namespaces) {
    for (const StoredObject* o : ns->table().List(std::nullopt, SIZE_MAX)) {
      if (o->state != ObjectState::kSealed || o->residence != Residence::kMemory) continue;
      bool device = o->size() > 0 && Unspillable(*o);
      if (device || !StartSpill(*ns, *o, false)) ++skipped;
    }
  }
  while (!jobs_.empty()) io_.run_one();
  removals_.Drain();  // the manifest counts no file that a crash could bring back
  uint64_t lost = skipped + spill_failures_ - failures;
  SpillManifest manifest;
  uint64_t objects = 0;
  for (const auto& [ns, place] : places_) {
    SpillManifest::Entry& e = manifest.directories[DirName(ns->key())];
    e.objects = place.files.size();
    for (const auto& [id, file] : place.files) e.bytes += file.bytes;
    objects += e.objects;
  }
  if (Status st = WriteSpillManifest(dir_.get(), manifest); !st.ok()) {
    spdlog::error("{}: the next start will take this stop for a crash", st.message());
  }
  spdlog::info(
      "{} objects ({}) are in {} for the next start, written in {} ms{}", objects,
      FormatBytes(on_disk_), options_.dir,
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                            start)
          .count(),
      lost == 0 ? "" : fmt::format("; {} objects could not be written and are lost", lost));
}

void SpillStore::NoteChange() {
  if (!enabled() || census_due_) return;
  census_due_ = true;
  census_timer_.expires_after(std::chrono::seconds(1));
  census_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;
    census_due_ = false;
    SpillManifest census;
    for (const auto& [ns, place] : places_) {
      census.directories[DirName(ns->key())].objects = ns->table().counts().sealed;
    }
    boost::asio::post(threads_, [dir = dir_.get(), census = std::move(census)] {
      if (Status st = WriteSpillManifest(dir, census, kSpillCensusName); !st.ok()) {
        spdlog::warn("{}", st.message());
      }
    });
  });
}

void SpillStore::Report(StoreStatus& st) const {
  st.spill_capacity = capacity_;
  st.spill_disk_bytes = on_disk_;
  st.spills = spills_;
  st.spill_bytes = spilled_bytes_;
  st.spill_ms = spill_ns_ / 1'000'000;
  st.restores = restores_;
  st.restore_bytes = restored_bytes_;
  st.restore_ms = restore_ns_ / 1'000'000;
  st.spill_failures = spill_failures_;
}

}  // namespace depot
