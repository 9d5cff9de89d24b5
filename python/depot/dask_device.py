"""Device arrays between Dask workers of one node through depot's device pools.

A Dask serialization family, ``"depot-cuda"``, beside Dask's ``"cuda"`` one: for a value Dask's
``cuda`` family serializes (CuPy, Numba, RMM and cuDF objects, and any type registered with
``distributed.protocol.cuda.cuda_serialize``), the sender copies each device frame, device to
device, into one owner-scoped depot object of device frames (depot.device_copy), and only the
header crosses the socket; the receiver gets the object and hands its frames, as DeviceFrames
(``__cuda_array_interface__``), to Dask's ``cuda`` deserializer. Frames are never merged nor
copied through the host, which Dask's own path does with ``merge_frames``. Like the ``"depot"``
family (depot.dask_family) it declines (so Dask falls back) unless the recipient announced the
same daemon, the value is large enough, and the daemon has device pools.

depot's comms (depot.dask_comm) ask for this family first. Device frames land on the GPU the
sender's array is on (depot.device_copy). Nothing here has run on a GPU yet: it is tested
against the test daemon whose GPUs are memfd stand-ins.
"""

import depot
from depot import connection, dask_family, device_copy
from distributed.protocol.cuda import cuda_serialize
from distributed.protocol.serialize import deserialize, register_serialization_family, serialize
from distributed.utils import nbytes

__all__ = ["FAMILY"]

#: The serialization family's name.
FAMILY = "depot-cuda"


def _dumps(x, context=None):
    if not dask_family.shares_daemon(context):
        raise NotImplementedError("the recipient does not share this process's depot")
    # Most values are not device values: decline on the type, before serialize() would, as its
    # refusal formats the value and a traceback (milliseconds for a dataframe, on every transfer).
    try:
        cuda_serialize.dispatch(type(x))
    except TypeError:
        raise NotImplementedError("not a device value") from None
    threshold = dask_family.threshold()
    try:
        header, frames = serialize(x, serializers=("cuda",), on_error="raise")
    except Exception as e:  # not a device value: the next family tries
        raise NotImplementedError(str(e)) from e
    moved = [i for i, f in enumerate(frames)
             if device_copy.has_device_interface(f) and _size(f) >= threshold]
    if not moved:
        raise NotImplementedError("no device frame large enough to be worth a trip through depot")
    try:
        guid = device_copy.put(connection.client(), [frames[i] for i in moved], None,
                               name="dask device transfer", owner_scoped=True)
    except depot.Error as e:  # no device pools, a full pool...: the socket still works
        raise NotImplementedError(str(e)) from e
    moved_set = set(moved)
    kept = [b"" if i in moved_set else f for i, f in enumerate(frames)]
    return {"guid": guid, "moved": moved, "inner": header}, kept


def _size(frame):
    return device_copy.contiguous_bytes(frame)[1] if device_copy.has_device_interface(frame) \
        else nbytes(frame)


def _loads(header, frames):
    c = connection.client()
    obj = c.get(header["guid"])
    try:
        c.delete(header["guid"])  # the DeviceFrames keep the bytes mapped
    except depot.NotFound:
        pass
    frames = list(frames)
    for i, frame in zip(header["moved"], obj.frames):
        frames[i] = frame
    return deserialize(header["inner"], frames)


register_serialization_family(FAMILY, _dumps, _loads)
