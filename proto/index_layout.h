// The layout of the two shared structures behind gets without a round trip (docs/design.md, "Gets
// without a round trip"), used by the daemon, which writes them, and by the client library, which
// reads the index and writes its own reference slots.
//
// Both start with the layout words (proto/layout_words.h): kIndexLayout's and kSlotsLayout's
// magic and version, in one cache line of their own, which the daemon writes when it makes the
// memfd. The client checks them when it maps either; the daemon checks the slots' (which the
// client may write) before it reads any slot.
//
// The index of a namespace is one memfd: the layout words, then `sets` sets of kWays entries
// (from word kEntriesWord), then the record arena (ArenaWord). A set is five cache lines: first its
// tags, the GUIDs of its kWays entries (two words each), then one line per entry, eight 64-bit
// words under a seqlock (kSeq: odd while written, the entry's tag included). A lookup reads the
// tags of the GUID's first set (and of its second when the first lacks it) and then the one entry
// whose tag matched: two or three lines, where a set of whole entries made it read eight. An entry
// names one sealed object; an object of one frame and no metadata has that frame in the entry
// itself (kInline), any other a record in the arena: each frame as kFrameWords words, then the
// metadata padded to whole words. Every word is read and written as an atomic (std::atomic_ref,
// relaxed, with fences), so racing readers and the writer are no data race.
//
// The reference slots of a session are one memfd: the layout words, then kSlotCount words (from
// word kSlotsWord), then one high-water word, the touches, and the slots past the first
// kSlotCount that the daemon granted (SlotWord): a slot holds the ObjectId of an object the session
// holds without a daemon reference, or 0. The high-water word says how many leading slots may be in
// use (the client takes the lowest free slot and raises the word before it writes a slot beyond
// it), so that the daemon reads only those: an idle session costs it one word, not kSlotCount.
//
// Nothing here trusts the other side: the client checks everything it reads like a reply, and
// the daemon reads slots only as ids to keep.
#ifndef DEPOT_PROTO_INDEX_LAYOUT_H_
#define DEPOT_PROTO_INDEX_LAYOUT_H_

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "depot/guid.h"
#include "proto/layout_words.h"

