// The catalog of kept objects: what it records reads back whole, what goes is gone, and an entry
// that a daemon killed mid-write or damage left is never read as an object.
#include "daemon/catalog.h"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cstring>

using namespace depot;

namespace {

StoredObject Object(Guid guid, std::vector<Location> frames, std::string name = "",
                    std::vector<uint8_t> metadata = {}) {
  StoredObject o(frames, name, metadata);
  o.guid = guid;
  o.creator_uid = 1000;
  o.creator_pid = 42;
  o.created_ns = 111;
  o.sealed_ns = 222;
  o.checksum = 0xabcdef;
  o.has_checksum = true;
  o.evictable = true;
  return o;
}

// What a new daemon reads from the catalog `c` left: opened anew from a duplicate of its fd.
std::vector<CatalogObject> ReadBack(const Catalog& c, uint64_t* torn) {
  auto opened = Catalog::Open(UniqueFd(::dup(c.fd())), c.key());
  REQUIRE(opened.ok());
  return (*opened)->Read(torn);
}

// The bytes of entry `slot` in the catalog's file (4 KiB header, 128-byte entries).
uint8_t* EntryBytes(int fd, uint32_t slot, void** map, size_t* size) {
  *size = 4096 + (uint64_t{slot} + 1) * 128;
  *map = ::mmap(nullptr, *size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  REQUIRE(*map != MAP_FAILED);
  return static_cast<uint8_t*>(*map) + 4096 + uint64_t{slot} * 128;
}

}  // namespace

TEST_CASE("A catalog reads back every object it recorded, and none it erased", "[catalog]") {
  auto c = Catalog::Create(7);
  REQUIRE(c.ok());
  Guid a = Guid::Random(), b = Guid::Random(), z = Guid::Random();
  std::vector<Location> three{{.segment = 1, .offset = 0, .size = 100},
                              {.segment = 2, .offset = 4096, .size = 5},
                              {.segment = 1, .offset = 128, .size = 64}};
  REQUIRE((*c)->Record(3, Object(a, {{.segment = 1, .offset = 64, .size = 10}})));
  REQUIRE((*c)->Record(9, Object(b, three, "a name", {1, 2, 3, 4})));
  REQUIRE((*c)->Record(4, Object(z, {})));  // no frame at all
  REQUIRE((*c)->Record(5, Object(Guid::Random(), {{.segment = 1, .size = 1}})));
  (*c)->Erase(5);
  // Device frames are kept under their pool's number, beside host frames.
  Guid d = Guid::Random();
  REQUIRE((*c)->Record(6, Object(d, {{.segment = 1, .pool = 2, .size = 8},
                                     {.segment = 4, .offset = 64, .size = 3}})));
  CHECK((*c)->entries() == 4);

  uint64_t torn = 9;
  auto read = ReadBack(**c, &torn);
  CHECK(torn == 0);
  REQUIRE(read.size() == 4);
  CHECK(read[0].object.guid == a);
  CHECK(read[0].object.frames.size() == 1);
  CHECK(read[0].object.frames[0].offset == 64);
  CHECK(read[1].object.guid == z);
  CHECK(read[1].object.frames.empty());
  CHECK(read[2].object.guid == d);
  REQUIRE(read[2].object.frames.size() == 2);
  CHECK(read[2].object.frames[0].pool == 2);
  CHECK(read[2].object.frames[0].size == 8);
  CHECK(read[2].object.frames[1].pool == 0);
  CHECK(read[2].object.frames[1].segment == 4);
  const NewObject& two = read[3].object;
  CHECK(two.guid == b);
  REQUIRE(two.frames.size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    CHECK(two.frames[i].segment == three[i].segment);
    CHECK(two.frames[i].offset == three[i].offset);
    CHECK(two.frames[i].size == three[i].size);
  }
  CHECK(two.name == "a name");
  CHECK(two.metadata == std::vector<uint8_t>{1, 2, 3, 4});
  CHECK(two.creator_uid == 1000);
  CHECK(two.creator_pid == 42);
  CHECK(two.evictable);
  CHECK(read[3].facts.checksum == 0xabcdef);
  CHECK(read[3].facts.has_checksum);
  CHECK(read[3].facts.created_ns == 111);
  CHECK(read[3].facts.sealed_ns == 222);
}

TEST_CASE("An entry torn or damaged is counted and never read as an object", "[catalog]") {
  auto c = Catalog::Create(1);
  REQUIRE(c.ok());
  Guid keep = Guid::Random();
  REQUIRE((*c)->Record(0, Object(keep, {{.segment = 1, .size = 10}})));
  REQUIRE((*c)->Record(
      1, Object(Guid::Random(), {{.segment = 1, .offset = 64, .size = 10}}, "n", {9, 9})));
  REQUIRE((*c)->Record(2, Object(Guid::Random(), {{.segment = 1, .offset = 128, .size = 10}})));
  void* map = nullptr;
  size_t size = 0;
  SECTION("a byte of an entry changed") {
    uint8_t* e = EntryBytes((*c)->fd(), 1, &map, &size);
    e[40] ^= 1;  // in its creation time
  }
  SECTION("a byte of its extra bytes changed (reused since)") {
    // The extra bytes of entry 1 are the first of the extra region: after every entry.
    uint8_t* e = EntryBytes((*c)->fd(), 1, &map, &size);
    uint64_t extra_offset;
    std::memcpy(&extra_offset, e + 64, sizeof extra_offset);
    ::munmap(map, size);
    size = 4096 + Catalog::kMaxEntries * 128 + extra_offset + 64;
    map = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, (*c)->fd(), 0);
    REQUIRE(map != MAP_FAILED);
    static_cast<uint8_t*>(map)[size - 64] ^= 0xff;
  }
  SECTION("a daemon killed after marking an entry live but before writing it") {
    uint8_t* e = EntryBytes((*c)->fd(), 1, &map, &size);
    std::memset(e + 4, 0, 124);
  }
  uint64_t torn = 0;
  auto read = ReadBack(**c, &torn);
  CHECK(torn == 1);
  REQUIRE(read.size() == 2);
  CHECK(read[0].object.guid == keep);
  ::munmap(map, size);
}

TEST_CASE("A catalog of another version or namespace is refused whole", "[catalog]") {
  auto c = Catalog::Create(5);
  REQUIRE(c.ok());
  CHECK(Catalog::Open(UniqueFd(::dup((*c)->fd())), 6).status().IsInvalidArgument());
  void* map = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, (*c)->fd(), 0);
  REQUIRE(map != MAP_FAILED);
  uint32_t version = Catalog::kVersion + 1;
  std::memcpy(static_cast<uint8_t*>(map) + 8, &version, sizeof version);
  auto refused = Catalog::Open(UniqueFd(::dup((*c)->fd())), 5);
  CHECK(refused.status().IsInvalidArgument());
  CHECK(refused.status().message().find("version") != std::string::npos);
  ::munmap(map, 4096);
}
