// depot._core: the C++ client bound for Python. The package `depot` (python/depot/) re-exports
// it and adds what is easier to write in Python (numpy helpers, the Dask integration).
//
// Lifetimes follow the C++ library's: a Python Object holds a depot::Object (a reference on the
// stored object), and every memoryview over one of its frames holds its own copy through the
// buffer exporter behind it, so the bytes stay mapped while any view lives, and the reference is
// released when the last one goes. The GIL is released around every call that talks to the
// daemon, so other Python threads run while a get waits.
#include <Python.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "depot/client.h"

namespace py = pybind11;
using namespace py::literals;

namespace {

// --- errors -------------------------------------------------------------------------------

// Python exception classes, indexed by Status::Code. Created once at import and kept for the
// life of the interpreter (never destroyed: the module cannot be unloaded).
std::vector<py::handle>& ErrorClasses() {
  static auto* classes = new std::vector<py::handle>();
  return *classes;
}

// depot.Error and one subclass per status code, named as the code (depot.NotFound, ...). The
// names come from Status::CodeName, the one table of codes, so a code added there becomes an
// exception here without a change to this file.
py::dict MakeErrorClasses(py::module_& m) {
  constexpr int kMaxCode = 256;  // Code is uint16_t; names stop well before this
  py::dict by_name;
  auto* base = PyErr_NewExceptionWithDoc(
      "depot.Error", "A request to depot failed; the subclass names the status code.", nullptr,
      nullptr);
  m.attr("Error") = py::handle(base);
  auto& classes = ErrorClasses();
  classes.assign(kMaxCode, py::handle(base));
  for (int code = 1; code < kMaxCode; ++code) {
    std::string_view name = depot::Status::CodeName(static_cast<depot::Status::Code>(code));
    if (name == "Unknown") continue;
    std::string qualified = "depot." + std::string(name);
    auto* cls = PyErr_NewException(qualified.c_str(), base, nullptr);
    classes[code] = py::handle(cls);
    m.attr(std::string(name).c_str()) = py::handle(cls);
    by_name[std::string(name).c_str()] = py::handle(cls);
  }
  return by_name;
}

[[noreturn]] void Raise(const depot::Status& status) {
  auto code = static_cast<size_t>(status.code());
  auto& classes = ErrorClasses();
  PyErr_SetString(code < classes.size() ? classes[code].ptr() : classes[0].ptr(),
                  status.message().c_str());
  throw py::error_already_set();
}

[[noreturn]] void RaiseInvalidArgument(const std::string& message) {
  Raise(depot::Status::InvalidArgument(message));
}

void Check(const depot::Status& status) {
  if (!status.ok()) Raise(status);
}

template <typename T>
T Check(depot::Result<T>&& result) {
  if (!result.ok()) Raise(result.status());
  return std::move(result).value();
}

// Runs f with the GIL released: f must not touch Python objects.
template <typename F>
auto WithoutGil(F&& f) {
  py::gil_scoped_release release;
  return f();
}

// --- arguments ----------------------------------------------------------------------------

depot::Guid ParseGuid(const std::string& text) {
  auto guid = depot::Guid::Parse(text);
  if (!guid) RaiseInvalidArgument("not a GUID: '" + text + "' (expected 8-4-4-4-12 hex digits)");
  return *guid;
}

// Seconds as Python callers write them to the client's milliseconds: None polls (the C++
// default), a number waits that long, math.inf waits without limit.
std::chrono::milliseconds ToTimeout(std::optional<double> seconds) {
  if (!seconds) return depot::kNoWait;
  if (std::isinf(*seconds) && *seconds > 0) return depot::kForever;
  if (!(*seconds >= 0)) RaiseInvalidArgument("timeout must be >= 0 seconds, None or math.inf");
  return std::chrono::milliseconds(static_cast<int64_t>(std::ceil(*seconds * 1000)));
}

// A contiguous buffer borrowed from a Python object for the length of one call. Released in
// the destructor, which must run with the GIL held.
class Buffer {
 public:
  explicit Buffer(py::handle object) {
    if (PyObject_GetBuffer(object.ptr(), &view_, PyBUF_ANY_CONTIGUOUS) != 0) {
      throw py::error_already_set();
    }
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { PyBuffer_Release(&view_); }

  std::span<const std::byte> bytes() const {
    return {static_cast<const std::byte*>(view_.buf), static_cast<size_t>(view_.len)};
  }

 private:
  Py_buffer view_{};
};

// The keyword arguments of put and create, holding the metadata buffer while the call runs.
struct Options {
  depot::CreateOptions create;
  std::unique_ptr<Buffer> metadata;

