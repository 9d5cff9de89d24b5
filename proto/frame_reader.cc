#include "proto/frame_reader.h"

#include <algorithm>
#include <cstring>

namespace depot::proto {
namespace {

// What one read asks for, and how much the buffer grows at a time at least.
constexpr size_t kReadChunk = 64 << 10;
// A buffer larger than this is shrunk back to one read chunk once the message that needed it is
// gone.
constexpr size_t kKeep = 4 * kReadChunk;

}  // namespace

FrameReader::FrameReader(uint32_t max_body) : max_body_(max_body), buffer_(kReadChunk) {}

FrameReader::Cut FrameReader::Next(Frame& frame, std::string& error) {
  want_ = 0;
  if (end_ - begin_ < sizeof(Header)) return Cut::kPartial;
  std::memcpy(&frame.header, buffer_.data() + begin_, sizeof(Header));
  if (error = CheckHeader(frame.header, max_body_); !error.empty()) return Cut::kBadHeader;
  size_t total = sizeof(Header) + frame.header.length;
  if (end_ - begin_ < total) {
    want_ = total;  // Space() grows towards it as its bytes come
    return Cut::kPartial;
  }
  frame.body = {buffer_.data() + begin_ + sizeof(Header), frame.header.length};
  begin_ += total;
  return Cut::kMessage;
}

uint16_t FrameReader::NextType() const {
  if (end_ - begin_ < sizeof(Header)) return 0;
  Header h;
  std::memcpy(&h, buffer_.data() + begin_, sizeof h);
  return h.type;
}

bool FrameReader::Whole() const {
  if (end_ - begin_ < sizeof(Header)) return false;
  Header h;
  std::memcpy(&h, buffer_.data() + begin_, sizeof h);
  return end_ - begin_ >= sizeof(Header) + size_t{h.length};
}

std::span<uint8_t> FrameReader::Space() {
  if (begin_ == end_) begin_ = end_ = 0;
  size_t unread = end_ - begin_;
  if (buffer_.size() > kKeep && unread < kReadChunk / 2 && want_ < kReadChunk) {
    // The large message that grew the buffer has been handled: give its memory back.
    std::vector<uint8_t> small(kReadChunk);
    std::memcpy(small.data(), buffer_.data() + begin_, unread);
    buffer_.swap(small);
    begin_ = 0;
    end_ = unread;
  }
  if (buffer_.size() - end_ < kReadChunk / 2) {
    // Keep message starts where they are relative to 8-byte boundaries: move whole messages only.
    std::memmove(buffer_.data(), buffer_.data() + begin_, unread);
    begin_ = 0;
    end_ = unread;
    if (buffer_.size() - end_ < kReadChunk / 2) {
      // At most double what has come, and no further than the message being read needs: memory
      // follows the bytes a peer has sent, not the length it announced.
      size_t grow = std::max(kReadChunk, end_);
      if (want_ > end_) grow = std::clamp(want_ - end_, kReadChunk, grow);
      buffer_.resize(end_ + grow);
    }
  }
  return {buffer_.data() + end_, buffer_.size() - end_};
}

}  // namespace depot::proto
