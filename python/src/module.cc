// depot._core: the C++ client bound for Python. The package `depot` (python/depot/) re-exports
// it and adds what is easier to write in Python (numpy helpers, the Dask integration).
//
// Lifetimes follow the C++ library's: a Python Object holds a depot::Object (a reference on the
// stored object), and every memoryview over one of its frames holds its own copy through the
// buffer exporter behind it, so the bytes stay mapped while any view lives, and the reference is
// released when the last one goes. The GIL is released around every call that talks to the
// daemon, so other Python threads run while a get waits.
//
// This file defines the module; the classes it exposes live beside it: client.h, draft.h,
// subscription.h, frames.h (the memoryviews), dicts.h (status, objects and events as dicts) and
// errors.h (the exception classes).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>

#include "depot/client.h"
#include "python/src/client.h"
#include "python/src/device_frame.h"
#include "python/src/draft.h"
#include "python/src/errors.h"
#include "python/src/frames.h"
#include "python/src/gil.h"
#include "python/src/subscription.h"

namespace py = pybind11;
using namespace py::literals;

using depot::python::BindDeviceFrame;
using depot::python::Check;
using depot::python::FrameBuffer;
using depot::python::FramesOf;
using depot::python::MakeErrorClasses;
using depot::python::PyClient;
using depot::python::PyDraft;
using depot::python::PySubscription;
using depot::python::ReadFrame;
using depot::python::WithoutGil;
using depot::python::WriteFrame;

