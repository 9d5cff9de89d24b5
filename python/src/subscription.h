// depot.Subscription: a stream of store events, as Python sees it.
#ifndef DEPOT_PYTHON_SRC_SUBSCRIPTION_H_
#define DEPOT_PYTHON_SRC_SUBSCRIPTION_H_

#include <pybind11/pybind11.h>

#include <optional>
#include <utility>

#include "depot/client.h"

namespace depot::python {

namespace py = pybind11;

// A stream of events on a connection of its own. Called with the GIL held; a wait releases it.
class PySubscription {
 public:
  explicit PySubscription(depot::Subscription s) : s_(std::move(s)) {}

  // The next event as a dict, or None when none came within the timeout.
  py::object Next(std::optional<double> timeout);

 private:
  depot::Subscription s_;
};

}  // namespace depot::python

#endif  // DEPOT_PYTHON_SRC_SUBSCRIPTION_H_
