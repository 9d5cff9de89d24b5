// Calls into the C++ client without the GIL, so that other Python threads run while one waits
// on the daemon.
#ifndef DEPOT_PYTHON_SRC_GIL_H_
#define DEPOT_PYTHON_SRC_GIL_H_

#include <pybind11/pybind11.h>

namespace depot::python {

// Runs f with the GIL released: f must not touch Python objects.
template <typename F>
auto WithoutGil(F&& f) {
  pybind11::gil_scoped_release release;
  return f();
}

}  // namespace depot::python

#endif  // DEPOT_PYTHON_SRC_GIL_H_
