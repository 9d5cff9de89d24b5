// Tests for sizes as people write them (common/units.h) and depotd's configuration: command
// line and config file (daemon/options.h).
#include "daemon/options.h"

#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "common/system_memory.h"
#include "depot/units.h"

namespace depot {
namespace {

using Catch::Matchers::Contains;

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = kKiB << 10;
constexpr uint64_t kGiB = kMiB << 10;

// Sets or unsets XDG_RUNTIME_DIR for one test and restores what was there.
class XdgRuntimeDir {
 public:
  explicit XdgRuntimeDir(const char* value) {
    if (const char* old = std::getenv("XDG_RUNTIME_DIR")) saved_ = old;
    if (value != nullptr) {
      ::setenv("XDG_RUNTIME_DIR", value, 1);
    } else {
      ::unsetenv("XDG_RUNTIME_DIR");
    }
  }
  ~XdgRuntimeDir() {
    if (saved_) {
      ::setenv("XDG_RUNTIME_DIR", saved_->c_str(), 1);
    } else {
      ::unsetenv("XDG_RUNTIME_DIR");
    }
  }
  XdgRuntimeDir(const XdgRuntimeDir&) = delete;
  XdgRuntimeDir& operator=(const XdgRuntimeDir&) = delete;

 private:
  std::optional<std::string> saved_;
};

TEST_CASE("ParseSize accepts numbers, binary suffixes and percentages", "[units]") {
  CHECK(ParseSize("4096", 0) == 4096u);
  CHECK(ParseSize("512MiB", 0) == 512 * kMiB);
  CHECK(ParseSize("8GiB", 0) == 8 * kGiB);
  CHECK(ParseSize("1g", 0) == kGiB);
  CHECK(ParseSize("64K", 0) == 64 * kKiB);
  CHECK(ParseSize("2mb", 0) == 2 * kMiB);  // MB means MiB here, as the header says
  CHECK(ParseSize("1TiB", 0) == (uint64_t{1} << 40));
  CHECK(ParseSize("1.5GiB", 0) == kGiB + kGiB / 2);
  CHECK(ParseSize("25%", 16 * kGiB) == 4 * kGiB);
  CHECK(ParseSize("100%", 12345) == 12345u);
  CHECK(ParseSize("50%", 1000) == 500u);
}

TEST_CASE("ParseSize rejects malformed, zero and out-of-range sizes", "[units]") {
  for (const char* text :
       {"", "abc", "0", "0GiB", "-5", "-1GiB", "12XB", "150%", "GiB", "0.1", "1e30", "inf"}) {
    CAPTURE(text);
    CHECK_FALSE(ParseSize(text, 16 * kGiB).has_value());
  }
  CHECK_FALSE(ParseSize("25%", 0).has_value());  // 25% of nothing is zero
}

// "nan" parses as a double that is neither <= 0 nor out of range, so it must be caught on its
// own; converting NaN to an integer is undefined behaviour.
TEST_CASE("ParseSize rejects NaN", "[units]") {
  CHECK_FALSE(ParseSize("nan", 16 * kGiB).has_value());
  CHECK_FALSE(ParseSize("nan%", 16 * kGiB).has_value());
  CHECK_FALSE(ParseSize("nanGiB", 16 * kGiB).has_value());
  CHECK_FALSE(ParseSize("-nan", 16 * kGiB).has_value());
}

TEST_CASE("FormatBytes prints one decimal above a KiB", "[units]") {
  CHECK(FormatBytes(0) == "0 B");
  CHECK(FormatBytes(512) == "512 B");
  CHECK(FormatBytes(1023) == "1023 B");
  CHECK(FormatBytes(1024) == "1.0 KiB");
  CHECK(FormatBytes(64 * kKiB) == "64.0 KiB");
  CHECK(FormatBytes(kGiB + kGiB / 2) == "1.5 GiB");
  CHECK(FormatBytes(uint64_t{3} << 40) == "3.0 TiB");
  CHECK(FormatBytes(uint64_t{2048} << 40) == "2048.0 TiB");  // no unit past TiB
}

TEST_CASE("ParseOptions defaults", "[options]") {
  auto little_memory = ParseOptions({}, 16 * kGiB, 2 * kGiB);
  REQUIRE(little_memory.ok());
  CHECK(little_memory->capacity == 2 * kGiB);
  CHECK(little_memory->socket_path == DefaultSocketPath());
  CHECK(little_memory->segment_size == 64 * kMiB);
  CHECK_FALSE(little_memory->prefault);
  CHECK(little_memory->keep_warm == 2 * kGiB);
  CHECK(little_memory->log_level == "info");
  CHECK_FALSE(little_memory->help);
  CHECK_FALSE(little_memory->version);

  auto ample_memory = ParseOptions({}, 16 * kGiB, 100 * kGiB);
  REQUIRE(ample_memory.ok());
  CHECK(ample_memory->capacity == 4 * kGiB);
}

TEST_CASE("ParseCgroupMemoryMax reads bytes, and max as no limit", "[options]") {
  CHECK(ParseCgroupMemoryMax("1073741824\n") == uint64_t{1} << 30);
  CHECK_FALSE(ParseCgroupMemoryMax("max\n").has_value());
  CHECK_FALSE(ParseCgroupMemoryMax("").has_value());
  CHECK_FALSE(ParseCgroupMemoryMax("12 34").has_value());
  CHECK(AvailableMemory() > 0);
  CHECK(AvailableMemory() <= PhysicalMemory());
}

TEST_CASE("ParseShmemHugePagePolicy reads the bracketed word, and nothing from anything else",
          "[options]") {
  CHECK(ParseShmemHugePagePolicy("always within_size advise [never] deny force\n") == "never");
  CHECK(ParseShmemHugePagePolicy("[always] within_size advise never deny force\n") == "always");
  CHECK(ParseShmemHugePagePolicy("always inherit [within_size] advise never\n") == "within_size");
  CHECK(ParseShmemHugePagePolicy("").empty());
  CHECK(ParseShmemHugePagePolicy("never").empty());
  CHECK(ParseShmemHugePagePolicy("] never [").empty());
}

TEST_CASE("ParseOptions takes values after a space or an equals sign", "[options]") {
  auto spaced = ParseOptions({"--socket", "/run/x/d.sock", "--capacity", "1GiB", "--segment-size",
                              "8MiB", "--log-level", "debug"},
                             16 * kGiB, 8 * kGiB);
  REQUIRE(spaced.ok());
  CHECK(spaced->socket_path == "/run/x/d.sock");
  CHECK(spaced->capacity == kGiB);
  CHECK(spaced->segment_size == 8 * kMiB);
  CHECK(spaced->log_level == "debug");

  auto joined = ParseOptions({"--socket=/tmp/a=b.sock", "--capacity=512MiB", "--log-level=warn"},
                             16 * kGiB, 8 * kGiB);
  REQUIRE(joined.ok());
  CHECK(joined->socket_path == "/tmp/a=b.sock");
  CHECK(joined->capacity == 512 * kMiB);
  CHECK(joined->log_level == "warn");
}

TEST_CASE("ParseOptions: a capacity percentage is of physical memory", "[options]") {
  auto r = ParseOptions({"--capacity", "25%"}, 16 * kGiB, 1 * kGiB);
  REQUIRE(r.ok());
  CHECK(r->capacity == 4 * kGiB);
}

TEST_CASE("ParseOptions: switches", "[options]") {
  auto r = ParseOptions({"--prefault", "--version", "--help"}, 16 * kGiB, 8 * kGiB);
  REQUIRE(r.ok());
  CHECK(r->prefault);
  CHECK(r->version);
  CHECK(r->help);
  CHECK(ParseOptions({"-h"}, 16 * kGiB, 8 * kGiB)->help);
  CHECK(ParseOptions({"--prefault=yes"}, 16 * kGiB, 8 * kGiB)->prefault);
  CHECK_FALSE(ParseOptions({"--prefault=off"}, 16 * kGiB, 8 * kGiB)->prefault);
  CHECK_FALSE(ParseOptions({"--prefault=maybe"}, 16 * kGiB, 8 * kGiB).ok());
  CHECK_FALSE(
      ParseOptions({"--eviction", "off"}, 16 * kGiB, 8 * kGiB).ok());  // "off" is not a flag
  CHECK_FALSE(ParseOptions({"--eviction=off"}, 16 * kGiB, 8 * kGiB)->eviction);
  CHECK(ParseOptions({"--keep-warm", "0"}, 16 * kGiB, 8 * kGiB)->keep_warm == 0);
  CHECK(ParseOptions({"--keep-warm", "25%"}, 16 * kGiB, 8 * kGiB)->keep_warm == 4 * kGiB);
}

TEST_CASE("ParseOptions rejects bad input, naming the flag", "[options]") {
  auto check = [](std::vector<std::string> args, const std::string& named) {
    CAPTURE(args);
    auto r = ParseOptions(args, 16 * kGiB, 8 * kGiB);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().IsInvalidArgument());
    CHECK_THAT(r.status().message(), Contains(named));
  };
  check({"--log-level", "loud"}, "--log-level");
  check({"--log-level=loud"}, "loud");
  check({"--capacity", "lots"}, "--capacity");
  check({"--capacity", "150%"}, "--capacity");
  check({"--segment-size", "0"}, "--segment-size");
  check({"--keep-warm", "a lot"}, "--keep-warm");
  check({"--frobnicate"}, "--frobnicate");
  check({"--socket", "/tmp/s", "extra"}, "extra");
  check({"--max-frames", "65"}, "--max-frames");
  check({"--max-metadata", "1MiB"}, "--max-metadata");
  check({"--max-message-size", "1GiB"}, "--max-message-size");
  check({"--socket-mode", "0999"}, "--socket-mode");
  check({"--device-capacity", "lots"}, "--device-capacity");
  check({"-capacity", "1GiB"}, "-capacity");
  check({"--socket"}, "--socket");
  check({"--capacity"}, "--capacity");
  check({"--log-level"}, "--log-level");
  check({"--socket="}, "--socket");
}

TEST_CASE("DefaultSocketPath honours XDG_RUNTIME_DIR", "[options]") {
  const std::string fallback = DefaultSocketPathFor("", ::getuid());
  {
    XdgRuntimeDir env("/run/user/4321");
    CHECK(DefaultSocketPath() == "/run/user/4321/depot/depot.sock");
    CHECK(ParseOptions({}, kGiB, kGiB)->socket_path == "/run/user/4321/depot/depot.sock");
  }
  {
    XdgRuntimeDir env("");
    CHECK(DefaultSocketPath() == fallback);
  }
  {
    XdgRuntimeDir env(nullptr);
    CHECK(DefaultSocketPath() == fallback);
  }
}

TEST_CASE("without XDG_RUNTIME_DIR the default is the user's own /run/user/$UID, else /tmp",
          "[options]") {
  char tmpl[] = "/tmp/depot-run-user-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  const std::string run_user = tmpl;
  const uid_t me = ::getuid();
  const std::string mine = run_user + "/" + std::to_string(me);
  const std::string tmp = "/tmp/depot-" + std::to_string(me) + "/depot.sock";
  // XDG_RUNTIME_DIR wins whatever exists.
  CHECK(DefaultSocketPathFor("/x", me, run_user) == "/x/depot/depot.sock");
  // No runtime directory: /tmp.
  CHECK(DefaultSocketPathFor("", me, run_user) == tmp);
  // The user's own runtime directory.
  REQUIRE(::mkdir(mine.c_str(), 0700) == 0);
  CHECK(DefaultSocketPathFor("", me, run_user) == mine + "/depot/depot.sock");
  // A directory at /run/user/$UID that someone else owns is not the user's runtime directory.
  const uid_t other = me + 1;
  const std::string theirs = run_user + "/" + std::to_string(other);
  REQUIRE(::mkdir(theirs.c_str(), 0700) == 0);  // ours, not `other`'s
  CHECK(DefaultSocketPathFor("", other, run_user) ==
        "/tmp/depot-" + std::to_string(other) + "/depot.sock");
  ::rmdir(theirs.c_str());
  ::rmdir(mine.c_str());
  ::rmdir(run_user.c_str());
}

// Writes `text` to a fresh file and returns its path.
std::string WriteFile(const std::string& text) {
  char tmpl[] = "/tmp/depot-conf-XXXXXX";
  int fd = ::mkstemp(tmpl);
  REQUIRE(fd >= 0);
  REQUIRE(::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()));
  ::close(fd);
  return tmpl;
}

