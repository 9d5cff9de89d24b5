"""[cuda] The Python device path on a real GPU, through the CUDA driver (ctypes) and, where
importable, CuPy and PyTorch. Where there is no driver or no GPU every test skips, saying why;
ctest runs this file as `python_cuda` (label cuda) and reports it skipped then.

Each test is written so that the defect it is named after fails it: the copy path with no
current context (CUDA_ERROR_INVALID_CONTEXT from cuMemcpy), a seal that does not wait for the
stream the writes were queued on (the bytes read back are not all written), a read-only frame
exported as a writable DLPack tensor, and a frame unmapped under a copy still reading it
(CUDA_ERROR_ILLEGAL_ADDRESS)."""

import ctypes
import gc
import os
import threading

import pytest

import depot
from conftest import Daemon

MIB = 1 << 20
HOLD_US = 300_000  # how long a stream is held back by a host function


class Cuda:
    """The driver through ctypes, with the primary context of GPU 0 pushed around each call."""

    def __init__(self):
        path = os.environ.get("DEPOT_LIBCUDA") or "libcuda.so.1"
        try:
            self.lib = ctypes.CDLL(path)
        except OSError as e:
            pytest.skip(f"[cuda] no CUDA driver here: {e}")
        if (r := self.lib.cuInit(0)) != 0:
            pytest.skip(f"[cuda] cuInit failed with error {r}: no usable GPU here")
        count = ctypes.c_int()
        self.lib.cuDeviceGetCount(ctypes.byref(count))
        if count.value < 1:
            pytest.skip("[cuda] the CUDA driver sees no GPU")
        p, u64 = ctypes.c_void_p, ctypes.c_uint64
        for name, args in {"cuMemAlloc_v2": [ctypes.POINTER(u64), ctypes.c_size_t],
                           "cuMemsetD8_v2": [u64, ctypes.c_ubyte, ctypes.c_size_t],
                           "cuMemsetD8Async": [u64, ctypes.c_ubyte, ctypes.c_size_t, p],
                           "cuMemcpyDtoH_v2": [p, u64, ctypes.c_size_t],
                           "cuMemcpyDtoDAsync_v2": [u64, u64, ctypes.c_size_t, p],
                           "cuStreamCreate": [ctypes.POINTER(p), ctypes.c_uint],
                           "cuStreamSynchronize": [p],
                           "cuLaunchHostFunc": [p, p, p],
                           "cuCtxPushCurrent_v2": [p], "cuCtxPopCurrent_v2": [ctypes.POINTER(p)],
                           "cuDevicePrimaryCtxRetain": [ctypes.POINTER(p), ctypes.c_int]}.items():
            getattr(self.lib, name).argtypes = args
        self.context = p()
        self.check(self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(self.context), 0))
        # A host function that holds a stream back: libc's usleep, taking the microseconds as
        # its argument (no Python callback: it would need the GIL a waiting seal may hold).
        self.usleep = ctypes.cast(ctypes.CDLL(None).usleep, p)

    @staticmethod
    def check(r, what="CUDA call"):
        assert r == 0, f"{what} failed with CUDA error {r}"

    def call(self, name, *args):
        """Calls `name` with GPU 0's primary context current, then pops it; returns its result."""
        self.check(self.lib.cuCtxPushCurrent_v2(self.context), "cuCtxPushCurrent")
        try:
            return getattr(self.lib, name)(*args)
        finally:
            self.lib.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))

    def alloc(self, size, byte):
        ptr = ctypes.c_uint64()
        self.check(self.call("cuMemAlloc_v2", ctypes.byref(ptr), size), "cuMemAlloc")
        self.check(self.call("cuMemsetD8_v2", ptr.value, byte, size), "cuMemsetD8")
        return ptr.value

    def stream(self):
        s = ctypes.c_void_p()
        self.check(self.call("cuStreamCreate", ctypes.byref(s), 1), "cuStreamCreate")  # non-blocking
        return s

    def hold(self, stream):
        self.check(self.call("cuLaunchHostFunc", stream, self.usleep, ctypes.c_void_p(HOLD_US)),
                   "cuLaunchHostFunc")

    def read(self, address, size):
        out = ctypes.create_string_buffer(size)
        self.check(self.call("cuMemcpyDtoH_v2", out, address, size), "cuMemcpyDtoH")
        return out.raw


class DeviceArray:
    def __init__(self, address, size, stream=None):
        self.__cuda_array_interface__ = {"shape": (size,), "typestr": "|u1", "version": 3,
                                         "data": (address, False), "strides": None,
                                         "stream": stream}


@pytest.fixture(scope="module")
def cuda():
    return Cuda()


@pytest.fixture(scope="module")
def gpu_daemon(cuda):
    d = Daemon("256MiB", args=("--device-chunk-size", "256MiB"))
    status = depot.Client(d.socket).status()
    if not status["device_pools"]:
        d.stop()
        pytest.skip(f"[cuda] the daemon made no device pool: {status['devices_unavailable']}")
    yield d
    d.stop()


