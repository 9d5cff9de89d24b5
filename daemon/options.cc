#include "daemon/options.h"

#include <fmt/format.h>
#include <grp.h>
#include <unistd.h>

#include <cassert>
#include <cstdlib>
#include <fstream>

#include "daemon/option_keys.h"
#include "daemon/option_values.h"

namespace depot {
namespace {

// An on/off key: as a flag it may stand alone (--prefault means on).
bool IsSwitch(const OptionKey& k) {
  std::string_view d = k.doc.default_text;
  return d == "on" || d == "off";
}

const OptionKey* FindKey(std::string_view name) {
  for (const OptionKey& k : OptionKeys()) {
    if (name == k.doc.name) return &k;
  }
  return nullptr;
}

// Applies every `key = value` line of a config file.
Status LoadFile(const std::string& path, DaemonOptions& o, uint64_t physical,
                const std::string& only_key = "") {
  std::ifstream in(path);
  if (!in) return Status::InvalidArgument(fmt::format("cannot read config file {}", path));
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    std::string text = option_values::Trim(line.substr(0, line.find('#')));
    if (text.empty()) continue;
    size_t eq = text.find('=');
    if (eq == std::string::npos) {
      return Status::InvalidArgument(
          fmt::format("{}:{}: expected `key = value`, got `{}`", path, n, text));
    }
    std::string key = option_values::Trim(text.substr(0, eq));
    std::string value = option_values::Trim(text.substr(eq + 1));
    const OptionKey* k = FindKey(key);
    if (k == nullptr) {
      return Status::InvalidArgument(fmt::format("{}:{}: unknown key `{}`", path, n, key));
    }
    if (!only_key.empty() && key != only_key) continue;
    if (std::string err = k->set(o, value, physical); !err.empty()) {
      return Status::InvalidArgument(fmt::format("{}:{}: {} = {}: {}", path, n, key, value, err));
    }
  }
  return Status::OK();
}

}  // namespace

std::string Usage() {
  std::string out = R"(usage: depotd [--config FILE] [OPTIONS]

The depot daemon: a shared-memory object store for the processes of this node.

  --config FILE         read `key = value` settings from FILE (see config/depotd.conf);
                        flags given here override it
  --check-config        check the configuration, print `configuration OK`, and exit
  --print-config        print the effective configuration and exit
  --version             print the version and exit
  --help                print this text and exit

Every configuration key is also a flag, with dashes for underscores (on/off keys may stand
alone: --prefault means on):
)";
  for (const OptionKey& k : OptionKeys()) {
    std::string flag = std::string("--") + k.doc.name;
    std::replace(flag.begin(), flag.end(), '_', '-');
    out += fmt::format("  {:<20}  {} (default: {})\n", flag, k.doc.help,
                       *k.doc.default_text ? k.doc.default_text : "empty");
  }
  return out;
}

const std::vector<ConfigKey>& ConfigKeys() {
  static const std::vector<ConfigKey> docs = [] {
    std::vector<ConfigKey> d;
    for (const OptionKey& k : OptionKeys()) d.push_back(k.doc);
    return d;
  }();
  return docs;
}

DaemonOptions DefaultOptions(uint64_t physical_memory, uint64_t memory_available) {
  DaemonOptions o;
  for (const OptionKey& k : OptionKeys()) {
    // The socket's default is described, not written: it depends on the environment.
    if (std::string_view(k.doc.name) == "socket") continue;
    std::string err = k.set(o, k.doc.default_text, physical_memory);
    assert(err.empty() && "every default in the key table is accepted by its key");
  }
  o.socket_path = DefaultSocketPath();
  o.capacity = std::min(o.capacity, memory_available);
  return o;
}

bool HasDefault(const DaemonOptions& o, std::string_view key) {
  const OptionKey* k = FindKey(key);
  return k != nullptr && k->get(o) == k->doc.default_text;
}

Result<DaemonOptions> ParseOptions(const std::vector<std::string>& args, uint64_t physical_memory,
                                   uint64_t memory_available) {
  DaemonOptions o = DefaultOptions(physical_memory, memory_available);

  // Split the flags into NAME and VALUE first: the file named by --config applies before them.
  struct Flag {
    std::string name, value;
    bool has_value;
  };
  std::vector<Flag> flags;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (!a.starts_with("-")) {
      return Status::InvalidArgument(
          fmt::format("unexpected argument `{}` (see depotd --help)", a));
    }
    Flag f{a, "", false};
    if (size_t eq = a.find('='); a.starts_with("--") && eq != std::string::npos) {
      f = {a.substr(0, eq), a.substr(eq + 1), true};
    }
    if (f.name == "--help" || f.name == "-h") {
      o.help = true;
    } else if (f.name == "--version") {
      o.version = true;
    } else if (f.name == "--check-config") {
      o.check_config = true;
    } else if (f.name == "--print-config") {
      o.print_config = true;
    } else {
      std::string key = f.name.substr(std::min<size_t>(2, f.name.size()));
      std::replace(key.begin(), key.end(), '-', '_');
      const OptionKey* k = FindKey(key);
      if (key != "config" && (k == nullptr || !f.name.starts_with("--"))) {
        return Status::InvalidArgument(fmt::format("unknown option {} (see depotd --help)", a));
      }
      if (!f.has_value && k != nullptr && IsSwitch(*k)) {
        f.value = "on";
      } else if (!f.has_value) {
        if (i + 1 >= args.size()) {
          return Status::InvalidArgument(fmt::format("{} needs a value", f.name));
        }
        f.value = args[++i];
      }
      if (key == "config") {
        o.config_path = f.value;
      } else {
        flags.push_back(std::move(f));
      }
    }
  }
  if (!o.config_path.empty()) {
    if (Status st = LoadFile(o.config_path, o, physical_memory); !st.ok()) return st;
  }
  for (const Flag& f : flags) {
    std::string key = f.name.substr(2);
    std::replace(key.begin(), key.end(), '-', '_');
    if (std::string err = FindKey(key)->set(o, f.value, physical_memory); !err.empty()) {
      return Status::InvalidArgument(fmt::format("{} {}: {}", f.name, f.value, err));
    }
  }
  return o;
}

Status Validate(const DaemonOptions& o) {
  if (o.per_user_namespaces && o.prefault) {
    return Status::InvalidArgument(
        "prefault reserves the whole capacity for one namespace; it cannot be combined with "
        "namespaces = per_user");
  }
  if (!o.socket_group.empty() && ::getgrnam(o.socket_group.c_str()) == nullptr) {
    return Status::InvalidArgument(fmt::format("socket_group {}: no such group", o.socket_group));
  }
  return Status::OK();
}

Result<std::string> ReadLogLevel(const std::string& config_path) {
  DaemonOptions o;
  o.log_level = FindKey("log_level")->doc.default_text;
  if (Status st = LoadFile(config_path, o, 0, "log_level"); !st.ok()) return st;
  return o.log_level;
}

std::string FormatConfig(const DaemonOptions& o) {
  std::string out;
  for (const OptionKey& k : OptionKeys()) out += fmt::format("{} = {}\n", k.doc.name, k.get(o));
  return out;
}

}  // namespace depot