TEST_CASE("A config file sets every key", "[options]") {
  std::string path = WriteFile(R"(# a comment
socket = /run/depot/depot.sock
socket_mode = 0600
socket_group = depot
capacity = 2GiB     # trailing comment
segment_size = 128MiB
hugepages = on
prefault = yes
eviction = off
log_level = debug
max_clients = 16
max_message_size = 8MiB
max_frames = 8
max_metadata = 1KiB
device_capacity = 50%
device_chunk_size = 512MiB
devices = GPU-1,GPU-2
)");
  auto o = ParseOptions({"--config", path}, 16 * kGiB, 8 * kGiB);
  INFO(o.status().ToString());
  REQUIRE(o.ok());
  CHECK(o->config_path == path);
  CHECK(o->socket_path == "/run/depot/depot.sock");
  CHECK(o->socket_mode == 0600);
  CHECK(o->socket_group == "depot");
  CHECK(o->capacity == 2 * kGiB);
  CHECK(o->segment_size == 128 * kMiB);
  CHECK(o->hugepages);
  CHECK(o->prefault);
  CHECK_FALSE(o->eviction);
  CHECK(o->log_level == "debug");
  CHECK(o->max_clients == 16);
  CHECK(o->max_message_size == 8 * kMiB);
  CHECK(o->max_frames == 8);
  CHECK(o->max_metadata == 1 * kKiB);
  CHECK(o->device_capacity == "50%");
  CHECK(o->device_chunk_size == 512 * kMiB);
  CHECK_FALSE(o->all_devices);
  CHECK(o->device_uuids == std::vector<std::string>{"GPU-1", "GPU-2"});
  ::unlink(path.c_str());
}

