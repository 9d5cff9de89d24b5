#include "daemon/status_reply.h"

#include <vector>

#include "daemon/replies.h"

namespace depot {

flatbuffers::Offset<wire::StatusReply> BuildStatusReply(flatbuffers::FlatBufferBuilder& fbb,
                                                        const StoreStatus& s) {
  // Strings and vectors go into the buffer before the table that points at them.
  auto version = fbb.CreateString(s.daemon_version);
  auto socket = fbb.CreateString(s.socket_path);
  auto errors = fbb.CreateVector(s.errors);
  std::vector<wire::UserUsage> users;
  for (const auto& u : s.users) users.emplace_back(u.uid, u.objects, u.bytes);
  auto users_vec = fbb.CreateVectorOfStructs(users);
  auto device_pools = replies::DevicePools(fbb, s.device_pools);
  auto unavailable = fbb.CreateString(s.devices_unavailable);
  wire::StatusReplyBuilder b(fbb);
  b.add_daemon_version(version);
  b.add_socket_path(socket);
#define DEPOT_ADD_TO_REPLY(name, type, group, key, meaning) b.add_##name(s.name);
  DEPOT_STORE_STATUS_SCALARS(DEPOT_ADD_TO_REPLY)
#undef DEPOT_ADD_TO_REPLY
  b.add_errors(errors);
  b.add_users(users_vec);
  b.add_device_pools(device_pools);
  b.add_devices_unavailable(unavailable);
  return b.Finish();
}

}  // namespace depot
