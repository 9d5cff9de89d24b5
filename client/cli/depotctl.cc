// depotctl: inspect and manage a running depotd. Built only on the public client API.
#include <fcntl.h>
#include <fnmatch.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "depot/units.h"
#include "depot/client.h"

namespace {

constexpr const char kUsage[] = R"(usage: depotctl [--socket PATH] [--json] COMMAND [ARGS]

Commands:
  status                      the daemon: pools, objects, clients, counters
  ls [--state S] [--name GLOB] [--sort size|age|name] [--limit N]
                              objects, one per line (S: creating or sealed)
  stat GUID                   everything the daemon knows about one object
  put FILE|- [--name NAME] [--evictable] [--metadata TEXT] [--checksum]
                              stores a file (or stdin) as one object; prints its GUID
                              (--checksum: records XXH3-64 of its bytes at seal)
  get GUID [-o FILE|-]        writes the object's bytes (every frame, in order)
  cat GUID                    writes the object's bytes to stdout
  rm GUID...                  deletes objects
  verify GUID...              hashes the bytes again (here, without copying) and compares
                              them with the checksum recorded at seal; exit 1 on a mismatch
  watch [--count N]           prints events as they happen, until Ctrl-C (or N events)
  clients                     connected clients and what they hold
  ping [--count N]            round-trip latency over N pings (default 10)

The socket is --socket, else $DEPOT_SOCKET, else $XDG_RUNTIME_DIR/depot/depot.sock, else
/tmp/depot-$UID/depot.sock. --json prints JSON (one object, an array, or for watch one object
a line). Exit codes: 0 ok, 1 error, 2 usage, 3 not found, 4 no daemon.
)";

enum Exit { kOk = 0, kError = 1, kUsageError = 2, kNotFound = 3, kNoDaemon = 4 };

int Fail(const depot::Status& st, std::string_view what) {
  std::fprintf(stderr, "depotctl: %.*s: %s\n", static_cast<int>(what.size()), what.data(),
               st.message().c_str());
  if (st.IsNotFound()) return kNotFound;
  if (st.IsUnavailable() || st.IsDisconnected()) return kNoDaemon;
  return kError;
}

int Usage(std::string_view why) {
  std::fprintf(stderr, "depotctl: %.*s (see depotctl --help)\n", static_cast<int>(why.size()),
               why.data());
  return kUsageError;
}

