// Tests for sizes as people write them (common/units.h) and depotd's command line
// (daemon/options.h).
#include "daemon/options.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "common/units.h"

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
  auto small_shm = ParseOptions({}, 16 * kGiB, 2 * kGiB);
  REQUIRE(small_shm.ok());
  CHECK(small_shm->capacity == 2 * kGiB);
  CHECK(small_shm->socket_path == DefaultSocketPath());
  CHECK(small_shm->segment_size == 64 * kMiB);
  CHECK_FALSE(small_shm->prefault);
  CHECK(small_shm->log_level == "info");
  CHECK_FALSE(small_shm->help);
  CHECK_FALSE(small_shm->version);

  auto large_shm = ParseOptions({}, 16 * kGiB, 100 * kGiB);
  REQUIRE(large_shm.ok());
  CHECK(large_shm->capacity == 4 * kGiB);
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
  CHECK_FALSE(ParseOptions({"--prefault=yes"}, 16 * kGiB, 8 * kGiB).ok());
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
  check({"--frobnicate"}, "--frobnicate");
  check({"--socket", "/tmp/s", "extra"}, "extra");
  check({"--socket"}, "--socket");
  check({"--capacity"}, "--capacity");
  check({"--log-level"}, "--log-level");
  check({"--socket="}, "--socket");
}

TEST_CASE("DefaultSocketPath honours XDG_RUNTIME_DIR", "[options]") {
  const std::string fallback = "/tmp/depot-" + std::to_string(::getuid()) + "/depot.sock";
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

}  // namespace
}  // namespace depot