  Options(std::optional<std::string> name, py::object metadata_object,
          std::optional<std::string> guid, bool evictable) {
    if (name) create.name = std::move(*name);
    if (!metadata_object.is_none()) {
      metadata = std::make_unique<Buffer>(metadata_object);
      create.metadata = metadata->bytes();
    }
    if (guid) create.guid = ParseGuid(*guid);
    create.evictable = evictable;
  }
};

// --- objects and drafts ---------------------------------------------------------------------

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

py::buffer_info FrameBuffer(const std::byte* data, size_t size, bool readonly) {
  static const std::byte kEmpty{};  // memoryviews need an address even for no bytes
  void* ptr = const_cast<std::byte*>(size == 0 ? &kEmpty : data);
  return py::buffer_info(ptr, 1, py::format_descriptor<uint8_t>::format(), 1,
                         {static_cast<py::ssize_t>(size)}, {1}, readonly);
}

py::memoryview ViewOf(py::object exporter) {
  return py::reinterpret_steal<py::memoryview>(PyMemoryView_FromObject(exporter.ptr()));
}

// A device frame's span is a GPU address range: a memoryview over it would fault on first read.
void CheckHost(const depot::Place& place, size_t i, const depot::Guid& guid) {
  if (place.host()) return;
  RaiseInvalidArgument("frame " + std::to_string(i) + " of " + guid.ToString() + " lives on GPU " +
                       place.gpu + ": device frames are not available from Python yet");
}

py::list FramesOf(const depot::Object& object) {
  py::list frames;
  for (size_t i = 0; i < object.frame_count(); ++i) {
    CheckHost(object.place(i), i, object.guid());
    frames.append(ViewOf(py::cast(ReadFrame{object, i})));
  }
  return frames;
}

// A Python Draft: the frames are writable views; seal() publishes, abort() discards, and as a
// context manager it seals on a clean exit and aborts when the block raises.
class PyDraft {
 public:
  // The last holder (this Draft or a view of a frame) destroys the depot::Draft, which aborts
  // it when still open: a round trip, made without the GIL.
  explicit PyDraft(depot::Draft draft)
      : draft_(new depot::Draft(std::move(draft)), [](depot::Draft* d) {
          py::gil_scoped_release release;
          delete d;
        }) {}

  std::string guid() const { return draft_->guid().ToString(); }

  py::list frames() const {
    py::list frames;
    for (size_t i = 0; i < draft_->frame_count(); ++i) {
      CheckHost(draft_->place(i), i, draft_->guid());
      frames.append(ViewOf(py::cast(WriteFrame{draft_, i})));
    }
    return frames;
  }

  void Seal() { Finish(true); }
  void Abort() { Finish(false); }
  bool open() const { return open_; }

  void Exit(py::handle exc_type) {
    if (!open_) return;  // sealed or aborted inside the block
    Finish(exc_type.is_none());
  }

 private:
  void Finish(bool seal) {
    auto draft = draft_;
    depot::Status status = WithoutGil([&] { return seal ? draft->Seal() : draft->Abort(); });
    open_ = false;
    Check(status);
  }