PYBIND11_MODULE(_core, m) {
  m.doc() = "depot's C++ client bound for Python; use the package `depot`.";
  m.attr("errors") = MakeErrorClasses(m);
  BindDeviceFrame(m);

  py::class_<ReadFrame>(m, "_ReadFrame", py::buffer_protocol()).def_buffer([](ReadFrame& f) {
    auto bytes = f.object.frame(f.index);
    return FrameBuffer(bytes.data(), bytes.size(), true);
  });
  py::class_<WriteFrame>(m, "_WriteFrame", py::buffer_protocol()).def_buffer([](WriteFrame& f) {
    auto bytes = f.draft->frame(f.index);
    return FrameBuffer(bytes.data(), bytes.size(), false);
  });

  py::class_<depot::Object>(m, "Object", R"(A sealed object, read-only and zero-copy.

`frames` are read-only memoryviews over the shared pages. The process holds a reference on the
object while this Object or any view of its frames lives, so the bytes stay valid even after the
object is deleted; the reference is released when the last of them goes.)")
      .def_property_readonly("guid", [](const depot::Object& o) { return o.guid().ToString(); })
      .def_property_readonly("frames", &FramesOf,
                             "The frames, no copy: read-only memoryviews, and DeviceFrames for "
                             "frames on a GPU.")
      .def_property_readonly(
          "places",
          [](const depot::Object& o) {
            py::list places;
            for (size_t i = 0; i < o.frame_count(); ++i) {
              auto p = o.place(i);
              places.append(p.host() ? py::object(py::none()) : py::object(py::str(p.gpu)));
            }
            return places;
          },
          "Where each frame lives: None for the host, else the GPU's UUID.")
      .def_property_readonly(
          "metadata",
          [](const depot::Object& o) {
            auto m = o.metadata();
            return py::bytes(reinterpret_cast<const char*>(m.data()), m.size());
          },
          "The metadata bytes given at put or create.")
      .def_property_readonly("size", &depot::Object::size, "Total bytes over all frames.")
      .def_property_readonly("creator_uid", &depot::Object::creator_uid,
                             "The uid of the process that created the object.")
      .def_property_readonly("creator_pid", &depot::Object::creator_pid,
                             "The pid of the process that created the object.")
      .def_property_readonly(
          "checksum", &depot::Object::checksum,
          "The checksum (XXH3-64) recorded at seal when the creator asked for one, else None.")
      .def(
          "verify", [](const depot::Object& o) { Check(WithoutGil([&] { return o.Verify(); })); },
          "Hashes the bytes again and compares with the checksum: DataLoss when they differ, "
          "InvalidArgument when none was recorded.")
      .def("__len__", &depot::Object::frame_count)
      .def(
          "populate",
          [](const depot::Object& o) { Check(WithoutGil([&] { return o.Populate(); })); },
          "Fills the page tables for every frame now, so that first reads do not fault.")
      .def("__repr__", [](const depot::Object& o) {
        return "<depot.Object " + o.guid().ToString() + ", " + std::to_string(o.frame_count()) +
               " frames, " + std::to_string(o.size()) + " bytes>";
      });

  py::class_<PyDraft>(m, "Draft", R"(An object being written in place.

`frames` are writable memoryviews over shared memory. seal() publishes the object, abort()
discards it; as a context manager it seals when the block ends normally and aborts when it
raises. Do not write through the views after sealing.)")
      .def_property_readonly("guid", &PyDraft::guid)
      .def_property_readonly("frames", &PyDraft::frames)
      .def_property_readonly("open", &PyDraft::open, "False once sealed or aborted.")
      .def("seal", &PyDraft::Seal, "stream"_a = py::none(),
           R"(Publishes the object, after the device writes queued on `stream` are done: None
(the legacy default stream of each GPU of the draft's frames), a CUstream handle (int), or a
CuPy, PyTorch or CUDA Python stream object. Writes on other streams must be finished first.)")
      .def("abort", &PyDraft::Abort)
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PyDraft& d, py::handle type, py::handle, py::handle) { d.Exit(type); });

  py::class_<PySubscription>(m, "Subscription", "A stream of store events (see Client.subscribe).")
      .def("next", &PySubscription::Next, "timeout"_a = py::none(),
           "The next event as a dict, or None when none came within `timeout` seconds "
           "(None: wait without limit).");

  py::class_<PyClient>(m, "Client", R"(A connection to depotd, shared safely by threads.

`socket` defaults to $DEPOT_SOCKET, else the default socket path. The client trusts a daemon
that runs as its own uid or root, or as the owner of a socket directory only root could have
made (the service's /run/depot); `daemon_uid` (else $DEPOT_DAEMON_UID) names one more uid to
trust. Any other daemon raises PermissionDenied: another user could have placed it there.
Every call that talks to the daemon releases the GIL. A Client belongs to the process that made
it: after fork(), connect a new one in the child. When depotd goes away (a crash, a restart, an
upgrade) the client connects to the next one, trying for up to `reconnect_wait` seconds (0:
never), and the objects it holds stay held and unchanged.)")
      .def(py::init<std::optional<std::string>, std::optional<uid_t>, double>(),
           "socket"_a = py::none(), py::kw_only(), "daemon_uid"_a = py::none(),
           "reconnect_wait"_a = 10.0)
      .def_property_readonly("socket", &PyClient::socket)
      .def("put", &PyClient::Put, "data"_a, py::kw_only(), "name"_a = py::none(),
           "metadata"_a = py::none(), "guid"_a = py::none(), "evictable"_a = false,
           "checksum"_a = false, "owner_scoped"_a = false, "places"_a = py::none(),
           R"(Copies a buffer (or a list of buffers, one frame each) into a new sealed object.

Returns its GUID as a string. Buffers must be contiguous (bytes, bytearray, memoryview, a
contiguous numpy array). Raises StoreFull when it does not fit, AlreadyExists when `guid` is
taken. `checksum` records a checksum of the bytes at seal, for Object.verify(); an
`owner_scoped` object is deleted when this connection closes or its process exits. `places`:
per frame, None for the host or a GPU's UUID (see status()['device_pools']); the bytes are copied
from the host there.)")
      .def("create", &PyClient::Create, "sizes"_a, py::kw_only(), "name"_a = py::none(),
           "metadata"_a = py::none(), "guid"_a = py::none(), "evictable"_a = false,
           "checksum"_a = false, "owner_scoped"_a = false, "places"_a = py::none(),
           "Reserves an object of frames of the given sizes to write in place; returns a Draft. "
           "`places`: per frame, None for the host or a GPU's UUID: such a frame is a "
           "DeviceFrame.")
      .def("get", &PyClient::Get, "guid"_a, "timeout"_a = py::none(),
           R"(Gets a sealed object, zero-copy.

`timeout` in seconds: None does not wait (NotFound when absent), a number waits up to that long
for the object to be created and sealed (then Timeout), math.inf waits without limit.)")
      .def("get_many", &PyClient::GetMany, "guids"_a, "timeout"_a = py::none(),
           "Gets any number of objects (in batches of up to 2,048 per round trip), in order; the "
           "first failure raises.")
      .def("delete", &PyClient::Delete, "guids"_a,
           "Deletes one GUID or any number of them; memory is freed when the last holder lets "
           "go.")
      .def("contains", &PyClient::Contains, "guids"_a,
           "True when the object exists and is sealed; for a list of GUIDs, a list of bools.")
      .def("stat", &PyClient::Stat, "guid"_a, "What the daemon knows about one object, as a dict.")
      .def("list", &PyClient::List, "Every object in the store, as dicts.")
      .def("status", &PyClient::Status, "The daemon's status and counters, as a dict.")
      .def("ping", &PyClient::Ping, "One round trip that does nothing.")
      .def("subscribe", &PyClient::Subscribe,
           "A Subscription to every store event from now on, on a connection of its own.")
      .def("close", &PyClient::Close,
           "Closes the connection; objects and views already got stay readable.")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PyClient& c, py::handle, py::handle, py::handle) { c.Close(); });
}
