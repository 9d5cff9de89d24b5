#include "common/fork_generation.h"

#include <pthread.h>

#include <atomic>

namespace depot {
namespace {

std::atomic<uint64_t> generation{0};

// Runs in the child, which has one thread: nothing else reads it yet.
void InChild() { generation.fetch_add(1, std::memory_order_relaxed); }

}  // namespace

uint64_t ForkGeneration() {
  // pthread_atfork fails only without memory for the handler, and then forks go uncounted; there
  // is nothing better to do than carry on.
  [[maybe_unused]] static const bool registered = ::pthread_atfork(nullptr, nullptr, InChild) == 0;
  return generation.load(std::memory_order_relaxed);
}

}  // namespace depot
