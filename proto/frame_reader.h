// proto::FrameReader cuts the byte stream from a peer into messages. Both ends read with it: the
// daemon's sessions (requests) and the client's channel (replies and pushed messages).
//
// The caller does the reading: Space() is where the next read goes, Filled() says how many bytes
// it put there, and Next() hands out each message once it is whole. Each header is checked
// (CheckHeader, with this reader's body limit) as soon as it is whole, so that a peer cannot make
// the buffer grow past the limit. The buffer grows as bytes arrive (at most doubling, never to a
// length a header merely announces), so a peer that announces a large body and sends little
// costs little; once a large message has been handled the buffer shrinks back. Only whole
// messages are moved and every message is a multiple of 8 bytes long, so each header and body
// keeps its place relative to 8-byte boundaries: bodies are read in place, and FlatBuffers
// needs that alignment.
//
// Not thread-safe: one reader at a time.
#ifndef DEPOT_PROTO_FRAME_READER_H_
#define DEPOT_PROTO_FRAME_READER_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "proto/wire.h"

namespace depot::proto {

class FrameReader {
 public:
  // One message: its header and its body (`header.length` bytes, not verified yet). The body is
  // a view of the reader's buffer, valid until the next call to Space().
  struct Frame {
    Header header{};
    std::span<const uint8_t> body;
  };
  enum class Cut {
    kMessage,    // a whole message is in `frame`
    kPartial,    // the next message is not all here yet: read more
    kBadHeader,  // the next header fails CheckHeader; the stream cannot be cut any further
  };

  // Accepts bodies of up to `max_body` bytes.
  explicit FrameReader(uint32_t max_body = kMaxMessageSize);

  // Accepts bodies of up to `max_body` bytes from the next header on (a daemon raises the limit
  // once a connection has said hello).
  void set_max_body(uint32_t max_body) { max_body_ = max_body; }

  // Takes the next message from the bytes read so far. On kBadHeader, `frame.header` holds the
  // header (its request id is the one to answer) and `error` says what is wrong with it.
  Cut Next(Frame& frame, std::string& error);

  // The type in the next message's header, or 0 while its header is not all here (the header
  // is not checked: Next does that).
  uint16_t NextType() const;
  // Whether the next message is all here, header and body (the header is not checked).
  bool Whole() const;

  // Where the next read should put its bytes: at least half a read chunk, made by moving the
  // unread bytes to the front of the buffer or growing it, or by shrinking a buffer that a large
  // message left behind.
  std::span<uint8_t> Space();

  // The last read put `n` bytes at the start of Space().
  void Filled(size_t n) { end_ += n; }

  // Bytes the buffer holds now, read or not (for tests).
  size_t capacity() const { return buffer_.size(); }

 private:
  uint32_t max_body_;
  std::vector<uint8_t> buffer_;  // bytes read, unread from begin_ to end_
  size_t begin_ = 0;
  size_t end_ = 0;
  size_t want_ = 0;  // length of the partial message at begin_, once its header is whole
};

}  // namespace depot::proto

#endif  // DEPOT_PROTO_FRAME_READER_H_
