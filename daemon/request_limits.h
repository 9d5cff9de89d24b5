// What a request may ask for, checked before anything is allocated or looked up: the limits a
// create must keep (frames, metadata and name as proto::CheckObjectShape, which puts keep too;
// sizes, pools, inline data), the size of a lease, what a put must carry (one function for a put
// message and a put-ring record, so that both give the same error), and the number of GUIDs one
// request may name. Each refusal is a Status a person can act on.
//
// What is checked against the daemon's state is not here: whether a GUID exists (the object
// table), where a put's frames lie against the session's lease (LeaseTable::Carve), quotas
// (QuotaLedger) and parked requests (GetWaits, ParkedCreates).
#ifndef DEPOT_DAEMON_REQUEST_LIMITS_H_
#define DEPOT_DAEMON_REQUEST_LIMITS_H_

#include <cstdint>
#include <string>

#include "depot/status.h"
#include "proto/object_rules.h"
#include "proto/wire.h"

namespace depot {

struct RequestLimits {
  proto::ObjectLimits object;       // frames, metadata, name: the same rules as every put
  uint64_t host_capacity = 0;       // no host frame may be larger
  size_t device_pools = 0;          // pools 1..device_pools exist
  std::string devices_unavailable;  // why there are none, when there are none
};

// InvalidArgument for a create no object may have (StoreFull for a frame larger than the whole
// capacity; Unavailable for device frames on a daemon without device pools).
Status CheckCreate(const wire::CreateRequest& req, const RequestLimits& limits);

// InvalidArgument unless a lease of `req.size()` bytes is one a client may ask for (1 byte to
// proto::kMaxLease).
Status CheckLease(const wire::LeaseRequest& req);

// ProtocolError for a put (a message or a put-ring record) that no client of the library sends:
// without a GUID, or of a shape no object may have (proto::CheckObjectShape against `limits`,
// which the library checks before it writes a put). The session that sent it closes.
Status CheckPut(const wire::PutRequest& req, const proto::ObjectLimits& limits);

// InvalidArgument unless `guids` names 1 to kMaxGuidsPerRequest objects.
Status CheckGuidCount(const flatbuffers::Vector<const wire::Guid*>* guids);

}  // namespace depot

#endif  // DEPOT_DAEMON_REQUEST_LIMITS_H_
