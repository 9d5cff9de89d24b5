"""depot for Dask: one copy of a large array per node instead of one per worker.

Two levels, usable together:

Explicit (the ``ray.put`` pattern): :func:`put` stores a value in the node's depot and returns a
small picklable :class:`Ref`; any task on any worker of the node calls ``ref.get()`` and receives
the value zero-copy (a read-only ``ndarray`` over the shared pages)::

    ref = depot.dask.put(weights)                       # one copy, into shared memory
    futures = client.map(lambda r, i: score(r.get(), i), [ref] * n, range(n))

Transparent: with the worker plugin (``client.register_worker_plugin(depot.dask.DepotPlugin())``)
or the one setting ``distributed.worker.preload: [depot.dask]``, data that a worker fetches from
another worker on the same node travels through depot: the sender copies each large frame into
shared memory once, the receiver maps it (zero-copy, read-only) and deletes it at once, and only
a small message goes over the socket. Workers on different nodes (or without depot) use Dask's
usual path, unchanged.

How: a Dask serialization family, ``"depot"``, tried first for worker-to-worker data. A worker's
comms announce, in their handshake, which depot daemon the worker uses; the family serializes
through depot only when the recipient announced the same daemon, and otherwise declines, so
Dask falls back to its ``"dask"`` and ``"pickle"`` families.
"""

import os
import pickle
import socket
import threading
import weakref

import depot
from dask.sizeof import sizeof
from distributed.comm.core import Comm
from distributed.diagnostics.plugin import WorkerPlugin
from distributed.protocol.serialize import (deserialize, families,
                                            register_serialization_family, serialize)
from distributed.utils import ensure_memoryview, nbytes

__all__ = ["DepotPlugin", "Ref", "client", "configure", "disable_transfers", "enable_transfers",
           "put", "transfer_stats", "FAMILY", "TRANSFER_NAME"]

#: The serialization family's name.
FAMILY = "depot"
#: The name of the objects that carry transfers between workers (see ``depotctl ls``).
TRANSFER_NAME = "dask transfer"
#: Frames smaller than this travel over the socket as usual: below about a megabyte, the two
#: round trips of a put and a get cost more than the copies they save.
DEFAULT_THRESHOLD = 1 << 20

_HANDSHAKE_KEY = "depot-node"
_PICKLE_METADATA = b'{"depot.pickle": 5}'

_lock = threading.Lock()
_socket = None
_client = None
_client_pid = None
_identity = None
_threshold = DEFAULT_THRESHOLD
_stats = {"sent": 0, "sent_bytes": 0, "received": 0, "received_bytes": 0}


def configure(socket_path=None, threshold=None):
    """Sets the daemon socket (default: $DEPOT_SOCKET, else the default path) and the size
    from which frames travel through depot, for this process."""
    global _socket, _client, _client_pid, _identity, _threshold
    with _lock:
        if socket_path is not None and socket_path != _socket:
            _socket, _client, _client_pid, _identity = socket_path, None, None, None
        if threshold is not None:
            _threshold = threshold


def client():
    """This process's depot.Client, connected on first use (and again in a forked child)."""
    global _client, _client_pid
    with _lock:
        if _client is None or _client_pid != os.getpid():
            _client = depot.Client(_socket)
            _client_pid = os.getpid()
        return _client


# --- explicit: put and Ref ---------------------------------------------------------------------