namespace depot::index {

inline constexpr layout::Layout kIndexLayout{"object index", layout::Magic("DEPOTIDX"), 2};
inline constexpr layout::Layout kSlotsLayout{"reference slots", layout::Magic("DEPOTSLT"), 1};

inline constexpr uint32_t kWays = 4;        // entries per set
inline constexpr uint64_t kEntryWords = 8;  // an entry is one cache line
inline constexpr uint64_t kSetWords =
    (1 + kWays) * kEntryWords;              // the tags' line, then the entries
inline constexpr uint64_t kFrameWords = 3;  // offset, size, pool << 32 | segment
// A record is placed at a multiple of this in the arena.
inline constexpr uint64_t kRecordAlign = 32;
// The entries' first word, after the layout words; the arena's first word, after `sets` sets;
// the bytes of an index of `sets` sets and `arena` bytes of records.
inline constexpr uint64_t kEntriesWord = layout::kHeaderWords;
inline constexpr uint64_t ArenaWord(uint64_t sets) { return kEntriesWord + sets * kSetWords; }
inline constexpr uint64_t IndexBytes(uint64_t sets, uint64_t arena) {
  return ArenaWord(sets) * 8 + arena;
}
// Entry `n` is way n % kWays of set n / kWays: the word of its tag (the GUID's hi, then lo) and
// the first word of the entry.
inline constexpr uint64_t TagWord(uint64_t n) {
  return kEntriesWord + n / kWays * kSetWords + n % kWays * 2;
}
inline constexpr uint64_t EntryWord(uint64_t n) {
  return kEntriesWord + n / kWays * kSetWords + (1 + n % kWays) * kEntryWords;
}
// The number of the entry whose first word is `word` (an EntryWord).
inline constexpr uint64_t EntryNumber(uint64_t word) {
  uint64_t in_set = (word - kEntriesWord) % kSetWords;
  return (word - kEntriesWord) / kSetWords * kWays + in_set / kEntryWords - 1;
}

inline constexpr uint32_t kSlotCount = 1024;
inline constexpr uint32_t kSlotsWord = layout::kHeaderWords;  // slot n is word kSlotsWord + n
inline constexpr uint32_t kSlotHighWater = kSlotsWord + kSlotCount;  // the word after the slots
// Then the touches: a count of the objects the client took from the index, and a ring of the
// last kTouchRingSize of their ids, which the daemon reads before it evicts or spills so that
// gets without a message still keep an object recently used. Untrusted like the slots: an id
// only moves an object of the namespace to the recent end of its LRU, as a get would.
inline constexpr uint32_t kTouchCount = kSlotHighWater + 1;
inline constexpr uint32_t kTouchRing = kSlotHighWater + 2;
inline constexpr uint32_t kTouchRingSize = 256;
inline constexpr uint64_t kSlotBytes = (uint64_t{kTouchRing} + kTouchRingSize) * 8;
// A session that holds more than kSlotCount objects at once asks for more slots (IndexRequest);
// slot n ≥ kSlotCount is word kMoreSlotsWord + n - kSlotCount, after the touches, so that the
// first kSlotCount keep their place. The file is made for kMaxSlots slots, but only the first
// SlotFileBytes(granted) are backed by memory and read: the daemon reserves more as it grants
// them, and never reads past what it granted.
inline constexpr uint32_t kMoreSlotsWord = (kTouchRing + kTouchRingSize + 7) / 8 * 8;
inline constexpr uint32_t kMaxSlots = uint32_t{1} << 20;
inline constexpr uint64_t SlotWord(uint64_t n) {
  return n < kSlotCount ? kSlotsWord + n : kMoreSlotsWord + (n - kSlotCount);
}
inline constexpr uint64_t SlotFileBytes(uint64_t slots) {
  return slots <= kSlotCount ? kSlotBytes : SlotWord(slots) * 8;
}

// The words of an entry (its GUID is its tag).
enum Word : uint64_t {
  kSeq = 0,  // even: stable; odd: being written
  kId = 1,   // the ObjectId (monotonic, never reused: the object's generation); 0: empty
  kChecksum = 2,
  kCreator = 3,  // uid | pid << 32
  kShape = 4,    // frame count | flags << 16 | metadata bytes << 32
  // kInline: the frame's kFrameWords words from here; otherwise the record's byte offset in the
  // arena.
  kRecord = 5,
};

static_assert(kRecord + kFrameWords == kEntryWords);

inline constexpr uint64_t kHasChecksum = 1;  // a flag of kShape
inline constexpr uint64_t kInline = 2;       // a flag of kShape: the one frame is in the entry

inline uint64_t Shape(uint64_t frames, uint64_t flags, uint64_t metadata) {
  return frames | flags << 16 | metadata << 32;
}
inline uint64_t ShapeFrames(uint64_t shape) { return shape & 0xffff; }
inline uint64_t ShapeFlags(uint64_t shape) { return (shape >> 16) & 0xffff; }
inline uint64_t ShapeMetadata(uint64_t shape) { return shape >> 32; }
// Whether an object of this shape has its frame in its entry.
inline bool Inlined(uint64_t frames, uint64_t metadata) { return frames == 1 && metadata == 0; }

// The bytes of a record of `frames` frames and `metadata` bytes of metadata.
inline uint64_t RecordBytes(uint64_t frames, uint64_t metadata) {
  return (frames * kFrameWords + (metadata + 7) / 8) * 8;
}

// The two sets a GUID may live in; `sets` is a power of two. The daemon puts an entry in the one
// with more free ways (two choices keep every set below its four ways at loads where one choice
// leaves several percent of the objects out); a reader looks in the first, then the second.
// GUIDs a client proposes may be chosen to collide: full sets only send those gets through the
// daemon.
inline uint64_t SetOf(const Guid& g, uint64_t sets) {
  uint64_t h = (g.hi ^ (g.lo * 0x9e3779b97f4a7c15ULL)) * 0xbf58476d1ce4e5b9ULL;
  return (h ^ (h >> 31)) & (sets - 1);
}
inline uint64_t SecondSetOf(const Guid& g, uint64_t sets) {
  uint64_t h = (g.lo ^ (g.hi * 0xc2b2ae3d27d4eb4fULL)) * 0x94d049bb133111ebULL;
  return (h ^ (h >> 29)) & (sets - 1);
}

// The shared words, read and written as atomics.
inline uint64_t Load(const uint64_t* word, std::memory_order order = std::memory_order_relaxed) {
  return std::atomic_ref<uint64_t>(*const_cast<uint64_t*>(word)).load(order);
}
inline void Store(uint64_t* word, uint64_t value,
                  std::memory_order order = std::memory_order_relaxed) {
  std::atomic_ref<uint64_t>(*word).store(value, order);
}

}  // namespace depot::index

#endif  // DEPOT_PROTO_INDEX_LAYOUT_H_