  std::shared_ptr<depot::Draft> draft_;
  bool open_ = true;
};

// --- dictionaries for inspection -------------------------------------------------------------

std::string_view StateName(depot::ObjectInfo::State s) {
  switch (s) {
    case depot::ObjectInfo::State::kCreating: return "creating";
    case depot::ObjectInfo::State::kSealed: return "sealed";
    case depot::ObjectInfo::State::kDeleted: return "deleted";
  }
  return "unknown";
}

py::dict ToDict(const depot::ObjectInfo& o) {
  py::list frames;
  for (const auto& f : o.frames) {
    frames.append(py::dict("pool"_a = f.pool, "segment"_a = f.segment, "offset"_a = f.offset,
                           "size"_a = f.size));
  }
  py::dict d("guid"_a = o.guid.ToString(), "name"_a = o.name, "state"_a = StateName(o.state),
             "size"_a = o.size, "frames"_a = frames, "refcount"_a = o.refcount,
             "evictable"_a = o.evictable, "created_unix_ns"_a = o.created_unix_ns,
             "sealed_unix_ns"_a = o.sealed_unix_ns, "creator_pid"_a = o.creator_pid,
             "creator_uid"_a = o.creator_uid, "metadata_size"_a = o.metadata_size);
  if (!o.metadata.empty()) {
    d["metadata"] = py::bytes(reinterpret_cast<const char*>(o.metadata.data()), o.metadata.size());
  }
  return d;
}

py::dict ToDict(const depot::StoreStatus& s) {
  py::dict errors;
  for (size_t code = 1; code < s.errors.size(); ++code) {
    if (s.errors[code] == 0) continue;
    errors[py::str(std::string(depot::Status::CodeName(static_cast<depot::Status::Code>(code))))] =
        s.errors[code];
  }
  return py::dict(
      "daemon_version"_a = s.daemon_version, "daemon_pid"_a = s.daemon_pid,
      "uptime_ms"_a = s.uptime_ms, "socket"_a = s.socket_path, "capacity"_a = s.capacity,
      "reserved"_a = s.reserved, "used"_a = s.used, "largest_free"_a = s.largest_free,
      "segments"_a = s.segments, "objects_creating"_a = s.objects_creating,
      "objects_sealed"_a = s.objects_sealed, "objects_deleted"_a = s.objects_deleted,
      "clients"_a = s.clients, "evictions"_a = s.evictions, "evicted_bytes"_a = s.evicted_bytes,
      "prefault"_a = s.prefault, "gets_waiting"_a = s.gets_waiting,
      "free_in_segments"_a = s.free_in_segments, "largest_free_block"_a = s.largest_free_block,
      "fragmentation"_a = s.fragmentation(), "requests"_a = s.requests,
      "connections"_a = s.connections, "errors"_a = errors);
}

py::dict ToDict(const depot::Event& e) {
  py::dict d("event"_a = std::string(depot::Event::KindName(e.kind)), "unix_ns"_a = e.unix_ns,
             "session"_a = e.session_id, "pid"_a = e.pid, "uid"_a = e.uid,
             "dropped_before"_a = e.dropped);
  if (!e.guid.is_nil()) {
    d["guid"] = e.guid.ToString();
    d["name"] = e.name;
    d["size"] = e.size;
  }
  return d;
}

// A stream of events on a connection of its own.
class PySubscription {
 public:
  explicit PySubscription(depot::Subscription s) : s_(std::move(s)) {}

  // The next event as a dict, or None when none came within the timeout.
  py::object Next(std::optional<double> timeout) {
    auto wait = timeout ? ToTimeout(timeout) : depot::kForever;
    auto event = WithoutGil([&] { return s_.Next(wait); });
    if (!event.ok() && event.status().IsTimeout()) return py::none();
    return ToDict(Check(std::move(event)));
  }

 private:
  depot::Subscription s_;
};

// --- the client --------------------------------------------------------------------------------

// A Python Client: one connection to depotd, usable from many threads. It belongs to the
// process that connected it; a child made by fork() must connect its own (the connection and
// its mappings do not cross fork), and using an inherited one raises depot.Disconnected.
class PyClient {
 public:
  explicit PyClient(std::optional<std::string> socket) : pid_(::getpid()) {
    depot::ConnectOptions options;
    options.socket_path = socket.value_or("");
    options.client_name = "python";
    client_.emplace(Check(WithoutGil([&] { return depot::Client::Connect(options); })));
  }

  std::string socket() { return client().socket_path(); }

