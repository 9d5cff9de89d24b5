// depot.Client: one connection to depotd, as Python sees it.
#ifndef DEPOT_PYTHON_SRC_CLIENT_H_
#define DEPOT_PYTHON_SRC_CLIENT_H_

#include <pybind11/pybind11.h>
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "depot/client.h"
#include "python/src/draft.h"
#include "python/src/subscription.h"

namespace depot::python {

namespace py = pybind11;

// Where each frame of a new object lives, as Python gives it (see Options::SetPlaces).
using Places = std::optional<std::vector<std::optional<std::string>>>;

// A Python Client: one connection to depotd, usable from many threads. It belongs to the
// process that connected it; a child made by fork() must connect its own (the connection and
// its mappings do not cross fork), and using an inherited one raises depot.Disconnected.
class PyClient {
 public:
  // `daemon_uid`: a daemon's uid to trust besides the usual ones; `reconnect_wait`: seconds
  // (ConnectOptions).
  PyClient(std::optional<std::string> socket, std::optional<uid_t> daemon_uid,
           double reconnect_wait);

  std::string socket() { return client().socket_path(); }

  std::string Put(py::handle data, std::optional<std::string> name, py::object metadata,
                  std::optional<std::string> guid, bool evictable, bool checksum, bool owner_scoped,
                  const Places& places);

  PyDraft Create(std::vector<uint64_t> sizes, std::optional<std::string> name, py::object metadata,
                 std::optional<std::string> guid, bool evictable, bool checksum, bool owner_scoped,
                 const Places& places);

  depot::Object Get(const std::string& guid, std::optional<double> timeout);

  // All or nothing: the first failure raises (and the objects already got are released). Any
  // number of GUIDs: the C++ client batches them.
  std::vector<depot::Object> GetMany(const std::vector<std::string>& guids,
                                     std::optional<double> timeout);

  // One GUID or any number of them; raises for the first that could not be deleted.
  void Delete(py::handle guids);

  // One GUID: a bool; a list of any number: a list of bools, in order.
  py::object Contains(py::handle guids);

  py::dict Stat(const std::string& guid);

  // Every object, page by page.
  py::list List();

  py::dict Status();

  void Ping();

  PySubscription Subscribe();

  // Drops the connection (objects and views already got stay readable); later calls raise
  // Disconnected. Closing twice is harmless.
  void Close();

 private:
  // The connection, or Disconnected when closed or called from a process other than the one
  // that made it.
  depot::Client& client();

  pid_t pid_;
  std::optional<uint64_t> forks_;  // the forks counted when connected (client.cc's ForksHere)
  std::optional<depot::Client> client_;
};

}  // namespace depot::python

#endif  // DEPOT_PYTHON_SRC_CLIENT_H_
