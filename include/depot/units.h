// Sizes as people write them: parsing "512MiB", "8GiB", "25%" and printing "1.5 GiB".
#ifndef DEPOT_UNITS_H_
#define DEPOT_UNITS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "depot/export.h"

namespace depot {

// Parses a byte count: a plain number, or one with a suffix K/KiB/KB, M/MiB/MB, G/GiB/GB,
// T/TiB/TB (all powers of 1024), or a percentage of `total` ("25%"). nullopt when malformed or
// zero.
DEPOT_API std::optional<uint64_t> ParseSize(std::string_view text, uint64_t total);

// "512 B", "64.0 KiB", "1.5 GiB".
DEPOT_API std::string FormatBytes(uint64_t bytes);

}  // namespace depot

#endif  // DEPOT_UNITS_H_
