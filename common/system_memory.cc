#include "common/system_memory.h"

#include <unistd.h>

namespace depot {

uint64_t PhysicalMemory() {
  return static_cast<uint64_t>(::sysconf(_SC_PHYS_PAGES)) *
         static_cast<uint64_t>(::sysconf(_SC_PAGE_SIZE));
}

}  // namespace depot
