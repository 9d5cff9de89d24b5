#include "daemon/shared_cpu.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>

#include "common/unique_fd.h"

namespace depot {

std::optional<uint64_t> ThreadRunDelay() {
  // "sum_exec_runtime run_delay timeslices": nanoseconds, nanoseconds, a count.
  UniqueFd fd(::open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return std::nullopt;
  char text[96];
  ssize_t n = ::read(fd.get(), text, sizeof text - 1);
  if (n <= 0) return std::nullopt;
  const char* end = text + n;
  uint64_t runtime = 0, delay = 0;
  auto [after_runtime, e1] = std::from_chars(text, end, runtime);
  if (e1 != std::errc() || after_runtime == end || *after_runtime != ' ') return std::nullopt;
  auto [after_delay, e2] = std::from_chars(after_runtime + 1, end, delay);
  if (e2 != std::errc()) return std::nullopt;
  return delay;
}

void SharedCpu::Begin(Clock::time_point now) {
  begun_ = now;
  others_ = std::chrono::nanoseconds(0);
  yields_ = yielded_to_ = 0;
  last_delay_ = run_delay_();
}

bool SharedCpu::Yielded(Clock::time_point before, Clock::time_point after) {
  ++yields_;
  auto yielded = after - before;
  if (yielded <= kYieldedTo) return false;
  // Only a late return is looked into (a read of /proc), and what others took since the last
  // look is put down to it: the quick yields between took next to nothing.
  std::chrono::nanoseconds others = yielded;
  std::optional<uint64_t> delay = run_delay_();
  if (delay && last_delay_ && *delay >= *last_delay_) {
    others = std::chrono::nanoseconds(*delay - *last_delay_);
  }
  last_delay_ = delay;
  if (others <= kYieldedTo) return false;  // the host's, not this CPU's other processes'
  ++yielded_to_;
  others_ += others;
  auto judged = std::max<Clock::duration>(after - begun_, kJudgedOver);
  return others > kLongestTurn || others_ * kShareDivisor > judged ||
         (yielded_to_ >= kYieldsToStop && 2 * yielded_to_ >= yields_);
}

}  // namespace depot
