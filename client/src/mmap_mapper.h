// internal::MmapMapper maps segments with mmap(2): host segments, and the tests' memfd stand-in
// for device chunks. Host segments get huge pages when the daemon asks for them.
//
// Thread-safe once set up: set_hugepages is called while connecting, before any mapping.
#ifndef DEPOT_CLIENT_SRC_MMAP_MAPPER_H_
#define DEPOT_CLIENT_SRC_MMAP_MAPPER_H_

#include "client/src/mapper.h"

namespace depot::internal {

class MmapMapper : public Mapper {
 public:
  // Whether the daemon asks for huge pages on host segment mappings (hello says).
  void set_hugepages(bool on) { hugepages_ = on; }

  Result<void*> Map(int fd, uint64_t size, uint32_t pool, bool writable) override;
  Status Unmap(void* base, uint64_t size) override;

 private:
  bool hugepages_ = false;
};

}  // namespace depot::internal

#endif  // DEPOT_CLIENT_SRC_MMAP_MAPPER_H_
