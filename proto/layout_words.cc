#include "proto/layout_words.h"

#include <fmt/format.h>

#include <atomic>

namespace depot::layout {
namespace {

// The words are shared with another process: read and written as atomics, like every other.
uint64_t Load(const uint64_t* word) {
  return std::atomic_ref<uint64_t>(*const_cast<uint64_t*>(word)).load(std::memory_order_acquire);
}

}  // namespace

void Write(uint64_t* words, const Layout& layout) {
  std::atomic_ref<uint64_t>(words[kMagic]).store(layout.magic, std::memory_order_relaxed);
  std::atomic_ref<uint64_t>(words[kVersion]).store(layout.version, std::memory_order_release);
}

bool Intact(const uint64_t* words, const Layout& layout) {
  return Load(words + kMagic) == layout.magic && Load(words + kVersion) == layout.version;
}

Status Check(const uint64_t* words, const Layout& layout) {
  uint64_t magic = Load(words + kMagic);
  uint64_t version = Load(words + kVersion);
  if (magic != layout.magic) {
    return Status::ProtocolError(fmt::format(
        "the {} that depotd sent is not one this library knows: it starts with {:#018x}, not "
        "the magic word {:#018x} (a depotd older than layout words, or not depotd)",
        layout.name, magic, layout.magic));
  }
  if (version != layout.version) {
    return Status::ProtocolError(
        fmt::format("the {} of depotd speaks layout version {}; this library reads {}", layout.name,
                    version, layout.version));
  }
  return Status::OK();
}

}  // namespace depot::layout
