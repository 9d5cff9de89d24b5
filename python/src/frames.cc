#include "python/src/frames.h"

#include <Python.h>

#include <cstdint>
#include <string>

#include "python/src/errors.h"

namespace depot::python {
namespace {

py::memoryview ViewOf(py::object exporter) {
  return py::reinterpret_steal<py::memoryview>(PyMemoryView_FromObject(exporter.ptr()));
}

// A device frame's span is a GPU address range: a memoryview over it would fault on first read.
void CheckHost(const depot::Place& place, size_t i, const depot::Guid& guid) {
  if (place.host()) return;
  RaiseInvalidArgument("frame " + std::to_string(i) + " of " + guid.ToString() + " lives on GPU " +
                       place.gpu + ": device frames are not available from Python yet");
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
    CheckHost(object.place(i), i, object.guid());
    frames.append(ViewOf(py::cast(ReadFrame{object, i})));
  }
  return frames;
}

py::list WritableFramesOf(const std::shared_ptr<depot::Draft>& draft) {
  py::list frames;
  for (size_t i = 0; i < draft->frame_count(); ++i) {
    CheckHost(draft->place(i), i, draft->guid());
    frames.append(ViewOf(py::cast(WriteFrame{draft, i})));
  }
  return frames;
}

}  // namespace depot::python
