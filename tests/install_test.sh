#!/usr/bin/env bash
# Installs depot into a temporary prefix and uses it as an operator and a developer would: the
# expected files are there; three consumers build against the installed files only (CMake with
# depot::depot, CMake with depot::depot_static, pkg-config) and put and get bytes through the
# installed depotd; `cpack -G DEB` makes a package that holds it all and has dependencies.
#
# Usage: install_test.sh BUILD_DIR SOURCE_DIR [SANITIZER]
# Exits 0 when all holds, 77 (skipped) in a sanitizer build, 1 on the first failure, saying what.
set -euo pipefail

if (($# < 2)); then
  echo "usage: $0 BUILD_DIR SOURCE_DIR [SANITIZER]" >&2
  exit 2
fi
build=$(realpath "$1")
source=$(realpath "$2")
sanitizer=${3:-}
if [[ -n $sanitizer ]]; then
  echo "SKIP: not run in a sanitizer build (DEPOT_SANITIZE=$sanitizer): programs built against it need the sanitizer runtime"
  exit 77
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/depot-install-test.XXXXXX")
prefix=$tmp/prefix
daemon_pid=""
passed=0

cleanup() {
  local rc=$?
  if [[ -n $daemon_pid ]]; then
    kill "$daemon_pid" 2>/dev/null || true
    wait "$daemon_pid" 2>/dev/null || true
  fi
  if ((rc == 0)); then
    rm -rf "$tmp"
  else
    echo "(kept $tmp for inspection)" >&2
  fi
}
trap cleanup EXIT

step() { echo; echo "== $*"; }
ok() { echo "  ok: $*"; passed=$((passed + 1)); }
fail() { echo "FAIL: $*" >&2; exit 1; }
# Runs a command quietly, its output kept in a log that is shown when it fails.
run_logged() {
  local what=$1 log=$tmp/$2.log
  shift 2
  "$@" >"$log" 2>&1 || { cat "$log" >&2; fail "$what (command: $*)"; }
}

# Pipelines here end in `grep >/dev/null`, never `grep -q`: under pipefail, a grep -q that stops
# reading early fails the pipeline when its writer dies of SIGPIPE.

# What the source tree has for the service; each is expected installed and packaged.
units=()
for f in "$source"/systemd/*.service "$source"/systemd/*.socket; do
  [[ -f $f ]] && units+=("$(basename "$f")")
done
sysusers=$(find "$source/systemd" -type f -path '*sysusers*' -print -quit 2>/dev/null || true)
tmpfiles=$(find "$source/systemd" -type f -path '*tmpfiles*' -print -quit 2>/dev/null || true)
configs=()
for f in "$source"/config/*.conf; do
  [[ -f $f ]] && configs+=("$(basename "$f")")
done

step "cmake --install $build --prefix $prefix"
run_logged "cmake --install failed" install cmake --install "$build" --prefix "$prefix"
expected=(bin/depotctl bin/depotd lib/libdepot.so lib/libdepot.so.0 lib/libdepot.a
          include/depot/client.h include/depot/device_pool_info.h include/depot/guid.h include/depot/object.h
          include/depot/status.h include/depot/store_status.h include/depot/units.h
          lib/cmake/depot/depotConfig.cmake lib/cmake/depot/depotConfigVersion.cmake
          lib/cmake/depot/depotTargets.cmake lib/pkgconfig/depot.pc)
for u in "${units[@]}"; do expected+=("lib/systemd/system/$u"); done
[[ -n $sysusers ]] && expected+=(lib/sysusers.d/depot.conf)
[[ -n $tmpfiles ]] && expected+=(lib/tmpfiles.d/depot.conf)
for f in "$source"/systemd/drop-ins/*.conf; do
  [[ -f $f ]] && expected+=("share/depot/depotd.service.d/$(basename "$f")")
done
for c in "${configs[@]}"; do expected+=("etc/depot/$c"); done
for f in "${expected[@]}"; do
  [[ -e $prefix/$f ]] || fail "not installed: $prefix/$f"
done
ok "${#expected[@]} expected files installed (systemd units: ${#units[@]}, configuration files: ${#configs[@]})"
real_so=$(readlink -f "$prefix/lib/libdepot.so")
[[ $real_so == "$prefix"/lib/libdepot.so.*.*.* ]] || fail "libdepot.so does not lead to a versioned file: $real_so"
soname=$(objdump -p "$real_so" | awk '$1 == "SONAME" {print $2}')
[[ $soname == libdepot.so.0 ]] || fail "SONAME of libdepot is '$soname', expected libdepot.so.0"
ok "libdepot.so -> $(basename "$real_so"), SONAME $soname"
grep -q "^prefix=$prefix\$" "$prefix/lib/pkgconfig/depot.pc" || fail "depot.pc does not name the prefix $prefix"
ok "depot.pc names the install prefix"

# A consumer compiles with the installed headers alone; none of them reaches the project's private
# dependencies (FlatBuffers, fmt, Boost, spdlog) or its private headers.
step "public headers stand alone"
headers=()
for h in "$prefix"/include/depot/*.h; do
  name=depot/$(basename "$h")
  headers+=("$name")
  deps=$(echo "#include <$name>" | g++ -std=c++20 -I"$prefix/include" -x c++ -M - 2>"$tmp/header.log") ||
    { cat "$tmp/header.log" >&2; fail "$name does not compile with only $prefix/include"; }
  if grep -E -o '[^ ]*/(flatbuffers|fmt|boost|spdlog|proto|common)/[^ ]*' <<<"$deps"; then
    fail "$name includes a private dependency (above)"
  fi
done
ok "each of ${headers[*]} compiles on its own, reaching no private dependency"

# The consumer: connects to the socket in argv[1], puts bytes (a small object that travels in the
# request and a 1 MiB one written into shared memory), gets them back and compares.
mkdir -p "$tmp/consumer"
cat >"$tmp/consumer/main.cc" <<'EOF'
#include <depot/client.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

static int Check(depot::Client& client, const std::vector<std::byte>& bytes) {
  depot::Result<depot::Guid> id = client.Put(std::span(bytes));
  if (!id.ok()) {
    std::fprintf(stderr, "put: %s\n", id.status().ToString().c_str());
    return 1;
  }
  depot::Result<depot::Object> object = client.Get(*id, std::chrono::milliseconds(2000));
  if (!object.ok()) {
    std::fprintf(stderr, "get: %s\n", object.status().ToString().c_str());
    return 1;
  }
  std::span<const std::byte> view = object->frame(0);
  if (view.size() != bytes.size() || std::memcmp(view.data(), bytes.data(), bytes.size()) != 0) {
    std::fprintf(stderr, "got %zu bytes back, not the %zu put\n", view.size(), bytes.size());
    return 1;
  }
  if (depot::Status deleted = client.Delete(*id); !deleted.ok()) {
    std::fprintf(stderr, "delete: %s\n", deleted.ToString().c_str());
    return 1;
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s SOCKET\n", argv[0]);
    return 2;
  }
  depot::ConnectOptions options;
  options.socket_path = argv[1];
  options.client_name = "install_test consumer";
  depot::Result<depot::Client> client = depot::Client::Connect(options);
  if (!client.ok()) {
    std::fprintf(stderr, "connect: %s\n", client.status().ToString().c_str());
    return 1;
  }
  std::string text = "put by a consumer of the installed libdepot";
  std::vector<std::byte> small(reinterpret_cast<const std::byte*>(text.data()),
                               reinterpret_cast<const std::byte*>(text.data()) + text.size());
  std::vector<std::byte> large(1 << 20);
  for (size_t i = 0; i < large.size(); ++i) large[i] = static_cast<std::byte>(i * 7 + 1);
  if (Check(*client, small) != 0 || Check(*client, large) != 0) return 1;
  std::printf("success: put and got back %zu and %zu bytes\n", small.size(), large.size());
  return 0;
}
EOF
cat >"$tmp/consumer/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.16)
project(depot_consumer LANGUAGES CXX)
find_package(depot 0 REQUIRED)
message(STATUS "depot_DIR: ${depot_DIR}")
add_executable(consumer main.cc)
target_link_libraries(consumer PRIVATE depot::${DEPOT_TARGET})
EOF

for target in depot depot_static; do
  step "consumer with find_package(depot) and depot::$target"
  dir=$tmp/build-$target
  run_logged "configuring the consumer of depot::$target failed" configure-$target \
    cmake -S "$tmp/consumer" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$prefix" -DDEPOT_TARGET=$target
  grep -q "depot_DIR: $prefix/lib/cmake/depot" "$tmp/configure-$target.log" ||
    fail "find_package(depot) did not find $prefix (see $tmp/configure-$target.log)"
  run_logged "building the consumer of depot::$target failed" build-$target \
    cmake --build "$dir" -j1
  ok "built $dir/consumer against $prefix/lib/cmake/depot"
done
ldd "$tmp/build-depot/consumer" | grep "libdepot.so.0 => $prefix/lib/libdepot.so.0" >/dev/null ||
  { ldd "$tmp/build-depot/consumer"; fail "the depot::depot consumer does not load $prefix/lib/libdepot.so.0"; }
ok "the depot::depot consumer loads $prefix/lib/libdepot.so.0"
if ldd "$tmp/build-depot_static/consumer" | grep -E 'libdepot|libfmt|libflatbuffers|libboost'; then
  fail "the depot::depot_static consumer loads the shared libraries above"
fi
ok "the depot::depot_static consumer needs no libdepot.so, fmt, FlatBuffers or Boost"

step "consumer with pkg-config depot"
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
flags=$(pkg-config --cflags --libs depot) || fail "pkg-config --cflags --libs depot failed"
echo "  pkg-config --cflags --libs depot: $flags"
# shellcheck disable=SC2086  # the flags are words
run_logged "compiling with pkg-config's flags failed" build-pkg-config \
  g++ -std=c++20 -Wall -Wextra -o "$tmp/consumer-pkg-config" "$tmp/consumer/main.cc" $flags
ok "compiled $tmp/consumer-pkg-config"

step "installed depotd on a temporary socket"
socket=$tmp/run/depot.sock
"$prefix/bin/depotd" --socket "$socket" --capacity 64MiB >"$tmp/depotd.log" 2>&1 &
daemon_pid=$!
# Polls until a client gets an answer (the installed depotctl, found beside its library through
# its RUNPATH): up to 10 s, failing at once if the daemon exits.
for ((i = 0; ; i++)); do
  if "$prefix/bin/depotctl" --socket "$socket" status >"$tmp/status.log" 2>&1; then break; fi
  if ! kill -0 "$daemon_pid" 2>/dev/null; then
    cat "$tmp/depotd.log" >&2
    daemon_pid=""
    fail "the installed depotd exited (its log is above)"
  fi
  if ((i >= 100)); then
    cat "$tmp/status.log" "$tmp/depotd.log" >&2
    fail "the installed depotd did not answer on $socket within 10 s"
  fi
  sleep 0.1
done
ok "depotd (pid $daemon_pid) answers; the installed depotctl runs without LD_LIBRARY_PATH"

step "consumers against the installed depotd"
for consumer in "$tmp/build-depot/consumer" "$tmp/build-depot_static/consumer" \
                "$tmp/consumer-pkg-config"; do
  # The pkg-config consumer has no RUNPATH: it finds libdepot.so.0 as a program would after ldconfig.
  out=$(LD_LIBRARY_PATH=$prefix/lib "$consumer" "$socket" 2>&1) ||
    { echo "$out" >&2; fail "$consumer failed"; }
  [[ $out == success:* ]] || { echo "$out" >&2; fail "$consumer did not print success"; }
  ok "${consumer#"$tmp"/}: $out"
done

step "cpack -G DEB: depot, libdepot0, libdepot-dev, python3-depot"
run_logged "cpack -G DEB failed" cpack bash -c "cd '$build' && cpack -G DEB -B '$tmp/pkg'"
packages=(depot libdepot0 libdepot-dev)
# The Python package exists when the binding was built.
[[ -d $build/python/depot ]] && packages+=(python3-depot)
declare -A deb
for p in "${packages[@]}"; do
  found=("$tmp/pkg/${p}_"*.deb)
  [[ -f ${found[0]} ]] || { ls "$tmp/pkg" >&2; fail "cpack wrote no ${p}_*.deb"; }
  deb[$p]=${found[0]}
  dpkg-deb --contents "${deb[$p]}" | awk '$1 !~ /^d/ {print $6}' | sed 's|^\./|/|' >"$tmp/contents-$p"
done
ok "built ${packages[*]}"

# Each package holds what it should, and no path is in two packages.
expect() {
  local p=$1
  shift
  for f in "$@"; do
    grep -qx -- "$f" "$tmp/contents-$p" || { cat "$tmp/contents-$p" >&2; fail "$p lacks $f"; }
  done
}
daemon_files=(/usr/bin/depotd /usr/bin/depotctl /usr/share/man/man8/depotd.8.gz
              /usr/share/man/man1/depotctl.1.gz /usr/share/man/man5/depotd.conf.5.gz
              /usr/share/bash-completion/completions/depotctl)
for u in "${units[@]}"; do daemon_files+=("/usr/lib/systemd/system/$u"); done
[[ -n $sysusers ]] && daemon_files+=(/usr/lib/sysusers.d/depot.conf)
[[ -n $tmpfiles ]] && daemon_files+=(/usr/lib/tmpfiles.d/depot.conf)
for f in "$source"/systemd/drop-ins/*.conf; do
  [[ -f $f ]] && daemon_files+=("/usr/share/depot/depotd.service.d/$(basename "$f")")
done
for c in "${configs[@]}"; do daemon_files+=("/etc/depot/$c"); done
expect depot "${daemon_files[@]}"
expect libdepot0 /usr/lib/libdepot.so.0
grep -Eqx '/usr/lib/libdepot\.so\.0\.[0-9]+\.[0-9]+' "$tmp/contents-libdepot0" || fail "libdepot0 lacks the versioned libdepot.so.0.X.Y"
expect libdepot-dev /usr/lib/libdepot.so /usr/lib/libdepot.a /usr/include/depot/client.h \
  /usr/include/depot/guid.h /usr/include/depot/object.h /usr/include/depot/status.h \
  /usr/include/depot/units.h /usr/lib/cmake/depot/depotConfig.cmake /usr/lib/pkgconfig/depot.pc
[[ -n ${deb[python3-depot]:-} ]] && expect python3-depot /usr/lib/python3/dist-packages/depot/__init__.py
for p in "${packages[@]}"; do
  expect "$p" "/usr/share/doc/$p/copyright" "/usr/share/doc/$p/changelog.gz"
done
dups=$(cat "${packages[@]/#/$tmp/contents-}" | sort | uniq -d)
[[ -z $dups ]] || fail "in two packages: $dups"
ok "each package holds its files (no path in two); each has its copyright and changelog"

depends() { dpkg-deb -f "${deb[$1]}" Depends; }
[[ $(depends depot) == *libc6* && $(depends depot) == *adduser* && $(depends depot) == *procps* && $(depends depot) == *"libdepot0 (= "* ]] ||
  fail "depot's Depends ($(depends depot)) lacks libc6, adduser, procps or libdepot0"
[[ $(depends libdepot-dev) == *"libdepot0 (= "* ]] || fail "libdepot-dev's Depends ($(depends libdepot-dev)) lacks libdepot0"
[[ -z ${deb[python3-depot]:-} || $(depends python3-depot) == *python3* ]] ||
  fail "python3-depot's Depends ($(depends python3-depot)) lacks python3"
ok "Depends: depot: $(depends depot); libdepot-dev: $(depends libdepot-dev)"
control() { dpkg-deb --ctrl-tarfile "${deb[$1]}" | tar -xO "./$2"; }
for f in postinst prerm postrm; do control depot $f >/dev/null || fail "depot has no $f"; done
for c in "${configs[@]}"; do
  control depot conffiles | grep -x "/etc/depot/$c" >/dev/null || fail "/etc/depot/$c is not a conffile"
done
control libdepot0 triggers | grep -x "activate-noawait ldconfig" >/dev/null || fail "libdepot0 has no ldconfig trigger"
control libdepot0 shlibs | grep "^libdepot 0 libdepot0" >/dev/null || fail "libdepot0 has no shlibs line for libdepot.so.0"
ok "depot: postinst, prerm, postrm, conffiles ${configs[*]:-none}; libdepot0: ldconfig trigger, shlibs"
mkdir "$tmp/unpacked"
dpkg-deb -x "${deb[libdepot-dev]}" "$tmp/unpacked"
grep -q '^prefix=/usr$' "$tmp/unpacked/usr/lib/pkgconfig/depot.pc" || fail "the packaged depot.pc is not for /usr"
nm -C --defined-only "$tmp/unpacked/usr/lib/libdepot.a" 2>/dev/null | grep 'depot::Client::Connect' >/dev/null ||
  fail "the packaged libdepot.a lacks depot::Client::Connect (stripped?)"
ok "the packaged depot.pc names /usr; the packaged libdepot.a keeps its symbols"

# One lintian run over every package: no error; each warning left is one docs/deployment.md explains.
step "lintian"
if command -v lintian >/dev/null; then
  lintian --no-tag-display-limit "${deb[@]}" >"$tmp/lintian.log" 2>&1 || true
  if grep -E '^E: ' "$tmp/lintian.log"; then fail "lintian reports errors (above)"; fi
  while read -r tag; do
    grep -F -- "\`$tag\`" "$source/docs/deployment.md" >/dev/null ||
      { cat "$tmp/lintian.log" >&2; fail "lintian warns $tag, which docs/deployment.md does not explain"; }
  done < <(awk '$1 == "W:" {print $3}' "$tmp/lintian.log" | sort -u)
  ok "lintian: no error; warnings, each explained: $(awk '$1 == "W:" {print $3}' "$tmp/lintian.log" | sort -u | tr '\n' ' ')"
else
  echo "  SKIP: lintian is not installed (scripts/deps installs it): the packages were not linted"
fi

# The packages in a fresh root: dpkg unpacks them there (its database too); the maintainer
# scripts are not run (the root has no shell to run them with), so nothing touches this system's
# users or units. Then the unpacked daemon serves, and the unpacked client, library and module
# talk to it.
step "dpkg --root: the packages unpacked in a fresh root, a client against the installed daemon"
root=$tmp/root
mkdir -p "$root/var/lib/dpkg/info" "$root/var/lib/dpkg/updates"
touch "$root/var/lib/dpkg/status"
run_logged "dpkg --unpack into $root failed" dpkg-root \
  dpkg --root="$root" --force-depends --unpack "${deb[@]}"
for p in "${packages[@]}"; do
  dpkg --root="$root" -s "$p" 2>/dev/null | grep -q '^Status: install ok unpacked' ||
    fail "dpkg --root does not list $p as unpacked"
done
ok "dpkg --root lists ${packages[*]} as unpacked in $root"
kill "$daemon_pid" 2>/dev/null || true
wait "$daemon_pid" 2>/dev/null || true
root_socket=$tmp/root-run/depot.sock
"$root/usr/bin/depotd" --socket "$root_socket" --capacity 64MiB >"$tmp/root-depotd.log" 2>&1 &
daemon_pid=$!
for ((i = 0; ; i++)); do
  "$root/usr/bin/depotctl" --socket "$root_socket" ping --count 1 >/dev/null 2>&1 && break
  kill -0 "$daemon_pid" 2>/dev/null || { cat "$tmp/root-depotd.log" >&2; daemon_pid=""; fail "the unpacked depotd exited"; }
  ((i < 100)) || fail "the unpacked depotd did not answer within 10 s"
  sleep 0.1
done
loaded=$(ldd "$root/usr/bin/depotctl" | awk '$1 == "libdepot.so.0" {print $3}')
[[ -n $loaded && $(realpath "$loaded") == $(realpath "$root/usr/lib/libdepot.so.0") ]] ||
  fail "the unpacked depotctl loads libdepot.so.0 from '$loaded', not from $root/usr/lib"
guid=$(echo "from the packages" | "$root/usr/bin/depotctl" --socket "$root_socket" put - --name packaged)
[[ $("$root/usr/bin/depotctl" --socket "$root_socket" cat "$guid") == "from the packages" ]] ||
  fail "the unpacked depotctl did not get its object back"
"$root/usr/bin/depotctl" --socket "$root_socket" metrics | grep '^depot_objects{state="sealed"} 1$' >/dev/null ||
  fail "the unpacked daemon's metrics do not count the object"
ok "the unpacked depotd serves; the unpacked depotctl (with libdepot0's library) puts, gets and reads metrics"
# shellcheck disable=SC2086
run_logged "compiling against the unpacked libdepot-dev failed" build-root \
  g++ -std=c++20 -o "$tmp/consumer-root" "$tmp/consumer/main.cc" -I"$root/usr/include" -L"$root/usr/lib" -ldepot -pthread
out=$(LD_LIBRARY_PATH=$root/usr/lib "$tmp/consumer-root" "$root_socket" 2>&1) || { echo "$out" >&2; fail "the consumer of the unpacked packages failed"; }
ok "a consumer built against libdepot-dev: $out"
if [[ -n ${deb[python3-depot]:-} ]]; then
  out=$(PYTHONPATH=$root/usr/lib/python3/dist-packages python3 -c "
import depot
c = depot.Client('$root_socket')
g = c.put(b'from python3-depot')
assert bytes(c.get(g).frames[0]) == b'from python3-depot'
print(depot.__file__)" 2>&1) || { echo "$out" >&2; fail "python3-depot did not put and get"; }
  [[ $out == "$root"/* ]] || fail "python imported depot from $out, not from $root"
  ok "python3-depot (from $out) puts and gets"
fi

echo
echo "PASS: $passed checks"
