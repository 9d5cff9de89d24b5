// depot::Prefetch starts loading the cache line at an address, so that a batch's reads of many
// random lines overlap their misses. A wrapper, not __builtin_prefetch itself: GCC 12 takes a
// function whose only effect is __builtin_prefetch for a pure one and drops every call to it (a
// member function that prefetches an index's sets compiled to nothing); the empty volatile asm
// is an effect the compiler keeps, and it emits no instruction.
#ifndef DEPOT_COMMON_PREFETCH_H_
#define DEPOT_COMMON_PREFETCH_H_

namespace depot {

inline void Prefetch(const void* p) {
  __builtin_prefetch(p);
  asm volatile("" : : "r"(p));
}

}  // namespace depot

#endif  // DEPOT_COMMON_PREFETCH_H_
