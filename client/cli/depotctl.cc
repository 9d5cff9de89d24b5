// depotctl: inspect and manage a running depotd. Built only on the public client API.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/units.h"
#include "depot/client.h"

namespace {

constexpr const char kUsage[] = R"(usage: depotctl [--socket PATH] [--json] COMMAND [ARGS]

Commands:
  status                      the daemon's pools, objects and clients
  ls [--limit N]              objects, one per line, in GUID order
  stat GUID                   everything the daemon knows about one object
  put FILE|- [--name NAME] [--evictable] [--metadata TEXT]
                              stores a file (or stdin) as one object; prints its GUID
  get GUID [-o FILE|-]        writes the object's bytes (every frame, in order)
  rm GUID...                  deletes objects

The socket is --socket, else $DEPOT_SOCKET, else $XDG_RUNTIME_DIR/depot/depot.sock, else
/tmp/depot-$UID/depot.sock. --json prints status, ls and stat as JSON.
Exit codes: 0 ok, 1 error, 2 usage, 3 not found, 4 no daemon.
)";

enum Exit { kOk = 0, kError = 1, kUsage_ = 2, kNotFound = 3, kNoDaemon = 4 };

int Fail(const depot::Status& st, std::string_view what) {
  std::fprintf(stderr, "depotctl: %.*s: %s\n", static_cast<int>(what.size()), what.data(),
               st.message().c_str());
  if (st.IsNotFound()) return kNotFound;
  if (st.IsUnavailable() || st.IsDisconnected()) return kNoDaemon;
  return kError;
}

