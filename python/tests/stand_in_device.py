"""A stand-in device array for the tests of depot.dask_device: bytes behind
__cuda_array_interface__, over host memory, as the memfd stand-in GPUs' device memory is host
memory. Its "cuda" serializers are registered on import, so that a Dask worker that unpickles the
type (by name: this module is on the workers' path) can deserialize it."""

import ctypes

import numpy as np
from distributed.protocol.cuda import cuda_deserialize, cuda_serialize


class StandInDeviceArray:
    def __init__(self, data):
        self.data = data
        self.__cuda_array_interface__ = {
            "shape": (data.nbytes,), "typestr": "|u1", "version": 3, "stream": None,
            "data": (data.ctypes.data, False), "strides": None}


@cuda_serialize.register(StandInDeviceArray)
def serialize_stand_in(x):
    return {"nbytes": x.data.nbytes}, [x]  # the frame is the device array itself


@cuda_deserialize.register(StandInDeviceArray)
def deserialize_stand_in(header, frames):
    """What the receiving task gets: the type of the frame it was handed, and the bytes' sum."""
    (frame,) = frames
    address = frame.__cuda_array_interface__["data"][0]
    data = np.frombuffer(ctypes.string_at(address, header["nbytes"]), dtype=np.uint8)
    return {"frame type": type(frame).__name__, "sum": int(data.sum(dtype=np.uint64))}
