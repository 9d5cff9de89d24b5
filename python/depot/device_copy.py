"""``Client.put`` of objects with ``__cuda_array_interface__``: their bytes copied from the GPU
they are on to a device frame of depot's, device to device, never through the host.

How the copy is made depends on the device pool's kind (``status()["device_pools"]``): on a
``cuda`` pool, ``cuMemcpy`` of the CUDA driver (unified addressing: the source may be on any
GPU), after waiting for the stream the producer names in its interface; on the test daemon's
``memfd-test`` stand-ins, whose "device memory" is host memory, a plain memmove. Nothing here has
run on a GPU yet (docs/python-and-dask.md says what has).
"""

import ctypes
import functools

import depot

__all__ = ["contiguous_bytes", "has_device_interface", "put"]


def has_device_interface(x):
    return hasattr(x, "__cuda_array_interface__")


def contiguous_bytes(x):
    """(address, size) of a C-contiguous CAI object, waiting for its producer's stream."""
    interface = x.__cuda_array_interface__
    shape = tuple(interface["shape"])
    itemsize = int(interface["typestr"][2:])
    size = itemsize
    for n in shape:
        size *= n
    strides = interface.get("strides")
    if strides is not None:
        expected, step = [], itemsize
        for n in reversed(shape):
            expected.insert(0, step)
            step *= n
        if tuple(strides) != tuple(expected) and size > 0:
            raise depot.InvalidArgument("a device array must be C-contiguous to be put; "
                                        "copy it to a contiguous one first")
    stream = interface.get("stream")
    if stream not in (None, 0) and interface.get("version", 0) >= 3:
        _cuda().cuStreamSynchronize(ctypes.c_void_p(stream))
    return interface["data"][0], size


def _host_address(buffer):
    import numpy as np

    return np.frombuffer(memoryview(buffer).cast("B"), dtype=np.uint8).ctypes.data


@functools.cache
def _cuda():
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        raise depot.Unavailable(f"cannot load libcuda.so.1 to copy device memory: {e}") from None
    cuda.cuMemcpy.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_size_t]
    cuda.cuStreamSynchronize.argtypes = [ctypes.c_void_p]
    return cuda


def _copy(kind, dst, src, size):
    if size == 0:
        return
    if kind == "memfd-test":
        ctypes.memmove(dst, src, size)
        return
    result = _cuda().cuMemcpy(dst, src, size)
    if result != 0:
        raise depot.Unavailable(f"cuMemcpy of {size} bytes failed with CUDA error {result}")


def put(client, frames, places, **options):
    """Puts ``frames`` (buffers, and objects with ``__cuda_array_interface__``) as one object;
    ``places`` as for ``Client.put``, each device array's frame defaulting to the first GPU."""
    pools = {p["uuid"]: p["kind"] for p in client.status()["device_pools"]}
    if not pools:
        raise depot.Unavailable("the daemon has no device pools to put device arrays in")
    places = list(places) if places is not None else [
        next(iter(pools)) if has_device_interface(f) else None for f in frames]
    sources = [contiguous_bytes(f) if has_device_interface(f) else None for f in frames]
    sizes = [s[1] if s else memoryview(f).nbytes for f, s in zip(frames, sources)]
    with client.create(sizes, places=places, **options) as draft:
        for frame, target, source, place in zip(frames, draft.frames, sources, places):
            if source is None and place is None:
                memoryview(target)[:] = memoryview(frame).cast("B")
            elif source is None:  # host bytes to a device frame
                _copy(pools[place], target.address, _host_address(frame), target.size)
            elif place is None:
                raise depot.InvalidArgument("a device array's frame must be placed on a GPU")
            else:
                _copy(pools[place], target.address, source[0], source[1])
    return draft.guid
