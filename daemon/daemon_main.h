// depotd's main, as a function: the real daemon passes the CUDA device backend; tests build a
// daemon with a stand-in backend from the same code.
#ifndef DEPOT_DAEMON_DAEMON_MAIN_H_
#define DEPOT_DAEMON_DAEMON_MAIN_H_

#include <functional>
#include <memory>
#include <string>

#include "daemon/device_backend.h"

namespace depot {

// Makes the device backend, or returns null and says why there is none.
using DeviceBackendFactory = std::function<std::unique_ptr<DeviceBackend>(std::string* why)>;

// Runs depotd with the command line `argv`; returns its exit code.
int DaemonMain(int argc, char** argv, const DeviceBackendFactory& make_backend);

}  // namespace depot

#endif  // DEPOT_DAEMON_DAEMON_MAIN_H_
