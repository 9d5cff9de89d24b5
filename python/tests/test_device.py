"""Device frames from Python. Without a GPU (here), against the test daemon whose GPUs are memfd
stand-ins (tests/memfd_depotd.cc): it exercises the Python plumbing (places, DeviceFrame, the
CUDA Array Interface, DLPack's refusal without a driver), whose "device memory" is host memory,
so a test can read it through its address. It is not GPU coverage: test_cuda.py is, and it
skips, saying why, where there is no GPU."""

import ctypes
import gc
import os

import pytest

import depot
from conftest import Daemon

GPU0 = "GPU-00000000-0000-4000-8000-000000000001"
GPU1 = "GPU-00000000-0000-4000-8000-000000000002"
MIB = 1 << 20


@pytest.fixture(scope="module")
def stand_in():
    d = Daemon("64MiB", daemon="MEMFD_DEPOTD", args=("--device-chunk-size", "16MiB"))
    yield d
    d.stop()


def read(frame):
    """The bytes of a stand-in device frame, read through its device address."""
    interface = frame.__cuda_array_interface__
    return ctypes.string_at(interface["data"][0], interface["shape"][0])


def test_device_frames_are_written_in_place_and_read_by_another_client(stand_in):
    writer = depot.Client(stand_in.socket)
    pools = {p["uuid"] for p in writer.status()["device_pools"]}
    assert {GPU0, GPU1} <= pools
    with writer.create([4096, MIB], places=[None, GPU0], name="mixed") as draft:
        host, device = draft.frames
        assert isinstance(host, memoryview) and isinstance(device, depot.DeviceFrame)
        assert device.gpu == GPU0 and len(device) == MIB and not device.readonly
        assert device.__cuda_array_interface__["data"][1] is False
        host[:5] = b"host!"
        ctypes.memmove(device.address, b"device" * 1000, 6000)
    obj = depot.Client(stand_in.socket).get(draft.guid)
    assert obj.places == [None, GPU0]
    host, device = obj.frames
    assert bytes(host[:5]) == b"host!"
    interface = device.__cuda_array_interface__
    assert interface == {"shape": (MIB,), "typestr": "|u1", "data": (device.address, True),
                         "version": 3, "strides": None, "stream": None}
    assert read(device)[:6000] == b"device" * 1000 and device.readonly


def test_put_copies_host_bytes_to_a_device(stand_in):
    c = depot.Client(stand_in.socket)
    guid = c.put([b"meta", b"x" * 100000], places=[None, GPU1])
    obj = c.get(guid)
    assert obj.places == [None, GPU1]
    assert read(obj.frames[1]) == b"x" * 100000


def test_a_device_frame_keeps_its_object_mapped(stand_in):
    c = depot.Client(stand_in.socket)
    guid = c.put([b"y" * 5000], places=[GPU0])
    frame = c.get(guid).frames[0]
    c.delete(guid)
    gc.collect()
    assert read(frame) == b"y" * 5000  # the object went from the index, not from this view


def test_dlpack_without_a_cuda_driver_says_why(stand_in):
    c = depot.Client(stand_in.socket)
    frame = c.get(c.put([b"z" * 10], places=[GPU0])).frames[0]
    # A build with CUDA support looks for the driver; one without says so.
    why = "cannot load libcuda" if os.environ.get("DEPOT_HAVE_CUDA") == "ON" else \
        "built without CUDA support"
    with pytest.raises(depot.Unavailable, match=why):
        frame.__dlpack_device__()
    with pytest.raises(depot.Unavailable, match=why):
        frame.__dlpack__(max_version=(1, 0))


def test_a_drafts_device_frame_is_not_handed_out_once_unmapped(stand_in):
    """A draft unmaps its frames when sealed or aborted, and the range may then be another
    mapping's: its DeviceFrames refuse to give the address out from then on."""
    c = depot.Client(stand_in.socket)
    for finish in ("seal", "abort"):
        draft = c.create([4096], places=[GPU0])
        (frame,) = draft.frames
        assert frame.address != 0 and frame.__cuda_array_interface__["data"][1] is False
        getattr(draft, finish)()
        for export in (lambda: frame.address, lambda: frame.__cuda_array_interface__,
                       lambda: frame.__dlpack__(max_version=(1, 0))):
            with pytest.raises(depot.InvalidArgument, match="unmapped"):
                export()
        assert len(frame) == 4096 and frame.gpu == GPU0  # what needs no mapping still answers


class Stream:
    """Stream objects as CuPy (.ptr), PyTorch (.cuda_stream) and CUDA Python (__cuda_stream__)
    name their CUstream."""

    def __init__(self, attribute, handle):
        if attribute == "__cuda_stream__":
            self.__cuda_stream__ = lambda: (0, handle)
        else:
            setattr(self, attribute, handle)


def test_seal_takes_the_stream_the_writes_were_queued_on(stand_in):
    """seal(stream=...) in every form a GPU library names a stream; the stand-ins have no
    streams to wait for, so this shows the argument reaching the library (the [cuda] test shows
    the wait)."""
    c = depot.Client(stand_in.socket)
    for stream in (None, 0, 12345, Stream("ptr", 1), Stream("cuda_stream", 2),
                   Stream("__cuda_stream__", 3)):
        draft = c.create([64], places=[GPU1])
        draft.seal(stream=stream)
        assert c.contains(draft.guid)
    draft = c.create([64], places=[GPU1])
    with pytest.raises(depot.InvalidArgument, match="stream"):
        draft.seal(stream="the default one")
    draft.abort()


def test_places_are_checked(stand_in):
    c = depot.Client(stand_in.socket)
    with pytest.raises(depot.InvalidArgument):
        c.create([10, 10], places=[GPU0])  # one place for two frames
    with pytest.raises(depot.Error):
        c.create([10], places=["GPU-not-a-pool"])


class FakeDeviceArray:
    """An object with __cuda_array_interface__ over host memory: on the stand-in GPUs, whose
    device memory is host memory, what a GPU array is to a real one."""

    def __init__(self, array, strides=None):
        self.array = array
        self.__cuda_array_interface__ = {
            "shape": array.shape, "typestr": array.dtype.str, "version": 3, "stream": None,
            "data": (array.ctypes.data, False), "strides": strides}


def test_put_copies_device_arrays_device_to_device(stand_in):
    import numpy as np

    c = depot.Client(stand_in.socket)
    source = np.arange(1000, dtype=np.float32)
    guid = c.put([b"header", FakeDeviceArray(source)])
    obj = c.get(guid)
    assert obj.places == [None, GPU0]  # the device array's frame on the first GPU
    assert bytes(obj.frames[0]) == b"header"
    assert read(obj.frames[1]) == source.tobytes()
    guid = c.put(FakeDeviceArray(source[:10]), places=[GPU1])
    assert read(c.get(guid).frames[0]) == source[:10].tobytes()
    with pytest.raises(depot.InvalidArgument, match="C-contiguous"):
        c.put(FakeDeviceArray(np.zeros((4, 4), np.float32), strides=(4, 16)))
    with pytest.raises(depot.InvalidArgument, match="placed on a GPU"):
        c.put([FakeDeviceArray(source)], places=[None])
