// Tests for SpillRemovals against its contract (daemon/spill_removals.h): a removal happens on the
// I/O threads after the loop turn that asked for it, never inside Remove; the files of one
// directory and of several go away, each batch synced; Drain returns once every removal queued so
// far is done (even when the loop was stopped, as it is at a clean stop), and at once, leaving the
// loop as it was, when none is.
#include "daemon/spill_removals.h"

#include <fcntl.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

namespace depot {
namespace {

namespace fs = std::filesystem;

// A directory of its own under the temporary directory, with a descriptor as the daemon holds one.
struct SpillDir {
  explicit SpillDir(const std::string& tag)
      : path(fs::temp_directory_path() /
             ("depot-removals-" + tag + "-" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
    fd = std::make_shared<const UniqueFd>(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    REQUIRE(fd->get() >= 0);
  }
  ~SpillDir() { fs::remove_all(path); }
  void Make(const std::string& name) const { std::ofstream(path / name) << "spilled bytes"; }
  bool Has(const std::string& name) const { return fs::exists(path / name); }

  fs::path path;
  std::shared_ptr<const UniqueFd> fd;
};

// The daemon's loop, its I/O threads and the unit under test.
struct Removals {
  ~Removals() { threads.join(); }

  boost::asio::io_context io;
  boost::asio::thread_pool threads{1};  // one: a job posted first holds back the removals
  SpillRemovals removals{io, threads};
};

TEST_CASE("removals wait for the loop, then remove every file queued, in every directory",
          "[spill_removals]") {
  Removals r;
  auto& [io, threads, removals] = r;
  SpillDir a("a"), b("b");
  for (const char* name : {"1", "2", "3"}) a.Make(name);
  b.Make("4");
  b.Make("kept");

  removals.Remove(a.fd, "1");
  removals.Remove(a.fd, "2");
  removals.Remove(b.fd, "4");
  // Nothing yet: the batch leaves at the end of this loop turn.
  CHECK(a.Has("1"));
  CHECK(a.Has("2"));
  CHECK(b.Has("4"));

  removals.Remove(a.fd, "3");
  removals.Drain();
  CHECK_FALSE(a.Has("1"));
  CHECK_FALSE(a.Has("2"));
  CHECK_FALSE(a.Has("3"));
  CHECK_FALSE(b.Has("4"));
  CHECK(b.Has("kept"));  // only what was named
}

TEST_CASE("a file already gone does not stop the others of its batch", "[spill_removals]") {
  Removals r;
  auto& [io, threads, removals] = r;
  SpillDir dir("gone");
  dir.Make("there");
  removals.Remove(dir.fd, "never-written");
  removals.Remove(dir.fd, "there");
  removals.Drain();
  CHECK_FALSE(dir.Has("there"));
}

TEST_CASE("Drain returns at once with nothing queued, and leaves the loop running",
          "[spill_removals]") {
  Removals r;
  auto& [io, threads, removals] = r;
  removals.Drain();
  CHECK_FALSE(io.stopped());
}

TEST_CASE("Drain waits for the removals when the loop was stopped, as at a clean stop",
          "[spill_removals]") {
  Removals r;
  auto& [io, threads, removals] = r;
  SpillDir dir("stopped");
  dir.Make("x");
  // The I/O thread is busy for a while, so that the removal ends well after Drain is called.
  boost::asio::post(threads, [] { std::this_thread::sleep_for(std::chrono::milliseconds(200)); });
  removals.Remove(dir.fd, "x");
  io.stop();  // the daemon's loop is stopped before it persists what it holds
  removals.Drain();
  CHECK_FALSE(dir.Has("x"));
}

}  // namespace
}  // namespace depot
