// Guid::Random, the GUIDs the daemon gives objects created without one (and the client's puts):
// UUID v4s, distinct, every random bit used, none shared with a forked child. Whether they can be
// predicted is not something a test can show; why they cannot is in docs/design.md (the trust
// model): they are the kernel's CSPRNG output, read a few KiB at a time.
#include "depot/guid.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <set>
#include <thread>
#include <vector>

#include "tests/daemon_fixture.h"

using namespace depot;
using namespace depot::test;

TEST_CASE("random GUIDs are distinct version 4 UUIDs", "[guid]") {
  std::set<Guid> seen;
  uint64_t hi_or = 0, lo_or = 0, hi_and = ~0ull, lo_and = ~0ull;
  // Several times the buffer's 4 KiB, so refills are crossed.
  for (int i = 0; i < 10000; ++i) {
    Guid g = Guid::Random();
    std::string text = g.ToString();
    INFO(text);
    REQUIRE(text[14] == '4');  // version 4
    REQUIRE((text[19] == '8' || text[19] == '9' || text[19] == 'a' || text[19] == 'b'));  // variant
    REQUIRE(Guid::Parse(text) == g);
    REQUIRE(seen.insert(g).second);
    hi_or |= g.hi, lo_or |= g.lo, hi_and &= g.hi, lo_and &= g.lo;
  }
  // Every bit but the 6 of the version and variant varies: 122 random bits.
  CHECK((hi_or & ~hi_and) == ~0xf000ull);
  CHECK((lo_or & ~lo_and) == ~(0xc0ull << 56));
}

TEST_CASE("threads draw different GUIDs", "[guid]") {
  std::vector<std::vector<Guid>> drawn(4);
  std::vector<std::thread> threads;
  for (auto& d : drawn) {
    threads.emplace_back([&d] {
      for (int i = 0; i < 1000; ++i) d.push_back(Guid::Random());
    });
  }
  for (auto& t : threads) t.join();
  std::set<Guid> all;
  for (const auto& d : drawn) all.insert(d.begin(), d.end());
  CHECK(all.size() == 4000);
}

TEST_CASE("a forked child does not repeat its parent's GUIDs", "[guid]") {
  (void)Guid::Random();  // this thread's buffer is filled, with plenty left in it
  int out[2];
  REQUIRE(::pipe(out) == 0);
  pid_t child = Spawn([&] {
    ::close(out[0]);
    for (int i = 0; i < 16; ++i) {
      Guid g = Guid::Random();
      if (::write(out[1], &g, sizeof g) != sizeof g) return 1;
    }
    return 0;
  });
  ::close(out[1]);
  std::vector<Guid> theirs(16);
  size_t got = 0;
  auto* p = reinterpret_cast<char*>(theirs.data());
  while (got < sizeof(Guid) * theirs.size()) {
    ssize_t n = ::read(out[0], p + got, sizeof(Guid) * theirs.size() - got);
    REQUIRE(n > 0);
    got += static_cast<size_t>(n);
  }
  ::close(out[0]);
  REQUIRE(Wait(child) == 0);
  std::set<Guid> ours;
  for (int i = 0; i < 16; ++i) ours.insert(Guid::Random());
  for (const Guid& g : theirs) CHECK_FALSE(ours.contains(g));
}
