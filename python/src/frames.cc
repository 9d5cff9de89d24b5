#include "python/src/frames.h"

#include <Python.h>

#include <cstdint>
#include <string>

#include "python/src/device_frame.h"
#include "python/src/errors.h"

namespace depot::python {
namespace {

py::memoryview ViewOf(py::object exporter) {
  return py::reinterpret_steal<py::memoryview>(PyMemoryView_FromObject(exporter.ptr()));
}

}  // namespace

py::buffer_info FrameBuffer(const std::byte* data, size_t size, bool readonly) {
  static const std::byte kEmpty{};  // memoryviews need an address even for no bytes
  void* ptr = const_cast<std::byte*>(size == 0 ? &kEmpty : data);
  return py::buffer_info(ptr, 1, py::format_descriptor<uint8_t>::format(), 1,
                         {static_cast<py::ssize_t>(size)}, {1}, readonly);
}

py::list FramesOf(const depot::Object& object) {
  py::list frames;
  for (size_t i = 0; i < object.frame_count(); ++i) {
    depot::Place place = object.place(i);
    if (place.host()) {
      frames.append(ViewOf(py::cast(ReadFrame{object, i})));
    } else {  // a GPU address range: a memoryview over it would fault on first read
      frames.append(py::cast(DeviceFrame(object, object.frame(i), place.gpu, true)));
    }
  }
  return frames;
}

py::list WritableFramesOf(const std::shared_ptr<depot::Draft>& draft) {
  py::list frames;
  for (size_t i = 0; i < draft->frame_count(); ++i) {
    depot::Place place = draft->place(i);
    if (place.host()) {
      frames.append(ViewOf(py::cast(WriteFrame{draft, i})));
    } else {
      frames.append(py::cast(DeviceFrame(draft, draft->frame(i), place.gpu, false)));
    }
  }
  return frames;
}

}  // namespace depot::python
