#include "common/shared_mapping.h"

#include <fmt/format.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace depot {

Result<SharedMapping> SharedMapping::Map(int fd, size_t size, bool writable, const char* what) {
  int prot = PROT_READ | (writable ? PROT_WRITE : 0);
  void* p = ::mmap(nullptr, size, prot, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    return Status::Unavailable(
        fmt::format("cannot map the {} ({} bytes): {}", what, size, std::strerror(errno)));
  }
  SharedMapping m;
  m.base_ = p;
  m.size_ = size;
  return m;
}

SharedMapping& SharedMapping::operator=(SharedMapping&& o) noexcept {
  if (this != &o) {
    if (base_ != nullptr) ::munmap(base_, size_);
    base_ = std::exchange(o.base_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

SharedMapping::~SharedMapping() {
  if (base_ != nullptr) ::munmap(base_, size_);
}

}  // namespace depot
