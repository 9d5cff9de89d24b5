#include "python/src/device_frame.h"

#include <Python.h>
#include <pybind11/stl.h>

#include <cstring>
#include <string>
#include <utility>

#include "depot/gpu.h"
#include "python/src/errors.h"

namespace depot::python {
namespace {

using namespace py::literals;

// DLPack's C ABI (dlpack.h): the versioned tensor of DLPack 1.0 ("dltensor_versioned"), which
// can say the memory is read-only, and the unversioned one of 0.x ("dltensor"), which cannot.
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
struct DLPackVersion {
  uint32_t major;
  uint32_t minor;
};
struct DLManagedTensorVersioned {
  DLPackVersion version;
  void* manager_ctx;
  void (*deleter)(DLManagedTensorVersioned* self);
  uint64_t flags;
  DLTensor dl_tensor;
};
constexpr int32_t kDLCUDA = 2;
constexpr uint8_t kDLUInt = 1;
constexpr uint64_t kDLPackFlagReadOnly = 1;  // DLPACK_FLAG_BITMASK_READ_ONLY
constexpr char kLegacyName[] = "dltensor";
constexpr char kVersionedName[] = "dltensor_versioned";

// What a capsule's tensor keeps alive: the frame's owner, and the shape the tensor points to.
// One of the two tensors is handed out, by the capsule's kind.
struct Exported {
  DLManagedTensor legacy{};
  DLManagedTensorVersioned versioned{};
  DeviceFrame::Owner owner;
  int64_t shape[1];
};

void DeleteExported(Exported* exported) {
  // The owner's destruction may talk to the daemon, which releases the GIL: take it first, as
  // the consumer may call this from any thread.
  py::gil_scoped_acquire gil;
  delete exported;
}
void DeleteLegacy(DLManagedTensor* t) { DeleteExported(static_cast<Exported*>(t->manager_ctx)); }
void DeleteVersioned(DLManagedTensorVersioned* t) {
  DeleteExported(static_cast<Exported*>(t->manager_ctx));
}

// The capsules' destructors: delete the tensor unless a consumer took it (and renamed the
// capsule "used_dltensor"/"used_dltensor_versioned", taking over the deleter).
void DestroyLegacy(PyObject* capsule) {
  if (!PyCapsule_IsValid(capsule, kLegacyName)) return;
  auto* t = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, kLegacyName));
  if (t != nullptr && t->deleter != nullptr) t->deleter(t);
}
void DestroyVersioned(PyObject* capsule) {
  if (!PyCapsule_IsValid(capsule, kVersionedName)) return;
  auto* t = static_cast<DLManagedTensorVersioned*>(PyCapsule_GetPointer(capsule, kVersionedName));
  if (t != nullptr && t->deleter != nullptr) t->deleter(t);
}

// The CUDA ordinal of the GPU with this UUID ("GPU-xxxxxxxx-..."), as this process numbers them.
int32_t OrdinalOf(const std::string& gpu) { return Check(depot::CudaOrdinal(gpu)); }

[[noreturn]] void BufferError(const std::string& why) {
  PyErr_SetString(PyExc_BufferError, why.c_str());
  throw py::error_already_set();
}

}  // namespace

const std::byte* DeviceFrame::Mapped() const {
  // A draft unmaps its frames when sealed or aborted, and then has none: the range may be
  // another mapping's by now.
  if (const auto* draft = std::get_if<std::shared_ptr<depot::Draft>>(&owner_);
      draft != nullptr && (*draft)->frame_count() == 0) {
    Check(depot::Status::InvalidArgument(
        "this device frame's draft is sealed or aborted, and its memory unmapped: get the object "
        "to read it"));
  }
  return bytes_.data();
}

uintptr_t DeviceFrame::address() const { return reinterpret_cast<uintptr_t>(Mapped()); }

