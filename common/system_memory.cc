#include "common/system_memory.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <iterator>
#include <sstream>

#include "depot/units.h"

namespace depot {
namespace {

// A limit this large is v1's way of saying "none".
constexpr uint64_t kNoLimit = uint64_t{1} << 62;

// A number in a cgroup file, or nullopt.
std::optional<uint64_t> ReadNumber(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  return ParseCgroupMemoryMax(text.str());
}

// This process's memory cgroup: its limit and its use, in v2 (memory.max, memory.current) or
// else in v1's memory hierarchy (memory.limit_in_bytes, memory.usage_in_bytes).
struct CgroupMemory {
  std::optional<uint64_t> limit;
  uint64_t current = 0;
};

CgroupMemory ReadCgroupMemory() {
  std::ifstream in("/proc/self/cgroup");
  std::string line, v1;
  CgroupMemory m;
  while (std::getline(in, line)) {
    if (line.starts_with("0::")) {
      std::string dir = "/sys/fs/cgroup" + line.substr(3);
      if (auto max = ReadNumber(dir + "/memory.max"); max || std::ifstream(dir + "/memory.max")) {
        m.limit = max;
        m.current = ReadNumber(dir + "/memory.current").value_or(0);
        return m;
      }
    } else if (size_t at = line.find(":memory:"); at != std::string::npos) {
      v1 = "/sys/fs/cgroup/memory" + line.substr(at + 8);
    }
  }
  if (!v1.empty()) {
    m.limit = ReadNumber(v1 + "/memory.limit_in_bytes");
    if (m.limit && *m.limit >= kNoLimit) m.limit.reset();
    m.current = ReadNumber(v1 + "/memory.usage_in_bytes").value_or(0);
  }
  return m;
}

// MemAvailable of /proc/meminfo, in bytes.
uint64_t MemAvailable() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return PhysicalMemory();
}

}  // namespace

uint64_t PhysicalMemory() {
  return static_cast<uint64_t>(::sysconf(_SC_PHYS_PAGES)) *
         static_cast<uint64_t>(::sysconf(_SC_PAGE_SIZE));
}

std::optional<uint64_t> ParseCgroupMemoryMax(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  uint64_t bytes = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), bytes);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return bytes;
}

std::optional<uint64_t> CgroupMemoryLimit() { return ReadCgroupMemory().limit; }

uint64_t AvailableMemory() {
  uint64_t available = MemAvailable();
  CgroupMemory m = ReadCgroupMemory();
  if (m.limit) available = std::min(available, *m.limit > m.current ? *m.limit - m.current : 0);
  return available;
}

std::string DescribeAvailableMemory() {
  auto limit = CgroupMemoryLimit();
  return FormatBytes(AvailableMemory()) + " available, " +
         (limit ? "cgroup limit " + FormatBytes(*limit) : std::string("no cgroup limit"));
}

std::string ParseShmemHugePagePolicy(std::string_view text) {
  auto open = text.find('['), close = text.find(']');
  return open < close && close != std::string_view::npos
             ? std::string(text.substr(open + 1, close - open - 1))
             : "";
}

std::string ShmemHugePagePolicy() {
  std::ifstream in(kShmemHugePagesPath);
  return ParseShmemHugePagePolicy(
      std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()));
}

bool ShmemHugePagesAllowed() {
  std::string policy = ShmemHugePagePolicy();
  return policy == "advise" || policy == "always" || policy == "within_size" || policy == "force";
}

}  // namespace depot