@pytest.fixture
def c(gpu_daemon):
    return depot.Client(gpu_daemon.socket)


def gpu_of(c):
    return c.status()["device_pools"][0]["uuid"]


def test_cuda_put_of_a_device_array_from_a_thread_with_no_context(cuda, c):
    source = cuda.alloc(MIB, 0x5A)
    out = {}
    t = threading.Thread(target=lambda: out.update(guid=c.put(DeviceArray(source, MIB))))
    t.start()
    t.join()
    frame = c.get(out["guid"]).frames[0]
    assert cuda.read(frame.address, MIB) == b"\x5a" * MIB


def test_cuda_put_waits_for_the_producers_stream(cuda, c):
    source = cuda.alloc(MIB, 0)
    stream = cuda.stream()
    cuda.hold(stream)
    cuda.check(cuda.call("cuMemsetD8Async", source, 0x33, MIB, stream), "cuMemsetD8Async")
    frame = c.get(c.put(DeviceArray(source, MIB, stream.value))).frames[0]
    assert cuda.read(frame.address, MIB) == b"\x33" * MIB


def test_cuda_seal_waits_for_the_stream_named(cuda, c):
    """The writes go on a non-blocking stream held back 300 ms; the read back goes through the
    legacy stream, which does not wait for it: only the seal's wait makes them visible."""
    draft = c.create([MIB], places=[gpu_of(c)])
    (frame,) = draft.frames
    stream = cuda.stream()
    cuda.hold(stream)
    cuda.check(cuda.call("cuMemsetD8Async", frame.address, 0x77, MIB, stream), "cuMemsetD8Async")
    draft.seal(stream=stream.value)
    obj = c.get(draft.guid)
    assert cuda.read(obj.frames[0].address, MIB) == b"\x77" * MIB


def test_cuda_dlpack_1_0_is_read_only_for_an_objects_frames(cuda, c):
    frame = c.get(c.put([b"\1" * 4096], places=[gpu_of(c)])).frames[0]
    api = ctypes.pythonapi
    api.PyCapsule_GetName.restype, api.PyCapsule_GetName.argtypes = (ctypes.c_char_p,
                                                                     [ctypes.py_object])
    capsule = frame.__dlpack__(max_version=(1, 0))
    assert api.PyCapsule_GetName(capsule) == b"dltensor_versioned"
    api.PyCapsule_GetPointer.restype = ctypes.c_void_p
    api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    flags = ctypes.c_uint64.from_address(api.PyCapsule_GetPointer(capsule, b"dltensor_versioned")
                                         + 24).value  # version, manager_ctx, deleter, flags
    assert flags & 1
    with pytest.raises(BufferError):
        frame.__dlpack__()  # unversioned: it cannot say read-only
    assert frame.__dlpack_device__()[0] == 2  # kDLCUDA


def test_cuda_torch_and_cupy_import_device_frames(cuda, c):
    """Whichever of PyTorch and CuPy is importable imports a frame without a copy and reads its
    bytes; skipped, saying so, where neither is."""
    frame = c.get(c.put([bytes(range(256)) * 16], places=[gpu_of(c)])).frames[0]
    tried = []
    try:
        import torch
    except ImportError:
        pass
    else:
        tried.append("torch")
        t = torch.from_dlpack(frame)
        assert t.is_cuda and t.data_ptr() == frame.address
        assert bytes(t.cpu().numpy()) == bytes(range(256)) * 16
    try:
        import cupy
    except ImportError:
        pass
    else:
        tried.append("cupy")
        a = cupy.asarray(frame)  # the CUDA Array Interface
        assert a.data.ptr == frame.address
        assert bytes(cupy.asnumpy(a)) == bytes(range(256)) * 16
    if not tried:
        pytest.skip("[cuda] neither torch nor cupy is importable here")


def test_cuda_a_frame_is_not_unmapped_under_a_copy_still_reading_it(cuda, c):
    """A copy from a frame, held back 300 ms, then the Object dropped and deleted: its chunk (of
    its own) is unmapped at the next request. The copy must still read the object's bytes."""
    size = 200 * MIB  # more than half a chunk: a chunk of its own
    guid = c.put(DeviceArray(cuda.alloc(size, 0x3C), size))
    target = cuda.alloc(size, 0)
    stream = cuda.stream()
    obj = c.get(guid)
    cuda.hold(stream)
    cuda.check(cuda.call("cuMemcpyDtoDAsync_v2", target, obj.frames[0].address, size, stream),
               "cuMemcpyDtoDAsync")
    del obj
    gc.collect()
    c.delete(guid)
    c.status()  # the retired chunk is let go of here
    cuda.check(cuda.call("cuStreamSynchronize", stream), "the copy from the dropped frame")
    assert cuda.read(target, size) == b"\x3c" * size
