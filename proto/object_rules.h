// The rules every object and every put must keep, shared by the daemon, which enforces them on
// every path (a create, a put message, a put-ring record), and the client library, which checks
// them before it writes a put anywhere: a put the daemon would refuse is refused at the caller,
// with the same message, and never returns a GUID (docs/design.md, "The trust model").
//
// Also the rules of leases (docs/design.md, "Puts in one message"): where a frame may start in
// one and what it takes of it.
#ifndef DEPOT_PROTO_OBJECT_RULES_H_
#define DEPOT_PROTO_OBJECT_RULES_H_

#include <cstdint>

#include "depot/status.h"
#include "proto/wire.h"

namespace depot::proto {

// The limits a daemon enforces on an object's shape; a client learns them at hello (an older
// daemon that does not say: the protocol's own).
struct ObjectLimits {
  uint32_t max_frames = kMaxFrames;
  uint32_t max_metadata = kMaxMetadataSize;
};

// InvalidArgument for an object of `frames` frames, `metadata` bytes of metadata and a name of
// `name` bytes that no daemon with `limits` keeps.
Status CheckObjectShape(uint64_t frames, uint64_t metadata, uint64_t name,
                        const ObjectLimits& limits);

// Host blocks start on this alignment and take their size rounded up to it, so each frame cut
// from a lease is a block of its own.
inline constexpr uint64_t kBlockAlign = 64;
constexpr uint64_t RoundUpToBlock(uint64_t n) { return (n + kBlockAlign - 1) & ~(kBlockAlign - 1); }

// The largest lease a client may ask for.
inline constexpr uint64_t kMaxLease = uint64_t{64} << 20;

}  // namespace depot::proto

#endif  // DEPOT_PROTO_OBJECT_RULES_H_
