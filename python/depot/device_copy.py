"""``Client.put`` of objects with ``__cuda_array_interface__``: their bytes copied from the GPU
they are on to a device frame of depot's, device to device, never through the host.

How the copy is made depends on the device pool's kind (``status()["device_pools"]``): on a
``cuda`` pool, through the CUDA driver (libcuda.so.1, or the library ``$DEPOT_LIBCUDA`` names, as
for the C++ client); on the test daemon's ``memfd-test`` stand-ins, whose "device memory" is host
memory, a plain memmove.

The driver's rules the copy follows, none of which the calling thread may have arranged (Dask
runs transfers in threads that never touched CUDA):
 - every call runs with a context made current for it (the primary context of the GPU it works
   on, pushed and popped), never relying on the thread's;
 - the producer's stream (the interface's ``stream``) is waited for first, in its own context,
   and a failed wait is an error: the bytes may not be written yet;
 - ``cuMemcpy`` between devices returns before the bytes move, and the draft's seal waits only
   on the default stream of its pool's GPU: the copy is waited for before ``put`` goes on.
A device array's frame goes, unless ``places`` says otherwise, on the GPU the array is on (or the
first GPU of the pools, where the driver cannot say), so that no worker of another GPU copies into
memory of a GPU it cannot reach.
"""

import contextlib
import ctypes
import functools
import os
import threading

import depot

__all__ = ["contiguous_bytes", "has_device_interface", "put"]

# The CUDA Array Interface's stream values that name a default stream, not a CUstream handle.
_LEGACY_STREAM, _PER_THREAD_STREAM = 1, 2
_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9
_CUDA_SUCCESS = 0


def has_device_interface(x):
    return hasattr(x, "__cuda_array_interface__")


def contiguous_bytes(x):
    """(address, size) of a C-contiguous CAI object."""
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
    return interface["data"][0], size


def _producer_stream(x):
    """The stream whose work must finish before ``x``'s bytes may be read, or None."""
    interface = x.__cuda_array_interface__
    stream = interface.get("stream")
    return stream if stream not in (None, 0) and interface.get("version", 0) >= 3 else None


def _host_address(buffer):
    import numpy as np

    return np.frombuffer(memoryview(buffer).cast("B"), dtype=np.uint8).ctypes.data


@functools.cache
def _cuda():
    path = os.environ.get("DEPOT_LIBCUDA") or "libcuda.so.1"
    try:
        cuda = ctypes.CDLL(path)
    except OSError as e:
        raise depot.Unavailable(f"cannot load {path} to copy device memory: {e}") from None
    p, u64 = ctypes.c_void_p, ctypes.c_uint64
    for name, args in {
        "cuInit": [ctypes.c_uint],
        "cuDeviceGet": [ctypes.POINTER(ctypes.c_int), ctypes.c_int],
        "cuDeviceGetUuid_v2": [ctypes.c_char_p, ctypes.c_int],
        "cuDevicePrimaryCtxRetain": [ctypes.POINTER(p), ctypes.c_int],
        "cuCtxPushCurrent_v2": [p],
        "cuCtxPopCurrent_v2": [ctypes.POINTER(p)],
        "cuStreamGetCtx": [p, ctypes.POINTER(p)],
        "cuStreamSynchronize": [p],
        "cuMemcpy": [u64, u64, ctypes.c_size_t],
        "cuPointerGetAttribute": [p, ctypes.c_int, u64],
    }.items():
        getattr(cuda, name).argtypes = args
    _check(cuda.cuInit(0), "cuInit")
    return cuda


def _check(result, call):
    if result != _CUDA_SUCCESS:
        raise depot.Unavailable(f"{call} failed with CUDA error {result}")


_contexts_lock = threading.Lock()
_contexts = {}  # ordinal -> its primary context, retained once for the life of the process


def _primary_context(ordinal):
    with _contexts_lock:
        if ordinal not in _contexts:
            cu, device, context = _cuda(), ctypes.c_int(), ctypes.c_void_p()
            _check(cu.cuDeviceGet(ctypes.byref(device), ordinal), "cuDeviceGet")
            _check(cu.cuDevicePrimaryCtxRetain(ctypes.byref(context), device),
                   "cuDevicePrimaryCtxRetain")
            _contexts[ordinal] = context
        return _contexts[ordinal]


