// Building the StatusReply the daemon answers a status request with, from a StoreStatus.
#ifndef DEPOT_DAEMON_STATUS_REPLY_H_
#define DEPOT_DAEMON_STATUS_REPLY_H_

#include "depot/store_status.h"
#include "proto/wire.h"

namespace depot {

// Every field of `status` into a reply built in `fbb`; the client reads it back with
// internal::StoreStatusFromReply (client/src/status_reply.h).
flatbuffers::Offset<wire::StatusReply> BuildStatusReply(flatbuffers::FlatBufferBuilder& fbb,
                                                        const StoreStatus& status);

}  // namespace depot

#endif  // DEPOT_DAEMON_STATUS_REPLY_H_
