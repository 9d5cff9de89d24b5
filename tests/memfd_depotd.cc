// A depotd for tests on machines without a GPU: the real daemon, with device pools whose
// "GPUs" are stand-ins and whose chunks are memfd segments (MemfdBackend). It exercises the device
// protocol, sub-allocation in chunks, chunk fd passing, the client's chunk cache and cleanup; it
// is not GPU coverage (that is the [cuda] tests, on a machine with a GPU).
#include "daemon/daemon_main.h"
#include "tests/memfd_backend.h"

int main(int argc, char** argv) {
  return depot::DaemonMain(
      argc, argv, [](std::string*) { return std::make_unique<depot::test::MemfdBackend>(); });
}
