#include "daemon/spill_removals.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>

#include "daemon/spill_file.h"

namespace depot {

void SpillRemovals::Remove(const std::shared_ptr<const UniqueFd>& dir, std::string name) {
  auto it =
      std::find_if(queued_.begin(), queued_.end(), [&](const Directory& d) { return d.fd == dir; });
  if (it == queued_.end()) it = queued_.insert(queued_.end(), Directory{dir, {}});
  it->names.push_back(std::move(name));
  // At the end of this loop turn, so that the removals of one request (or one reclaim) share it.
  if (!flush_posted_) {
    flush_posted_ = true;
    boost::asio::post(io_, [this] { Flush(); });
  }
}

void SpillRemovals::Flush() {
  flush_posted_ = false;
  if (queued_.empty()) return;
  ++running_;
  boost::asio::post(threads_, [this, batch = std::move(queued_)] {
    for (const Directory& d : batch) {
      if (Status st = RemoveSpillFiles(d.fd->get(), d.names); !st.ok()) {
        spdlog::warn("spill files: {}", st.message());
      }
    }
    boost::asio::post(io_, [this] { --running_; });
  });
  queued_.clear();
}

void SpillRemovals::Drain() {
  Flush();
  // Nothing running: no wait, and the loop is left as it was (a work guard given back on a loop
  // with no other work would stop it).
  if (running_ == 0) return;
  // Work for the loop, so that run_one waits for a job's end rather than return for want of any.
  auto busy = boost::asio::make_work_guard(io_);
  // The daemon stops its loop before it persists; a stopped loop would run nothing, and Drain
  // would return before the removals end (and the manifest could count a file a crash brings
  // back).
  if (io_.stopped()) io_.restart();
  while (running_ > 0) io_.run_one();
}

}  // namespace depot
