// The layout of a session's put ring (docs/design.md, "Puts without a message"), used by the
// daemon, which reads the puts and writes the control words and the returns, and by the client
// library, which writes the puts.
//
// The ring is one memfd of kRingFileBytes, sent read-write with the hello reply:
//   - the layout words (proto/layout_words.h): kPutRingLayout's magic and version, in a cache
//     line of their own, which the daemon writes when it makes the ring; the client checks them
//     when it maps the ring, and the daemon before each time it reads the ring;
//   - control words (kHead.. kLease), each read and written as an atomic;
//   - the returns: kReturnSlots entries of kReturnWords words, blocks of the session's lease the
//     daemon hands back warm after the objects cut from them were deleted;
//   - the records: kRecordBytes bytes used as a ring. A record is a header word (its body's
//     length in the low 32 bits) and the body of a put message (wire::PutRequest), padded to a
//     whole word; a body may wrap around the end of the records.
// The header's high bits are flags, changed atomically: kHeld, set by the client (compare and
// swap from no flags) when this process got the object before the daemon took its record, asks
// the daemon to take it with a reference for the session, which the client releases by GUID;
// kTaken, set by the daemon (fetch_or) as it takes the record, so that a later kHeld fails.
// The client writes records from the head and then raises kHead (release); the daemon copies
// each record out, checks it like a message and raises kTail past it. Positions are byte counts
// since the ring was made, never wrapped: a record starts at position % kRecordBytes.
//
// Nothing here trusts the other side: the daemon copies a record before it looks at it and
// checks the positions against each other, and the client checks every return against its lease.
#ifndef DEPOT_PROTO_PUT_RING_LAYOUT_H_
#define DEPOT_PROTO_PUT_RING_LAYOUT_H_

#include <cstdint>

#include "proto/layout_words.h"

namespace depot::put_ring {

inline constexpr layout::Layout kPutRingLayout{"put ring", layout::Magic("DEPOTRNG"), 1};

// The control words, after the layout words.
enum Word : uint64_t {
  kHead = layout::kHeaderWords,  // client: bytes of records published
  kTail,                         // daemon: bytes of records taken
  kPolled,      // daemon: how puts ring the doorbell (PolledState), with an epoch above it
  kReturnHead,  // daemon: returns written
  kReturnTail,  // client: returns taken
  kLease,       // both: whether the client writes into its lease now (LeaseState)
};
inline constexpr uint64_t kControlWords = 8;

// The kPolled word is epoch << 2 | one of these. The epoch grows each time the daemon stops
// polling, so that a client rings once per stop: its doorbell makes the daemon poll again, and the
// puts it writes meanwhile are taken with the doorbell or at the next poll.
enum PolledState : uint64_t {
  kIdle = 0,     // not polled: ring the doorbell, once for this word's value
  kPolling = 1,  // polled: no doorbell
  kUrgent = 2,   // a get waits: ring the doorbell after every put
};
inline constexpr uint64_t kStateMask = 3;

// The kLease word. The client moves it from kLeaseIdle to kLeaseWriting (compare and swap) before
// it places a put in its lease, and back to kLeaseIdle once the put's record is published. When
// memory runs short the daemon takes back a lease left idle, moving the word from kLeaseIdle to
// kLeaseRevoked (compare and swap): the client's next put finds it so and takes a new lease. The
// daemon writes kLeaseIdle when it grants a lease.
enum LeaseState : uint64_t {
  kLeaseIdle = 0,
  kLeaseWriting = 1,
  kLeaseRevoked = 2,
};

// A return: the block's offset, its size (a multiple of 64) and its segment. Returns are of the
// lease the client holds: the client skips those written before its last lease's reply.
inline constexpr uint64_t kReturnWords = 3;
inline constexpr uint64_t kReturnSlots = 64;
inline constexpr uint64_t kReturnsWord = layout::kHeaderWords + kControlWords;

inline constexpr uint64_t kRecordsWord = kReturnsWord + kReturnSlots * kReturnWords;
inline constexpr uint64_t kRecordBytes = uint64_t{64} << 10;
inline constexpr uint64_t kHeaderBytes = 8;
inline constexpr uint64_t kLengthMask = 0xffffffff;
inline constexpr uint64_t kHeld = uint64_t{1} << 32;
inline constexpr uint64_t kTaken = uint64_t{1} << 33;
inline constexpr uint64_t kRingFileBytes = kRecordsWord * 8 + kRecordBytes;

// The ring's bytes a record of `body` bytes takes.
inline constexpr uint64_t RecordSpan(uint64_t body) { return kHeaderBytes + ((body + 7) & ~7ull); }

}  // namespace depot::put_ring

#endif  // DEPOT_PROTO_PUT_RING_LAYOUT_H_