std::string Json(std::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      out += fmt::format("\\u{:04x}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// "42s", "5m", "3h", "2d": how long ago.
std::string Age(int64_t unix_ns) {
  int64_t s = std::max<int64_t>(0, (NowNs() - unix_ns) / 1'000'000'000);
  if (s < 60) return fmt::format("{}s", s);
  if (s < 3600) return fmt::format("{}m", s / 60);
  if (s < 86400) return fmt::format("{}h", s / 3600);
  return fmt::format("{}d", s / 86400);
}

std::string Duration(uint64_t ms) {
  uint64_t s = ms / 1000;
  if (s < 60) return fmt::format("{}s", s);
  if (s < 3600) return fmt::format("{}m {}s", s / 60, s % 60);
  if (s < 86400) return fmt::format("{}h {}m", s / 3600, s % 3600 / 60);
  return fmt::format("{}d {}h", s / 86400, s % 86400 / 3600);
}

std::string Micros(double ns) { return fmt::format("{:.1f} µs", ns / 1000.0); }

const char* StateName(depot::ObjectInfo::State s) {
  switch (s) {
    case depot::ObjectInfo::State::kCreating: return "creating";
    case depot::ObjectInfo::State::kSealed: return "sealed";
    case depot::ObjectInfo::State::kDeleted: return "deleted";
  }
  return "?";
}

// Where each frame lives, e.g. "3 host" or "1 host, 2 gpu1".
std::string Places(const std::vector<depot::FrameInfo>& frames) {
  std::map<uint32_t, int> per_pool;
  for (const auto& f : frames) ++per_pool[f.pool];
  std::string out;
  for (auto [pool, n] : per_pool) {
    if (!out.empty()) out += ", ";
    out += pool == 0 ? fmt::format("{} host", n) : fmt::format("{} gpu{}", n, pool - 1);
  }
  return out;
}

std::string InfoJson(const depot::ObjectInfo& o, bool with_metadata) {
  std::string frames;
  for (const auto& f : o.frames) {
    frames += fmt::format("{}{{\"pool\":{},\"segment\":{},\"offset\":{},\"size\":{}}}",
                          frames.empty() ? "" : ",", f.pool, f.segment, f.offset, f.size);
  }
  std::string out = fmt::format(
      "{{\"guid\":\"{}\",\"name\":{},\"state\":\"{}\",\"size\":{},\"frames\":[{}],\"refcount\":{},"
      "\"evictable\":{},\"created_unix_ns\":{},\"sealed_unix_ns\":{},\"creator_pid\":{},"
      "\"creator_uid\":{},\"metadata_size\":{}",
      o.guid.ToString(), Json(o.name), StateName(o.state), o.size, frames, o.refcount,
      o.evictable, o.created_unix_ns, o.sealed_unix_ns, o.creator_pid, o.creator_uid,
      o.metadata_size);
  if (o.checksum) out += fmt::format(",\"checksum\":\"{:016x}\"", *o.checksum);
  if (with_metadata) {
    std::string hex;
    for (std::byte b : o.metadata) hex += fmt::format("{:02x}", static_cast<unsigned>(b));
    out += fmt::format(",\"metadata_hex\":\"{}\"", hex);
  }
  return out + "}";
}

int Status(depot::Client& c, bool json) {
  auto s = c.GetStatus();
  if (!s.ok()) return Fail(s.status(), "status");
  std::string errors_json, errors_text;
  uint64_t errors_total = 0;
  for (size_t code = 1; code < s->errors.size(); ++code) {
    if (s->errors[code] == 0) continue;
    auto name = depot::Status::CodeName(static_cast<depot::Status::Code>(code));
    errors_json += fmt::format("{}\"{}\":{}", errors_json.empty() ? "" : ",", name, s->errors[code]);
    errors_text += fmt::format("{}{} {}", errors_text.empty() ? "" : ", ", name, s->errors[code]);
    errors_total += s->errors[code];
  }
  std::string pools_json, pools_text;
  for (const auto& p : s->device_pools) {
    pools_json += fmt::format(
        "{}{{\"pool\":{},\"uuid\":{},\"name\":{},\"kind\":{},\"capacity\":{},\"chunk_size\":{},"
        "\"reserved\":{},\"used\":{},\"chunks\":{}}}",
        pools_json.empty() ? "" : ",", p.pool, Json(p.uuid), Json(p.name), Json(p.kind), p.capacity,
        p.chunk_size, p.reserved, p.used, p.chunks);
    pools_text += fmt::format("\n  gpu{} {} ({}, {}): {} used of {}, {} in {} chunk{}", p.pool - 1,
                              p.uuid, p.name, p.kind, depot::FormatBytes(p.used),
                              depot::FormatBytes(p.capacity), depot::FormatBytes(p.reserved),
                              p.chunks, p.chunks == 1 ? "" : "s");
  }
  std::string users_json;
  for (const auto& u : s->users) {
    users_json += fmt::format("{}{{\"uid\":{},\"objects\":{},\"bytes\":{}}}",
                              users_json.empty() ? "" : ",", u.uid, u.objects, u.bytes);
  }
  if (json) {
    fmt::print(
        "{{\"daemon_version\":{},\"daemon_pid\":{},\"uptime_ms\":{},\"socket\":{},"
        "\"host_pool\":{{\"capacity\":{},\"reserved\":{},\"used\":{},\"free\":{},"
        "\"largest_free\":{},\"largest_free_block\":{},\"fragmentation\":{:.4f},\"segments\":{},"
        "\"prefault\":{}}},"
        "\"device_pools\":{{\"available\":{},\"reason\":{},\"pools\":[{}]}},"
        "\"objects\":{{\"creating\":{},\"sealed\":{},\"deleted\":{}}},"
        "\"clients\":{},\"connections\":{},\"gets_waiting\":{},\"evictions\":{},"
        "\"evicted_bytes\":{},\"requests\":{},\"errors\":{{{}}},"
        "\"namespaces\":{{\"per_user\":{},\"count\":{}}},"
        "\"quotas\":{{\"user_bytes\":{},\"user_objects\":{},\"client_bytes\":{},"
        "\"client_objects\":{}}},\"users\":[{}]}}\n",
        Json(s->daemon_version), s->daemon_pid, s->uptime_ms, Json(s->socket_path), s->capacity,
        s->reserved, s->used, s->capacity - s->used, s->largest_free, s->largest_free_block,
        s->fragmentation(), s->segments, s->prefault, !s->device_pools.empty(),
        Json(s->devices_unavailable), pools_json, s->objects_creating, s->objects_sealed,
        s->objects_deleted, s->clients, s->connections, s->gets_waiting, s->evictions,
        s->evicted_bytes, s->requests, errors_json, s->per_user_namespaces, s->namespaces,
        s->user_quota_bytes, s->user_quota_objects, s->client_quota_bytes,
        s->client_quota_objects, users_json);
    return kOk;
  }
  using depot::FormatBytes;
  fmt::print("depotd {}, pid {}, up {}, socket {}\n", s->daemon_version, s->daemon_pid,
             Duration(s->uptime_ms), s->socket_path);
  fmt::print("host pool     {} used of {} ({} free), largest free block {}, fragmentation {:.0f}%\n",
             FormatBytes(s->used), FormatBytes(s->capacity), FormatBytes(s->capacity - s->used),
             FormatBytes(s->largest_free), 100 * s->fragmentation());
  fmt::print("segments      {} holding {}{}\n", s->segments, FormatBytes(s->reserved),
             s->prefault ? " (prefaulted)" : "");
  if (s->device_pools.empty()) {
    fmt::print("device pools  unavailable ({})\n", s->devices_unavailable);
  } else {
    fmt::print("device pools  {}{}\n", s->device_pools.size(), pools_text);
  }
  fmt::print("objects       {} sealed, {} being created, {} deleted but still referenced\n",
             s->objects_sealed, s->objects_creating, s->objects_deleted);
  fmt::print("clients       {} connected ({} since start), {} gets waiting\n", s->clients,
             s->connections, s->gets_waiting);
  fmt::print("evictions     {} ({})\n", s->evictions, FormatBytes(s->evicted_bytes));
  fmt::print("requests      {} answered, {} errors{}\n", s->requests, errors_total,
             errors_text.empty() ? "" : " (" + errors_text + ")");
  fmt::print("namespaces    {}\n", s->per_user_namespaces
                                       ? fmt::format("one per user ({} now)", s->namespaces)
                                       : std::string("one, shared by every user"));
  auto limit = [](uint64_t bytes, uint64_t objects) {
    if (bytes == 0 && objects == 0) return std::string("none");
    return fmt::format("{}, {}", bytes ? FormatBytes(bytes) : "any size",
                       objects ? fmt::format("{} objects", objects) : "any number of objects");
  };
  fmt::print("quotas        per user: {}; per connection: {}\n",
             limit(s->user_quota_bytes, s->user_quota_objects),
             limit(s->client_quota_bytes, s->client_quota_objects));
  for (const auto& u : s->users) {
    fmt::print("  uid {:<8}  {} objects, {}{}\n", u.uid, u.objects, FormatBytes(u.bytes),
               s->user_quota_bytes ? fmt::format(" ({:.0f}% of its quota)",
                                                 100.0 * u.bytes / s->user_quota_bytes)
                                   : "");
  }
  return kOk;
}

struct LsOptions {
  std::string state, name_glob, sort;
  uint64_t limit = UINT64_MAX;
};

bool Matches(const depot::ObjectInfo& o, const LsOptions& opt) {
  if (!opt.state.empty() && opt.state != StateName(o.state)) return false;
  return opt.name_glob.empty() || ::fnmatch(opt.name_glob.c_str(), o.name.c_str(), 0) == 0;
}

// "Less" for the sort order: largest first for size, oldest first for age.
bool Before(const LsOptions& opt, const depot::ObjectInfo& a, const depot::ObjectInfo& b) {
  if (opt.sort == "size") return a.size > b.size;
  if (opt.sort == "age") return a.created_unix_ns < b.created_unix_ns;
  return a.name < b.name;
}

int Ls(depot::Client& c, bool json, const LsOptions& opt) {
  if (!opt.state.empty() && opt.state != "creating" && opt.state != "sealed") {
    return Usage("--state takes creating or sealed");
  }
  if (!opt.sort.empty() && opt.sort != "size" && opt.sort != "age" && opt.sort != "name") {
    return Usage("--sort takes size, age or name");
  }
  uint64_t shown = 0;
  auto print = [&](const depot::ObjectInfo& o) {
    if (json) {
      fmt::print("{}{}", shown ? ",\n" : "\n", InfoJson(o, false));
    } else {
      fmt::print("{:<36}  {:<8}  {:>10}  {:<8}  {:>4}  {:>4}  {:>13}  {}\n", o.guid.ToString(),
                 StateName(o.state), depot::FormatBytes(o.size), Places(o.frames), o.refcount,
                 Age(o.created_unix_ns), fmt::format("{}/{}", o.creator_pid, o.creator_uid),
                 o.name);
    }
    ++shown;
  };
  if (json) {
    fmt::print("[");
  } else {
    fmt::print("{:<36}  {:<8}  {:>10}  {:<8}  {:>4}  {:>4}  {:>13}  {}\n", "GUID", "STATE", "SIZE",
               "FRAMES", "REFS", "AGE", "CREATOR", "NAME");
  }
  // Pages of the daemon's list in GUID order; unsorted output streams, so a store of millions
  // of objects is never held here at once. A sort keeps only the best `limit` rows.
  std::vector<depot::ObjectInfo> kept;
  auto worse = [&](const depot::ObjectInfo& a, const depot::ObjectInfo& b) { return Before(opt, a, b); };
  std::optional<depot::Guid> after;
  while (true) {
    auto page = c.List(after, 1000);
    if (!page.ok()) return Fail(page.status(), "ls");
    for (auto& o : page->objects) {
      if (!Matches(o, opt)) continue;
      if (opt.sort.empty()) {
        if (shown >= opt.limit) break;
        print(o);
        continue;
      }
      kept.push_back(std::move(o));
      std::push_heap(kept.begin(), kept.end(), worse);
      if (kept.size() > opt.limit) {
        std::pop_heap(kept.begin(), kept.end(), worse);
        kept.pop_back();
      }
    }
    if (!page->more || page->objects.empty() || (opt.sort.empty() && shown >= opt.limit)) break;
    after = page->objects.back().guid;
  }
  std::sort_heap(kept.begin(), kept.end(), worse);
  for (const auto& o : kept) print(o);
  if (json) fmt::print("{}]\n", shown ? "\n" : "");
  return kOk;
}

std::optional<depot::Guid> ParseGuid(const std::string& s) {
  auto g = depot::Guid::Parse(s);
  if (!g) {
    std::fprintf(stderr, "depotctl: '%s' is not a GUID (expected xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)\n",
                 s.c_str());
  }
  return g;
}

int Stat(depot::Client& c, bool json, const std::string& arg) {
  auto guid = ParseGuid(arg);
  if (!guid) return kUsageError;
  auto o = c.Stat(*guid);
  if (!o.ok()) return Fail(o.status(), "stat " + arg);
  if (json) {
    fmt::print("{}\n", InfoJson(*o, true));
    return kOk;
  }
  fmt::print("guid:      {}\nname:      {}\nstate:     {}\nsize:      {} ({} bytes)\n",
             o->guid.ToString(), o->name, StateName(o->state), depot::FormatBytes(o->size), o->size);
  fmt::print("refcount:  {}\nevictable: {}\ncreator:   pid {} uid {}\ncreated:   {} ago\n",
             o->refcount, o->evictable ? "yes" : "no", o->creator_pid, o->creator_uid,
             Age(o->created_unix_ns));
  if (o->sealed_unix_ns != 0) fmt::print("sealed:    {} ago\n", Age(o->sealed_unix_ns));
  if (o->checksum) fmt::print("checksum:  xxh3 {:016x}\n", *o->checksum);
  for (size_t i = 0; i < o->frames.size(); ++i) {
    const auto& f = o->frames[i];
    fmt::print("frame {}:   {} on {}, segment {} offset {}\n", i, depot::FormatBytes(f.size),
               f.pool == 0 ? "host" : fmt::format("gpu{}", f.pool - 1), f.segment, f.offset);
  }
  std::string text, hex;
  for (size_t i = 0; i < o->metadata.size() && i < 64; ++i) {
    auto b = static_cast<unsigned char>(o->metadata[i]);
    hex += fmt::format("{:02x}", b);
    text += (b >= 0x20 && b < 0x7f) ? static_cast<char>(b) : '.';
  }
  fmt::print("metadata:  {} bytes{}{}{}\n", o->metadata.size(), hex.empty() ? "" : ": " + hex,
             text.empty() ? "" : "  \"" + text + "\"", o->metadata.size() > 64 ? " ..." : "");
  return kOk;
}

bool ReadAll(int fd, std::span<std::byte> out) {
  size_t got = 0;
  while (got < out.size()) {
    ssize_t n = ::read(fd, out.data() + got, out.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    got += static_cast<size_t>(n);
  }
  return true;
}

int Put(depot::Client& c, const std::string& file, const depot::CreateOptions& opts) {
  std::string what = "put " + file;
  int fd = file == "-" ? STDIN_FILENO : ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Fail(depot::Status::NotFound(std::strerror(errno)), what);
  struct stat st {};
  depot::Result<depot::Guid> guid = depot::Status::InvalidArgument("nothing read");
  if (fd != STDIN_FILENO && ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
    // Read the file straight into shared memory: no intermediate buffer.
    auto draft = c.Create({static_cast<uint64_t>(st.st_size)}, opts);
    if (!draft.ok()) return Fail(draft.status(), what);
    if (!ReadAll(fd, draft->frame(0))) {
      return Fail(depot::Status::InvalidArgument(fmt::format("short read: {}", std::strerror(errno))),
                  what);
    }
    depot::Status sealed = draft->Seal();
    guid = sealed.ok() ? depot::Result<depot::Guid>(draft->guid()) : sealed;
  } else {
    std::vector<std::byte> data;
    std::byte buf[1 << 16];
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof buf)) > 0) data.insert(data.end(), buf, buf + n);
    if (n < 0) return Fail(depot::Status::InvalidArgument(std::strerror(errno)), what);
    guid = c.Put(data, opts);
  }
  if (fd != STDIN_FILENO) ::close(fd);
  if (!guid.ok()) return Fail(guid.status(), what);
  fmt::print("{}\n", guid->ToString());
  return kOk;
}

// get and cat: writes every frame of the object to `out` ("-": stdout).
int Get(depot::Client& c, const std::string& cmd, const std::string& arg, const std::string& out) {
  auto guid = ParseGuid(arg);
  if (!guid) return kUsageError;
  auto obj = c.Get(*guid);
  if (!obj.ok()) return Fail(obj.status(), cmd + " " + arg);
  int fd = out == "-" ? STDOUT_FILENO
                      : ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Fail(depot::Status::InvalidArgument(std::strerror(errno)), "get: " + out);
  for (size_t i = 0; i < obj->frame_count(); ++i) {
    auto f = obj->frame(i);
    size_t done = 0;
    while (done < f.size()) {
      ssize_t n = ::write(fd, f.data() + done, f.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return Fail(depot::Status::InvalidArgument(std::strerror(errno)), "get: " + out);
      done += static_cast<size_t>(n);
    }
  }
  if (fd != STDOUT_FILENO && ::close(fd) != 0) {
    return Fail(depot::Status::InvalidArgument(std::strerror(errno)), "get: " + out);
  }
  return kOk;
}

// Each object is mapped and hashed in this process: the daemon never reads object bytes.
int Verify(depot::Client& c, bool json, const std::vector<std::string>& args) {
  int rc = kOk;
  for (const auto& a : args) {
    auto guid = ParseGuid(a);
    if (!guid) return kUsageError;
    auto obj = c.Get(*guid, depot::kNoWait);
    if (!obj.ok()) {
      rc = std::max(rc, Fail(obj.status(), "verify " + a));
      continue;
    }
    depot::Status st = obj->Verify();
    if (json) {
      fmt::print("{{\"guid\":\"{}\",\"ok\":{},\"checksum\":{},\"message\":{}}}\n", a, st.ok(),
                 obj->checksum() ? fmt::format("\"{:016x}\"", *obj->checksum()) : "null",
                 Json(st.message()));
    } else if (st.ok()) {
      fmt::print("{}: OK (xxh3 {:016x}, {})\n", a, *obj->checksum(), depot::FormatBytes(obj->size()));
    } else {
      fmt::print("{}: {}\n", a, st.ToString());
    }
    if (!st.ok()) rc = kError;
  }
  return rc;
}

int Rm(depot::Client& c, const std::vector<std::string>& args) {
  std::vector<depot::Guid> guids;
  for (const auto& a : args) {
    auto g = ParseGuid(a);
    if (!g) return kUsageError;
    guids.push_back(*g);
  }
  auto results = c.Delete(guids);
  int rc = kOk;
  for (size_t i = 0; i < results.size(); ++i) {
    if (!results[i].ok()) rc = std::max(rc, Fail(results[i], "rm " + args[i]));
  }
  return rc;
}

int Watch(depot::Client& c, bool json, uint64_t count) {
  auto sub = c.Subscribe();
  if (!sub.ok()) return Fail(sub.status(), "watch");
  std::fflush(stdout);
  for (uint64_t seen = 0; seen < count; ++seen) {
    auto e = sub->Next();
    if (!e.ok()) return Fail(e.status(), "watch");
    auto kind = depot::Event::KindName(e->kind);
    bool client_event = e->kind == depot::Event::Kind::kClientConnected ||
                        e->kind == depot::Event::Kind::kClientDisconnected;
    if (json) {
      fmt::print("{{\"event\":\"{}\",\"unix_ns\":{},{}\"session\":{},\"pid\":{},\"uid\":{},"
                 "\"dropped_before\":{}}}\n",
                 kind, e->unix_ns,
                 client_event ? "" : fmt::format("\"guid\":\"{}\",\"name\":{},\"size\":{},",
                                                 e->guid.ToString(), Json(e->name), e->size),
                 e->session_id, e->pid, e->uid, e->dropped);
    } else {
      if (e->dropped > 0) fmt::print("({} events dropped: this watcher fell behind)\n", e->dropped);
      auto time = std::chrono::system_clock::time_point(std::chrono::nanoseconds(e->unix_ns));
      auto secs = std::chrono::floor<std::chrono::seconds>(time);
      std::time_t t = std::chrono::system_clock::to_time_t(secs);
      std::tm tm{};
      ::localtime_r(&t, &tm);
      std::string what = client_event ? "" : fmt::format("{}  {:>10}  {}", e->guid.ToString(),
                                                         depot::FormatBytes(e->size), e->name);
      fmt::print("{:02}:{:02}:{:02}.{:03}  {:<19}  session {} (pid {} uid {})  {}\n", tm.tm_hour,
                 tm.tm_min, tm.tm_sec, (e->unix_ns / 1'000'000) % 1000, kind, e->session_id,
                 e->pid, e->uid, what);
    }
    std::fflush(stdout);
  }
  return kOk;
}

int Clients(depot::Client& c, bool json) {
  auto clients = c.Clients();
  if (!clients.ok()) return Fail(clients.status(), "clients");
  if (json) {
    fmt::print("[");
    for (size_t i = 0; i < clients->size(); ++i) {
      const auto& k = (*clients)[i];
      fmt::print("{}\n{{\"session\":{},\"pid\":{},\"uid\":{},\"gid\":{},\"name\":{},\"process\":{},"
                 "\"references\":{},\"bytes_held\":{},\"creating\":{},\"requests\":{},"
                 "\"connected_unix_ns\":{},\"subscribed\":{},\"created_objects\":{},"
                 "\"created_bytes\":{}}}",
                 i ? "," : "", k.session_id, k.pid, k.uid, k.gid, Json(k.name), Json(k.process),
                 k.references, k.bytes_held, k.creating, k.requests, k.connected_unix_ns,
                 k.subscribed, k.created_objects, k.created_bytes);
    }
    fmt::print("{}]\n", clients->empty() ? "" : "\n");
    return kOk;
  }
  fmt::print("{:>7}  {:>7}  {:>5}  {:<15}  {:<12}  {:>4}  {:>10}  {:>7}  {:>10}  {:>8}  {:>4}  {}\n",
             "SESSION", "PID", "UID", "PROCESS", "NAME", "REFS", "HELD", "CREATED", "BYTES",
             "REQUESTS", "AGE", "");
  for (const auto& k : *clients) {
    fmt::print("{:>7}  {:>7}  {:>5}  {:<15}  {:<12}  {:>4}  {:>10}  {:>7}  {:>10}  {:>8}  {:>4}  {}\n",
               k.session_id, k.pid, k.uid, k.process, k.name, k.references,
               depot::FormatBytes(k.bytes_held), k.created_objects,
               depot::FormatBytes(k.created_bytes), k.requests, Age(k.connected_unix_ns),
               k.subscribed ? "watching" : (k.creating ? fmt::format("creating {}", k.creating) : ""));
  }
  return kOk;
}

int Ping(depot::Client& c, bool json, uint64_t count) {
  std::vector<double> ns;
  for (uint64_t i = 0; i < count; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    depot::Status st = c.Ping();
    auto t1 = std::chrono::steady_clock::now();
    if (!st.ok()) return Fail(st, "ping");
    ns.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count());
  }
  std::sort(ns.begin(), ns.end());
  double min = ns.front(), median = ns[ns.size() / 2], max = ns.back();
  if (json) {
    fmt::print("{{\"count\":{},\"min_ns\":{:.0f},\"median_ns\":{:.0f},\"max_ns\":{:.0f}}}\n", count,
               min, median, max);
  } else {
    fmt::print("{} pings to {}: min {}, median {}, max {}\n", count, c.socket_path(), Micros(min),
               Micros(median), Micros(max));
  }
  return kOk;
}

}  // namespace

