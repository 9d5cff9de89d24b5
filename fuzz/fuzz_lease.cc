// Fuzz target for leases and put-ring records: puts placed relative to a lease's start, end and
// cursor, mixed with deletes, memory pressure that takes leases back, segments given back and
// closes, against a real Store; every few operations and at the end the invariants of leases and
// the allocator are checked as a client sees them (fuzz/lease_driver.h has the input format).
#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstdlib>

#include "fuzz/lease_driver.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static bool quiet = [] {
    spdlog::set_level(spdlog::level::off);
    return true;
  }();
  (void)quiet;
  depot::fuzz::LeaseDriver driver;
  std::string broken = driver.Run({data, size});
  if (broken.empty()) broken = driver.Finish();
  if (!broken.empty()) {
    std::fprintf(stderr, "fuzz_lease: %s\n", broken.c_str());
    std::abort();
  }
  return 0;
}
