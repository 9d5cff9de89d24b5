// The table of depotd's configuration keys (daemon/options.h): each key's name, default and
// help, how it is set from text and how it is shown again. It is the one place a key's default
// is written; ParseOptions, DefaultOptions and FormatConfig read it.
#ifndef DEPOT_DAEMON_OPTION_KEYS_H_
#define DEPOT_DAEMON_OPTION_KEYS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "daemon/options.h"

namespace depot {

struct OptionKey {
  ConfigKey doc;
  // Sets the key from text; returns "" or what is wrong with the value.
  std::function<std::string(DaemonOptions&, const std::string&, uint64_t physical)> set;
  std::function<std::string(const DaemonOptions&)> get;
};

// Every key, in the order the documentation lists them.
const std::vector<OptionKey>& OptionKeys();

}  // namespace depot

#endif  // DEPOT_DAEMON_OPTION_KEYS_H_
