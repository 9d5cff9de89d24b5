#include "depot/guid.h"

#include <pthread.h>
#include <sys/random.h>

#include <cerrno>
#include <cstring>

namespace depot {
namespace {

// Bytes from the kernel's random source (a CSPRNG), taken a few KiB at a time: one system call
// per 256 GUIDs rather than one each. Each thread has its own, so no lock is taken.
struct RandomPool {
  uint8_t bytes[4096];
  size_t used = sizeof bytes;  // all used: the first call fills it
};
thread_local RandomPool pool;

// A child of fork() starts with a copy of its parent's pool: it must not hand out the bytes its
// parent hands out too (the same GUIDs in two processes), so it drops them. Only the thread that
// forked lives on in the child, so its pool is the only one to drop.
void DropPoolInChild() { pool.used = sizeof pool.bytes; }

void Refill() {
  size_t got = 0;
  while (got < sizeof pool.bytes) {
    // Blocks only until the kernel's pool is first initialised, early at boot; EINTR is retried.
    ssize_t n = ::getrandom(pool.bytes + got, sizeof pool.bytes - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
  }
  pool.used = 0;
}

}  // namespace

Guid Guid::Random() {
  static const int registered = ::pthread_atfork(nullptr, nullptr, DropPoolInChild);
  (void)registered;
  uint64_t bits[2];
  if (pool.used + sizeof bits > sizeof pool.bytes) Refill();
  std::memcpy(bits, pool.bytes + pool.used, sizeof bits);
  // Bytes handed out are not kept: what a later reader of this memory finds says nothing.
  std::memset(pool.bytes + pool.used, 0, sizeof bits);
  pool.used += sizeof bits;
  return FromRandomBits(bits[0], bits[1]);
}

}  // namespace depot
