#include "python/src/draft.h"

#include <utility>

#include "python/src/errors.h"
#include "python/src/frames.h"
#include "python/src/gil.h"

namespace depot::python {

PyDraft::PyDraft(depot::Draft draft)
    : draft_(new depot::Draft(std::move(draft)), [](depot::Draft* d) {
        py::gil_scoped_release release;
        delete d;
      }) {}

py::list PyDraft::frames() const { return WritableFramesOf(draft_); }

void* PyDraft::StreamHandle(py::handle stream) {
  if (stream.is_none()) return nullptr;
  py::object handle;
  if (py::hasattr(stream, "__cuda_stream__")) {
    handle = py::tuple(stream.attr("__cuda_stream__")())[1];
  } else if (py::hasattr(stream, "cuda_stream")) {  // torch.cuda.Stream
    handle = stream.attr("cuda_stream");
  } else if (py::hasattr(stream, "ptr")) {  // cupy.cuda.Stream
    handle = stream.attr("ptr");
  } else {
    handle = py::reinterpret_borrow<py::object>(stream);
  }
  if (!py::isinstance<py::int_>(handle)) {
    Check(depot::Status::InvalidArgument(
        "stream must be None, a CUstream handle (int) or a CuPy, PyTorch or CUDA Python stream"));
  }
  return reinterpret_cast<void*>(handle.cast<uintptr_t>());
}

void PyDraft::Finish(bool seal, void* cuda_stream) {
  auto draft = draft_;
  depot::Status status =
      WithoutGil([&] { return seal ? draft->Seal(cuda_stream) : draft->Abort(); });
  open_ = false;
  Check(status);
}

}  // namespace depot::python
