// depot::Guid: the 16-byte identity of an object (a random UUID v4), printed in canonical form.
#ifndef DEPOT_GUID_H_
#define DEPOT_GUID_H_

#include <array>
#include <compare>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "depot/export.h"

namespace depot {

struct DEPOT_API Guid {
  uint64_t hi = 0;  // the first 8 bytes of the canonical text, big-endian
  uint64_t lo = 0;

  auto operator<=>(const Guid&) const = default;
  bool is_nil() const { return hi == 0 && lo == 0; }

  // A fresh random UUID v4: 122 bits from the kernel's random source (a CSPRNG, read a few KiB
  // at a time per thread, and never shared with a forked child), so that no one who sees other
  // GUIDs can tell the next one. Thread-safe.
  static Guid Random();

  // A UUID v4 made of 122 of these random bits (the other 6 name the version and variant).
  static constexpr Guid FromRandomBits(uint64_t hi, uint64_t lo) {
    hi = (hi & ~0xf000ull) | 0x4000ull;              // version 4
    lo = (lo & ~(0xc0ull << 56)) | (0x80ull << 56);  // RFC 4122 variant
    return Guid{hi, lo};
  }

  // "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", lower case.
  std::string ToString() const {
    static constexpr char kHex[] = "0123456789abcdef";
    std::string s;
    s.reserve(36);
    for (int i = 0; i < 32; ++i) {
      uint64_t word = i < 16 ? hi : lo;
      int shift = 60 - 4 * (i % 16);
      if (i == 8 || i == 12 || i == 16 || i == 20) s.push_back('-');
      s.push_back(kHex[(word >> shift) & 0xf]);
    }
    return s;
  }

  // Parses the canonical form (either case). nullopt for anything else.
  static std::optional<Guid> Parse(std::string_view s) {
    if (s.size() != 36) return std::nullopt;
    Guid g;
    int digits = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      char c = s[i];
      if (i == 8 || i == 13 || i == 18 || i == 23) {
        if (c != '-') return std::nullopt;
        continue;
      }
      int v;
      if (c >= '0' && c <= '9')
        v = c - '0';
      else if (c >= 'a' && c <= 'f')
        v = c - 'a' + 10;
      else if (c >= 'A' && c <= 'F')
        v = c - 'A' + 10;
      else
        return std::nullopt;
      uint64_t& word = digits < 16 ? g.hi : g.lo;
      word = (word << 4) | static_cast<uint64_t>(v);
      ++digits;
    }
    return g;
  }
};

}  // namespace depot

template <>
struct std::hash<depot::Guid> {
  size_t operator()(const depot::Guid& g) const noexcept {
    return std::hash<uint64_t>()(g.hi ^ (g.lo * 0x9e3779b97f4a7c15ull));
  }
};

#endif  // DEPOT_GUID_H_