int main(int argc, char** argv) {
  depot::ConnectOptions connect;
  connect.client_name = "depotctl";
  bool json = false;
  std::string out = "-";
  std::string metadata;
  std::optional<uint64_t> count;
  LsOptions ls;
  depot::CreateOptions create;
  std::vector<std::string> pos;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto number = [](const std::string& v) -> std::optional<uint64_t> {
      char* end = nullptr;
      uint64_t n = std::strtoull(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || n == 0) return std::nullopt;
      return n;
    };
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return kOk;
    } else if (a == "--json") {
      json = true;
    } else if (a == "--evictable") {
      create.evictable = true;
    } else if (a == "--checksum") {
      create.checksum = true;
    } else if (a == "--socket" || a == "-o" || a == "--output" || a == "--name" ||
               a == "--metadata" || a == "--limit" || a == "--count" || a == "-n" ||
               a == "--state" || a == "--sort") {
      if (i + 1 >= argc) return Usage(a + " needs a value");
      std::string v = argv[++i];
      if (a == "--socket") {
        connect.socket_path = v;
      } else if (a == "--name") {
        create.name = v;
        ls.name_glob = v;
      } else if (a == "--metadata") {
        metadata = v;
      } else if (a == "--state") {
        ls.state = v;
      } else if (a == "--sort") {
        ls.sort = v;
      } else if (a == "-o" || a == "--output") {
        out = v;
      } else {
        count = number(v);
        if (!count) return Usage(a + " needs a positive number");
      }
    } else if (a.size() > 1 && a[0] == '-' && a != "-") {
      return Usage("unknown option " + a);
    } else {
      pos.push_back(a);
    }
  }
  if (pos.empty()) return Usage("no command given");
  std::string cmd = pos[0];
  std::vector<std::string> args(pos.begin() + 1, pos.end());
  static const std::map<std::string, std::pair<size_t, size_t>> kArity = {
      {"status", {0, 0}}, {"ls", {0, 0}},  {"stat", {1, 1}},    {"put", {1, 1}},
      {"get", {1, 1}},    {"cat", {1, 1}}, {"rm", {1, SIZE_MAX}}, {"watch", {0, 0}},
      {"clients", {0, 0}}, {"ping", {0, 0}}, {"verify", {1, SIZE_MAX}}};
  auto arity = kArity.find(cmd);
  if (arity == kArity.end()) return Usage(fmt::format("unknown command '{}'", cmd));
  if (args.size() < arity->second.first || args.size() > arity->second.second) {
    return Usage(fmt::format("'{}' takes {} argument(s), not {}", cmd,
                             arity->second.first == arity->second.second
                                 ? std::to_string(arity->second.first)
                                 : fmt::format("at least {}", arity->second.first),
                             args.size()));
  }
  if (count && cmd == "ls") ls.limit = *count;

  auto client = depot::Client::Connect(connect);
  if (!client.ok()) return Fail(client.status(), cmd);
  if (cmd == "status") return Status(*client, json);
  if (cmd == "ls") return Ls(*client, json, ls);
  if (cmd == "stat") return Stat(*client, json, args[0]);
  if (cmd == "get") return Get(*client, cmd, args[0], out);
  if (cmd == "cat") return Get(*client, cmd, args[0], "-");
  if (cmd == "rm") return Rm(*client, args);
  if (cmd == "verify") return Verify(*client, json, args);
  if (cmd == "watch") return Watch(*client, json, count.value_or(UINT64_MAX));
  if (cmd == "clients") return Clients(*client, json);
  if (cmd == "ping") return Ping(*client, json, count.value_or(10));
  create.metadata = std::as_bytes(std::span(metadata));
  return Put(*client, args[0], create);
}
