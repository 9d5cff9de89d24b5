#include "common/users.h"

#include <fmt/format.h>
#include <pwd.h>

#include <vector>

namespace depot {

std::string DescribeUser(uid_t uid) {
  passwd pw{};
  passwd* found = nullptr;
  std::vector<char> buf(4096);
  if (::getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) == 0 && found != nullptr) {
    return fmt::format("uid {} ({})", uid, found->pw_name);
  }
  return fmt::format("uid {}", uid);
}

}  // namespace depot