TEST_CASE("devices reads all, none, or a list of GPU UUIDs", "[options]") {
  auto all = ParseOptions({}, 16 * kGiB, 8 * kGiB);
  CHECK(all->all_devices);
  auto none = ParseOptions({"--devices", "none"}, 16 * kGiB, 8 * kGiB);
  CHECK_FALSE(none->all_devices);
  CHECK(none->device_uuids.empty());
  CHECK(FormatConfig(*none).find("devices = none\n") != std::string::npos);
  auto listed = ParseOptions({"--devices", " GPU-a , GPU-b,"}, 16 * kGiB, 8 * kGiB);
  CHECK(listed->device_uuids == std::vector<std::string>{"GPU-a", "GPU-b"});
  CHECK(FormatConfig(*listed).find("devices = GPU-a,GPU-b\n") != std::string::npos);
  CHECK_FALSE(ParseOptions({"--devices", " , "}, 16 * kGiB, 8 * kGiB).ok());
  // Named as nvidia-smi -L prints them, or never found: not ordinals, not the old MIG form.
  auto ordinal = ParseOptions({"--devices", "0,1"}, 16 * kGiB, 8 * kGiB);
  REQUIRE_FALSE(ordinal.ok());
  CHECK(ordinal.status().message().find("0 is not a GPU UUID") != std::string::npos);
  auto old_mig = ParseOptions({"--devices", "MIG-GPU-5c89852c-d268-c3f3-1b07-005d5ae1dc3f/7/0"},
                              16 * kGiB, 8 * kGiB);
  REQUIRE_FALSE(old_mig.ok());
  CHECK(old_mig.status().message().find("old form") != std::string::npos);
  CHECK(ParseOptions({"--devices", "MIG-5c89852c-d268-c3f3-1b07-005d5ae1dc3f"}, 16 * kGiB, 8 * kGiB)
            .ok());
}

