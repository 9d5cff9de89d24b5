// SharedCpu tells, from the sched_yields of a thread that spins (PutRings::Spin), whether its CPU
// is shared with other work: then the spin takes time from the very processes it serves, or from
// anyone else's, and waits behind them for its turn, where a sleeping thread is woken at once.
//
// A yield that returns late is not enough to tell: on a virtual machine the host deschedules the
// virtual CPU itself now and then (every few milliseconds here, for 0.1-1 ms), and no process of
// the guest runs meanwhile. So a late yield is looked into: the scheduler's count of the time this
// thread waited, runnable, for a CPU that others held (run_delay, /proc/thread-self/schedstat)
// says how much of it others took. Where the kernel does not say, all of a late yield counts as
// others'. Nor is one turn of another process enough: a server beside the daemon that wakes for a
// few hundred microseconds every 100 ms (Redis's cron) takes a fraction of a percent of the CPU.
// So the CPU is shared when others took more than a quarter of the spin's time (counted over at
// least kJudgedOver: more than 1 ms in its first 4 ms), or ran at least as often as not, or took
// more than kLongestTurn at once: a request that comes meanwhile waits that long for a spinning
// daemon, where a sleeping one would have been woken at once.
//
// Not thread-safe: the spinning thread owns it.
#ifndef DEPOT_DAEMON_SHARED_CPU_H_
#define DEPOT_DAEMON_SHARED_CPU_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <utility>

namespace depot {

// The calling thread's run_delay so far, in nanoseconds; nullopt where /proc does not say.
std::optional<uint64_t> ThreadRunDelay();

class SharedCpu {
 public:
  using Clock = std::chrono::steady_clock;
  // A yield of which others took longer than kYieldedTo let another process run. The CPU is
  // shared once others took more than a kShareDivisor-th of the spin's time, counted over at
  // least kJudgedOver, or more than kLongestTurn of one yield, or once kYieldsToStop yields, and
  // at least half of the spin's, let others run.
  static constexpr std::chrono::microseconds kYieldedTo{5};
  static constexpr std::chrono::microseconds kLongestTurn{500};
  static constexpr std::chrono::milliseconds kJudgedOver{4};
  static constexpr int kShareDivisor = 4;
  static constexpr int kYieldsToStop = 8;

  using RunDelayFn = std::function<std::optional<uint64_t>()>;
  explicit SharedCpu(RunDelayFn run_delay = ThreadRunDelay) : run_delay_(std::move(run_delay)) {}

  // A spin begins at `now`: what earlier spins saw is forgotten.
  void Begin(Clock::time_point now);
  // A sched_yield of the spin ran from `before` to `after`: whether the CPU shows itself shared.
  bool Yielded(Clock::time_point before, Clock::time_point after);

 private:
  RunDelayFn run_delay_;
  Clock::time_point begun_{};
  std::optional<uint64_t> last_delay_;  // run_delay at the last look
  std::chrono::nanoseconds others_{0};  // what others took of this spin's yields
  int yields_ = 0;
  int yielded_to_ = 0;  // of them, those that let another process run
};

}  // namespace depot

#endif  // DEPOT_DAEMON_SHARED_CPU_H_
