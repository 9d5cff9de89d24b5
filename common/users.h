// Naming users in messages: "uid 1000 (alice)", so that a person reading a refusal knows who is
// meant without looking the number up.
#ifndef DEPOT_COMMON_USERS_H_
#define DEPOT_COMMON_USERS_H_

#include <sys/types.h>

#include <string>

namespace depot {

// "uid N (name)", or "uid N" when the user database has no name for it. Thread-safe.
std::string DescribeUser(uid_t uid);

}  // namespace depot

#endif  // DEPOT_COMMON_USERS_H_
