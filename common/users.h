// Naming users in messages: "uid 1000 (alice)", so that a person reading a refusal knows who is
// meant without looking the number up.
#ifndef DEPOT_COMMON_USERS_H_
#define DEPOT_COMMON_USERS_H_

#include <sys/types.h>

#include <string>

namespace depot {

// "uid N (name)", or "uid N" when the user database has no name for it. Thread-safe.
std::string DescribeUser(uid_t uid);

// The group's name, or its number when the group database has no name for it. Thread-safe.
std::string GroupName(gid_t gid);

}  // namespace depot

#endif  // DEPOT_COMMON_USERS_H_