  std::string Put(py::handle data, std::optional<std::string> name, py::object metadata,
                  std::optional<std::string> guid, bool evictable) {
    Options options(std::move(name), std::move(metadata), std::move(guid), evictable);
    std::vector<std::unique_ptr<Buffer>> buffers;
    if (py::isinstance<py::list>(data) || py::isinstance<py::tuple>(data)) {
      for (py::handle frame : data) buffers.push_back(std::make_unique<Buffer>(frame));
    } else {
      buffers.push_back(std::make_unique<Buffer>(data));
    }
    std::vector<std::span<const std::byte>> frames;
    for (const auto& b : buffers) frames.push_back(b->bytes());
    auto& c = client();
    auto id = WithoutGil([&] { return c.Put(frames, options.create); });
    return Check(std::move(id)).ToString();
  }

  PyDraft Create(std::vector<uint64_t> sizes, std::optional<std::string> name,
                 py::object metadata, std::optional<std::string> guid, bool evictable) {
    Options options(std::move(name), std::move(metadata), std::move(guid), evictable);
    auto& c = client();
    auto draft = WithoutGil([&] { return c.Create(sizes, options.create); });
    return PyDraft(Check(std::move(draft)));
  }

  depot::Object Get(const std::string& guid, std::optional<double> timeout) {
    depot::Guid id = ParseGuid(guid);
    auto wait = ToTimeout(timeout);
    auto& c = client();
    return Check(WithoutGil([&] { return c.Get(id, wait); }));
  }

  // All or nothing: the first failure raises (and the objects already got are released).
  std::vector<depot::Object> GetMany(const std::vector<std::string>& guids,
                                     std::optional<double> timeout) {
    std::vector<depot::Guid> ids;
    for (const auto& g : guids) ids.push_back(ParseGuid(g));
    auto wait = ToTimeout(timeout);
    auto& c = client();
    auto results = WithoutGil([&] { return c.Get(std::span<const depot::Guid>(ids), wait); });
    std::vector<depot::Object> objects;
    for (auto& r : results) objects.push_back(Check(std::move(r)));
    return objects;
  }

  // One GUID or a list of them; raises for the first that could not be deleted.
  void Delete(py::handle guids) {
    std::vector<depot::Guid> ids;
    if (py::isinstance<py::str>(guids)) {
      ids.push_back(ParseGuid(guids.cast<std::string>()));
    } else {
      for (py::handle g : guids) ids.push_back(ParseGuid(g.cast<std::string>()));
    }
    auto& c = client();
    auto statuses = WithoutGil([&] { return c.Delete(std::span<const depot::Guid>(ids)); });
    for (const auto& s : statuses) Check(s);
  }

  bool Contains(const std::string& guid) {
    depot::Guid id = ParseGuid(guid);
    auto& c = client();
    return Check(WithoutGil([&] { return c.Contains(id); }));
  }

  py::dict Stat(const std::string& guid) {
    depot::Guid id = ParseGuid(guid);
    auto& c = client();
    return ToDict(Check(WithoutGil([&] { return c.Stat(id); })));
  }

  // Every object, page by page.
  py::list List() {
    py::list all;
    std::optional<depot::Guid> after;
    auto& c = client();
    for (;;) {
      auto page = Check(WithoutGil([&] { return c.List(after); }));
      for (const auto& o : page.objects) all.append(ToDict(o));
      if (!page.more || page.objects.empty()) return all;
      after = page.objects.back().guid;
    }
  }

  py::dict Status() {
    auto& c = client();
    return ToDict(Check(WithoutGil([&] { return c.GetStatus(); })));
  }

  void Ping() {
    auto& c = client();
    Check(WithoutGil([&] { return c.Ping(); }));
  }

  PySubscription Subscribe() {
    auto& c = client();
    return PySubscription(Check(WithoutGil([&] { return c.Subscribe(); })));
  }

 private:
  depot::Client& client() {
    if (::getpid() != pid_) {
      Raise(depot::Status::Disconnected(
          "this Client was connected by process " + std::to_string(pid_) +
          "; a connection does not cross fork(): create a new depot.Client in process " +
          std::to_string(::getpid())));
    }
    return *client_;
  }

  pid_t pid_;
  std::optional<depot::Client> client_;
};

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "depot's C++ client bound for Python; use the package `depot`.";
  m.attr("errors") = MakeErrorClasses(m);

