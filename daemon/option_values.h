// How depotd's config keys read their values (option_keys.cc): sizes, counts, switches and lists of
// users or groups. Each setter returns "" or what is wrong with the value.
#ifndef DEPOT_DAEMON_OPTION_VALUES_H_
#define DEPOT_DAEMON_OPTION_VALUES_H_

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "depot/units.h"

namespace depot::option_values {

// `max` fits in T, so the parsed size does too once it is checked against it.
template <typename T>
std::string SetSize(T& out, const std::string& v, uint64_t physical, uint64_t min, uint64_t max) {
  auto parsed = ParseSize(v, physical);
  if (!parsed) return "expected a size such as 512MiB, 8GiB or 25%";
  if (*parsed < min || *parsed > max) {
    return fmt::format("must be between {} and {}", FormatBytes(min), FormatBytes(max));
  }
  out = static_cast<T>(*parsed);
  return "";
}

inline std::string SetBool(bool& out, const std::string& v) {
  std::string s = v;
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  if (s == "on" || s == "true" || s == "yes" || s == "1") {
    out = true;
  } else if (s == "off" || s == "false" || s == "no" || s == "0") {
    out = false;
  } else {
    return "expected on or off";
  }
  return "";
}

inline std::string SetUint(uint32_t& out, const std::string& v, uint32_t min, uint32_t max,
                           int base = 10) {
  uint32_t n = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n, base);
  if (ec != std::errc() || end != v.data() + v.size() || n < min || n > max) {
    return base == 8 ? fmt::format("expected an octal mode such as 0660")
                     : fmt::format("expected a whole number from {} to {}", min, max);
  }
  out = n;
  return "";
}

inline std::string Trim(std::string_view s) {
  size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string_view::npos) return "";
  size_t e = s.find_last_not_of(" \t\r");
  return std::string(s.substr(b, e - b + 1));
}

inline std::string OnOff(bool b) { return b ? "on" : "off"; }

// A size limit, where 0 means none.
inline std::string SetLimit(uint64_t& out, const std::string& v, uint64_t physical) {
  if (v == "0") {
    out = 0;
    return "";
  }
  return SetSize(out, v, physical, 1, uint64_t{1} << 50);
}

inline std::string SetCount(uint64_t& out, const std::string& v) {
  uint64_t n = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || end != v.data() + v.size())
    return "expected a whole number (0: no limit)";
  out = n;
  return "";
}

// A list of users (or groups) separated by commas, each a name or a number. `lookup` finds the
// number for a name (getpwnam / getgrnam).
template <typename Id, typename Lookup>
std::string SetIds(std::vector<Id>& out, const std::string& v, const char* what, Lookup lookup) {
  out.clear();
  size_t start = 0;
  while (start <= v.size()) {
    size_t comma = std::min(v.find(',', start), v.size());
    std::string item = Trim(std::string_view(v).substr(start, comma - start));
    start = comma + 1;
    if (item.empty()) continue;
    Id id{};
    auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), id);
    if (ec != std::errc() || end != item.data() + item.size()) {
      std::optional<Id> found = lookup(item.c_str());
      if (!found) return fmt::format("no {} named `{}` on this system", what, item);
      id = *found;
    }
    out.push_back(id);
  }
  return "";
}

// "" for a GPU as `devices` names it, GPU-... or MIG-... as `nvidia-smi -L` prints it; else
// what is wrong. Ordinals change with CUDA_VISIBLE_DEVICES and the old MIG form
// (MIG-GPU-<uuid>/<gi>/<ci>) is not what the driver reports, so either would never be found.
inline std::string CheckDeviceUuid(const std::string& uuid) {
  if (uuid.find('/') != std::string::npos) {
    return fmt::format(
        "{} is the old form of a MIG instance's name: write the MIG-... UUID that "
        "`nvidia-smi -L` prints for it",
        uuid);
  }
  if (uuid.rfind("GPU-", 0) != 0 && uuid.rfind("MIG-", 0) != 0) {
    return fmt::format(
        "{} is not a GPU UUID: write GPU-... or MIG-... as `nvidia-smi -L` prints "
        "them (ordinals change with CUDA_VISIBLE_DEVICES)",
        uuid);
  }
  return "";
}

template <typename Id>
std::string JoinIds(const std::vector<Id>& ids) {
  return fmt::format("{}", fmt::join(ids, ","));
}

}  // namespace depot::option_values

#endif  // DEPOT_DAEMON_OPTION_VALUES_H_
