// Fuzz target for leases and put-ring records: puts placed relative to a lease's start, end and
// cursor, mixed with deletes, memory pressure that takes leases back, segments given back and
// closes, against a real Store; every few operations and at the end the invariants of leases and
// the allocator are checked as a client sees them (fuzz/lease_driver.h has the input format).
//
// At scale: with DEPOT_FUZZ_LEASE_OBJECTS=N in the environment, every input runs against one
// driver whose store already holds N objects of 64 B (LeaseDriver's "at scale"), made before the
// first input; after each input, what it created is deleted, and the store must be as the fill
// left it.
#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstdlib>

#include "fuzz/lease_driver.h"

namespace {

void Quiet() {
  static bool quiet = [] {
    spdlog::set_level(spdlog::level::off);
    return true;
  }();
  (void)quiet;
}

// The driver at scale, when DEPOT_FUZZ_LEASE_OBJECTS asks for one (null otherwise).
depot::fuzz::LeaseDriver* AtScale() {
  static depot::fuzz::LeaseDriver* driver = [] {
    const char* objects = std::getenv("DEPOT_FUZZ_LEASE_OBJECTS");
    if (objects == nullptr) return static_cast<depot::fuzz::LeaseDriver*>(nullptr);
    Quiet();
    return new depot::fuzz::LeaseDriver(std::strtoull(objects, nullptr, 10));
  }();
  return driver;
}

void Found(const std::string& broken) {
  if (broken.empty()) return;
  std::fprintf(stderr, "fuzz_lease: %s\n", broken.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  AtScale();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Quiet();
  if (depot::fuzz::LeaseDriver* driver = AtScale()) {
    std::string broken = driver->Run({data, size});
    Found(broken.empty() ? driver->Finish() : broken);
    return 0;
  }
  depot::fuzz::LeaseDriver driver;
  std::string broken = driver.Run({data, size});
  Found(broken.empty() ? driver.Finish() : broken);
  return 0;
}