int Usage(std::string_view why) {
  std::fprintf(stderr, "depotctl: %.*s\n\n%s", static_cast<int>(why.size()), why.data(), kUsage);
  return kUsage_;
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

const char* StateName(depot::ObjectInfo::State s) {
  switch (s) {
    case depot::ObjectInfo::State::kCreating: return "creating";
    case depot::ObjectInfo::State::kSealed: return "sealed";
    case depot::ObjectInfo::State::kDeleted: return "deleted";
  }
  return "?";
}

std::string Age(int64_t unix_ns) {
  int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                    std::chrono::system_clock::now().time_since_epoch()).count();
  int64_t s = std::max<int64_t>(0, (now - unix_ns) / 1'000'000'000);
  if (s < 60) return fmt::format("{}s", s);
  if (s < 3600) return fmt::format("{}m", s / 60);
  if (s < 86400) return fmt::format("{}h", s / 3600);
  return fmt::format("{}d", s / 86400);
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
  if (json) {
    fmt::print(
        "{{\"daemon_version\":{},\"daemon_pid\":{},\"uptime_ms\":{},\"socket\":{},"
        "\"host_pool\":{{\"capacity\":{},\"reserved\":{},\"used\":{},\"free\":{},"
        "\"largest_free\":{},\"segments\":{},\"prefault\":{}}},"
        "\"objects\":{{\"creating\":{},\"sealed\":{},\"deleted\":{}}},"
        "\"clients\":{},\"gets_waiting\":{},\"evictions\":{},\"evicted_bytes\":{}}}\n",
        Json(s->daemon_version), s->daemon_pid, s->uptime_ms, Json(s->socket_path), s->capacity,
        s->reserved, s->used, s->capacity - s->used, s->largest_free, s->segments, s->prefault,
        s->objects_creating, s->objects_sealed, s->objects_deleted, s->clients, s->gets_waiting,
        s->evictions, s->evicted_bytes);
    return kOk;
  }
  using depot::FormatBytes;
  fmt::print("depotd {} (pid {}), up {}s, socket {}\n", s->daemon_version, s->daemon_pid,
             s->uptime_ms / 1000, s->socket_path);
  fmt::print("host pool: {} used of {} ({} free, largest free block {}){}\n", FormatBytes(s->used),
             FormatBytes(s->capacity), FormatBytes(s->capacity - s->used),
             FormatBytes(s->largest_free), s->prefault ? ", prefaulted" : "");
  fmt::print("segments:  {} holding {}\n", s->segments, FormatBytes(s->reserved));
  fmt::print("objects:   {} sealed, {} being created, {} deleted but still referenced\n",
             s->objects_sealed, s->objects_creating, s->objects_deleted);
  fmt::print("clients:   {} connected, {} gets waiting\n", s->clients, s->gets_waiting);
  fmt::print("evictions: {} ({})\n", s->evictions, FormatBytes(s->evicted_bytes));
  return kOk;
}

int Ls(depot::Client& c, bool json, uint64_t limit) {
  std::optional<depot::Guid> after;
  uint64_t shown = 0;
  if (json) fmt::print("[");
  else fmt::print("{:<36}  {:<8}  {:>10}  {:>6}  {:>4}  {:>4}  {}\n", "GUID", "STATE", "SIZE",
                  "FRAMES", "REFS", "AGE", "NAME");
  while (shown < limit) {
    auto page = c.List(after, static_cast<uint32_t>(std::min<uint64_t>(1000, limit - shown)));
    if (!page.ok()) return Fail(page.status(), "ls");
    for (const auto& o : page->objects) {
      if (json) {
        fmt::print("{}{}", shown ? ",\n" : "\n", InfoJson(o, false));
      } else {
        fmt::print("{:<36}  {:<8}  {:>10}  {:>6}  {:>4}  {:>4}  {}\n", o.guid.ToString(),
                   StateName(o.state), depot::FormatBytes(o.size), o.frames.size(), o.refcount,
                   Age(o.created_unix_ns), o.name);
      }
      ++shown;
    }
    if (!page->more || page->objects.empty()) break;
    after = page->objects.back().guid;
  }
  if (json) fmt::print("{}]\n", shown ? "\n" : "");
  return kOk;
}

std::optional<depot::Guid> ParseGuid(const std::string& s) {
  auto g = depot::Guid::Parse(s);
  if (!g) std::fprintf(stderr, "depotctl: '%s' is not a GUID (expected xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)\n", s.c_str());
  return g;
}

int Stat(depot::Client& c, bool json, const std::string& arg) {
  auto guid = ParseGuid(arg);
  if (!guid) return kUsage_;
  auto o = c.Stat(*guid);
  if (!o.ok()) return Fail(o.status(), "stat " + arg);
  if (json) {
    fmt::print("{}\n", InfoJson(*o, true));
    return kOk;
  }
  fmt::print("guid:      {}\nname:      {}\nstate:     {}\nsize:      {} ({} bytes)\n",
             o->guid.ToString(), o->name, StateName(o->state), depot::FormatBytes(o->size), o->size);
  fmt::print("refcount:  {}\nevictable: {}\ncreator:   pid {} uid {}\nage:       {}\n", o->refcount,
             o->evictable ? "yes" : "no", o->creator_pid, o->creator_uid, Age(o->created_unix_ns));
  for (size_t i = 0; i < o->frames.size(); ++i) {
    const auto& f = o->frames[i];
    fmt::print("frame {}:   {} on host, segment {} offset {}\n", i, depot::FormatBytes(f.size),
               f.segment, f.offset);
  }
  std::string text, hex;
  for (size_t i = 0; i < o->metadata.size() && i < 64; ++i) {
    auto b = static_cast<unsigned char>(o->metadata[i]);
    hex += fmt::format("{:02x}", b);
    text += (b >= 0x20 && b < 0x7f) ? static_cast<char>(b) : '.';
  }
  fmt::print("metadata:  {} bytes{}{}\n", o->metadata.size(), hex.empty() ? "" : ": " + hex,
             text.empty() ? "" : "  \"" + text + "\"");
  return kOk;
}

// Reads all of `fd` into `out`, up to `limit` bytes when given.
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
  int fd = file == "-" ? STDIN_FILENO : ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Fail(depot::Status::NotFound(std::strerror(errno)), "put " + file);
  struct stat st {};
  depot::Result<depot::Guid> guid = depot::Status::InvalidArgument("unreachable");
  if (fd != STDIN_FILENO && ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
    // Read the file straight into shared memory: no intermediate buffer.
    uint64_t size = static_cast<uint64_t>(st.st_size);
    auto draft = c.Create({size}, opts);
    if (!draft.ok()) return Fail(draft.status(), "put " + file);
    if (!ReadAll(fd, draft->frame(0))) {
      return Fail(depot::Status::InvalidArgument(fmt::format("short read: {}", std::strerror(errno))),
                  "put " + file);
    }
    depot::Status sealed = draft->Seal();
    guid = sealed.ok() ? depot::Result<depot::Guid>(draft->guid()) : sealed;
  } else {
    std::vector<std::byte> data;
    std::byte buf[1 << 16];
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof buf)) > 0) data.insert(data.end(), buf, buf + n);
    if (n < 0) return Fail(depot::Status::InvalidArgument(std::strerror(errno)), "put " + file);
    guid = c.Put(data, opts);
  }
  if (fd != STDIN_FILENO) ::close(fd);
  if (!guid.ok()) return Fail(guid.status(), "put " + file);
  fmt::print("{}\n", guid->ToString());
  return kOk;
}

