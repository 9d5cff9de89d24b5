// GPUs as depot names them: by UUID ("GPU-xxxxxxxx-...", "MIG-..." for a MIG instance), the
// name a device frame's Place carries, which every process of the node reads the same way. CUDA
// numbers devices per process (CUDA_VISIBLE_DEVICES), so a frame's consumer asks for its ordinal.
#ifndef DEPOT_GPU_H_
#define DEPOT_GPU_H_

#include <string_view>

#include "depot/export.h"
#include "depot/status.h"

namespace depot {

// The CUDA ordinal, as this process numbers its devices, of the GPU named `gpu`. Unavailable
// when no visible device has that UUID, when there is no CUDA driver, or when this depot was
// built without CUDA support, with the reason.
DEPOT_API Result<int> CudaOrdinal(std::string_view gpu);

}  // namespace depot

#endif  // DEPOT_GPU_H_
