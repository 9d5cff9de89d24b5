// What every depotctl command shares: exit codes, error messages, and the pieces of its output
// (JSON strings, ages).
#ifndef DEPOT_CLIENT_CLI_FORMAT_H_
#define DEPOT_CLIENT_CLI_FORMAT_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "depot/status.h"

namespace depotctl {

enum Exit { kOk = 0, kError = 1, kUsageError = 2, kNotFound = 3, kNoDaemon = 4 };

// Prints "depotctl: WHAT: MESSAGE" to stderr; returns the exit code for the status.
int Fail(const depot::Status& st, std::string_view what);

// Prints why the command line is wrong to stderr; returns kUsageError.
int Usage(std::string_view why);

// `s` as a JSON string: quoted, with quotes, backslashes and control characters escaped.
std::string Json(std::string_view s);

// "42s", "5m", "3h", "2d": how long ago.
std::string Age(int64_t unix_ns);

}  // namespace depotctl

#endif  // DEPOT_CLIENT_CLI_FORMAT_H_
