"""Values handed from one process of the node to another through depot, without copies.

:func:`dumps` pickles a value with protocol 5 (cloudpickle, so lambdas and local functions
travel too), places each large out-of-band buffer (a numpy array's bytes, for instance) in depot,
and returns a small payload; :func:`loads`, in any process of the node, maps those buffers back
(read-only, zero-copy) and unpickles the value around them. This is what the local process
scheduler (``depot.dask.get``), :class:`through_depot` for process pools and ``depot.cache`` use.

Ownership: the process that loads a payload owns the objects made for it, and deletes each when
the last view of it goes. A buffer that already lies in an object this process holds (an array
it loaded, passed on to another process) is not copied again: the payload names the object, and
its owner keeps it. So a value handed on from process to process is copied once in all.
The objects are owner-scoped: they go when the connection of the process that made them closes,
so a payload never loaded (a receiver that failed) does not outlive its sender; views already
taken stay readable.

Trust: a payload names each object by GUID and says which uid created it. :func:`loads` maps
an object only when the daemon says that uid (or the loading process's own) created it, and
raises :class:`depot.PermissionDenied` otherwise: once the sender's object is gone, another user
of a shared namespace could create one under the same GUID (a GUID belongs to whoever creates it
first) with bytes of its choosing.
"""

import os
import pickle

import cloudpickle

import depot
from depot import connection
from depot.holdings import HOLDINGS, exists, part

__all__ = ["dumps", "loads", "through_depot", "DEFAULT_THRESHOLD", "HANDOFF_NAME"]

#: Buffers smaller than this stay inside the payload: below about a megabyte, a put and a get
#: cost more than the copies they save.
DEFAULT_THRESHOLD = 1 << 20
#: The name of the objects that carry handed-off buffers (see ``depotctl ls``).
HANDOFF_NAME = "handoff"


def dumps(value, threshold=DEFAULT_THRESHOLD):
    """A small payload (bytes) from which :func:`loads` rebuilds ``value`` in any process of
    the node; buffers of ``threshold`` bytes or more travel through depot."""
    large = []

    def out_of_band(buffer):
        try:
            raw = buffer.raw()
        except BufferError:  # not contiguous: pickled in band
            return True
        if raw.nbytes < threshold:
            return True
        large.append(raw)
        return False

    data = cloudpickle.dumps(value, protocol=5, buffer_callback=out_of_band)
    # Per buffer: (guid, frame, offset, length, the receiver owns the object, creator uid).
    places = []
    new = []
    c = connection.client()
    for raw in large:
        held = HOLDINGS.find(raw)
        if held is not None and not exists(c, held[0]):
            held = None  # its maker's connection closed: mapped here, gone from depot
        if held is not None:
            guid, frame, offset, creator = held
            places.append((guid, frame, offset, raw.nbytes, False, creator))
        else:
            places.append((None, len(new), 0, raw.nbytes, True, os.getuid()))
            new.append(raw)
    if new:
        guid = c.put(new, name=HANDOFF_NAME, owner_scoped=True)
        places = [(guid if g is None else g, *rest) for g, *rest in places]
    return pickle.dumps((data, places), protocol=5)


def loads(payload):
    """The value that :func:`dumps` made ``payload`` of; its large buffers are read-only views
    of shared memory. :class:`depot.PermissionDenied` when an object the payload names was not
    created by the uid the payload says (nor by this process's uid): not the sender's bytes."""
    data, places = pickle.loads(payload)
    if not places:
        return pickle.loads(data)
    c = connection.client()
    objects = {}
    buffers = []
    for guid, frame, offset, length, owned, creator in places:
        if guid not in objects:
            obj = c.get(guid)
            if obj.creator_uid not in (creator, os.getuid()):
                raise depot.PermissionDenied(
                    f"handoff: object {guid} was created by uid {obj.creator_uid}, not by uid "
                    f"{creator} that handed it off: refusing its bytes")
            objects[guid] = obj.frames
            for i, view in enumerate(objects[guid]):
                HOLDINGS.add(view, guid, i, owned, obj.creator_uid)
        buffers.append(part(objects[guid], guid, frame, offset, length))
    return pickle.loads(data, buffers=buffers)


class through_depot:
    """Wraps a function so that its result comes back from a worker process through depot:
    ``pool.map(depot.handoff.through_depot(f), items)`` with ``multiprocessing.Pool`` or
    ``concurrent.futures.ProcessPoolExecutor``. The worker pickles the result with its large
    buffers placed in depot; the parent receives the value with those buffers mapped, read-only,
    zero-copy, and they are deleted from depot when the parent drops them.

    ``f`` must itself be picklable by the pool (a module-level function); the wrapper is.
    """

    def __init__(self, function, threshold=DEFAULT_THRESHOLD):
        self.function = function
        self.threshold = threshold

    def __call__(self, *args, **kwargs):
        return _Handed(dumps(self.function(*args, **kwargs), self.threshold))


class _Handed:
    """A result on its way back from a worker: unpickled in the parent as the value itself."""

    __slots__ = ("payload",)

    def __init__(self, payload):
        self.payload = payload

    def __reduce__(self):
        return loads, (self.payload,)
