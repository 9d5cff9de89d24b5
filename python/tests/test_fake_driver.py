"""The device path against a stand-in CUDA driver (tests/fake_libcuda.cc, loaded through
$DEPOT_LIBCUDA) whose two GPUs have the UUIDs of the memfd stand-in daemon's pools and whose
"device memory" is host memory. The fake enforces the driver rules the path must follow: no call
without a current context (CUDA_ERROR_INVALID_CONTEXT, as in a Dask thread that never touched
CUDA), cuMemcpy done only when its stream is waited for, a producer's stream whose queued writes
land only when it is waited for, and a stream that can fail. Not GPU coverage (the [cuda] tests
are): it shows the Python side and the library's CUDA support doing what a GPU needs of them.

The driver is loaded once per process, so each test runs in a child process of its own."""

import os
import subprocess
import sys
import textwrap

import pytest

from conftest import Daemon

FAKE = os.environ.get("FAKE_LIBCUDA")
pytestmark = pytest.mark.skipif(
    not FAKE or not os.path.exists(FAKE),
    reason=f"no stand-in CUDA driver ($FAKE_LIBCUDA is {FAKE!r}; ctest sets it)")

PRELUDE = """
import ctypes, os, threading
import numpy as np
import depot

GPU0 = "GPU-00000000-0000-4000-8000-000000000001"
GPU1 = "GPU-00000000-0000-4000-8000-000000000002"
fake = ctypes.CDLL(os.environ["DEPOT_LIBCUDA"])  # the very library the client loaded
fake.fake_cuda_register.argtypes = [ctypes.c_uint64, ctypes.c_size_t, ctypes.c_int]
fake.fake_cuda_defer_fill.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_int,
                                      ctypes.c_size_t]
fake.fake_cuda_fail_stream.argtypes = [ctypes.c_void_p, ctypes.c_int]
fake.fake_cuda_log.restype = ctypes.c_char_p


class CudaPools(depot.Client):
    # The stand-in pools, as the daemon of a real GPU names their kind: copies go through the
    # driver, here the fake.
    def status(self):
        s = super().status()
        for p in s["device_pools"]:
            p["kind"] = "cuda"
        return s


class DeviceArray:
    # A "device array" on fake GPU `ordinal`, with the producer's stream in its interface.
    def __init__(self, data, ordinal=0, stream=None):
        self.data = data
        fake.fake_cuda_register(data.ctypes.data, data.nbytes, ordinal)
        self.__cuda_array_interface__ = {
            "shape": data.shape, "typestr": data.dtype.str, "version": 3, "stream": stream,
            "data": (data.ctypes.data, False), "strides": None}


def stream_on(ordinal):
    # A stream created in the primary context of fake GPU `ordinal`.
    ctx, stream = ctypes.c_void_p(), ctypes.c_void_p()
    assert fake.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), ordinal) == 0
    assert fake.cuCtxPushCurrent_v2(ctx) == 0
    assert fake.cuStreamCreate(ctypes.byref(stream), 1) == 0
    assert fake.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p())) == 0
    return stream


def read(frame):
    interface = frame.__cuda_array_interface__
    return ctypes.string_at(interface["data"][0], interface["shape"][0])


def in_fresh_thread(fn):
    # Runs fn in a thread that never made a CUDA context current; returns or raises its result.
    out = {}
    def run():
        try:
            out["value"] = fn()
        except BaseException as e:
            out["error"] = e
    t = threading.Thread(target=run)
    t.start()
    t.join()
    if "error" in out:
        raise out["error"]
    return out["value"]


c = CudaPools(os.environ["SOCKET"])
"""


@pytest.fixture(scope="module")
def stand_in():
    d = Daemon("64MiB", daemon="MEMFD_DEPOTD", args=("--device-chunk-size", "16MiB"))
    yield d
    d.stop()


def run(stand_in, code):
    env = dict(os.environ, DEPOT_LIBCUDA=FAKE, SOCKET=stand_in.socket)
    done = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_library_finds_a_frames_gpu_through_the_driver(stand_in):
    """The library the binding links is built with CUDA support where the build has it: with a
    driver present, __dlpack_device__ answers the frame's ordinal (before depot::CudaOrdinal,
    the binding's copy of that code was compiled without DEPOT_HAVE_CUDA and answered "built
    without CUDA support" in every build)."""
    if os.environ.get("DEPOT_HAVE_CUDA") != "ON":
        pytest.skip("this build has no CUDA support (DEPOT_HAVE_CUDA is "
                    f"{os.environ.get('DEPOT_HAVE_CUDA')!r}): nothing to find an ordinal with")
    run(stand_in, """
        frame = c.get(c.put([b"z" * 10], places=[GPU1])).frames[0]
        assert frame.__dlpack_device__() == (2, 1), frame.__dlpack_device__()
        assert c.get(c.put([b"z" * 10], places=[GPU0])).frames[0].__dlpack_device__() == (2, 0)
    """)