@contextlib.contextmanager
def _current(context):
    """``context`` current in this thread for the block, then whatever was before."""
    cu = _cuda()
    _check(cu.cuCtxPushCurrent_v2(context), "cuCtxPushCurrent")
    try:
        yield
    finally:
        cu.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))


def _ordinal_of(address):
    """The CUDA ordinal of the GPU whose memory ``address`` is, or None where the driver cannot
    say (host memory, or memory it does not know)."""
    ordinal = ctypes.c_int(-1)
    if _cuda().cuPointerGetAttribute(ctypes.byref(ordinal), _POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                     address) != _CUDA_SUCCESS:
        return None
    return ordinal.value


def _uuid_of(ordinal):
    """The GPU's UUID in nvidia-smi's form (as pools name GPUs)."""
    cu, device, raw = _cuda(), ctypes.c_int(), ctypes.create_string_buffer(16)
    _check(cu.cuDeviceGet(ctypes.byref(device), ordinal), "cuDeviceGet")
    _check(cu.cuDeviceGetUuid_v2(raw, device), "cuDeviceGetUuid")
    h = raw.raw.hex()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _wait_for_producer(stream, source, fallback_ordinal):
    """Waits for the producer's ``stream``, in its context, and fails when the wait does."""
    cu = _cuda()
    if stream in (_LEGACY_STREAM, _PER_THREAD_STREAM):
        # A default stream is the current context's: the source GPU's primary context, as CuPy's,
        # PyTorch's and Numba's are.
        ordinal = _ordinal_of(source)
        context = _primary_context(fallback_ordinal if ordinal is None else ordinal)
    else:
        context = ctypes.c_void_p()
        _check(cu.cuStreamGetCtx(ctypes.c_void_p(stream), ctypes.byref(context)),
               "cuStreamGetCtx")
    with _current(context):
        _check(cu.cuStreamSynchronize(ctypes.c_void_p(stream)), "cuStreamSynchronize")


def _copy(kind, target, src, size, stream=None):
    """Copies ``size`` bytes at ``src`` (device or host memory) into the draft's device frame
    ``target``, after the producer's ``stream``, and waits for the copy to finish."""
    if size == 0:
        return
    if kind == "memfd-test":
        ctypes.memmove(target.address, src, size)
        return
    cu = _cuda()
    ordinal = target.__dlpack_device__()[1]
    if stream is not None:
        _wait_for_producer(stream, src, ordinal)
    with _current(_primary_context(ordinal)):
        _check(cu.cuMemcpy(target.address, src, size), f"cuMemcpy of {size} bytes")
        _check(cu.cuStreamSynchronize(None), "cuStreamSynchronize after cuMemcpy")


def _place_of(frame, pools):
    """Where a device array's frame goes by default: the pool of the GPU it is on, where the
    driver says which and a pool has it; else the first pool."""
    first = next(iter(pools))
    if "cuda" not in pools.values():
        return first
    try:
        ordinal = _ordinal_of(contiguous_bytes(frame)[0])
        uuid = None if ordinal is None else _uuid_of(ordinal)
    except depot.Unavailable:
        return first
    return uuid if uuid in pools else first


def put(client, frames, places, **options):
    """Puts ``frames`` (buffers, and objects with ``__cuda_array_interface__``) as one object;
    ``places`` as for ``Client.put``, each device array's frame defaulting to the GPU it is on."""
    pools = {p["uuid"]: p["kind"] for p in client.status()["device_pools"]}
    if not pools:
        raise depot.Unavailable("the daemon has no device pools to put device arrays in")
    places = list(places) if places is not None else [
        _place_of(f, pools) if has_device_interface(f) else None for f in frames]
    sources = [contiguous_bytes(f) if has_device_interface(f) else None for f in frames]
    sizes = [s[1] if s else memoryview(f).nbytes for f, s in zip(frames, sources)]
    with client.create(sizes, places=places, **options) as draft:
        for frame, target, source, place in zip(frames, draft.frames, sources, places):
            if source is None and place is None:
                memoryview(target)[:] = memoryview(frame).cast("B")
            elif source is None:  # host bytes to a device frame
                _copy(pools[place], target, _host_address(frame), target.size)
            elif place is None:
                raise depot.InvalidArgument("a device array's frame must be placed on a GPU")
            else:
                _copy(pools[place], target, source[0], source[1], _producer_stream(frame))
    return draft.guid