int Get(depot::Client& c, const std::string& arg, const std::string& out) {
  auto guid = ParseGuid(arg);
  if (!guid) return kUsage_;
  auto obj = c.Get(*guid);
  if (!obj.ok()) return Fail(obj.status(), "get " + arg);
  int fd = out == "-" ? STDOUT_FILENO : ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
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

int Rm(depot::Client& c, const std::vector<std::string>& args) {
  std::vector<depot::Guid> guids;
  for (const auto& a : args) {
    auto g = ParseGuid(a);
    if (!g) return kUsage_;
    guids.push_back(*g);
  }
  auto results = c.Delete(guids);
  int rc = kOk;
  for (size_t i = 0; i < results.size(); ++i) {
    if (!results[i].ok()) rc = std::max(rc, Fail(results[i], "rm " + args[i]));
  }
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  depot::ConnectOptions connect;
  connect.client_name = "depotctl";
  bool json = false;
  std::string out = "-";
  std::string metadata;
  uint64_t limit = UINT64_MAX;
  depot::CreateOptions create;
  std::vector<std::string> pos;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::optional<std::string> {
      if (i + 1 >= argc) return std::nullopt;
      return std::string(argv[++i]);
    };
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return kOk;
    } else if (a == "--json") {
      json = true;
    } else if (a == "--evictable") {
      create.evictable = true;
    } else if (a == "--socket" || a == "-o" || a == "--output" || a == "--name" ||
               a == "--metadata" || a == "--limit") {
      auto v = value();
      if (!v) return Usage(a + " needs a value");
      if (a == "--socket") connect.socket_path = *v;
      else if (a == "--name") create.name = *v;
      else if (a == "--metadata") metadata = *v;
      else if (a == "--limit") {
        char* end = nullptr;
        limit = std::strtoull(v->c_str(), &end, 10);
        if (v->empty() || *end != '\0') return Usage("--limit needs a number");
      } else out = *v;
    } else if (a.size() > 1 && a[0] == '-' && a != "-") {
      return Usage("unknown option " + a);
    } else {
      pos.push_back(a);
    }
  }
  if (pos.empty()) return Usage("no command given");
  std::string cmd = pos[0];
  std::vector<std::string> args(pos.begin() + 1, pos.end());
  auto want = [&](size_t n) { return args.size() == n; };
  bool known = (cmd == "status" && want(0)) || (cmd == "ls" && want(0)) ||
               (cmd == "stat" && want(1)) || (cmd == "put" && want(1)) ||
               (cmd == "get" && want(1)) || (cmd == "rm" && !args.empty());
  if (!known) return Usage(fmt::format("'{}' with {} argument(s) is not a command", cmd, args.size()));

  auto client = depot::Client::Connect(connect);
  if (!client.ok()) return Fail(client.status(), cmd);
  if (cmd == "status") return Status(*client, json);
  if (cmd == "ls") return Ls(*client, json, limit);
  if (cmd == "stat") return Stat(*client, json, args[0]);
  if (cmd == "get") return Get(*client, args[0], out);
  if (cmd == "rm") return Rm(*client, args);
  create.metadata = std::as_bytes(std::span(metadata));
  return Put(*client, args[0], create);
}
