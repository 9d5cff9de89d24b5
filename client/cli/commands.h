// The depotctl commands, one function each, grouped by the file that holds them. Each prints
// its result (JSON with `json`) and returns the process's exit code (an Exit).
#ifndef DEPOT_CLIENT_CLI_COMMANDS_H_
#define DEPOT_CLIENT_CLI_COMMANDS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "depot/client.h"

namespace depotctl {

// objects.cc: the objects in the store.

struct LsOptions {
  std::string state, name_glob, sort;
  uint64_t limit = UINT64_MAX;
  int32_t holder_pid = 0;  // not 0: only what this process holds or creates
};

int Ls(depot::Client& c, bool json, const LsOptions& opt);
int Stat(depot::Client& c, bool json, const std::string& arg);
int Put(depot::Client& c, const std::string& file, const depot::CreateOptions& opts);
// get and cat: writes every frame of the object to `out` ("-": stdout).
int Get(depot::Client& c, const std::string& cmd, const std::string& arg, const std::string& out);
int Verify(depot::Client& c, bool json, const std::vector<std::string>& args);
int Rm(depot::Client& c, const std::vector<std::string>& args);

// status.cc: the daemon and its connections.
int Status(depot::Client& c, bool json);
int Clients(depot::Client& c, bool json);
int Ping(depot::Client& c, bool json, uint64_t count);
// The metrics in the Prometheus text format, for node_exporter's textfile collector and scripts.
int Metrics(depot::Client& c);

// top.cc: a live view, refreshed every `interval_ms`; plain snapshots when stdout is not a
// terminal (`count` of them; 0: until interrupted).
int Top(depot::Client& c, uint64_t interval_ms, uint64_t count);

// watch.cc: events as they happen.
int Watch(depot::Client& c, bool json, uint64_t count);

}  // namespace depotctl

#endif  // DEPOT_CLIENT_CLI_COMMANDS_H_
