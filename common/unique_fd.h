// UniqueFd owns one file descriptor and closes it when it goes.
#ifndef DEPOT_COMMON_UNIQUE_FD_H_
#define DEPOT_COMMON_UNIQUE_FD_H_

#include <utility>

namespace depot {

// Owns a file descriptor and closes it on destruction. Movable, not copyable.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd();

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() { return std::exchange(fd_, -1); }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

}  // namespace depot

#endif  // DEPOT_COMMON_UNIQUE_FD_H_
