// The two words at the start of every shared-memory layout a client maps (the namespace index
// and a session's reference slots, proto/index_layout.h; a session's put ring,
// proto/put_ring_layout.h), as LMDB opens its meta page with MDB_MAGIC and a data version.
//
// Each layout begins with one cache line of kHeaderWords words: kMagic, eight ASCII bytes naming
// the layout (read as a little-endian word), then kVersion, the layout's version, then words
// reserved as 0. The layout's own words follow. The daemon writes the two words when it makes the
// memory, before any client is sent it, and never changes them. The client library checks them
// when it maps the memory (Check): a layout of another version, or memory that is not that
// layout, is a clear error at connect, never a misreading later. Where a client maps the layout
// read-write (its reference slots and its put ring), the daemon checks that the words are still
// intact (Intact) before it reads what the client may have written; a client that overwrote
// them has its connection closed with a protocol error.
//
// A layout's version changes whenever a word of it moves or changes meaning.
#ifndef DEPOT_PROTO_LAYOUT_WORDS_H_
#define DEPOT_PROTO_LAYOUT_WORDS_H_

#include <cstdint>

#include "depot/status.h"

namespace depot::layout {

enum HeaderWord : uint64_t {
  kMagic = 0,
  kVersion = 1,
};
inline constexpr uint64_t kHeaderWords = 8;  // one cache line; the layout's words follow
inline constexpr uint64_t kHeaderBytes = kHeaderWords * 8;

// One layout: what errors call it, its magic word and its version.
struct Layout {
  const char* name;
  uint64_t magic;
  uint64_t version;
};

// Eight ASCII bytes as the word they make in memory (little-endian), so that a dump shows them.
constexpr uint64_t Magic(const char (&text)[9]) {
  uint64_t word = 0;
  for (int i = 7; i >= 0; --i) word = word << 8 | static_cast<uint8_t>(text[i]);
  return word;
}

// Writes `layout`'s magic and version at `words` (the daemon, making the memory).
void Write(uint64_t* words, const Layout& layout);
// Whether `words` still start with `layout`'s magic and version.
bool Intact(const uint64_t* words, const Layout& layout);
// The client library's check of memory it maps: ProtocolError saying what it found when `words`
// do not start with `layout`'s magic and version ("the put ring of depotd speaks layout version
// 2; this library reads 1").
Status Check(const uint64_t* words, const Layout& layout);

}  // namespace depot::layout

#endif  // DEPOT_PROTO_LAYOUT_WORDS_H_
