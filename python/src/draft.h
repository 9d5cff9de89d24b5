// depot.Draft: an object being written in place, as Python sees it.
#ifndef DEPOT_PYTHON_SRC_DRAFT_H_
#define DEPOT_PYTHON_SRC_DRAFT_H_

#include <pybind11/pybind11.h>

#include <memory>
#include <string>

#include "depot/object.h"

namespace depot::python {

namespace py = pybind11;

// A Python Draft: the frames are writable views; seal() publishes, abort() discards, and as a
// context manager it seals on a clean exit and aborts when the block raises. Called with the GIL
// held; the round trips to the daemon release it.
class PyDraft {
 public:
  // The last holder (this Draft or a view of a frame) destroys the depot::Draft, which aborts
  // it when still open: a round trip, made without the GIL.
  explicit PyDraft(depot::Draft draft);

  std::string guid() const { return draft_->guid().ToString(); }
  py::list frames() const;

  // Seals after the device writes queued on `stream` are done: None (the legacy default
  // stream of each GPU of the draft), a CUstream handle as an int, or a stream object of CuPy
  // (.ptr), PyTorch (.cuda_stream) or one with __cuda_stream__ (CUDA Python's protocol).
  void Seal(py::object stream) { Finish(true, StreamHandle(stream)); }
  void Abort() { Finish(false, nullptr); }
  bool open() const { return open_; }

  void Exit(py::handle exc_type) {
    if (!open_) return;  // sealed or aborted inside the block
    Finish(exc_type.is_none(), nullptr);
  }

 private:
  static void* StreamHandle(py::handle stream);
  void Finish(bool seal, void* cuda_stream);

  std::shared_ptr<depot::Draft> draft_;
  bool open_ = true;
};

}  // namespace depot::python

#endif  // DEPOT_PYTHON_SRC_DRAFT_H_
