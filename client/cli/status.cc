// depotctl's commands on the daemon itself: status, clients, ping, metrics.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "client/cli/commands.h"
#include "client/cli/format.h"
#include "depot/units.h"

namespace depotctl {
namespace {

std::string Duration(uint64_t ms) {
  uint64_t s = ms / 1000;
  if (s < 60) return fmt::format("{}s", s);
  if (s < 3600) return fmt::format("{}m {}s", s / 60, s % 60);
  if (s < 86400) return fmt::format("{}h {}m", s / 3600, s % 3600 / 60);
  return fmt::format("{}d {}h", s / 86400, s % 86400 / 3600);
}

std::string Micros(double ns) { return fmt::format("{:.1f} µs", ns / 1000.0); }

// Members of one JSON object, added in order. A plain value for one thread.
class JsonMembers {
 public:
  void Add(std::string_view key, std::string_view value) {
    text_ += fmt::format("{}\"{}\":{}", text_.empty() ? "" : ",", key, value);
  }
  std::string Object() const { return "{" + text_ + "}"; }

 private:
  std::string text_;
};

// `depotctl --json status`: every scalar field of the status, nested by its group (see
// DEPOT_STORE_STATUS_SCALARS), and the fields that are not scalars.
std::string StatusJson(const depot::StoreStatus& s, const std::string& errors_json,
                       const std::string& pools_json) {
  std::map<std::string_view, JsonMembers> groups;
  s.ForEachScalar([&](const depot::StoreStatusField& field, auto value) {
    if (!field.group.empty()) groups[field.group].Add(field.key, fmt::format("{}", value));
  });
  groups["host_pool"].Add("free", fmt::format("{}", s.capacity - s.used));
  groups["host_pool"].Add("fragmentation", fmt::format("{:.4f}", s.fragmentation()));
  JsonMembers top;
  top.Add("daemon_version", Json(s.daemon_version));
  top.Add("socket", Json(s.socket_path));
  // A group goes where its first field is.
  s.ForEachScalar([&](const depot::StoreStatusField& field, auto value) {
    if (field.group.empty()) {
      top.Add(field.key, fmt::format("{}", value));
    } else if (auto group = groups.extract(field.group)) {
      top.Add(field.group, group.mapped().Object());
    }
  });
  JsonMembers device_pools;
  device_pools.Add("available", fmt::format("{}", !s.device_pools.empty()));
  device_pools.Add("reason", Json(s.devices_unavailable));
  device_pools.Add("pools", "[" + pools_json + "]");
  top.Add("device_pools", device_pools.Object());
  top.Add("errors", "{" + errors_json + "}");
  std::string users_json;
  for (const auto& u : s.users) {
    users_json += fmt::format("{}{{\"uid\":{},\"objects\":{},\"bytes\":{}}}",
                              users_json.empty() ? "" : ",", u.uid, u.objects, u.bytes);
  }
  top.Add("users", "[" + users_json + "]");
  return top.Object();
}

}  // namespace

int Status(depot::Client& c, bool json) {
  auto s = c.GetStatus();
  if (!s.ok()) return Fail(s.status(), "status");
  std::string errors_json, errors_text;
  uint64_t errors_total = 0;
  for (size_t code = 1; code < s->errors.size(); ++code) {
    if (s->errors[code] == 0) continue;
    auto name = depot::Status::CodeName(static_cast<depot::Status::Code>(code));
    errors_json +=
        fmt::format("{}\"{}\":{}", errors_json.empty() ? "" : ",", name, s->errors[code]);
    errors_text += fmt::format("{}{} {}", errors_text.empty() ? "" : ", ", name, s->errors[code]);
    errors_total += s->errors[code];
  }
  std::string pools_json, pools_text;
  for (const auto& p : s->device_pools) {
    pools_json += fmt::format(
        "{}{{\"pool\":{},\"uuid\":{},\"name\":{},\"kind\":{},\"capacity\":{},\"chunk_size\":{},"
        "\"reserved\":{},\"used\":{},\"chunks\":{},\"retired_held\":{}}}",
        pools_json.empty() ? "" : ",", p.pool, Json(p.uuid), Json(p.name), Json(p.kind), p.capacity,
        p.chunk_size, p.reserved, p.used, p.chunks, p.retired_held);
    pools_text +=
        fmt::format("\n  gpu{} {} ({}, {}): {} used of {}, {} in {} chunk{}", p.pool - 1, p.uuid,
                    p.name, p.kind, depot::FormatBytes(p.used), depot::FormatBytes(p.capacity),
                    depot::FormatBytes(p.reserved), p.chunks, p.chunks == 1 ? "" : "s");
    if (p.retired_held > 0) {
      pools_text += fmt::format(", {} in retired chunks clients still map",
                                depot::FormatBytes(p.retired_held));
    }
  }
  if (json) {
    fmt::print("{}\n", StatusJson(*s, errors_json, pools_json));
    return kOk;
  }
  using depot::FormatBytes;
  fmt::print("depotd {}, pid {}, up {}, socket {}\n", s->daemon_version, s->daemon_pid,
             Duration(s->uptime_ms), s->socket_path);
  fmt::print(
      "host pool     {} used of {} ({} free), largest free block {}, fragmentation {:.0f}%\n",
      FormatBytes(s->used), FormatBytes(s->capacity), FormatBytes(s->capacity - s->used),
      FormatBytes(s->largest_free), 100 * s->fragmentation());
  if (s->leased > 0 || s->leases_revoked > 0) {
    fmt::print("leased        {} to clients for puts, not used yet{}\n", FormatBytes(s->leased),
               s->leases_revoked == 0
                   ? ""
                   : fmt::format("; {} idle leases taken back for room", s->leases_revoked));
  }
  fmt::print("segments      {} holding {}{}{}\n", s->segments, FormatBytes(s->reserved),
             s->prefault ? " (prefaulted)"
                         : fmt::format(", {} of them empty and kept warm (at most {})",
                                       FormatBytes(s->warm), FormatBytes(s->keep_warm)),
             s->retired_held == 0 ? ""
                                  : fmt::format(", {} in retired segments clients still map",
                                                FormatBytes(s->retired_held)));
  if (s->device_pools.empty()) {
    fmt::print("device pools  unavailable ({})\n", s->devices_unavailable);
  } else {
    fmt::print("device pools  {}{}\n", s->device_pools.size(), pools_text);
  }
  fmt::print("objects       {} sealed, {} being created, {} deleted but still referenced\n",
             s->objects_sealed, s->objects_creating, s->objects_deleted);
  if (s->index_entries > 0) {
    fmt::print("index         {} objects in {} entries (gets of them need no round trip){}\n",
               s->indexed, s->index_entries,
               s->index_over_share + s->index_taken_back == 0
                   ? ""
                   : fmt::format("; {} left out and {} taken back to keep each user's part",
                                 s->index_over_share, s->index_taken_back));
  }
  fmt::print("clients       {} connected ({} since start), {} gets waiting\n", s->clients,
             s->connections, s->gets_waiting);
  fmt::print(
      "limits        {} GUIDs in gets waiting (busiest user {}; at most {} a connection, {} a "
      "user)\n"
      "              {} of creates waiting for disk (busiest user {}; at most {} a user)\n"
      "              busiest user {} connections (at most {} a user), {} yet to say hello (at "
      "most {} a user; {} refused)\n"
      "              busiest user {} objects held through depotd (at most {} a user; {} refused)\n",
      s->pending_guids, s->pending_guids_top_user, s->max_pending_guids,
      s->max_pending_guids_per_user, FormatBytes(s->parked_create_bytes),
      FormatBytes(s->parked_create_bytes_top_user), FormatBytes(s->max_parked_bytes_per_user),
      s->sessions_top_user, s->max_sessions_per_user, s->handshakes_top_user,
      s->max_handshakes_per_user, s->handshakes_refused, s->references_top_user,
      s->max_references_per_user, s->references_refused);
  fmt::print("evictions     {} ({})\n", s->evictions, FormatBytes(s->evicted_bytes));
  if (s->spill_capacity == 0) {
    fmt::print("spill         off (no spill_dir)\n");
  } else {
    auto rate = [](uint64_t bytes, uint64_t ms) {
      return ms == 0 ? std::string("-") : FormatBytes(bytes * 1000 / ms) + "/s";
    };
    fmt::print(
        "spill         {} objects ({}) on disk, {} of {} in files; {} lost\n"
        "              {} written ({}, {}), {} restored ({}, {}), {} failed\n",
        s->spilled_objects, FormatBytes(s->spilled_bytes), FormatBytes(s->spill_disk_bytes),
        FormatBytes(s->spill_capacity), s->objects_lost, s->spills, FormatBytes(s->spill_bytes),
        rate(s->spill_bytes, s->spill_ms), s->restores, FormatBytes(s->restore_bytes),
        rate(s->restore_bytes, s->restore_ms), s->spill_failures);
  }
  if (!s->keep_memory) {
    fmt::print("kept memory   off (not under systemd, or keep_memory = off)\n");
  } else {
    fmt::print(
        "kept memory   {} descriptors in systemd's store; at start {} objects ({}) adopted in "
        "{:.1f} ms, {} dropped, {} catalogs refused{}{}\n",
        s->kept_descriptors, s->adopted_objects, FormatBytes(s->adopted_bytes),
        static_cast<double>(s->adoption_us) / 1000, s->adoption_dropped, s->adoption_refused,
        s->kept_closed_bytes == 0
            ? ""
            : fmt::format("; {} of kept segments closed to new objects until the grace period "
                          "ends ({})",
                          FormatBytes(s->kept_closed_bytes),
                          s->grace_waiting == 0
                              ? std::string("when its time runs out")
                              : fmt::format("or {} sessions of the last depotd end or resume",
                                            s->grace_waiting)),
        s->grace_resumed == 0 ? "" : fmt::format("; {} sessions resumed", s->grace_resumed));
  }
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
               s->user_quota_bytes
                   ? fmt::format(" ({:.0f}% of its quota)", 100.0 * u.bytes / s->user_quota_bytes)
                   : "");
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
      fmt::print(
          "{}\n{{\"session\":{},\"pid\":{},\"uid\":{},\"gid\":{},\"name\":{},\"process\":{},"
          "\"references\":{},\"bytes_held\":{},\"creating\":{},\"requests\":{},"
          "\"connected_unix_ns\":{},\"subscribed\":{},\"created_objects\":{},"
          "\"created_bytes\":{}}}",
          i ? "," : "", k.session_id, k.pid, k.uid, k.gid, Json(k.name), Json(k.process),
          k.references, k.bytes_held, k.creating, k.requests, k.connected_unix_ns, k.subscribed,
          k.created_objects, k.created_bytes);
    }
    fmt::print("{}]\n", clients->empty() ? "" : "\n");
    return kOk;
  }
  fmt::print(
      "{:>7}  {:>7}  {:>5}  {:<15}  {:<12}  {:>4}  {:>10}  {:>7}  {:>10}  {:>8}  {:>4}  {}\n",
      "SESSION", "PID", "UID", "PROCESS", "NAME", "REFS", "HELD", "CREATED", "BYTES", "REQUESTS",
      "AGE", "");
  for (const auto& k : *clients) {
    fmt::print(
        "{:>7}  {:>7}  {:>5}  {:<15}  {:<12}  {:>4}  {:>10}  {:>7}  {:>10}  {:>8}  {:>4}  {}\n",
        k.session_id, k.pid, k.uid, k.process, k.name, k.references,
        depot::FormatBytes(k.bytes_held), k.created_objects, depot::FormatBytes(k.created_bytes),
        k.requests, Age(k.connected_unix_ns),
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

int Metrics(depot::Client& c) {
  auto text = c.Metrics();
  if (!text.ok()) return Fail(text.status(), "metrics");
  std::fwrite(text->data(), 1, text->size(), stdout);
  return kOk;
}

}  // namespace depotctl
