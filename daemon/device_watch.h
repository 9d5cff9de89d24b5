// DeviceWatch looks for GPUs on a thread of its own while the daemon has none. At boot the GPU's
// kernel modules may load after the daemon started, and a look (dlopen of libcuda, cuInit) can
// take long enough that the daemon's loop must not wait for it: every client would.
//
// It looks every kFirstWait at first, twice as long after each look that finds none, up to
// kLongestWait, and at once when asked (SIGHUP). Each answer goes to `found` on the loop, through
// `post`. After a look that found GPUs the thread ends, so that the backend is the loop's alone
// from then on; Start looks again (when the loop found none of them usable).
//
// Start, LookNow and the destructor are called on the loop; the thread only looks and posts.
#ifndef DEPOT_DAEMON_DEVICE_WATCH_H_
#define DEPOT_DAEMON_DEVICE_WATCH_H_

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "daemon/device_backend.h"

namespace depot {

class DeviceWatch {
 public:
  // `asked`: the look was asked for (LookNow), so that its answer is worth a log line even when
  // it found nothing.
  using Found = std::function<void(Result<std::vector<DeviceInfo>> found, bool asked)>;
  using Post = std::function<void(std::function<void()>)>;

  static constexpr std::chrono::milliseconds kFirstWait{2000};
  static constexpr std::chrono::milliseconds kLongestWait{30000};

  // Watches `backend`, which must outlive the watch; nothing starts until Start.
  DeviceWatch(DeviceBackend& backend, Post post, Found found);
  ~DeviceWatch();  // stops the thread and waits for a look in progress; later answers are dropped
  DeviceWatch(const DeviceWatch&) = delete;
  DeviceWatch& operator=(const DeviceWatch&) = delete;

  // Starts looking, kFirstWait from now, unless it is looking already.
  void Start();
  // Looks at once (starting the thread if it has ended).
  void LookNow();

 private:
  void Run();

  DeviceBackend& backend_;
  Post post_;
  Found found_;
  // Read on the loop by posted answers: false once the watch is gone.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);

  std::mutex mu_;  // guards what follows
  std::condition_variable cv_;
  bool running_ = false;  // the thread is looking or waiting to
  bool stopping_ = false;
  bool asked_ = false;
  std::thread thread_;
};

}  // namespace depot

#endif  // DEPOT_DAEMON_DEVICE_WATCH_H_
