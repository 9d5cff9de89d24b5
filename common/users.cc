#include "common/users.h"

#include <fmt/format.h>
#include <grp.h>
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

std::string GroupName(gid_t gid) {
  group gr{};
  group* found = nullptr;
  std::vector<char> buf(4096);
  if (::getgrgid_r(gid, &gr, buf.data(), buf.size(), &found) == 0 && found != nullptr) {
    return found->gr_name;
  }
  return std::to_string(gid);
}

}  // namespace depot
