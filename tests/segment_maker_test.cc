// Tests for SegmentMaker against its contract (daemon/segment_maker.h): segments are made on the
// helper thread, in the order asked, and each `done` runs on the loop with a sealed memfd of the
// size and name asked, or with the error; the destructor joins the thread and drops the jobs not
// started, whose `done` never runs.
#include "daemon/segment_maker.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace depot {
namespace {

constexpr uint64_t kSize = 2 << 20;

TEST_CASE("segments are made in order and handed over on the loop, sealed and of their size",
          "[segment_maker]") {
  boost::asio::io_context io;
  SegmentMaker maker([&io](std::function<void()> f) { boost::asio::post(io, std::move(f)); });
  std::vector<Result<SegmentMemory>> made;
  for (int i = 0; i < 3; ++i) {
    maker.Make("depot-test-" + std::to_string(i), kSize * (i + 1),
               [&](Result<SegmentMemory> r) { made.push_back(std::move(r)); });
  }
  auto loop_thread = std::this_thread::get_id();
  std::vector<std::thread::id> ran_on;
  maker.Make("depot-test-last", kSize, [&](Result<SegmentMemory> r) {
    ran_on.push_back(std::this_thread::get_id());
    made.push_back(std::move(r));
  });
  auto work = boost::asio::make_work_guard(io);
  // Bounded, so that a `done` that never reaches the loop fails rather than hangs.
  while (made.size() < 4 && io.run_one_for(std::chrono::seconds(10)) > 0) {
  }
  REQUIRE(made.size() == 4);

  REQUIRE(ran_on.size() == 1);
  CHECK(ran_on[0] == loop_thread);  // `done` runs where the loop runs
  for (size_t i = 0; i < made.size(); ++i) {
    CAPTURE(i);
    REQUIRE(made[i].ok());
    const SegmentMemory& m = *made[i];
    uint64_t want = i < 3 ? kSize * (i + 1) : kSize;
    CHECK(m.size == want);
    CHECK(m.name == (i < 3 ? "depot-test-" + std::to_string(i) : std::string("depot-test-last")));
    struct stat st {};
    REQUIRE(::fstat(m.fd.get(), &st) == 0);
    CHECK(static_cast<uint64_t>(st.st_size) == want);
    int seals = ::fcntl(m.fd.get(), F_GET_SEALS);
    CHECK((seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) ==
          (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL));
    CHECK(m.read_only_fd.valid());
  }
}

TEST_CASE("a segment that cannot be made hands its error to done", "[segment_maker]") {
  boost::asio::io_context io;
  SegmentMaker maker([&io](std::function<void()> f) { boost::asio::post(io, std::move(f)); });
  std::vector<Result<SegmentMemory>> made;
  // memfd_create takes names of at most 249 bytes.
  maker.Make(std::string(300, 'n'), kSize,
             [&](Result<SegmentMemory> r) { made.push_back(std::move(r)); });
  auto work = boost::asio::make_work_guard(io);
  while (made.empty() && io.run_one_for(std::chrono::seconds(10)) > 0) {
  }
  REQUIRE(made.size() == 1);
  CHECK_FALSE(made[0].ok());
  CHECK_FALSE(made[0].status().message().empty());
}

TEST_CASE("the destructor drops jobs not started, and no done runs after it", "[segment_maker]") {
  boost::asio::io_context io;
  std::atomic<int> posted{0};
  int done = 0;
  {
    SegmentMaker maker([&](std::function<void()> f) {
      ++posted;
      boost::asio::post(io, std::move(f));
    });
    for (int i = 0; i < 64; ++i) {
      // 16 MiB each (reserved, so some milliseconds to make): most are still queued below.
      maker.Make("depot-test-dropped-" + std::to_string(i), 8 * kSize,
                 [&](Result<SegmentMemory>) { ++done; });
    }
  }  // joins the helper thread after the job in progress
  int after = posted.load();
  CHECK(after < 64);  // jobs queued behind the one in progress were dropped
  io.run();
  CHECK(done == after);  // each segment made is handed over, and nothing else
  CHECK(posted.load() == after);
}

}  // namespace
}  // namespace depot