TEST_CASE("Validate refuses keys that cannot go together, before the daemon starts", "[options]") {
  auto ok = ParseOptions({"--prefault"}, 16 * kGiB, 8 * kGiB);
  CHECK(Validate(*ok).ok());
  auto both = ParseOptions({"--prefault", "--namespaces", "per_user"}, 16 * kGiB, 8 * kGiB);
  REQUIRE(both.ok());
  Status st = Validate(*both);
  CHECK(st.IsInvalidArgument());
  CHECK_THAT(st.message(), Contains("namespaces = per_user"));
  auto group = ParseOptions({"--socket-group", "no-such-group-here"}, 16 * kGiB, 8 * kGiB);
  CHECK_THAT(Validate(*group).message(), Contains("no such group"));
}

TEST_CASE("Flags override the config file wherever they stand", "[options]") {
  std::string path = WriteFile("capacity = 1GiB\nlog_level = warn\n");
  auto o = ParseOptions({"--capacity", "3GiB", "--config", path}, 16 * kGiB, 8 * kGiB);
  REQUIRE(o.ok());
  CHECK(o->capacity == 3 * kGiB);  // the flag wins even before --config
  CHECK(o->log_level == "warn");   // the file wins over the default
  ::unlink(path.c_str());
}

TEST_CASE("A bad config file names the file, the line and the key", "[options]") {
  auto check = [](const std::string& text, const std::string& line, const std::string& what) {
    std::string path = WriteFile(text);
    auto o = ParseOptions({"--config", path}, 16 * kGiB, 8 * kGiB);
    REQUIRE_FALSE(o.ok());
    CHECK(o.status().IsInvalidArgument());
    CHECK_THAT(o.status().message(), Contains(path + ":" + line + ":") && Contains(what));
    ::unlink(path.c_str());
  };
  check("# fine\ncapacity = 1GiB\ncapacity = lots\n", "3", "capacity = lots");
  check("frobnicate = 1\n", "1", "unknown key `frobnicate`");
  check("\n\nthis line has no equals sign\n", "3", "expected `key = value`");
  check("max_frames = 1000\n", "1", "max_frames");
  check("log_level = loud\n", "1", "log_level");
  auto missing = ParseOptions({"--config", "/nonexistent/depotd.conf"}, 16 * kGiB, 8 * kGiB);
  CHECK_THAT(missing.status().message(), Contains("/nonexistent/depotd.conf"));
}

