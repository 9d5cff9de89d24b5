// Fuzz target for the client's reply handling: a fake daemon, fed from the input, answers a real
// Client that connects and then creates (writing every byte of its frames) and seals an object,
// puts a small one and gets two. The fake sends the input's bytes as they are, with memfds of
// the sizes the input asks for riding along, and never reads what the client asks: every reply,
// request id included, comes from the input.
//
// Input: a sequence of records, each
//   one byte            low 2 bits: how many fds ride with the record's first byte; bit 2: wait
//                       (20 ms at most) for the client's next request first (a reply read before
//                       its request was sent answers nothing: the client drops it)
//   4 bytes per fd      the memfd's size (little-endian, modulo 4 MiB)
//   2 bytes             the record's length L (little-endian)
//   L bytes             stream bytes, sent as they are
// The client's request ids run from 1: hello 1, create 2, seal 3, put 4, get 5.
//
// Checks, besides the sanitizers: the client never crashes (a SIGBUS from a frame past the end of
// its file is a finding), and never hangs: the fake ends the stream after the last record.
//
// A client that finds its daemon gone connects again (with a short reconnect_wait here, so that
// the path runs on every input without slowing the fuzzing); the fake takes each such connection
// and closes it at once, as a socket with no daemon behind it would.
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "common/unique_fd.h"
#include "depot/client.h"
#include "proto/fd_passing.h"
#include "proto/wire.h"

namespace depot::fuzz {
namespace {

constexpr uint32_t kMaxMemfd = 4u << 20;

// A listening socket in a private directory, made once per process.
class Listener {
 public:
  Listener() {
    char dir[] = "/tmp/depot-fuzz-client-XXXXXX";
    if (::mkdtemp(dir) == nullptr) std::abort();
    path_ = std::string(dir) + "/fake.sock";
    fd_ = UniqueFd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path_.c_str(), sizeof addr.sun_path - 1);
    if (::bind(fd_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::listen(fd_.get(), 4) != 0) {
      std::abort();
    }
  }
  const std::string& path() const { return path_; }
  int fd() const { return fd_.get(); }

