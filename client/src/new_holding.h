// internal::NewHolding makes a Holding as std::make_shared does (the Holding and its counts in
// one block), but takes the block from blocks this thread gave back, up to 1,024 of them. A
// multi-GUID get makes a Holding for each object, and a process lets them go and gets again:
// glibc's malloc keeps seven blocks of a size per thread, and beyond them freed blocks of this
// size were merged and split again, the larger part of a Holding's cost (measured: a multi-get
// of 1,000 spent 120-210 thousand cycles making Holdings, and 85 with blocks kept).
#ifndef DEPOT_CLIENT_SRC_NEW_HOLDING_H_
#define DEPOT_CLIENT_SRC_NEW_HOLDING_H_

#include <memory>

#include "client/src/object_cache.h"

namespace depot::internal {

std::shared_ptr<Holding> NewHolding();

}  // namespace depot::internal

#endif  // DEPOT_CLIENT_SRC_NEW_HOLDING_H_
