#include "depot/units.h"

#include <fmt/format.h>

#include <cctype>
#include <charconv>
#include <cmath>

namespace depot {

std::optional<uint64_t> ParseSize(std::string_view text, uint64_t total) {
  double value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || !std::isfinite(value) || value <= 0) return std::nullopt;
  std::string unit;
  for (const char* p = end; p != text.data() + text.size(); ++p) {
    if (!std::isspace(static_cast<unsigned char>(*p))) unit += static_cast<char>(std::tolower(*p));
  }
  double bytes;
  if (unit == "%") {
    if (value > 100) return std::nullopt;
    bytes = static_cast<double>(total) * value / 100.0;
  } else {
    int shift;
    if (unit.empty() || unit == "b")
      shift = 0;
    else if (unit == "k" || unit == "kib" || unit == "kb")
      shift = 10;
    else if (unit == "m" || unit == "mib" || unit == "mb")
      shift = 20;
    else if (unit == "g" || unit == "gib" || unit == "gb")
      shift = 30;
    else if (unit == "t" || unit == "tib" || unit == "tb")
      shift = 40;
    else
      return std::nullopt;
    bytes = value * static_cast<double>(uint64_t{1} << shift);
  }
  if (bytes < 1 || bytes > 1e19) return std::nullopt;
  return static_cast<uint64_t>(bytes);
}

std::string FormatBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return fmt::format("{} B", bytes);
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1023.95 && u < 4) {  // 1023.97 MiB prints as 1.0 GiB, not 1024.0 MiB
    v /= 1024;
    ++u;
  }
  return fmt::format("{:.1f} {}", v, kUnits[u]);
}

}  // namespace depot
