#include "tests/daemon_fixture.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

namespace depot::test {

void Skip(const std::string& why) {
  std::printf("SKIPPED: %s\n", why.c_str());
  std::fflush(stdout);
  std::_Exit(77);
}

std::map<std::string, std::string> SegmentsOf(pid_t pid, const std::string& prefix) {
  std::map<std::string, std::string> segments;
  const std::string memfd = "/memfd:" + prefix;
  std::error_code ec;
  for (const auto& e :
       std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
    std::string target = std::filesystem::read_symlink(e.path(), ec).string();
    if (!target.starts_with(memfd)) continue;
    std::string name = target.substr(7, target.find(' ') - 7);  // without " (deleted)"
    segments.emplace(name, e.path().string());
  }
  return segments;
}

std::string TempDir() {
  char tmpl[] = "/tmp/depot-test-XXXXXX";
  char* d = ::mkdtemp(tmpl);
  REQUIRE(d != nullptr);
  return d;
}

Daemon::Daemon(std::vector<std::string> args) : dir_(TempDir()), socket_(dir_ + "/depot.sock") {
  Launch(std::move(args), {}, "");
}

Daemon::Daemon(std::string socket, std::vector<std::string> args, std::vector<std::string> wrapper,
               std::string binary)
    : dir_(TempDir()), socket_(std::move(socket)) {
  Launch(std::move(args), std::move(wrapper), std::move(binary));
}

void Daemon::Launch(std::vector<std::string> args, std::vector<std::string> wrapper,
                    std::string binary) {
  std::vector<std::string> argv = wrapper;
  // DEPOT_TEST_DEPOTD runs the tests against another depotd (an older build, to see a new test
  // fail on the code before its fix).
  const char* other = std::getenv("DEPOT_TEST_DEPOTD");
  argv.push_back(!binary.empty() ? binary : other != nullptr ? other : DEPOTD_PATH);
  argv.push_back("--socket");
  argv.push_back(socket_);
  argv.insert(argv.end(), args.begin(), args.end());
  std::string log = dir_ + "/depotd.log";
  pid_ = ::fork();
  REQUIRE(pid_ >= 0);
  if (pid_ == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);  // a test that crashes takes its daemon with it
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    ::dup2(fd, STDERR_FILENO);
    std::vector<char*> cargv;
    for (auto& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    ::execvp(cargv[0], cargv.data());
    std::_Exit(127);
  }
  bool up = WaitFor([&] {
    int status;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return true;  // exited: stop waiting, reported below
    }
    return Client::Connect({socket_, "fixture"}).ok();
  });
  INFO("depotd log:\n" << Log());
  REQUIRE(pid_ > 0);
  REQUIRE(up);
}

