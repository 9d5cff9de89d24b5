#include "python/src/subscription.h"

#include "python/src/arguments.h"
#include "python/src/dicts.h"
#include "python/src/errors.h"
#include "python/src/gil.h"

namespace depot::python {

py::object PySubscription::Next(std::optional<double> timeout) {
  auto wait = timeout ? ToTimeout(timeout) : depot::kForever;
  auto event = WithoutGil([&] { return s_.Next(wait); });
  if (!event.ok() && event.status().IsTimeout()) return py::none();
  return ToDict(Check(std::move(event)));
}

}  // namespace depot::python
