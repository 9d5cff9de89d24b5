#include "python/src/device_frame.h"

#include <Python.h>

#include <cstring>
#include <utility>

#include "depot/gpu.h"
#include "python/src/errors.h"

namespace depot::python {
namespace {

using namespace py::literals;

// DLPack's C ABI (dlpack.h, version 0.x, the "dltensor" capsule every importer accepts).
struct DLDevice {
  int32_t device_type;
  int32_t device_id;
};
struct DLDataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;
  uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};
constexpr int32_t kDLCUDA = 2;
constexpr uint8_t kDLUInt = 1;

// What a capsule's tensor keeps alive: the frame's owner, and the shape the tensor points to.
struct Exported {
  DLManagedTensor tensor{};
  DeviceFrame::Owner owner;
  int64_t shape[1];
};

void DeleteExported(DLManagedTensor* tensor) {
  // The owner's destruction may talk to the daemon, which releases the GIL: take it first, as
  // the consumer may call this from any thread.
  py::gil_scoped_acquire gil;
  delete static_cast<Exported*>(tensor->manager_ctx);
}

// The capsule's destructor: deletes the tensor unless a consumer took it (and renamed the
// capsule "used_dltensor", taking over the deleter).
void DestroyCapsule(PyObject* capsule) {
  if (!PyCapsule_IsValid(capsule, "dltensor")) return;
  auto* tensor = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
  if (tensor != nullptr && tensor->deleter != nullptr) tensor->deleter(tensor);
}

// The CUDA ordinal of the GPU with this UUID ("GPU-xxxxxxxx-..."), as this process numbers them.
int32_t OrdinalOf(const std::string& gpu) { return Check(depot::CudaOrdinal(gpu)); }

}  // namespace

py::dict DeviceFrame::CudaArrayInterface() const {
  return py::dict("shape"_a = py::make_tuple(size()), "typestr"_a = "|u1",
                  "data"_a = py::make_tuple(address(), readonly_), "version"_a = 3,
                  "strides"_a = py::none(), "stream"_a = py::none());
}

py::tuple DeviceFrame::DlpackDevice() const { return py::make_tuple(kDLCUDA, OrdinalOf(gpu_)); }

py::capsule DeviceFrame::Dlpack(py::object) const {
  int32_t ordinal = OrdinalOf(gpu_);
  auto* exported = new Exported{{}, owner_, {static_cast<int64_t>(size())}};
  DLTensor& t = exported->tensor.dl_tensor;
  t.data = const_cast<std::byte*>(bytes_.data());
  t.device = {kDLCUDA, ordinal};
  t.ndim = 1;
  t.dtype = {kDLUInt, 8, 1};
  t.shape = exported->shape;
  t.strides = nullptr;
  t.byte_offset = 0;
  exported->tensor.manager_ctx = exported;
  exported->tensor.deleter = DeleteExported;
  PyObject* capsule = PyCapsule_New(&exported->tensor, "dltensor", DestroyCapsule);
  if (capsule == nullptr) {
    delete exported;
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::capsule>(capsule);
}

void BindDeviceFrame(py::module_& m) {
  py::class_<DeviceFrame>(m, "DeviceFrame", R"(A frame on a GPU: device memory, no memoryview.

Import it without a copy through __cuda_array_interface__ (version 3) or DLPack
(__dlpack__, __dlpack_device__): a flat array of `size` bytes (uint8) on GPU `gpu`. It keeps the
object mapped while it, or any array imported from it, lives. Read-only for an Object's frames;
writable for a Draft's, until the draft is sealed.)")
      .def_property_readonly("gpu", &DeviceFrame::gpu, "The GPU's UUID.")
      .def_property_readonly("size", &DeviceFrame::size)
      .def_property_readonly("address", &DeviceFrame::address, "The device address.")
      .def_property_readonly("readonly", &DeviceFrame::readonly)
      .def_property_readonly("__cuda_array_interface__", &DeviceFrame::CudaArrayInterface)
      .def("__dlpack_device__", &DeviceFrame::DlpackDevice)
      .def("__dlpack__", &DeviceFrame::Dlpack, py::kw_only(), "stream"_a = py::none())
      .def("__len__", &DeviceFrame::size)
      .def("__repr__", [](const DeviceFrame& f) {
        return "<depot.DeviceFrame " + std::to_string(f.size()) + " bytes on " + f.gpu() + ">";
      });
}

}  // namespace depot::python