class Ref:
    """A reference to a value in depot: small, picklable, resolved with :meth:`get`.

    The ``Ref`` returned by :func:`put` owns the object and deletes it when it is garbage
    collected (or at :meth:`delete`); copies made by pickling (the ones tasks receive) do not.
    Keep the owner alive while tasks may still get the value: a task holding the value keeps its
    bytes mapped after the delete, but a get after it raises ``depot.NotFound``.
    """

    __slots__ = ("guid", "_finalizer", "__weakref__")

    def __init__(self, guid, *, _owner=False):
        self.guid = guid
        self._finalizer = (weakref.finalize(self, _delete_quietly, guid, os.getpid())
                           if _owner else None)

    def get(self, timeout=None):
        """The value, zero-copy: an ndarray is a read-only view of the shared pages; another
        value is unpickled with its out-of-band buffers left in shared memory."""
        obj = client().get(self.guid, timeout)
        if obj.metadata == _PICKLE_METADATA:
            return pickle.loads(obj.frames[0], buffers=obj.frames[1:])
        return depot.array_of(obj)

    def delete(self):
        """Deletes the object now (the owner's business; copies may call it too)."""
        if self._finalizer is not None:
            self._finalizer()
        else:
            _delete_quietly(self.guid, os.getpid())

    def __reduce__(self):
        return (Ref, (self.guid,))

    def __eq__(self, other):
        return isinstance(other, Ref) and other.guid == self.guid

    def __hash__(self):
        return hash(self.guid)

    def __repr__(self):
        return f"depot.dask.Ref({self.guid!r})"


def put(value, *, name=None):
    """Copies ``value`` into depot once and returns an owning :class:`Ref` to it.

    A numpy array is stored as its bytes with dtype and shape; any other value is pickled
    (protocol 5), its large buffers (numpy arrays inside, for instance) kept out of band as
    frames of their own, so that they too come back zero-copy.
    """
    import numpy as np

    c = client()
    if isinstance(value, np.ndarray) and not value.dtype.hasobject:
        return Ref(c.put_array(value, name=name), _owner=True)
    buffers = []

    def out_of_band(buffer):
        try:
            buffers.append(buffer.raw())
            return False
        except BufferError:  # not contiguous: pickled in band
            return True

    data = pickle.dumps(value, protocol=5, buffer_callback=out_of_band)
    return Ref(c.put([data, *buffers], name=name, metadata=_PICKLE_METADATA), _owner=True)


def _delete_quietly(guid, pid):
    if os.getpid() != pid:
        return  # a forked child's copy of the owner: the parent deletes
    try:
        client().delete(guid)
    except depot.Error:
        pass  # already deleted, or the daemon is gone: nothing left to free


# --- transparent: the serialization family -------------------------------------------------------


def node_identity():
    """Which daemon this process uses: host, boot, daemon pid and socket. Two processes with
    the same identity can pass objects by GUID. None when no daemon answers."""
    try:
        return _daemon_identity()
    except depot.Error:
        return None


def _daemon_identity():
    """node_identity(), raising the depot.Error that explains why there is none."""
    global _identity
    if _identity is None:
        status = client().status()
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot_id = f.read().strip()
        _identity = f"{socket.gethostname()}/{boot_id}/{status['daemon_pid']}/{status['socket']}"
    return _identity


def _dumps(x, context=None):
    """Serializes with Dask's own families, then moves the large frames into one depot object,
    when the recipient uses the same daemon; declines (NotImplementedError) otherwise."""
    recipient = (context or {}).get("recipient") or {}
    identity = recipient.get(_HANDSHAKE_KEY)
    if identity is None or identity != node_identity():
        raise NotImplementedError("the recipient does not share this process's depot")
    if sizeof(x) < _threshold:  # most messages: decline before serializing anything
        raise NotImplementedError("too small to be worth a trip through depot")
    try:
        header, frames = serialize(x, serializers=("dask", "pickle"), on_error="raise")
    except Exception as e:  # let the next family try, and report its error if it fails too
        raise NotImplementedError(str(e)) from e
    if any(c is not None for c in header.get("compression") or ()):
        raise NotImplementedError("frames already compressed")
    moved = [i for i, frame in enumerate(frames) if nbytes(frame) >= _threshold]
    if not moved:
        raise NotImplementedError("no frame large enough to be worth a trip through depot")
    try:
        guid = client().put([ensure_memoryview(frames[i]) for i in moved], name=TRANSFER_NAME)
    except (depot.Error, BufferError, ValueError) as e:  # a full store, a strided buffer...:
        raise NotImplementedError(str(e)) from e        # the socket still works
    moved_set = set(moved)
    _count("sent", sum(nbytes(frames[i]) for i in moved))
    _read_only(header)
    kept = [b"" if i in moved_set else frame for i, frame in enumerate(frames)]
    return {"guid": guid, "moved": moved, "inner": header}, kept


