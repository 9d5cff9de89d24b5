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

void PyDraft::Finish(bool seal) {
  auto draft = draft_;
  depot::Status status = WithoutGil([&] { return seal ? draft->Seal() : draft->Abort(); });
  open_ = false;
  Check(status);
}

}  // namespace depot::python
