// Tests for the spill file format (daemon/spill_file.h): what is written reads back, and no file
// that is not exactly what depotd wrote (a byte changed anywhere in the header, a file cut
// short, bytes that do not match their checksum, garbage) is believed or crashes the reader.
#include "daemon/spill_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/thread_pool.hpp>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "common/unique_fd.h"
#include "daemon/spill_removals.h"
#include "tests/daemon_fixture.h"

namespace depot {
namespace {

namespace fs = std::filesystem;

struct Written {
  std::string dir;
  UniqueFd fd;
  SpillHeader header;
  std::vector<std::vector<uint8_t>> frames;
};

// Writes an owner-scoped object of three frames (one empty) with a name, metadata and a checksum.
Written WriteOne(Guid guid = Guid{0x1234, 0x5678}, const std::string& name = "object.obj") {
  Written w;
  w.dir = test::TempDir();
  w.fd = UniqueFd(::open(w.dir.c_str(), O_RDONLY | O_DIRECTORY));
  std::mt19937 rng(7);
  w.frames = {std::vector<uint8_t>(10000), {}, std::vector<uint8_t>(123)};
  for (auto& f : w.frames) {
    for (auto& b : f) b = static_cast<uint8_t>(rng());
  }
  XXH3_state_t st;
  XXH3_64bits_reset(&st);
  for (auto& f : w.frames) XXH3_64bits_update(&st, f.data(), f.size());
  w.header.guid = guid;
  w.header.name = "a name";
  w.header.metadata = {1, 2, 3};
  for (auto& f : w.frames) w.header.frame_sizes.push_back(f.size());
  w.header.checksum = XXH3_64bits_digest(&st);
  w.header.has_checksum = true;
  w.header.owner_scoped = true;
  w.header.creator_uid = 1000;
  w.header.creator_pid = 42;
  w.header.created_ns = 111;
  w.header.sealed_ns = 222;
  std::vector<std::span<const uint8_t>> spans(w.frames.begin(), w.frames.end());
  REQUIRE(WriteSpillFile(w.fd.get(), name, w.header, spans).ok());
  return w;
}

Status ReadBack(const Written& w, const std::string& name = "object.obj") {
  std::vector<std::vector<uint8_t>> into;
  for (auto s : w.header.frame_sizes) into.emplace_back(s);
  std::vector<std::span<uint8_t>> spans(into.begin(), into.end());
  Status st = ReadSpillFile(w.fd.get(), name, w.header, spans);
  if (st.ok()) CHECK(into == w.frames);
  return st;
}

TEST_CASE("a spill file reads back as it was written, 0600, with no temporary left",
          "[spill_file]") {
  Written w = WriteOne();
  auto h = ReadSpillHeader(w.fd.get(), "object.obj");
  REQUIRE(h.ok());
  CHECK(h->guid == w.header.guid);
  CHECK(h->name == "a name");
  CHECK(h->metadata == w.header.metadata);
  CHECK(h->frame_sizes == w.header.frame_sizes);
  CHECK(h->checksum == w.header.checksum);
  CHECK(h->has_checksum);
  CHECK(h->owner_scoped);
  CHECK_FALSE(h->evictable);
  CHECK(h->creator_uid == 1000);
  CHECK(h->creator_pid == 42);
  CHECK(h->sealed_ns == 222);
  CHECK(ReadBack(w).ok());
  struct stat st {};
  REQUIRE(::stat((w.dir + "/object.obj").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  CHECK(static_cast<uint64_t>(st.st_size) == SpillFileSize(w.header));
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(w.dir)) files += e.is_regular_file();
  CHECK(files == 1);
}

TEST_CASE("any byte of the header changed: the file is refused, never believed", "[spill_file]") {
  Written w = WriteOne();
  std::string path = w.dir + "/object.obj";
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  for (int at = 0; at < 4096; at += at < 200 ? 1 : 97) {
    char b;
    f.seekg(at);
    f.read(&b, 1);
    char flipped = static_cast<char>(b ^ 0x01);
    f.seekp(at);
    f.write(&flipped, 1);
    f.flush();
    auto h = ReadSpillHeader(w.fd.get(), "object.obj");
    CAPTURE(at);
    CHECK(h.status().IsDataLoss());
    f.seekp(at);
    f.write(&b, 1);
    f.flush();
  }
  CHECK(ReadSpillHeader(w.fd.get(), "object.obj").ok());
}

TEST_CASE("a file cut short, changed data, a missing file or garbage is DataLoss", "[spill_file]") {
  Written w = WriteOne();
  std::string path = w.dir + "/object.obj";
  uint64_t size = SpillFileSize(w.header);
  // Changed data: the recorded checksum catches it.
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(size - 5));
    f.put('\x7f');
  }
  CHECK(ReadBack(w).IsDataLoss());
  for (uint64_t cut : {uint64_t{0}, uint64_t{50}, uint64_t{4095}, size - 1}) {
    fs::resize_file(path, cut);
    CAPTURE(cut);
    CHECK(ReadSpillHeader(w.fd.get(), "object.obj").status().IsDataLoss());
    CHECK(ReadBack(w).IsDataLoss());
  }
  fs::remove(path);
  CHECK(ReadBack(w).IsDataLoss());
  std::mt19937 rng(3);
  for (int i = 0; i < 50; ++i) {
    std::vector<char> junk(rng() % 20000);
    for (auto& c : junk) c = static_cast<char>(rng());
    if (i % 2 == 0 && junk.size() >= 8) std::memcpy(junk.data(), "DEPOTSPL", 8);
    std::ofstream(path, std::ios::binary)
        .write(junk.data(), static_cast<std::streamsize>(junk.size()));
    CHECK_FALSE(ReadSpillHeader(w.fd.get(), "object.obj").ok());
  }
  // A file of another object with the same sizes is not taken for this one.
  Written other = WriteOne(Guid{1, 2});
  CHECK(ReadBack(other).ok());
  fs::copy_file(other.dir + "/object.obj", w.dir + "/object.obj",
                fs::copy_options::overwrite_existing);
  CHECK(ReadBack(w).IsDataLoss());
}

// What this shows: the files go, a name already gone is no error, and the directory is synced
// after them (through a descriptor that cannot be synced, the removal is reported as failed).
// What no test here can show is that the removal survives a power cut: that needs the kernel's
// word that fsync of the directory is what makes it durable, which is POSIX's.
TEST_CASE("removing spill files syncs their directory once they are gone", "[spill_file]") {
  std::string dir = test::TempDir();
  auto touch = [&](const std::string& name) { std::ofstream(dir + "/" + name) << "x"; };
  for (const char* name : {"a.obj", "b.obj", "c.obj"}) touch(name);
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY));
  std::vector<std::string> names = {"a.obj", "b.obj", "never-there.obj"};
  CHECK(RemoveSpillFiles(fd.get(), names).ok());
  CHECK_FALSE(fs::exists(dir + "/a.obj"));
  CHECK_FALSE(fs::exists(dir + "/b.obj"));
  CHECK(fs::exists(dir + "/c.obj"));

  // An O_PATH descriptor names the directory for unlinkat but cannot be fsynced (EBADF): the
  // file still goes, and the failed sync is the answer, so the function did try to sync.
  UniqueFd path_only(::open(dir.c_str(), O_PATH | O_DIRECTORY));
  std::vector<std::string> last = {"c.obj"};
  Status st = RemoveSpillFiles(path_only.get(), last);
  CHECK_FALSE(fs::exists(dir + "/c.obj"));
  CHECK(st.IsUnavailable());
  CHECK_THAT(st.message(), Catch::Matchers::Contains("sync the directory"));
}

