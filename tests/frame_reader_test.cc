// Tests for proto::FrameReader, the cutting of a byte stream into messages that the daemon and
// the client share.
#include "proto/frame_reader.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

namespace depot::proto {
namespace {

using Catch::Matchers::Contains;
using Cut = FrameReader::Cut;

// A ping request whose body is `body_bytes` long (a multiple of 8), each byte its request id.
std::vector<uint8_t> Message(uint64_t request_id, uint32_t body_bytes) {
  Header h{kMagic,     kProtocolVersion, static_cast<uint16_t>(MsgType::kPing),
           request_id, body_bytes,       0};
  std::vector<uint8_t> out(sizeof h + body_bytes, static_cast<uint8_t>(request_id));
  std::memcpy(out.data(), &h, sizeof h);
  return out;
}

// Copies `bytes` into the reader in reads of at most `read_size` bytes, taking each message as
// soon as it is whole; returns the messages' request ids, checking each body's bytes.
std::vector<uint64_t> Feed(FrameReader& reader, const std::vector<uint8_t>& bytes,
                           size_t read_size) {
  std::vector<uint64_t> ids;
  size_t fed = 0;
  FrameReader::Frame frame;
  std::string error;
  while (true) {
    Cut cut = reader.Next(frame, error);
    REQUIRE(cut != Cut::kBadHeader);
    if (cut == Cut::kMessage) {
      CHECK(frame.body.size() == frame.header.length);
      CHECK(reinterpret_cast<uintptr_t>(frame.body.data()) % 8 == 0);
      auto id = static_cast<uint8_t>(frame.header.request_id);
      CHECK(std::all_of(frame.body.begin(), frame.body.end(), [&](uint8_t b) { return b == id; }));
      ids.push_back(frame.header.request_id);
      continue;
    }
    if (fed == bytes.size()) return ids;
    std::span<uint8_t> space = reader.Space();
    REQUIRE(space.size() >= 32 << 10);
    size_t n = std::min({space.size(), read_size, bytes.size() - fed});
    std::memcpy(space.data(), bytes.data() + fed, n);
    reader.Filled(n);
    fed += n;
  }
}

TEST_CASE("FrameReader cuts a stream into messages, however the reads split it", "[wire]") {
  std::vector<uint8_t> stream;
  std::vector<uint64_t> sent;
  // Small messages and ones larger than a read chunk, so that the buffer compacts and grows.
  const uint32_t sizes[] = {0, 8, 64, 4096, 200 << 10, 16, 300 << 10, 24};
  for (uint64_t id = 1; id <= 16; ++id) {
    auto m = Message(id, sizes[id % std::size(sizes)]);
    stream.insert(stream.end(), m.begin(), m.end());
    sent.push_back(id);
  }
  for (size_t read_size : {size_t{1} << 30, size_t{65536}, size_t{4093}, size_t{24}, size_t{7}}) {
    FrameReader reader;
    CHECK(Feed(reader, stream, read_size) == sent);
  }
}

TEST_CASE("FrameReader stops at a bad header, before its body is read", "[wire]") {
  FrameReader reader(1024);
  auto good = Message(7, 1024);
  auto big = Message(8, 1032);
  std::vector<uint8_t> stream = good;
  stream.insert(stream.end(), big.begin(), big.begin() + sizeof(Header));
  auto space = reader.Space();
  REQUIRE(space.size() >= stream.size());
  std::memcpy(space.data(), stream.data(), stream.size());
  reader.Filled(stream.size());

  FrameReader::Frame frame;
  std::string error;
  REQUIRE(reader.Next(frame, error) == Cut::kMessage);
  CHECK(frame.header.request_id == 7);
  REQUIRE(reader.Next(frame, error) == Cut::kBadHeader);
  CHECK(frame.header.request_id == 8);
  CHECK_THAT(error, Contains("exceeds the limit of 1024 bytes"));
}

TEST_CASE("FrameReader waits for a whole header", "[wire]") {
  FrameReader reader;
  auto m = Message(3, 8);
  FrameReader::Frame frame;
  std::string error;
  for (size_t i = 0; i < m.size(); ++i) {
    CHECK(reader.Next(frame, error) == Cut::kPartial);
    reader.Space()[0] = m[i];
    reader.Filled(1);
  }
  REQUIRE(reader.Next(frame, error) == Cut::kMessage);
  CHECK(frame.header.request_id == 3);
  CHECK(reader.Next(frame, error) == Cut::kPartial);
}

TEST_CASE("FrameReader grows as bytes arrive, not to the length a header announces", "[wire]") {
  FrameReader reader;
  auto m = Message(5, 48u << 20);  // a 48 MiB body, of which only the first bytes come
  auto space = reader.Space();
  std::memcpy(space.data(), m.data(), 4096);
  reader.Filled(4096);
  FrameReader::Frame frame;
  std::string error;
  REQUIRE(reader.Next(frame, error) == Cut::kPartial);
  reader.Space();
  CHECK(reader.capacity() < (1u << 20));
}

TEST_CASE("FrameReader shrinks back once a large message is handled", "[wire]") {
  FrameReader reader;
  auto big = Message(4, 8u << 20);
  auto small = Message(6, 64);
  std::vector<uint8_t> stream = big;
  stream.insert(stream.end(), small.begin(), small.end());
  CHECK(Feed(reader, stream, 1 << 20) == std::vector<uint64_t>{4, 6});
  CHECK(reader.capacity() >= (8u << 20));  // it held the large message whole
  reader.Space();
  CHECK(reader.capacity() <= (256u << 10));
}

TEST_CASE("FrameReader takes a new body limit from the next header on", "[wire]") {
  FrameReader reader(64);
  reader.set_max_body(1024);
  CHECK(Feed(reader, Message(9, 1024), 1 << 20) == std::vector<uint64_t>{9});
}

}  // namespace
}  // namespace depot::proto
