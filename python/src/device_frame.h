// Frames on a GPU, as Python sees them. A device frame's bytes are device memory, so no
// memoryview can expose them (a read through one would fault); instead a DeviceFrame exposes the
// two protocols GPU libraries (CuPy, PyTorch, Numba, JAX) import without a copy: the CUDA Array
// Interface, version 3, and DLPack (__dlpack__ and __dlpack_device__). Each is a flat array of
// bytes (uint8) of the frame's size.
#ifndef DEPOT_PYTHON_SRC_DEVICE_FRAME_H_
#define DEPOT_PYTHON_SRC_DEVICE_FRAME_H_

#include <pybind11/pybind11.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <variant>

#include "depot/object.h"

namespace depot::python {

namespace py = pybind11;

// One frame on a GPU, and what keeps it mapped: the Object it belongs to (read-only) or the
// Draft being written (writable). Immutable; usable from any thread holding the GIL.
class DeviceFrame {
 public:
  using Owner = std::variant<depot::Object, std::shared_ptr<depot::Draft>>;

  DeviceFrame(Owner owner, std::span<const std::byte> bytes, std::string gpu, bool readonly)
      : owner_(std::move(owner)), bytes_(bytes), gpu_(std::move(gpu)), readonly_(readonly) {}

  const std::string& gpu() const { return gpu_; }
  size_t size() const { return bytes_.size(); }
  // The device address. InvalidArgument once a draft's frame is unmapped (sealed or aborted).
  uintptr_t address() const;
  bool readonly() const { return readonly_; }

  // The CUDA Array Interface, version 3: shape, typestr "|u1", data (address, read-only), no
  // strides, and no stream: an object's device writes are complete when it is sealed.
  py::dict CudaArrayInterface() const;

  // (kDLCUDA, the CUDA ordinal of the frame's GPU in this process). Unavailable when no CUDA
  // driver is loaded here to find the ordinal from the GPU's UUID.
  py::tuple DlpackDevice() const;

  // A capsule over the frame that keeps it mapped until its consumer lets it go: DLPack 1.0's
  // "dltensor_versioned", flagged read-only for an Object's frame, when `max_version` is 1.0 or
  // newer; else 0.x's "dltensor", refused (BufferError) for a read-only frame, which it cannot
  // mark. BufferError for a `dl_device` other than the frame's GPU and for copy=True. `stream`
  // is accepted and ignored: there is nothing to wait for (see CudaArrayInterface).
  py::capsule Dlpack(py::object stream, py::object max_version, py::object dl_device,
                     py::object copy) const;

 private:
  // The bytes' address, or InvalidArgument once a draft's frame is unmapped.
  const std::byte* Mapped() const;

  Owner owner_;
  std::span<const std::byte> bytes_;
  std::string gpu_;
  bool readonly_;
};

// Binds DeviceFrame into the module.
void BindDeviceFrame(py::module_& m);

}  // namespace depot::python

#endif  // DEPOT_PYTHON_SRC_DEVICE_FRAME_H_