py::dict DeviceFrame::CudaArrayInterface() const {
  return py::dict("shape"_a = py::make_tuple(size()), "typestr"_a = "|u1",
                  "data"_a = py::make_tuple(address(), readonly_), "version"_a = 3,
                  "strides"_a = py::none(), "stream"_a = py::none());
}

py::tuple DeviceFrame::DlpackDevice() const { return py::make_tuple(kDLCUDA, OrdinalOf(gpu_)); }

py::capsule DeviceFrame::Dlpack(py::object /*stream*/, py::object max_version, py::object dl_device,
                                py::object copy) const {
  const std::byte* data = Mapped();
  int32_t ordinal = OrdinalOf(gpu_);
  if (!dl_device.is_none()) {
    auto wanted = dl_device.cast<std::pair<int32_t, int32_t>>();
    if (wanted != std::pair{kDLCUDA, ordinal}) {
      BufferError("a device frame is exported only on its own GPU (" + std::to_string(kDLCUDA) +
                  ", " + std::to_string(ordinal) + "): copy it there yourself");
    }
  }
  if (!copy.is_none() && copy.cast<bool>()) {
    BufferError("a device frame is exported without a copy (copy=True asks for one)");
  }
  bool versioned =
      !max_version.is_none() && max_version.cast<std::pair<uint32_t, uint32_t>>().first >= 1;
  if (!versioned && readonly_) {
    // Unversioned DLPack cannot say read-only: the consumer would get a writable tensor over
    // memory mapped read-only, and its first write would fault its context (numpy refuses the
    // same way).
    BufferError(
        "a read-only device frame is exported only as DLPack 1.0 (pass max_version=(1, 0)), "
        "which marks it read-only, or through __cuda_array_interface__");
  }
  auto* exported = new Exported{{}, {}, owner_, {static_cast<int64_t>(size())}};
  DLTensor& t = versioned ? exported->versioned.dl_tensor : exported->legacy.dl_tensor;
  t.data = const_cast<std::byte*>(data);
  t.device = {kDLCUDA, ordinal};
  t.ndim = 1;
  t.dtype = {kDLUInt, 8, 1};
  t.shape = exported->shape;
  t.strides = nullptr;
  t.byte_offset = 0;
  PyObject* capsule;
  if (versioned) {
    exported->versioned.version = {1, 0};
    exported->versioned.manager_ctx = exported;
    exported->versioned.deleter = DeleteVersioned;
    exported->versioned.flags = readonly_ ? kDLPackFlagReadOnly : 0;
    capsule = PyCapsule_New(&exported->versioned, kVersionedName, DestroyVersioned);
  } else {
    exported->legacy.manager_ctx = exported;
    exported->legacy.deleter = DeleteLegacy;
    capsule = PyCapsule_New(&exported->legacy, kLegacyName, DestroyLegacy);
  }
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
object mapped while it, or any array imported from it, lives. Read-only for an Object's frames
(DLPack 1.0 only, which marks them so); writable for a Draft's until the draft is sealed or
aborted, which unmaps them: drop what was imported from a draft's frame before then.)")
      .def_property_readonly("gpu", &DeviceFrame::gpu, "The GPU's UUID.")
      .def_property_readonly("size", &DeviceFrame::size)
      .def_property_readonly("address", &DeviceFrame::address, "The device address.")
      .def_property_readonly("readonly", &DeviceFrame::readonly)
      .def_property_readonly("__cuda_array_interface__", &DeviceFrame::CudaArrayInterface)
      .def("__dlpack_device__", &DeviceFrame::DlpackDevice)
      .def("__dlpack__", &DeviceFrame::Dlpack, py::kw_only(), "stream"_a = py::none(),
           "max_version"_a = py::none(), "dl_device"_a = py::none(), "copy"_a = py::none())
      .def("__len__", &DeviceFrame::size)
      .def("__repr__", [](const DeviceFrame& f) {
        return "<depot.DeviceFrame " + std::to_string(f.size()) + " bytes on " + f.gpu() + ">";
      });
}

}  // namespace depot::python
