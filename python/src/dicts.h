// What the daemon reports, as Python dicts with the fields of `depotctl --json` (the status
// flattened).
#ifndef DEPOT_PYTHON_SRC_DICTS_H_
#define DEPOT_PYTHON_SRC_DICTS_H_

#include <pybind11/pybind11.h>

#include "depot/client.h"

namespace depot::python {

namespace py = pybind11;

py::dict ToDict(const depot::ObjectInfo& o);
// Every field of the status (its scalars named as in DEPOT_STORE_STATUS_SCALARS), with
// fragmentation, and errors by code name.
py::dict ToDict(const depot::StoreStatus& s);
py::dict ToDict(const depot::Event& e);

}  // namespace depot::python

#endif  // DEPOT_PYTHON_SRC_DICTS_H_