def test_put_copies_from_a_thread_with_no_context(stand_in):
    run(stand_in, """
        source = np.arange(100000, dtype=np.uint8)
        guid = in_fresh_thread(lambda: c.put([DeviceArray(source)]))
        assert read(c.get(guid).frames[0]) == source.tobytes()
        log = fake.fake_cuda_log().decode()
        # The copy ran in the destination GPU's context and was waited for there.
        assert "cuMemcpy device=0\\ncuStreamSynchronize default device=0" in log, log
    """)


def test_put_waits_for_the_producers_stream_and_fails_when_the_wait_does(stand_in):
    run(stand_in, """
        source = np.zeros(4096, dtype=np.uint8)
        stream = stream_on(0)
        fake.fake_cuda_defer_fill(stream, source.ctypes.data, 7, source.nbytes)
        guid = in_fresh_thread(lambda: c.put([DeviceArray(source, 0, stream.value)]))
        assert read(c.get(guid).frames[0]) == b"\\7" * 4096

        failing = stream_on(0)
        fake.fake_cuda_fail_stream(failing, 700)  # CUDA_ERROR_ILLEGAL_ADDRESS
        try:
            c.put([DeviceArray(source, 0, failing.value)], name="never")
            raise AssertionError("a put whose producer's stream failed succeeded")
        except depot.Unavailable as e:
            assert "cuStreamSynchronize" in str(e) and "700" in str(e), e
        assert not [o for o in c.list() if o["name"] == "never"]
    """)


def test_device_arrays_go_on_the_gpu_they_are_on(stand_in):
    run(stand_in, """
        source = np.arange(5000, dtype=np.uint8)
        obj = c.get(c.put([b"header", DeviceArray(source, ordinal=1)]))
        assert obj.places == [None, GPU1], obj.places
        assert read(obj.frames[1]) == source.tobytes()
        assert "cuMemcpy device=1" in fake.fake_cuda_log().decode()
        host = np.arange(10, dtype=np.uint8)  # memory the driver does not know: the first GPU
        class Unknown:
            __cuda_array_interface__ = {"shape": (10,), "typestr": "|u1", "version": 3,
                                        "data": (host.ctypes.data, False)}
        assert c.get(c.put(Unknown())).places == [GPU0]
    """)


def test_dlpack_1_0_marks_an_objects_frames_read_only(stand_in):
    run(stand_in, """
        class DLTensor(ctypes.Structure):
            _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32),
                        ("device_id", ctypes.c_int32), ("ndim", ctypes.c_int32),
                        ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                        ("lanes", ctypes.c_uint16), ("shape", ctypes.POINTER(ctypes.c_int64)),
                        ("strides", ctypes.c_void_p), ("byte_offset", ctypes.c_uint64)]
        class Versioned(ctypes.Structure):
            _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32),
                        ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p),
                        ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]
        api = ctypes.pythonapi
        api.PyCapsule_GetName.restype, api.PyCapsule_GetName.argtypes = (
            ctypes.c_char_p, [ctypes.py_object])
        api.PyCapsule_GetPointer.restype, api.PyCapsule_GetPointer.argtypes = (
            ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p])

        def versioned(frame, **kw):
            capsule = frame.__dlpack__(max_version=(1, 0), **kw)
            assert api.PyCapsule_GetName(capsule) == b"dltensor_versioned"
            t = Versioned.from_address(api.PyCapsule_GetPointer(capsule, b"dltensor_versioned"))
            assert (t.major, t.minor) == (1, 0)
            assert t.dl_tensor.data == frame.address and t.dl_tensor.shape[0] == len(frame)
            assert (t.dl_tensor.device_type, t.dl_tensor.device_id) == frame.__dlpack_device__()
            return capsule, t.flags

        frame = c.get(c.put([b"r" * 4096], places=[GPU1])).frames[0]
        capsule, flags = versioned(frame)
        assert flags & 1, "an object's frame exported writable"
        _, flags = versioned(frame, dl_device=(2, 1), copy=False, stream=None)
        for kw in ({}, {"max_version": (0, 8)}, {"max_version": (1, 0), "dl_device": (2, 0)},
                   {"max_version": (1, 0), "copy": True}):
            try:
                frame.__dlpack__(**kw)
                raise AssertionError(f"__dlpack__({kw}) of a read-only frame succeeded")
            except BufferError:
                pass
        del frame, capsule  # the capsule's destructor frees what it held

        with c.create([4096], places=[GPU0]) as draft:
            (writable,) = draft.frames
            _, flags = versioned(writable)
            assert flags == 0
            legacy = writable.__dlpack__()  # unversioned DLPack for a writable frame
            assert api.PyCapsule_GetName(legacy) == b"dltensor"
            del legacy
    """)
