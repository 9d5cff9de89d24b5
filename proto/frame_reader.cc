#include "proto/frame_reader.h"

#include <cstring>

namespace depot::proto {
namespace {

// What one read asks for, and how much the buffer grows at a time.
constexpr size_t kReadChunk = 64 << 10;

}  // namespace

FrameReader::FrameReader(uint32_t max_body) : max_body_(max_body), buffer_(kReadChunk) {}

FrameReader::Cut FrameReader::Next(Frame& frame, std::string& error) {
  if (end_ - begin_ < sizeof(Header)) return Cut::kPartial;
  std::memcpy(&frame.header, buffer_.data() + begin_, sizeof(Header));
  if (error = CheckHeader(frame.header, max_body_); !error.empty()) return Cut::kBadHeader;
  size_t total = sizeof(Header) + frame.header.length;
  if (end_ - begin_ < total) {
    // Room for the whole message, so that the reads to come can complete it.
    if (buffer_.size() - begin_ < total) buffer_.resize(begin_ + total + kReadChunk);
    return Cut::kPartial;
  }
  frame.body = {buffer_.data() + begin_ + sizeof(Header), frame.header.length};
  begin_ += total;
  return Cut::kMessage;
}

std::span<uint8_t> FrameReader::Space() {
  if (begin_ == end_) begin_ = end_ = 0;
  if (buffer_.size() - end_ < kReadChunk / 2) {
    // Keep message starts where they are relative to 8-byte boundaries: move whole messages only.
    std::memmove(buffer_.data(), buffer_.data() + begin_, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
    if (buffer_.size() - end_ < kReadChunk / 2) buffer_.resize(end_ + kReadChunk);
  }
  return {buffer_.data() + end_, buffer_.size() - end_};
}

}  // namespace depot::proto
