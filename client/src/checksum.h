// The checksum depot records at seal: XXH3-64 over an object's frames, in order, as if they were
// one buffer. Header-only: the hash is compiled in, so libdepot needs no libxxhash at run time.
#ifndef DEPOT_CLIENT_SRC_CHECKSUM_H_
#define DEPOT_CLIENT_SRC_CHECKSUM_H_

#include <cstdint>

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace depot::internal {

template <typename Frames>
uint64_t Checksum(const Frames& frames) {
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  for (const auto& f : frames) XXH3_64bits_update(&state, f.data(), f.size());
  return XXH3_64bits_digest(&state);
}

}  // namespace depot::internal

#endif  // DEPOT_CLIENT_SRC_CHECKSUM_H_