def _read_only(header):
    """Marks every frame of a header (and of the headers nested in it) read-only: the receiver's
    views of shared memory are, and Dask's deserializers copy a frame that should be writable
    but is not."""
    for key, value in header.items():
        if key == "writeable":
            header[key] = [False] * len(value)
        elif isinstance(value, dict):
            _read_only(value)


def _loads(header, frames):
    """Maps the frames the sender moved into depot, deletes their object (the views keep the
    bytes until the value is dropped) and deserializes as Dask would have."""
    c = client()
    obj = c.get(header["guid"])
    try:
        c.delete(header["guid"])
    except depot.NotFound:
        pass
    frames = list(frames)
    for i, view in zip(header["moved"], obj.frames):
        frames[i] = view
    _count("received", obj.size)
    return deserialize(header["inner"], frames)


def _count(direction, size):
    with _lock:
        _stats[direction] += 1
        _stats[direction + "_bytes"] += size


def transfer_stats():
    """This process's transfers through depot: how many were sent and received, and bytes."""
    with _lock:
        return dict(_stats)


register_serialization_family(FAMILY, _dumps, _loads)


def _announce_identity():
    """Adds this process's depot identity to the handshake of every comm it opens or accepts
    from now on, so that a sender learns whether its recipient shares its daemon. False when
    it already did."""
    original = Comm.handshake_info
    if getattr(original, "_depot", False):
        return False

    def handshake_info():
        info = original()
        identity = node_identity()
        if identity is not None:
            info[_HANDSHAKE_KEY] = identity
        return info

    handshake_info._depot = True
    Comm.handshake_info = staticmethod(handshake_info)
    return True


def enable_transfers(worker, threshold=None):
    """Makes the data this worker fetches from workers on its node travel through depot."""
    configure(threshold=threshold)
    _daemon_identity()  # raises when no daemon answers
    if _announce_identity():
        worker.rpc.collect()  # idle comms were opened before the handshake carried the identity
    # The families this worker asks its peers to serialize with: depot first, then every other
    # one as before (Dask's default order, then the rest, so that any reply stays readable).
    others = [f for f in ("dask", "pickle") if f in families]
    others += [f for f in families if f not in others and f != FAMILY]
    worker.rpc.deserializers = (FAMILY, *others)
    _delete_transfers(lambda pid: not _alive(pid))


def disable_transfers(worker):
    """Back to Dask's own path for the data this worker fetches (its peers still take depot
    transfers it asks for while enabled)."""
    worker.rpc.deserializers = None


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def _delete_transfers(created_by):
    """Deletes transfer objects whose creator pid satisfies ``created_by``: those of this
    worker when it closes, those of dead workers when one starts."""
    c = client()
    stale = [o["guid"] for o in c.list()
             if o["name"] == TRANSFER_NAME and created_by(o["creator_pid"])]
    for guid in stale:
        try:
            c.delete(guid)
        except depot.Error:
            pass  # its receiver deleted it meanwhile


class DepotPlugin(WorkerPlugin):
    """Connects each worker to depot and, with ``transfers`` (the default), sends the data
    exchanged by workers of one node through it (see the module's documentation).

    ``socket``: the daemon's socket (default: $DEPOT_SOCKET, else the default path);
    ``threshold``: frames from this size go through depot. When the worker closes, the
    transfers it sent that no receiver took are deleted.
    """

    name = "depot"

    def __init__(self, socket=None, transfers=True, threshold=DEFAULT_THRESHOLD):
        self.socket = socket
        self.transfers = transfers
        self.threshold = threshold

    def setup(self, worker):
        configure(self.socket, self.threshold)
        client()  # fail here, visibly, when no daemon answers
        if self.transfers:
            enable_transfers(worker, self.threshold)

    def teardown(self, worker):
        pid = os.getpid()
        try:
            _delete_transfers(lambda creator: creator == pid)
        except depot.Error:
            pass  # the daemon went first: it took the objects with it


def dask_setup(worker):
    """The preload hook: ``distributed.worker.preload: [depot.dask]`` enables transfers."""
    DepotPlugin().setup(worker)


def dask_teardown(worker):
    DepotPlugin().teardown(worker)
