#include "python/src/dicts.h"

#include <string>
#include <string_view>

namespace depot::python {

using namespace py::literals;

py::dict ToDict(const depot::ObjectInfo& o) {
  py::list frames;
  for (const auto& f : o.frames) {
    frames.append(py::dict("pool"_a = f.pool, "segment"_a = f.segment, "offset"_a = f.offset,
                           "size"_a = f.size));
  }
  py::dict d("guid"_a = o.guid.ToString(), "name"_a = o.name,
             "state"_a = depot::ObjectInfo::StateName(o.state), "size"_a = o.size,
             "frames"_a = frames, "refcount"_a = o.refcount, "evictable"_a = o.evictable,
             "created_unix_ns"_a = o.created_unix_ns, "sealed_unix_ns"_a = o.sealed_unix_ns,
             "creator_pid"_a = o.creator_pid, "creator_uid"_a = o.creator_uid,
             "metadata_size"_a = o.metadata_size);
  d["residence"] = depot::ObjectInfo::ResidenceName(o.residence);
  if (!o.metadata.empty()) {
    d["metadata"] = py::bytes(reinterpret_cast<const char*>(o.metadata.data()), o.metadata.size());
  }
  return d;
}

py::dict ToDict(const depot::StoreStatus& s) {
  py::dict errors;
  for (size_t code = 1; code < s.errors.size(); ++code) {
    if (s.errors[code] == 0) continue;
    errors[py::str(std::string(depot::Status::CodeName(static_cast<depot::Status::Code>(code))))] =
        s.errors[code];
  }
  py::list users;
  for (const auto& u : s.users) {
    users.append(py::dict("uid"_a = u.uid, "objects"_a = u.objects, "bytes"_a = u.bytes));
  }
  py::list pools;
  for (const auto& p : s.device_pools) {
    pools.append(py::dict("pool"_a = p.pool, "uuid"_a = p.uuid, "name"_a = p.name,
                          "kind"_a = p.kind, "capacity"_a = p.capacity,
                          "chunk_size"_a = p.chunk_size, "reserved"_a = p.reserved,
                          "used"_a = p.used, "chunks"_a = p.chunks));
  }
  py::dict d("daemon_version"_a = s.daemon_version, "socket"_a = s.socket_path);
  s.ForEachScalar([&](const depot::StoreStatusField& field, auto value) {
    d[py::str(field.name.data(), field.name.size())] = value;
  });
  d["fragmentation"] = s.fragmentation();
  d["errors"] = errors;
  d["users"] = users;
  d["device_pools"] = pools;
  d["devices_unavailable"] = s.devices_unavailable;
  return d;
}

py::dict ToDict(const depot::Event& e) {
  py::dict d("event"_a = std::string(depot::Event::KindName(e.kind)), "unix_ns"_a = e.unix_ns,
             "session"_a = e.session_id, "pid"_a = e.pid, "uid"_a = e.uid,
             "dropped_before"_a = e.dropped);
  if (!e.guid.is_nil()) {
    d["guid"] = e.guid.ToString();
    d["name"] = e.name;
    d["size"] = e.size;
  }
  return d;
}

}  // namespace depot::python
