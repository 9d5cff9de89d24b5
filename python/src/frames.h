// Frames as memoryviews: zero-copy views over an object's or a draft's bytes, kept valid by the
// buffer exporters behind them.
#ifndef DEPOT_PYTHON_SRC_FRAMES_H_
#define DEPOT_PYTHON_SRC_FRAMES_H_

#include <pybind11/pybind11.h>

#include <cstddef>
#include <memory>

#include "depot/object.h"

namespace depot::python {

namespace py = pybind11;

// The buffer exporters behind the memoryviews handed out: each holds what keeps its bytes
// valid, so a view may outlive the Object or Draft it came from.
struct ReadFrame {
  depot::Object object;
  size_t index;
};

struct WriteFrame {
  std::shared_ptr<depot::Draft> draft;
  size_t index;
};

// The buffer of one frame, for the exporters' buffer protocol.
py::buffer_info FrameBuffer(const std::byte* data, size_t size, bool readonly);

// Every frame: a host frame as a memoryview, read-only over an object, writable over a draft; a
// frame on a GPU as a DeviceFrame (device_frame.h).
py::list FramesOf(const depot::Object& object);
py::list WritableFramesOf(const std::shared_ptr<depot::Draft>& draft);

}  // namespace depot::python

#endif  // DEPOT_PYTHON_SRC_FRAMES_H_
