#include "bench/copy_after_syscall.h"

#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "bench/harness.h"

namespace depot::bench {
namespace {

constexpr size_t kHuge = size_t{2} << 20;

// `bytes` (at most 2 MiB) on one 2 MiB page where the kernel gives one, else on small pages.
class HugeBuffer {
 public:
  HugeBuffer() {
    void* p =
        ::mmap(nullptr, 2 * kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw BenchError("mmap of 4 MiB failed");
    base_ = static_cast<std::byte*>(p);
    data_ = reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(base_) + kHuge - 1) &
                                         ~uintptr_t{kHuge - 1});
    (void)::madvise(data_, kHuge, MADV_HUGEPAGE);
    std::memset(data_, 0x5a, kHuge);
  }
  HugeBuffer(const HugeBuffer&) = delete;
  HugeBuffer& operator=(const HugeBuffer&) = delete;
  ~HugeBuffer() { ::munmap(base_, 2 * kHuge); }
  std::byte* data() const { return data_; }
  // Whether the page under it is a huge one (AnonHugePages of its mapping, which madvise made
  // start at data_).
  bool huge() const {
    std::ifstream smaps("/proc/self/smaps");
    std::string start = fmt::format("{:x}-", reinterpret_cast<uintptr_t>(data_));
    bool in = false;
    for (std::string line; std::getline(smaps, line);) {
      if (line.rfind(start, 0) == 0) in = true;
      if (in && line.rfind("AnonHugePages:", 0) == 0) return std::stoul(line.substr(14)) > 0;
    }
    return false;
  }

 private:
  std::byte* base_;
  std::byte* data_;
};

}  // namespace

CopyCosts CopyAfterSyscall(size_t bytes, int samples) {
  if (bytes > kHuge) throw BenchError("CopyAfterSyscall: at most 2 MiB");
  std::vector<std::byte> small_src(bytes, std::byte{0x3c}), small_dst(bytes);
  HugeBuffer huge_src, huge_dst;
  struct Case {
    std::byte* dst;
    const std::byte* src;
    bool syscall;
    std::vector<double> times;
  };
  Case cases[] = {{small_dst.data(), small_src.data(), false, {}},
                  {small_dst.data(), small_src.data(), true, {}},
                  {huge_dst.data(), huge_src.data(), false, {}},
                  {huge_dst.data(), huge_src.data(), true, {}}};
  for (int i = 0; i < samples; ++i) {
    for (Case& c : cases) {
      if (c.syscall) {
        (void)::getppid();
      } else {
        std::memcpy(c.dst, c.src, bytes);  // the loop's copy before
      }
      auto t0 = Clock::now();
      std::memcpy(c.dst, c.src, bytes);
      KeepAlive(c.dst[bytes / 2]);
      c.times.push_back(Since(t0));
    }
  }
  return {.loop_small = Percentile(cases[0].times, 0.5),
          .after_small = Percentile(cases[1].times, 0.5),
          .loop_huge = Percentile(cases[2].times, 0.5),
          .after_huge = Percentile(cases[3].times, 0.5),
          .huge = huge_src.huge() && huge_dst.huge()};
}

}  // namespace depot::bench