// SpillRemovals (daemon/spill_removals.h), the batching in front of RemoveSpillFiles: nothing is
// removed inside the loop turn that asks, and Drain returns only once every removal is done.
TEST_CASE("spill removals wait for the loop turn's end, and a drain for their job",
          "[spill_file][spill_removals]") {
  std::string one = test::TempDir(), two = test::TempDir();
  for (const char* name : {"a.obj", "b.obj"}) {
    std::ofstream(one + "/" + name) << "x";
    std::ofstream(two + "/" + name) << "x";
  }
  boost::asio::io_context io;
  boost::asio::thread_pool threads(2);
  {
    SpillRemovals removals(io, threads);
    auto dir_one = std::make_shared<const UniqueFd>(::open(one.c_str(), O_RDONLY | O_DIRECTORY));
    auto dir_two = std::make_shared<const UniqueFd>(::open(two.c_str(), O_RDONLY | O_DIRECTORY));
    removals.Remove(dir_one, "a.obj");
    removals.Remove(dir_two, "b.obj");
    removals.Remove(dir_one, "b.obj");
    CHECK(fs::exists(one + "/a.obj"));  // queued, not yet handed to a thread
    removals.Drain();
    CHECK_FALSE(fs::exists(one + "/a.obj"));
    CHECK_FALSE(fs::exists(one + "/b.obj"));
    CHECK_FALSE(fs::exists(two + "/b.obj"));
    CHECK(fs::exists(two + "/a.obj"));
  }
  threads.join();
}

}  // namespace
}  // namespace depot
