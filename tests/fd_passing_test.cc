// Tests for SCM_RIGHTS fd passing and UniqueFd (proto/fd_passing.h).
#include "proto/fd_passing.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "common/unix_socket.h"
#include "proto/wire.h"

namespace depot::proto {
namespace {

struct SocketPair {
  SocketPair() {
    int sv[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    a.reset(sv[0]);
    b.reset(sv[1]);
  }
  UniqueFd a;
  UniqueFd b;
};

// A memfd holding `content`, deliberately without close-on-exec.
UniqueFd MemFile(const std::string& content) {
  UniqueFd fd(::memfd_create("fd_passing_test", 0));
  REQUIRE(fd.valid());
  REQUIRE(::write(fd.get(), content.data(), content.size()) ==
          static_cast<ssize_t>(content.size()));
  return fd;
}

std::string ReadAll(int fd) {
  std::string out(256, '\0');
  ssize_t n = ::pread(fd, out.data(), out.size(), 0);
  REQUIRE(n >= 0);
  out.resize(static_cast<size_t>(n));
  return out;
}

bool SameFile(int x, int y) {
  struct stat sx {};
  struct stat sy {};
  REQUIRE(::fstat(x, &sx) == 0);
  REQUIRE(::fstat(y, &sy) == 0);
  return sx.st_dev == sy.st_dev && sx.st_ino == sy.st_ino;
}

bool IsOpen(int fd) { return ::fcntl(fd, F_GETFD) != -1 || errno != EBADF; }

std::span<const uint8_t> Bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

TEST_CASE("One fd travels with the data and refers to the same pipe", "[fd_passing]") {
  SocketPair s;
  int p[2];
  REQUIRE(::pipe(p) == 0);
  UniqueFd read_end(p[0]);
  UniqueFd write_end(p[1]);

  const int fds[] = {write_end.get()};
  REQUIRE(SendWithFds(s.a.get(), Bytes("hello"), fds, 0) == 5);

  std::vector<uint8_t> buf(64);
  std::vector<UniqueFd> got;
  REQUIRE(RecvWithFds(s.b.get(), buf, got, 0) == 5);
  CHECK(std::string(buf.begin(), buf.begin() + 5) == "hello");
  REQUIRE(got.size() == 1);
  CHECK(got[0].get() != write_end.get());
  CHECK(SameFile(got[0].get(), write_end.get()));

  // Writing through the received end reaches the original read end.
  write_end.reset();
  REQUIRE(::write(got[0].get(), "via-received", 12) == 12);
  got.clear();
  char out[32] = {};
  CHECK(::read(read_end.get(), out, sizeof out) == 12);
  CHECK(std::string(out, 12) == "via-received");
}

TEST_CASE("Three fds arrive in order, close-on-exec", "[fd_passing]") {
  SocketPair s;
  std::vector<UniqueFd> files;
  std::vector<int> raw;
  for (int i = 0; i < 3; ++i) {
    files.push_back(MemFile("file-" + std::to_string(i)));
    raw.push_back(files.back().get());
    REQUIRE((::fcntl(raw.back(), F_GETFD) & FD_CLOEXEC) == 0);
  }
  const std::string data(100, 'd');
  REQUIRE(SendWithFds(s.a.get(), Bytes(data), raw, 0) == 100);

  std::vector<uint8_t> buf(200);
  std::vector<UniqueFd> got;
  REQUIRE(RecvWithFds(s.b.get(), buf, got, 0) == 100);
  REQUIRE(got.size() == 3);
  for (int i = 0; i < 3; ++i) {
    CAPTURE(i);
    CHECK(ReadAll(got[i].get()) == "file-" + std::to_string(i));
    CHECK(SameFile(got[i].get(), raw[i]));
    CHECK((::fcntl(got[i].get(), F_GETFD) & FD_CLOEXEC) != 0);
  }
}

TEST_CASE("RecvWithFds appends to fds already in the vector", "[fd_passing]") {
  SocketPair s;
  UniqueFd f = MemFile("x");
  const int fds[] = {f.get()};
  REQUIRE(SendWithFds(s.a.get(), Bytes("1"), fds, 0) == 1);
  std::vector<uint8_t> buf(8);
  std::vector<UniqueFd> got;
  got.emplace_back(::dup(f.get()));
  REQUIRE(RecvWithFds(s.b.get(), buf, got, 0) == 1);
  REQUIRE(got.size() == 2);
  CHECK(SameFile(got[1].get(), f.get()));
}

TEST_CASE("SendWithFds refuses fds without data and too many fds", "[fd_passing]") {
  SocketPair s;
  UniqueFd f = MemFile("x");

  const int one[] = {f.get()};
  errno = 0;
  CHECK(SendWithFds(s.a.get(), {}, one, 0) == -1);
  CHECK(errno == EINVAL);

  std::vector<int> too_many(kMaxFdsPerSend + 1, f.get());
  errno = 0;
  CHECK(SendWithFds(s.a.get(), Bytes("x"), too_many, 0) == -1);
  CHECK(errno == EINVAL);

  // Nothing was sent by either refusal.
  std::vector<uint8_t> buf(8);
  std::vector<UniqueFd> got;
  CHECK(RecvWithFds(s.b.get(), buf, got, MSG_DONTWAIT) == -1);
  CHECK(errno == EAGAIN);
  CHECK(got.empty());

  // The limit itself is accepted.
  std::vector<int> at_limit(kMaxFdsPerSend, f.get());
  REQUIRE(SendWithFds(s.a.get(), Bytes("x"), at_limit, 0) == 1);
  REQUIRE(RecvWithFds(s.b.get(), buf, got, 0) == 1);
  CHECK(got.size() == static_cast<size_t>(kMaxFdsPerSend));
}

TEST_CASE("Data without fds and end of stream", "[fd_passing]") {
  SocketPair s;
  REQUIRE(SendWithFds(s.a.get(), Bytes("plain"), {}, 0) == 5);
  std::vector<uint8_t> buf(16);
  std::vector<UniqueFd> got;
  REQUIRE(RecvWithFds(s.b.get(), buf, got, 0) == 5);
  CHECK(got.empty());

  s.a.reset();
  CHECK(RecvWithFds(s.b.get(), buf, got, 0) == 0);
  CHECK(got.empty());
}

TEST_CASE("SendWithFds to a closed peer fails without SIGPIPE", "[fd_passing]") {
  SocketPair s;
  s.b.reset();
  errno = 0;
  CHECK(SendWithFds(s.a.get(), Bytes("x"), {}, 0) == -1);
  CHECK(errno == EPIPE);
}

TEST_CASE("UniqueFd closes on destruction and on reset", "[fd_passing]") {
  int raw = ::memfd_create("unique_fd", 0);
  REQUIRE(raw >= 0);
  {
    UniqueFd fd(raw);
    CHECK(fd.valid());
    CHECK(fd.get() == raw);
    CHECK(IsOpen(raw));
  }
  errno = 0;
  CHECK(::fcntl(raw, F_GETFD) == -1);
  CHECK(errno == EBADF);

  int first = ::memfd_create("first", 0);
  int second = ::memfd_create("second", 0);
  UniqueFd fd(first);
  fd.reset(second);
  CHECK_FALSE(IsOpen(first));
  CHECK(fd.get() == second);
  fd.reset();
  CHECK_FALSE(fd.valid());
  CHECK_FALSE(IsOpen(second));

  UniqueFd empty;
  CHECK_FALSE(empty.valid());
  CHECK(empty.get() == -1);
}

TEST_CASE("UniqueFd moves ownership and release gives it up", "[fd_passing]") {
  int raw = ::memfd_create("moved", 0);
  REQUIRE(raw >= 0);
  UniqueFd a(raw);
  UniqueFd b(std::move(a));
  CHECK_FALSE(a.valid());  // NOLINT(bugprone-use-after-move): the moved-from state is the point
  CHECK(b.get() == raw);

  int other = ::memfd_create("other", 0);
  UniqueFd c(other);
  c = std::move(b);
  CHECK(c.get() == raw);
  CHECK_FALSE(IsOpen(other));  // the fd c held before is closed
  CHECK(IsOpen(raw));

  int released = c.release();
  CHECK(released == raw);
  CHECK_FALSE(c.valid());
  { UniqueFd gone = std::move(c); }
  CHECK(IsOpen(raw));  // released: nobody closed it
  ::close(raw);
}

TEST_CASE("ConnectUnix reaches a listening socket and says why it cannot", "[fd_passing]") {
  char dir[] = "/tmp/depot-connect-XXXXXX";
  REQUIRE(::mkdtemp(dir) != nullptr);
  std::string path = std::string(dir) + "/s.sock";
  CHECK_FALSE(depot::ConnectUnix(path).valid());  // nothing there yet
  CHECK(errno == ENOENT);

  UniqueFd listener(::socket(AF_UNIX, SOCK_STREAM, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  REQUIRE(::bind(listener.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(::listen(listener.get(), 1) == 0);
  UniqueFd fd = depot::ConnectUnix(path);
  REQUIRE(fd.valid());
  CHECK((::fcntl(fd.get(), F_GETFD) & FD_CLOEXEC) != 0);

  CHECK_FALSE(depot::ConnectUnix(std::string(200, 'x')).valid());
  CHECK(errno == ENAMETOOLONG);
  ::unlink(path.c_str());
  ::rmdir(dir);
}

}  // namespace
}  // namespace depot::proto