Daemon::~Daemon() {
  if (pid_ > 0) {
    // A clean shutdown exits 0; under the sanitizers a leak or a memory error would not.
    int status = Stop(SIGTERM);
    if (std::uncaught_exceptions() == 0) {
      INFO("depotd log:\n" << Log());
      CHECK(WIFEXITED(status));
      CHECK(WEXITSTATUS(status) == 0);
    }
  }
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

int Daemon::Stop(int sig) {
  if (pid_ <= 0) return -1;
  ::kill(pid_, sig);
  // A daemon that does not stop fails the test with its log, not at ctest's timeout.
  int status = 0;
  bool stopped =
      WaitFor([&] { return ::waitpid(pid_, &status, WNOHANG) == pid_; }, std::chrono::seconds(120));
  if (!stopped) {
    std::string log = Log();
    std::fprintf(
        stderr,
        "depotd (pid %d) had not exited 120 s after signal %d; killed. Its log's end:\n%s\n", pid_,
        sig, log.substr(log.size() > 4000 ? log.size() - 4000 : 0).c_str());
    ::kill(pid_, SIGKILL);
    status = Wait(pid_);
  }
  pid_ = -1;
  return status;
}

Client Daemon::Connect() const {
  auto c = Client::Connect({socket_, "test"});
  INFO(c.status().ToString());
  REQUIRE(c.ok());
  return *c;
}

std::string Daemon::Log() const {
  std::ifstream in(dir_ + "/depotd.log");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

pid_t Spawn(std::function<int()> fn) {
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    // The test framework's crash handlers must not report a child's fault as the parent's.
    for (int sig : {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL, SIGTERM, SIGINT})
      ::signal(sig, SIG_DFL);
    int rc = 99;
    try {
      rc = fn();
    } catch (...) {
      rc = 98;
    }
    // _Exit flushes nothing: what the child printed would be lost.
    std::cout.flush();
    std::fflush(nullptr);
    std::_Exit(rc);
  }
  return pid;
}

int Wait(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

int RunChild(std::function<int()> fn) {
  int status = Wait(Spawn(std::move(fn)));
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int Run(const std::vector<std::string>& argv, std::string* out, std::string* err,
        const std::string& input) {
  std::string dir = TempDir();
  std::string in_path = dir + "/in", out_path = dir + "/out", err_path = dir + "/err";
  std::ofstream(in_path) << input;
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::dup2(::open(in_path.c_str(), O_RDONLY), STDIN_FILENO);
    ::dup2(::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644), STDOUT_FILENO);
    ::dup2(::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644), STDERR_FILENO);
    std::vector<char*> cargv;
    for (auto a : argv) cargv.push_back(::strdup(a.c_str()));
    cargv.push_back(nullptr);
    ::execvp(cargv[0], cargv.data());
    std::_Exit(127);
  }
  int status = Wait(pid);
  auto slurp = [](const std::string& p) {
    std::ifstream f(p);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  };
  if (out) *out = slurp(out_path);
  if (err) *err = slurp(err_path);
  std::filesystem::remove_all(dir);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

bool WaitFor(const std::function<bool()>& ready, std::chrono::milliseconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (ready()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return ready();
}

int Ctl(const Daemon& d, std::vector<std::string> args, std::string* out) {
  args.insert(args.begin(), {DEPOTCTL_PATH, "--socket", d.socket()});
  std::string err;
  int rc = Run(args, out, &err);
  *out += err;
  return rc;
}

CreateOptions Named(std::string name, bool evictable) {
  CreateOptions o;
  o.name = std::move(name);
  o.evictable = evictable;
  return o;
}

StoreStatus StatusOf(Client& c) {
  auto s = c.GetStatus();
  REQUIRE(s.ok());
  return *s;
}

bool Holds(const Object& o, const std::vector<std::byte>& bytes) {
  return o.size() == bytes.size() &&
         std::memcmp(o.frame(0).data(), bytes.data(), bytes.size()) == 0;
}

uint64_t Requests(Client& c, const std::string& name) {
  auto clients = c.Clients();
  REQUIRE(clients.ok());
  for (const ClientInfo& i : *clients) {
    if (i.pid == ::getpid() && i.name == name) return i.requests;
  }
  FAIL("no connection named " << name);
  return 0;
}

ScopedMaker SpawnScopedMaker(const std::string& socket, const std::vector<std::byte>& bytes) {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  pid_t pid = Spawn([&] {
    auto c = Client::Connect({.socket_path = socket,
                              .client_name = "maker",
                              .reconnect_wait = std::chrono::milliseconds(0)});
    if (!c.ok()) return 1;
    CreateOptions o;
    o.owner_scoped = true;
    auto guid = c->Put(bytes, o);
    if (!guid.ok() || ::write(fds[1], &*guid, sizeof *guid) != sizeof *guid) return 2;
    ::pause();
    return 0;
  });
  ::close(fds[1]);
  ScopedMaker maker{pid, {}};
  pollfd p{fds[0], POLLIN, 0};
  bool ready = ::poll(&p, 1, 10000) == 1;
  bool read = ready && ::read(fds[0], &maker.guid, sizeof maker.guid) == sizeof maker.guid;
  ::close(fds[0]);
  REQUIRE(read);
  return maker;
}

std::vector<std::byte> Pattern(size_t size, uint32_t seed) {
  std::vector<std::byte> v(size);
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < size; ++i) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    v[i] = static_cast<std::byte>(x);
  }
  return v;
}

Channel::Channel() { REQUIRE(::pipe(fds_) == 0); }
Channel::~Channel() {
  ::close(fds_[0]);
  ::close(fds_[1]);
}
void Channel::Send(const std::string& line) {
  std::string l = line + "\n";
  ssize_t n = ::write(fds_[1], l.data(), l.size());
  (void)n;
}
std::string Channel::Receive() {
  std::string line;
  char c;
  while (::read(fds_[0], &c, 1) == 1 && c != '\n') line += c;
  return line;
}

uint64_t ResidentBytes() {
  std::ifstream in("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  in >> size >> resident;
  return resident * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
}

std::string MappingOf(const void* p) {
  auto addr = reinterpret_cast<uintptr_t>(p);
  std::ifstream in("/proc/self/maps");
  std::string line;
  while (std::getline(in, line)) {
    uintptr_t lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx", &lo, &hi) == 2 && addr >= lo && addr < hi) return line;
  }
  return "";
}

uint64_t ResidentOf(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string key;
  while (in >> key) {
    if (key == "VmRSS:") {
      uint64_t kib = 0;
      in >> kib;
      return kib << 10;
    }
  }
  return 0;
}

}  // namespace depot::test