TEST_CASE("FormatConfig prints a file that reads back to the same configuration", "[options]") {
  auto o = ParseOptions({"--capacity", "3GiB", "--prefault", "--socket-group", "adm",
                         "--max-frames", "9", "--devices", "none"},
                        16 * kGiB, 8 * kGiB);
  REQUIRE(o.ok());
  std::string text = FormatConfig(*o);
  CHECK_THAT(text, Contains("capacity = 3221225472\n") && Contains("prefault = on\n"));
  std::string path = WriteFile(text);
  auto back = ParseOptions({"--config", path}, 16 * kGiB, 8 * kGiB);
  REQUIRE(back.ok());
  CHECK(FormatConfig(*back) == text);
  ::unlink(path.c_str());
}

TEST_CASE("ReadLogLevel reads only the log level", "[options]") {
  std::string path = WriteFile("capacity = 1GiB\nlog_level = error\n");
  CHECK(*ReadLogLevel(path) == "error");
  ::unlink(path.c_str());
}

TEST_CASE("config/depotd.conf documents every key at its default", "[options]") {
  std::ifstream in(DEPOT_SOURCE_DIR "/config/depotd.conf");
  REQUIRE(in);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string defaults;  // every key's line, uncommented
  for (const ConfigKey& k : ConfigKeys()) {
    std::string line =
        std::string("# ") + k.name + " =" + (*k.default_text ? " " : "") + k.default_text + "\n";
    INFO(k.name);
    CHECK_THAT(text, Contains(line));
    if (std::string_view(k.name) != "socket") defaults += line.substr(2);
  }
  // The documented defaults are the real ones.
  std::string path = WriteFile(defaults);
  auto from_file = ParseOptions({"--config", path}, 16 * kGiB, 100 * kGiB);
  auto built_in = ParseOptions({}, 16 * kGiB, 100 * kGiB);
  REQUIRE(from_file.ok());
  built_in->config_path = from_file->config_path;
  CHECK(FormatConfig(*from_file) == FormatConfig(*built_in));
  ::unlink(path.c_str());
}

TEST_CASE("docs/configuration.md's table lists every key at its default", "[options]") {
  std::ifstream in(DEPOT_SOURCE_DIR "/docs/configuration.md");
  REQUIRE(in);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (const ConfigKey& k : ConfigKeys()) {
    INFO(k.name);
    CHECK_THAT(text, Contains(std::string("| `") + k.name + "` | `" + k.default_text + "` |"));
  }
}

}  // namespace
}  // namespace depot
