// Reading the daemon's StatusReply into the public StoreStatus.
#ifndef DEPOT_CLIENT_SRC_STATUS_REPLY_H_
#define DEPOT_CLIENT_SRC_STATUS_REPLY_H_

#include "depot/store_status.h"
#include "proto/wire.h"

namespace depot::internal {

// Every field of the reply; absent strings and vectors read as empty. The inverse of the
// daemon's BuildStatusReply (daemon/status_reply.h).
StoreStatus StoreStatusFromReply(const wire::StatusReply& reply);

}  // namespace depot::internal

#endif  // DEPOT_CLIENT_SRC_STATUS_REPLY_H_
