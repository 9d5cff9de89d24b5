// ForkGeneration counts the forks between the process that first asked and this one: 0 there,
// and one more in each child forked since. What a process builds (threads, locks that one of its
// threads may hold, a socket's conversation, shared-memory slots it owns, CUDA's driver state)
// does not carry into a child forked after it was built: whoever keeps such state notes the
// generation when it builds it and, in a process whose generation differs, uses none of it.
//
// Counting starts at the first call (it registers a pthread_atfork handler), so make the first
// call when building the state it guards. One relaxed atomic load after that.
#ifndef DEPOT_COMMON_FORK_GENERATION_H_
#define DEPOT_COMMON_FORK_GENERATION_H_

#include <cstdint>

namespace depot {

uint64_t ForkGeneration();

// Built with the generation of the process that builds it; forked() in a child forked since.
class ForkMark {
 public:
  ForkMark() : generation_(ForkGeneration()) {}
  bool forked() const { return generation_ != ForkGeneration(); }

 private:
  uint64_t generation_;
};

// Owns a T that a child forked since it was made leaves undestroyed. For a condition variable:
// it counts the parent's threads that waited on it when the child was forked, and glibc's
// pthread_cond_destroy waits for them, in the child forever.
template <typename T>
class ParentOwned {
 public:
  ParentOwned() : value_(new T) {}
  ~ParentOwned() {
    if (!made_.forked()) delete value_;
  }
  ParentOwned(const ParentOwned&) = delete;
  ParentOwned& operator=(const ParentOwned&) = delete;

  T* operator->() const { return value_; }
  T& operator*() const { return *value_; }

 private:
  ForkMark made_;
  T* value_;
};

}  // namespace depot

#endif  // DEPOT_COMMON_FORK_GENERATION_H_
