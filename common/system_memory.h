// What memory this machine has, for sizing the pools.
#ifndef DEPOT_COMMON_SYSTEM_MEMORY_H_
#define DEPOT_COMMON_SYSTEM_MEMORY_H_

#include <cstdint>

namespace depot {

// Physical memory of this machine in bytes.
uint64_t PhysicalMemory();

}  // namespace depot

#endif  // DEPOT_COMMON_SYSTEM_MEMORY_H_
