// How the binding reports a failed request: as a Python exception of the class named after the
// status code (depot.NotFound, ...), all subclasses of depot.Error.
#ifndef DEPOT_PYTHON_SRC_ERRORS_H_
#define DEPOT_PYTHON_SRC_ERRORS_H_

#include <pybind11/pybind11.h>

#include <string>
#include <utility>

#include "depot/status.h"

namespace depot::python {

namespace py = pybind11;

// depot.Error and one subclass per status code, named as the code (depot.NotFound, ...), made
// attributes of `m`; returns them by name. Called once, at import.
py::dict MakeErrorClasses(py::module_& m);

// Sets the exception for `status` and throws py::error_already_set.
[[noreturn]] void Raise(const depot::Status& status);
[[noreturn]] void RaiseInvalidArgument(const std::string& message);

inline void Check(const depot::Status& status) {
  if (!status.ok()) Raise(status);
}

template <typename T>
T Check(depot::Result<T>&& result) {
  if (!result.ok()) Raise(result.status());
  return std::move(result).value();
}

}  // namespace depot::python

#endif  // DEPOT_PYTHON_SRC_ERRORS_H_
