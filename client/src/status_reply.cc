#include "client/src/status_reply.h"

#include <string>
#include <type_traits>

#include "client/src/connection.h"

namespace depot::internal {

StoreStatus StoreStatusFromReply(const wire::StatusReply& r) {
  StoreStatus s;
  auto str = [](const flatbuffers::String* text) { return text ? text->str() : std::string(); };
  s.daemon_version = str(r.daemon_version());
  s.socket_path = str(r.socket_path());
#define DEPOT_FROM_REPLY(name, type, group, key, meaning)                     \
  static_assert(std::is_same_v<decltype(r.name()), type>,                     \
                #name ": DEPOT_STORE_STATUS_SCALARS and depot.fbs disagree"); \
  s.name = r.name();
  DEPOT_STORE_STATUS_SCALARS(DEPOT_FROM_REPLY)
#undef DEPOT_FROM_REPLY
  if (r.errors()) s.errors.assign(r.errors()->begin(), r.errors()->end());
  if (r.users()) {
    for (const wire::UserUsage* u : *r.users()) {
      s.users.push_back({u->uid(), u->objects(), u->bytes()});
    }
  }
  s.device_pools = DevicePoolsFromWire(r.device_pools());
  s.devices_unavailable = str(r.devices_unavailable());
  return s;
}

}  // namespace depot::internal
