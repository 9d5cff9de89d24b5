// Python arguments as the C++ client takes them: GUIDs, timeouts in seconds, buffers, and the
// keyword arguments of put and create.
#ifndef DEPOT_PYTHON_SRC_ARGUMENTS_H_
#define DEPOT_PYTHON_SRC_ARGUMENTS_H_

#include <Python.h>
#include <pybind11/pybind11.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "depot/client.h"

namespace depot::python {

namespace py = pybind11;

// Raises InvalidArgument when `text` is not a GUID.
depot::Guid ParseGuid(const std::string& text);

// Seconds as Python callers write them to the client's milliseconds: None polls (the C++
// default), a number waits that long, math.inf waits without limit.
std::chrono::milliseconds ToTimeout(std::optional<double> seconds);

// A contiguous buffer borrowed from a Python object for the length of one call. Released in
// the destructor, which must run with the GIL held.
class Buffer {
 public:
  explicit Buffer(py::handle object) {
    if (PyObject_GetBuffer(object.ptr(), &view_, PyBUF_ANY_CONTIGUOUS) != 0) {
      throw py::error_already_set();
    }
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { PyBuffer_Release(&view_); }

  std::span<const std::byte> bytes() const {
    return {static_cast<const std::byte*>(view_.buf), static_cast<size_t>(view_.len)};
  }

 private:
  Py_buffer view_{};
};

// The keyword arguments of put and create, holding the metadata buffer while the call runs.
struct Options {
  depot::CreateOptions create;
  std::unique_ptr<Buffer> metadata;

  Options(std::optional<std::string> name, py::object metadata_object,
          std::optional<std::string> guid, bool evictable, bool checksum, bool owner_scoped);

  // Where each frame lives: None (or "host") for the host, else a GPU's UUID; None: all on the
  // host.
  void SetPlaces(const std::optional<std::vector<std::optional<std::string>>>& places);
};

}  // namespace depot::python

#endif  // DEPOT_PYTHON_SRC_ARGUMENTS_H_
