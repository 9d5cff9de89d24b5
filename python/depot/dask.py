"""depot for Dask: one copy of a large array per node instead of one per worker.

Two levels, usable together:

Explicit (the ``ray.put`` pattern): :func:`put` stores a value in the node's depot and returns a
small picklable :class:`Ref`; any task on any worker of the node calls ``ref.get()`` and receives
the value zero-copy (a read-only ``ndarray`` over the shared pages). With the worker plugin, a
Ref passed as a task argument (at top level or inside lists, tuples and dicts) arrives in the
task as the value itself::

    ref = depot.dask.put(weights)                       # one copy, into shared memory
    futures = client.map(score, [ref] * n, range(n))    # score(weights, i)

The local process scheduler: ``dask.compute(x, scheduler=depot.dask.get)`` (or
``scheduler="depot"``) runs Dask's multiprocessing scheduler with the buffers of task results
passed through depot instead of pipes (see depot.local_scheduler).

Transparent: with the worker plugin (``client.register_worker_plugin(depot.dask.DepotPlugin())``)
or the one setting ``distributed.worker.preload: [depot.dask]``, data that a worker fetches from
another worker on the same node travels through depot: the sender copies each large frame into
shared memory once, the receiver maps it (zero-copy, read-only) and deletes it at once, and only
a small message goes over the socket. Workers on different nodes (or without depot) use Dask's
usual path, unchanged.

Device values (CuPy and the other types Dask's ``"cuda"`` family serializes) go first to a
family of their own, ``"depot-cuda"`` (depot.dask_device): as device frames through the daemon's
device pools.

How: a Dask serialization family, ``"depot"``, tried (after ``"depot-cuda"``) for
worker-to-worker data. A worker's
comms announce, in their handshake, which depot daemon the worker uses; the family serializes
through depot only when the recipient announced the same daemon, and otherwise declines, so
Dask falls back to its ``"dask"`` and ``"pickle"`` families.
"""

import os
import threading

import dask.base
from dask.sizeof import sizeof
from distributed.comm.core import Comm
from distributed.diagnostics.plugin import WorkerPlugin
from distributed.protocol.serialize import (deserialize, families,
                                            register_serialization_family, serialize)
from distributed.utils import ensure_memoryview, nbytes

import depot
from depot import connection, dask_device
from depot.local_scheduler import ProcessScheduler, get
from depot.refs import Ref, put, resolve

__all__ = ["DepotPlugin", "ProcessScheduler", "Ref", "client", "configure", "disable_transfers",
           "enable_transfers", "get", "put", "resolve_refs_in_tasks", "transfer_stats", "FAMILY",
           "TRANSFER_NAME"]

#: The serialization family's name.
FAMILY = "depot"
#: The name of the objects that carry transfers between workers (see ``depotctl ls``).
TRANSFER_NAME = "dask transfer"
#: Frames smaller than this travel over the socket as usual. Measured between two workers
#: (bench/dask/bench_workloads.py's sweep), a fetch through depot costs about 0.6 ms more than
#: Dask's own at 16-64 KiB (its round trips to the daemon), breaks even near 512 KiB and is
#: 20-40% faster at 1 MiB.
DEFAULT_THRESHOLD = 512 << 10

_HANDSHAKE_KEY = "depot-node"

_lock = threading.Lock()
_threshold = DEFAULT_THRESHOLD
_stats = {"sent": 0, "sent_bytes": 0, "received": 0, "received_bytes": 0}


def configure(socket_path=None, threshold=None):
    """Sets the daemon socket (default: $DEPOT_SOCKET, else the default path) and the size
    from which frames travel through depot, for this process."""
    global _threshold
    connection.configure(socket_path)
    if threshold is not None:
        with _lock:
            _threshold = threshold


def client():
    """This process's depot.Client, connected on first use (and again in a forked child)."""
    return connection.client()


# --- transparent: the serialization family -------------------------------------------------------


