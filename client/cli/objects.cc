// depotctl's commands on objects: ls, stat, put, get and cat, verify, rm.
#include <fcntl.h>
#include <fmt/format.h>
#include <fnmatch.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "client/cli/commands.h"
#include "client/cli/format.h"
#include "depot/units.h"

namespace depotctl {
namespace {

// Where each frame lives, e.g. "3 host" or "1 host, 2 gpu1".
std::string Places(const std::vector<depot::FrameInfo>& frames) {
  // The common case, every frame on the host, without a map per row: ls prints millions.
  if (std::all_of(frames.begin(), frames.end(), [](const auto& f) { return f.pool == 0; })) {
    return frames.empty() ? "" : fmt::format("{} host", frames.size());
  }
  std::map<uint32_t, int> per_pool;
  for (const auto& f : frames) ++per_pool[f.pool];
  std::string out;
  for (auto [pool, n] : per_pool) {
    if (!out.empty()) out += ", ";
    out += pool == 0 ? fmt::format("{} host", n) : fmt::format("{} gpu{}", n, pool - 1);
  }
  return out;
}

// Where the object's bytes are: its frames' places in memory, or the daemon's disk.
std::string Where(const depot::ObjectInfo& o) {
  using R = depot::ObjectInfo::Residence;
  if (o.residence == R::kMemory || o.residence == R::kSpilling) return Places(o.frames);
  return depot::ObjectInfo::ResidenceName(o.residence);
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
      o.guid.ToString(), Json(o.name), depot::ObjectInfo::StateName(o.state), o.size, frames,
      o.refcount, o.evictable, o.created_unix_ns, o.sealed_unix_ns, o.creator_pid, o.creator_uid,
      o.metadata_size);
  if (o.checksum) out += fmt::format(",\"checksum\":\"{:016x}\"", *o.checksum);
  out += fmt::format(",\"residence\":\"{}\"", depot::ObjectInfo::ResidenceName(o.residence));
  if (with_metadata) {
    std::string holders;
    for (const auto& h : o.holders) {
      holders += fmt::format(
          "{}{{\"session\":{},\"pid\":{},\"uid\":{},\"process\":{},\"name\":{},"
          "\"references\":{}}}",
          holders.empty() ? "" : ",", h.session_id, h.pid, h.uid, Json(h.process), Json(h.name),
          h.references);
    }
    out += fmt::format(",\"holders\":[{}],\"creator_session\":{},\"creator_process\":{}", holders,
                       o.creator_session, Json(o.creator_process));
    std::string hex;
    for (std::byte b : o.metadata) hex += fmt::format("{:02x}", static_cast<unsigned>(b));
    out += fmt::format(",\"metadata_hex\":\"{}\"", hex);
  }
  return out + "}";
}

bool Matches(const depot::ObjectInfo& o, const LsOptions& opt) {
  if (!opt.state.empty() && opt.state != depot::ObjectInfo::StateName(o.state)) return false;
  return opt.name_glob.empty() || ::fnmatch(opt.name_glob.c_str(), o.name.c_str(), 0) == 0;
}

// "Less" for the sort order: largest first for size, oldest first for age.
bool Before(const LsOptions& opt, const depot::ObjectInfo& a, const depot::ObjectInfo& b) {
  if (opt.sort == "size") return a.size > b.size;
  if (opt.sort == "age") return a.created_unix_ns < b.created_unix_ns;
  return a.name < b.name;
}

std::optional<depot::Guid> ParseGuid(const std::string& s) {
  auto g = depot::Guid::Parse(s);
  if (!g) {
    std::fprintf(stderr,
                 "depotctl: '%s' is not a GUID (expected xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)\n",
                 s.c_str());
  }
  return g;
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

}  // namespace

int Ls(depot::Client& c, bool json, const LsOptions& opt) {
  if (!opt.state.empty() && opt.state != "creating" && opt.state != "sealed") {
    return Usage("--state takes creating or sealed");
  }
  if (!opt.sort.empty() && opt.sort != "size" && opt.sort != "age" && opt.sort != "name") {
    return Usage("--sort takes size, age or name");
  }
  uint64_t shown = 0;
  // Rows are formatted into one buffer and written a block at a time: a write per row through
  // stdio cost more than the listing itself at a million objects.
  fmt::memory_buffer rows;
  auto flush = [&] {
    std::fwrite(rows.data(), 1, rows.size(), stdout);
    rows.clear();
  };
  auto print = [&](const depot::ObjectInfo& o) {
    auto out = std::back_inserter(rows);
    if (json) {
      fmt::format_to(out, "{}{}", shown ? ",\n" : "\n", InfoJson(o, false));
    } else {
      // A GUID's text is always 36 characters: no padding to measure.
      fmt::format_to(out, "{}  {:<8}  {:>10}  {:<8}  {:>4}  {:>4}  {:>13}  {}\n", o.guid.ToString(),
                     depot::ObjectInfo::StateName(o.state), depot::FormatBytes(o.size), Where(o),
                     o.refcount, Age(o.created_unix_ns),
                     fmt::format("{}/{}", o.creator_pid, o.creator_uid), o.name);
    }
    if (rows.size() >= 64 * 1024) flush();
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
  auto worse = [&](const depot::ObjectInfo& a, const depot::ObjectInfo& b) {
    return Before(opt, a, b);
  };
  std::optional<depot::Guid> after;
  while (true) {
    auto page = c.ListHeldBy(opt.holder_pid, after, 1000);
    if (!page.ok()) {
      flush();  // what was listed before, then the error
      return Fail(page.status(), "ls");
    }
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
  flush();
  if (json) fmt::print("{}]\n", shown ? "\n" : "");
  return kOk;
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
             o->guid.ToString(), o->name, depot::ObjectInfo::StateName(o->state),
             depot::FormatBytes(o->size), o->size);
  fmt::print("refcount:  {}\nevictable: {}\ncreator:   pid {} uid {}{}\ncreated:   {} ago\n",
             o->refcount, o->evictable ? "yes" : "no", o->creator_pid, o->creator_uid,
             o->creator_session == 0
                 ? ""
                 : fmt::format(" ({}, session {})", o->creator_process, o->creator_session),
             Age(o->created_unix_ns));
  if (o->sealed_unix_ns != 0) fmt::print("sealed:    {} ago\n", Age(o->sealed_unix_ns));
  if (o->checksum) fmt::print("checksum:  xxh3 {:016x}\n", *o->checksum);
  fmt::print("where:     {}\n", depot::ObjectInfo::ResidenceName(o->residence));
  for (size_t i = 0; i < o->frames.size(); ++i) {
    const auto& f = o->frames[i];
    fmt::print("frame {}:   {} on {}, segment {} offset {}\n", i, depot::FormatBytes(f.size),
               f.pool == 0 ? "host" : fmt::format("gpu{}", f.pool - 1), f.segment, f.offset);
  }
  fmt::print("holders:   {}\n", o->holders.empty() ? "none" : "");
  for (const auto& h : o->holders) {
    fmt::print("  pid {:<8} {:<16} uid {:<6} references {:<6} session {}{}\n", h.pid, h.process,
               h.uid, h.references, h.session_id, h.name.empty() ? "" : " (" + h.name + ")");
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
      return Fail(
          depot::Status::InvalidArgument(fmt::format("short read: {}", std::strerror(errno))),
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
      fmt::print("{}: OK (xxh3 {:016x}, {})\n", a, *obj->checksum(),
                 depot::FormatBytes(obj->size()));
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

}  // namespace depotctl
