// Test support: a raw connection to depotd that speaks bytes, not the client library, for tests
// that send what no client of the library would.
#ifndef DEPOT_TESTS_RAW_CONNECTION_H_
#define DEPOT_TESTS_RAW_CONNECTION_H_

#include <sys/socket.h>
#include <sys/time.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/unique_fd.h"
#include "common/unix_socket.h"
#include "proto/fd_passing.h"
#include "proto/index_layout.h"
#include "proto/wire.h"

namespace depot::test {

// A raw connection that speaks bytes, not the client library. Not thread-safe.
class Raw {
 public:
  explicit Raw(const std::string& path) : fd_(ConnectUnix(path)) {
    REQUIRE(fd_.valid());
    timeval tv{10, 0};
    ::setsockopt(fd_.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  void Write(std::span<const uint8_t> bytes) {
    REQUIRE(::send(fd_.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
            static_cast<ssize_t>(bytes.size()));
  }
  // Write for a connection the daemon may have closed already: whether every byte went.
  bool TryWrite(std::span<const uint8_t> bytes) {
    return ::send(fd_.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
           static_cast<ssize_t>(bytes.size());
  }
  void Write(const std::string& s) {
    Write({reinterpret_cast<const uint8_t*>(s.data()), s.size()});
  }
  // `index_layout`: the index layout the client says it reads (0: said nothing, as libraries
  // before the field).
  void Hello(uint16_t version = proto::kProtocolVersion,
             uint16_t index_layout = index::kIndexLayout.version) {
    flatbuffers::FlatBufferBuilder fbb;
    fbb.Finish(wire::CreateHelloRequest(fbb, version, fbb.CreateString("raw"), index_layout));
    Write(proto::Encode(static_cast<uint16_t>(proto::MsgType::kHello), 1, fbb));
  }
  // Says hello and reads the reply with the fds that ride with it (the index's and the slots'
  // when there is an index, then the put ring's); `reply` gets the reply's body.
  std::vector<UniqueFd> HelloWithFds(std::vector<uint8_t>& reply,
                                     uint16_t index_layout = index::kIndexLayout.version) {
    Hello(proto::kProtocolVersion, index_layout);
    proto::Header h;
    std::vector<UniqueFd> fds;
    auto* b = reinterpret_cast<uint8_t*>(&h);
    for (size_t got = 0; got < sizeof h;) {
      ssize_t n = proto::RecvWithFds(fd_.get(), {b + got, sizeof h - got}, fds, 0);
      REQUIRE(n > 0);
      got += static_cast<size_t>(n);
    }
    REQUIRE(h.type == proto::ReplyType(proto::MsgType::kHello));
    reply.resize(h.length);
    REQUIRE(ReadExactly(reply.data(), reply.size()));
    REQUIRE(proto::VerifyBody(h.type, reply));
    return fds;
  }
  // Reads one message; false at end of stream.
  // Asks for a lease of `size` bytes (request id 2) and returns its range; fails the test on an
  // error or another reply.
  wire::FrameLocation Lease(uint64_t size) {
    flatbuffers::FlatBufferBuilder fbb(64);
    fbb.Finish(wire::CreateLeaseRequest(fbb, size));
    Write(proto::Encode(static_cast<uint16_t>(proto::MsgType::kLease), 2, fbb));
    proto::Header h;
    std::vector<uint8_t> body;
    while (Read(h, body) && h.request_id != 2) {
    }
    REQUIRE(proto::VerifyBody(h.type, body));
    if (h.type == static_cast<uint16_t>(proto::MsgType::kError)) {
      FAIL(proto::Body<wire::ErrorReply>(body)->message()->str());
    }
    REQUIRE(h.type == proto::ReplyType(proto::MsgType::kLease));
    const auto* frames = proto::Body<wire::CreateReply>(body)->frames();
    REQUIRE(frames != nullptr);
    REQUIRE(frames->size() == 1);
    return *frames->Get(0);
  }

  // Gets `guid` (request id 3) and returns the reply's type: a get reply carries the descriptor
  // of each segment this session has not been sent yet (dropped here, as the daemon has counted
  // it sent), and keeps a reference on the object until the connection ends.
  uint16_t Get(const Guid& guid) {
    flatbuffers::FlatBufferBuilder fbb(64);
    wire::Guid g = proto::ToWire(guid);
    fbb.Finish(wire::CreateGetRequest(fbb, fbb.CreateVectorOfStructs(&g, 1), 0));
    Write(proto::Encode(static_cast<uint16_t>(proto::MsgType::kGet), 3, fbb));
    proto::Header h{};
    std::vector<uint8_t> body;
    while (Read(h, body)) {
      if (h.request_id == 3) return h.type;
    }
    return 0;  // the connection ended first
  }

  bool Read(proto::Header& h, std::vector<uint8_t>& body) {
    if (!ReadExactly(&h, sizeof h)) return false;
    body.resize(h.length);
    return ReadExactly(body.data(), body.size());
  }
  // Reads the error that ends the connection, then checks that the connection did end.
  Status ReadFinalError() {
    proto::Header h;
    std::vector<uint8_t> body;
    while (Read(h, body)) {
      if (h.type != static_cast<uint16_t>(proto::MsgType::kError)) continue;
      REQUIRE(proto::VerifyBody(h.type, body));
      auto* e = proto::Body<wire::ErrorReply>(body);
      Status st(static_cast<Status::Code>(e->code()), e->message()->str());
      CHECK(!Read(h, body));  // closed after the error
      return st;
    }
    FAIL("the connection ended without an error");
    return Status();
  }

 private:
  bool ReadExactly(void* p, size_t n) {
    auto* b = static_cast<uint8_t*>(p);
    while (n > 0) {
      ssize_t got = ::recv(fd_.get(), b, n, 0);
      if (got <= 0) return false;
      b += got;
      n -= static_cast<size_t>(got);
    }
    return true;
  }
  UniqueFd fd_;
};

// Builds, in `fbb`, a put of `frames` named `guid` (a message's body, or a put ring's record).
inline void BuildPut(flatbuffers::FlatBufferBuilder& fbb, const Guid& guid,
                     const std::vector<wire::FrameLocation>& frames) {
  wire::Guid g = proto::ToWire(guid);
  auto locations = fbb.CreateVectorOfStructs(frames);
  wire::PutRequestBuilder b(fbb);
  b.add_guid(&g);
  b.add_frames(locations);
  fbb.Finish(b.Finish());
}

}  // namespace depot::test

#endif  // DEPOT_TESTS_RAW_CONNECTION_H_
