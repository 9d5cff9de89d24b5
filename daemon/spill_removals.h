// SpillRemovals removes spill files on the spill I/O threads, in batches: the files removed in
// one turn of the loop go in one job, which unlinks them and then syncs each directory once
// (RemoveSpillFiles). Without the sync, a file removed just before a crash may be back in its
// directory after it, and the next start would adopt its object, deleted, again; with it, a
// removal is on disk one job after the loop turn that asked for it, at the cost of one fsync per
// directory per batch rather than one per file. A clean stop waits for every removal (Drain)
// before the manifest says what the directories hold, restarting the loop if it was stopped.
//
// Belongs to the daemon's loop; a job touches only the names and descriptors handed to it.
#ifndef DEPOT_DAEMON_SPILL_REMOVALS_H_
#define DEPOT_DAEMON_SPILL_REMOVALS_H_

#include <boost/asio/io_context.hpp>
#include <boost/asio/thread_pool.hpp>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "common/unique_fd.h"

namespace depot {

class SpillRemovals {
 public:
  SpillRemovals(boost::asio::io_context& io, boost::asio::thread_pool& threads)
      : io_(io), threads_(threads) {}

  // Queues the file `name` of the directory `dir` for removal. `dir` is a descriptor of its own
  // (the namespace's may close before the job runs), the same object for every file of that
  // directory, so that its files share one sync.
  void Remove(const std::shared_ptr<const UniqueFd>& dir, std::string name);

  // Runs the loop until every removal queued so far is done and synced. At a clean stop.
  void Drain();

 private:
  struct Directory {
    std::shared_ptr<const UniqueFd> fd;
    std::vector<std::string> names;
  };
  // Hands what is queued to one job on the I/O threads.
  void Flush();

  boost::asio::io_context& io_;
  boost::asio::thread_pool& threads_;
  std::vector<Directory> queued_;
  bool flush_posted_ = false;
  size_t running_ = 0;  // jobs handed to the threads whose end the loop has not seen
};

}  // namespace depot

#endif  // DEPOT_DAEMON_SPILL_REMOVALS_H_