def node_identity():
    """Which daemon this process uses: host, boot, daemon pid and socket. Two processes with
    the same identity can pass objects by GUID. None when no daemon answers."""
    try:
        return connection.daemon_identity()
    except depot.Error:
        return None


def shares_daemon(context):
    """Whether the recipient named in a serialization context announced this process's daemon."""
    recipient = (context or {}).get("recipient") or {}
    identity = recipient.get(_HANDSHAKE_KEY)
    return identity is not None and identity == node_identity()


def threshold():
    """The size from which frames travel through depot, in this process."""
    return _threshold


def _dumps(x, context=None):
    """Serializes with Dask's own families, then moves the large frames into one depot object,
    when the recipient uses the same daemon; declines (NotImplementedError) otherwise."""
    if not shares_daemon(context):
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
        guid = client().put([ensure_memoryview(frames[i]) for i in moved], name=TRANSFER_NAME,
                            owner_scoped=True)  # none outlives its sender
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
# dask.compute(..., scheduler="depot"): Dask looks names up in this table.
dask.base.named_schedulers.setdefault("depot", get)


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
    connection.daemon_identity()  # raises when no daemon answers
    if _announce_identity():
        worker.rpc.collect()  # idle comms were opened before the handshake carried the identity
    # The families this worker asks its peers to serialize with: depot first, then every other
    # one as before (Dask's default order, then the rest, so that any reply stays readable).
    # Device values first to their own family, so that the "depot" one does not copy them to the
    # host through Dask's "dask" family.
    ours = (dask_device.FAMILY, FAMILY)
    others = [f for f in ("dask", "pickle") if f in families]
    others += [f for f in families if f not in others and f not in ours]
    worker.rpc.deserializers = (*ours, *others)


def disable_transfers(worker):
    """Back to Dask's own path for the data this worker fetches (its peers still take depot
    transfers it asks for while enabled)."""
    worker.rpc.deserializers = None


def _delete_transfers(created_by):
    """Deletes transfer objects whose creator pid satisfies ``created_by``: those of this
    worker when it closes (its process may go on, and its connection with it). Those of a
    worker that dies go with its connection: they are owner-scoped."""
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
    ``threshold``: frames from this size go through depot; ``refs`` (the default): Refs in task
    arguments arrive as their values (:func:`resolve_refs_in_tasks`). When the worker closes,
    the transfers it sent that no receiver took are deleted.
    """

    name = "depot"

    def __init__(self, socket=None, transfers=True, threshold=DEFAULT_THRESHOLD, refs=True):
        self.socket = socket
        self.transfers = transfers
        self.threshold = threshold
        self.refs = refs

    def setup(self, worker):
        configure(self.socket, self.threshold)
        client()  # fail here, visibly, when no daemon answers
        if self.refs:
            resolve_refs_in_tasks(worker)
        if self.transfers:
            enable_transfers(worker, self.threshold)

    def teardown(self, worker):
        pid = os.getpid()
        try:
            _delete_transfers(lambda creator: creator == pid)
        except depot.Error:
            pass  # the daemon went first: it took the objects with it


def resolve_refs_in_tasks(worker):
    """Makes the Refs in the arguments of this worker's tasks (at top level or inside lists,
    tuples and dicts) arrive in the tasks as their values. False when it already did."""
    prepare = worker._prepare_args_for_execution
    if getattr(prepare, "_depot", False):
        return False

    def prepare_and_resolve(ts, args, kwargs):
        args, kwargs = prepare(ts, args, kwargs)
        return resolve(args), resolve(kwargs)

    prepare_and_resolve._depot = True
    worker._prepare_args_for_execution = prepare_and_resolve
    return True


def dask_setup(worker):
    """The preload hook: ``distributed.worker.preload: [depot.dask]`` enables transfers."""
    DepotPlugin().setup(worker)


def dask_teardown(worker):
    DepotPlugin().teardown(worker)
