#include "python/src/errors.h"

#include <Python.h>

#include <string_view>
#include <vector>

namespace depot::python {
namespace {

// Python exception classes, indexed by Status::Code. Created once at import and kept for the
// life of the interpreter (never destroyed: the module cannot be unloaded).
std::vector<py::handle>& ErrorClasses() {
  static auto* classes = new std::vector<py::handle>();
  return *classes;
}

}  // namespace

// The names come from Status::CodeName, the one table of codes, so a code added there becomes an
// exception here without a change to this file.
py::dict MakeErrorClasses(py::module_& m) {
  constexpr int kMaxCode = 256;  // Code is uint16_t; names stop well before this
  py::dict by_name;
  auto* base = PyErr_NewExceptionWithDoc(
      "depot.Error", "A request to depot failed; the subclass names the status code.", nullptr,
      nullptr);
  m.attr("Error") = py::handle(base);
  auto& classes = ErrorClasses();
  classes.assign(kMaxCode, py::handle(base));
  for (int code = 1; code < kMaxCode; ++code) {
    std::string_view name = depot::Status::CodeName(static_cast<depot::Status::Code>(code));
    if (name == "Unknown") continue;
    std::string qualified = "depot." + std::string(name);
    auto* cls = PyErr_NewException(qualified.c_str(), base, nullptr);
    classes[code] = py::handle(cls);
    m.attr(std::string(name).c_str()) = py::handle(cls);
    by_name[std::string(name).c_str()] = py::handle(cls);
  }
  return by_name;
}

[[noreturn]] void Raise(const depot::Status& status) {
  auto code = static_cast<size_t>(status.code());
  auto& classes = ErrorClasses();
  PyErr_SetString(code < classes.size() ? classes[code].ptr() : classes[0].ptr(),
                  status.message().c_str());
  throw py::error_already_set();
}

[[noreturn]] void RaiseInvalidArgument(const std::string& message) {
  Raise(depot::Status::InvalidArgument(message));
}

}  // namespace depot::python