  py::class_<ReadFrame>(m, "_ReadFrame", py::buffer_protocol())
      .def_buffer([](ReadFrame& f) {
        auto bytes = f.object.frame(f.index);
        return FrameBuffer(bytes.data(), bytes.size(), true);
      });
  py::class_<WriteFrame>(m, "_WriteFrame", py::buffer_protocol())
      .def_buffer([](WriteFrame& f) {
        auto bytes = f.draft->frame(f.index);
        return FrameBuffer(bytes.data(), bytes.size(), false);
      });

  py::class_<depot::Object>(m, "Object", R"(A sealed object, read-only and zero-copy.

`frames` are read-only memoryviews over the shared pages. The process holds a reference on the
object while this Object or any view of its frames lives, so the bytes stay valid even after the
object is deleted; the reference is released when the last of them goes.)")
      .def_property_readonly("guid", [](const depot::Object& o) { return o.guid().ToString(); })
      .def_property_readonly("frames", &FramesOf, "The frames as read-only memoryviews (no copy).")
      .def_property_readonly(
          "metadata",
          [](const depot::Object& o) {
            auto m = o.metadata();
            return py::bytes(reinterpret_cast<const char*>(m.data()), m.size());
          },
          "The metadata bytes given at put or create.")
      .def_property_readonly("size", &depot::Object::size, "Total bytes over all frames.")
      .def("__len__", &depot::Object::frame_count)
      .def("populate",
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
      .def("seal", &PyDraft::Seal)
      .def("abort", &PyDraft::Abort)
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PyDraft& d, py::handle type, py::handle, py::handle) { d.Exit(type); });

  py::class_<PySubscription>(m, "Subscription", "A stream of store events (see Client.subscribe).")
      .def("next", &PySubscription::Next, "timeout"_a = py::none(),
           "The next event as a dict, or None when none came within `timeout` seconds "
           "(None: wait without limit).");

  py::class_<PyClient>(m, "Client", R"(A connection to depotd, shared safely by threads.

`socket` defaults to $DEPOT_SOCKET, else the default socket path. Every call that talks to the
daemon releases the GIL. A Client belongs to the process that made it: after fork(), connect a
new one in the child.)")
      .def(py::init<std::optional<std::string>>(), "socket"_a = py::none())
      .def_property_readonly("socket", &PyClient::socket)
      .def("put", &PyClient::Put, "data"_a, py::kw_only(), "name"_a = py::none(),
           "metadata"_a = py::none(), "guid"_a = py::none(), "evictable"_a = false,
           R"(Copies a buffer (or a list of buffers, one frame each) into a new sealed object.

Returns its GUID as a string. Buffers must be contiguous (bytes, bytearray, memoryview, a
contiguous numpy array). Raises StoreFull when it does not fit, AlreadyExists when `guid` is
taken.)")
      .def("create", &PyClient::Create, "sizes"_a, py::kw_only(), "name"_a = py::none(),
           "metadata"_a = py::none(), "guid"_a = py::none(), "evictable"_a = false,
           "Reserves an object of frames of the given sizes to write in place; returns a Draft.")
      .def("get", &PyClient::Get, "guid"_a, "timeout"_a = py::none(),
           R"(Gets a sealed object, zero-copy.

`timeout` in seconds: None does not wait (NotFound when absent), a number waits up to that long
for the object to be created and sealed (then Timeout), math.inf waits without limit.)")
      .def("get_many", &PyClient::GetMany, "guids"_a, "timeout"_a = py::none(),
           "Gets several objects in one round trip, in order; the first failure raises.")
      .def("delete", &PyClient::Delete, "guids"_a,
           "Deletes one GUID or a list of them; memory is freed when the last holder lets go.")
      .def("contains", &PyClient::Contains, "guid"_a, "True when the object exists and is sealed.")
      .def("stat", &PyClient::Stat, "guid"_a, "What the daemon knows about one object, as a dict.")
      .def("list", &PyClient::List, "Every object in the store, as dicts.")
      .def("status", &PyClient::Status, "The daemon's status and counters, as a dict.")
      .def("ping", &PyClient::Ping, "One round trip that does nothing.")
      .def("subscribe", &PyClient::Subscribe,
           "A Subscription to every store event from now on, on a connection of its own.");
}