 private:
  std::string path_;
  UniqueFd fd_;
};

// Takes `n` bytes from the front of `in`; false when fewer remain.
bool Take(std::span<const uint8_t>& in, size_t n, uint8_t* out) {
  if (in.size() < n) return false;
  std::memcpy(out, in.data(), n);
  in = in.subspan(n);
  return true;
}

// Reads `n` bytes of what the client sent into `out` (nullptr: drops them); false at the end of
// its stream.
bool Read(int sock, void* out, size_t n) {
  std::array<uint8_t, 4096> sink;
  auto* to = static_cast<uint8_t*>(out);
  while (n > 0) {
    ssize_t got = ::recv(sock, to ? to : sink.data(), std::min(n, sink.size()), 0);
    if (got < 0 && errno == EINTR) continue;  // libFuzzer's timer
    if (got <= 0) return false;
    n -= static_cast<size_t>(got);
    if (to) to += got;
  }
  return true;
}

// Reads the client's next request (the client library frames its own requests correctly). When
// none comes within a moment (the client waits for a reply the input sent early, with the wrong
// id, or not at all) it goes on: the input decides what comes next, and no input can hang both.
bool AwaitRequest(int sock) {
  pollfd p{sock, POLLIN, 0};
  int ready;
  do {
    ready = ::poll(&p, 1, 20);
  } while (ready < 0 && errno == EINTR);
  if (ready == 0) return true;
  proto::Header h{};
  return Read(sock, &h, sizeof h) && Read(sock, nullptr, h.length);
}

// The fake daemon: sends every record of `input` on `sock`.
void SendRecords(int sock, std::span<const uint8_t> input) {
  uint8_t flags = 0;
  while (Take(input, 1, &flags)) {
    if ((flags & 4) && !AwaitRequest(sock)) return;
    std::vector<UniqueFd> memfds;
    for (int i = 0; i < (flags & 3); ++i) {
      uint32_t size = 0;
      if (!Take(input, sizeof size, reinterpret_cast<uint8_t*>(&size))) return;
      UniqueFd fd(::memfd_create("fuzz-segment", MFD_CLOEXEC));
      if (!fd.valid() || ::ftruncate(fd.get(), size % kMaxMemfd) != 0) std::abort();
      memfds.push_back(std::move(fd));
    }
    uint16_t length = 0;
    if (!Take(input, sizeof length, reinterpret_cast<uint8_t*>(&length))) return;
    length = static_cast<uint16_t>(std::min<size_t>(length, input.size()));
    std::span<const uint8_t> bytes = input.first(length);
    input = input.subspan(length);
    if (bytes.empty()) continue;
    std::vector<int> raw;
    for (const auto& fd : memfds) raw.push_back(fd.get());
    size_t sent = 0;
    while (sent < bytes.size()) {
      std::span<const int> fds;
      if (sent == 0) fds = raw;
      ssize_t n = proto::SendWithFds(sock, bytes.subspan(sent), fds, MSG_NOSIGNAL);
      if (n <= 0) return;  // the client hung up
      sent += static_cast<size_t>(n);
    }
  }
}

// Takes every connection waiting on the listener and closes it.
void RefuseWaiting(int listener) {
  pollfd p{listener, POLLIN, 0};
  int ready;
  while ((ready = ::poll(&p, 1, 0)) > 0 || (ready < 0 && errno == EINTR)) {
    if (ready < 0) continue;  // libFuzzer's timer
    int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) ::close(fd);
  }
}

// Sends the records, then ends the stream (a reply the input lacks is then Disconnected, not a
// hang) and reads what the client sends until it hangs up: closing with its requests unread
// would reset the connection and lose the replies not yet read. Meanwhile a reconnecting client
// finds no daemon behind the socket.
void Serve(UniqueFd sock, int listener, std::span<const uint8_t> input) {
  SendRecords(sock.get(), input);
  ::shutdown(sock.get(), SHUT_WR);
  while (true) {
    std::array<pollfd, 2> p{{{sock.get(), POLLIN, 0}, {listener, POLLIN, 0}}};
    if (::poll(p.data(), p.size(), -1) < 0) {
      if (errno == EINTR) continue;  // libFuzzer's timer
      std::abort();
    }
    if (p[1].revents != 0) RefuseWaiting(listener);
    if (p[0].revents != 0) {
      std::array<uint8_t, 4096> sink;
      ssize_t got = ::recv(sock.get(), sink.data(), sink.size(), 0);
      if (got == 0 || (got < 0 && errno != EINTR)) return;
    }
  }
}

// What a program does with the store; every result is looked at, as a program would.
void UseClient(const std::string& path) {
  auto client = Client::Connect(
      {.socket_path = path, .client_name = "fuzz", .reconnect_wait = std::chrono::milliseconds(1)});
  if (!client.ok()) return;
  std::array<uint64_t, 2> sizes{4096, 100};
  if (auto draft = client->Create(sizes); draft.ok()) {
    for (size_t i = 0; i < draft->frame_count(); ++i) {
      std::memset(draft->frame(i).data(), 0xAB, draft->frame(i).size());
    }
    (void)draft->Seal();
  }
  std::array<std::byte, 16> small{};
  (void)client->Put(small);
  std::array<Guid, 2> guids{Guid{0x1111222233334001ull, 0x8000000000000001ull},
                            Guid{0x1111222233334002ull, 0x8000000000000002ull}};
  uint64_t sum = 0;
  for (auto& got : client->Get(guids, std::chrono::milliseconds(0))) {
    if (!got.ok()) continue;
    for (size_t i = 0; i < got->frame_count(); ++i) {
      if (!got->place(i).host()) continue;  // device memory: not for the CPU to read
      for (std::byte b : got->frame(i)) sum += static_cast<uint8_t>(b);
    }
    for (std::byte b : got->metadata()) sum += static_cast<uint8_t>(b);
  }
  if (sum == 1) std::fprintf(stderr, "\n");  // keeps the reads
}

}  // namespace
}  // namespace depot::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace depot::fuzz;
  static Listener listener;
  std::thread client(UseClient, listener.path());
  int fd;
  do {
    fd = ::accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC);
  } while (fd < 0 && errno == EINTR);  // libFuzzer's timer
  if (fd < 0) std::abort();
  depot::UniqueFd sock(fd);
  Serve(std::move(sock), listener.fd(), {data, size});
  client.join();
  RefuseWaiting(listener.fd());  // what the client tried last, for the next input not to take
  return 0;
}
