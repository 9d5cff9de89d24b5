#include "client/src/new_holding.h"

#include <cstddef>
#include <vector>

namespace depot::internal {
namespace {

// How many blocks a thread keeps: a batch of 1,000 let go, and some more.
constexpr size_t kKept = 1024;

// An allocator that keeps the blocks given back on this thread for its next allocations. The
// thread's blocks go back to the heap when it ends; a block given back after that (an Object
// let go by a later thread_local's destructor) goes straight there.
template <typename T>
class Recycling {
 public:
  using value_type = T;
  Recycling() = default;
  template <typename U>
  Recycling(const Recycling<U>& /*other*/) {}  // NOLINT(google-explicit-constructor): rebinding

  T* allocate(size_t n) {
    if (n == 1 && !ended_ && !kept_.blocks.empty()) {
      T* p = kept_.blocks.back();
      kept_.blocks.pop_back();
      return p;
    }
    return std::allocator<T>().allocate(n);
  }
  void deallocate(T* p, size_t n) {
    if (n == 1 && !ended_ && kept_.blocks.size() < kKept) {
      kept_.blocks.push_back(p);
      return;
    }
    std::allocator<T>().deallocate(p, n);
  }
  template <typename U>
  bool operator==(const Recycling<U>& /*other*/) const {
    return true;
  }

 private:
  struct Kept {
    std::vector<T*> blocks;
    ~Kept() {
      for (T* p : blocks) std::allocator<T>().deallocate(p, 1);
      ended_ = true;
    }
  };
  static thread_local Kept kept_;
  static thread_local bool ended_;  // trivially destructible: still readable after kept_ ended
};

template <typename T>
thread_local typename Recycling<T>::Kept Recycling<T>::kept_;
template <typename T>
thread_local bool Recycling<T>::ended_ = false;

}  // namespace

std::shared_ptr<Holding> NewHolding() {
  return std::allocate_shared<Holding>(Recycling<Holding>());
}

}  // namespace depot::internal
