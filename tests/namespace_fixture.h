// Test support for unit tests of the daemon's units that work on a namespace's memory (leases,
// segment descriptors): one real namespace, its host pool of memfd segments (4 MiB of 1 MiB
// segments), made the way the daemon makes it but with no index, no GPUs and hooks that do
// nothing, so that the pool's `used` bytes show what a unit cut, freed or leaked.
//
// Not thread-safe, like the namespace: a test drives it from its one thread.
#ifndef DEPOT_TESTS_NAMESPACE_FIXTURE_H_
#define DEPOT_TESTS_NAMESPACE_FIXTURE_H_

#include <fmt/format.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>
#include <cstdint>
#include <vector>

#include "daemon/device_set.h"
#include "daemon/namespace_set.h"

namespace depot::test {

class TestNamespace {
 public:
  // `keep_warm`: bytes of empty segments kept (0: an empty segment is given back at once).
  explicit TestNamespace(uint64_t keep_warm = 1 << 20)
      : set_(io_, Options(keep_warm), devices_,
             NamespaceHooks{
                 .retired = [](const Namespace&, uint32_t, uint32_t) { return false; },
                 .freed = [](const StoredObject&) {},
                 .event = [](const Namespace&, TableEvent, const StoredObject&, SessionId) {},
                 .restored = [](Namespace&, const Guid&, const Status&) {}}) {
    auto made = set_.For(::getuid());
    REQUIRE(made.ok());
    ns_ = *made;
  }
  TestNamespace(const TestNamespace&) = delete;
  TestNamespace& operator=(const TestNamespace&) = delete;

  Namespace& ns() { return *ns_; }
  // Bytes in allocated blocks of the host pool.
  uint64_t used() const { return ns_->pool(0).stats().used; }
  uint32_t segments() const { return ns_->pool(0).stats().segments; }
  // One block of `size` bytes in a segment of this process's uid.
  Location Allocate(uint64_t size) {
    uint64_t sizes[] = {size};
    auto got = ns_->Allocate(sizes, {}, ::getuid());
    REQUIRE(got.ok());
    return got->front();
  }
  void Free(const std::vector<Location>& frames) { ns_->Free(frames); }

 private:
  static NamespaceOptions Options(uint64_t keep_warm) {
    static int made = 0;
    NamespaceOptions o;
    o.host.capacity = 4 << 20;
    o.host.segment_size = 1 << 20;
    o.host.keep_warm = keep_warm;
    o.host.name_prefix = fmt::format("depot-nstest-{}-{}-", ::getpid(), made++);
    return o;
  }

  boost::asio::io_context io_;
  DeviceSet devices_{DeviceOptions{.unavailable = "no GPUs in this test"}};
  NamespaceSet set_;
  Namespace* ns_ = nullptr;
};

}  // namespace depot::test

#endif  // DEPOT_TESTS_NAMESPACE_FIXTURE_H_
