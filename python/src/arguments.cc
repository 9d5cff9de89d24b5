#include "python/src/arguments.h"

#include <cmath>
#include <cstdint>
#include <utility>

#include "python/src/errors.h"

namespace depot::python {

depot::Guid ParseGuid(const std::string& text) {
  auto guid = depot::Guid::Parse(text);
  if (!guid) RaiseInvalidArgument("not a GUID: '" + text + "' (expected 8-4-4-4-12 hex digits)");
  return *guid;
}

std::chrono::milliseconds ToTimeout(std::optional<double> seconds) {
  if (!seconds) return depot::kNoWait;
  if (std::isinf(*seconds) && *seconds > 0) return depot::kForever;
  if (!(*seconds >= 0)) RaiseInvalidArgument("timeout must be >= 0 seconds, None or math.inf");
  return std::chrono::milliseconds(static_cast<int64_t>(std::ceil(*seconds * 1000)));
}

Options::Options(std::optional<std::string> name, py::object metadata_object,
                 std::optional<std::string> guid, bool evictable, bool checksum,
                 bool owner_scoped) {
  if (name) create.name = std::move(*name);
  if (!metadata_object.is_none()) {
    metadata = std::make_unique<Buffer>(metadata_object);
    create.metadata = metadata->bytes();
  }
  if (guid) create.guid = ParseGuid(*guid);
  create.evictable = evictable;
  create.checksum = checksum;
  create.owner_scoped = owner_scoped;
}

void Options::SetPlaces(const std::optional<std::vector<std::optional<std::string>>>& places) {
  if (!places) return;
  for (const auto& p : *places) {
    create.places.push_back(!p || *p == "host" ? depot::Place::Host() : depot::Place::Gpu(*p));
  }
}

}  // namespace depot::python
