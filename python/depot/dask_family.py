"""The ``"depot"`` Dask serialization family: large frames between processes of one node.

For a value at least :func:`threshold` bytes large, the sender serializes it with Dask's own
``"dask"`` and ``"pickle"`` families, finds each frame of that size or more in depot or copies
it there, and sends only the header, which names where each lies; the receiver maps the frames
(zero-copy, read-only) and deserializes as Dask would have. A value enters depot once: the
sender copies its frames into one owner-scoped object the first time and keeps it while the
value lives, so every later send of it names the same object; a value that arrived through depot
lies in an object already, which is named as long as its owner keeps it (depot.holdings). Each
receiver's views keep the bytes they map. An object no sender keeps (a value of bytes, or one
partly named) is deleted by its receiver, once mapped.
The family declines (``NotImplementedError``, so Dask tries its next family) unless the
recipient announced, in its comm's handshake, the same daemon as this process's: depot's comms
(depot.dask_comm) announce it and ask for this family first. They also serialize a large
collection of small plain records whole, every frame in one object (:func:`dumps_whole`), where
Dask would send each record on its own.

A recipient in the sender's own process (a P2P shuffle sends a worker's shards for its own
outputs through its own listener) is handed the large frames by reference, read-only, as Dask's
``inproc://`` comms hand whole messages: nothing is copied, and depot is not asked. The frames
wait in this process, under the reading end of their connection, until it takes them or closes,
or until the write that handed them fails.
"""

import contextvars
import itertools
import os
import threading
import uuid
import weakref

from dask.sizeof import sizeof
from distributed.protocol.serialize import deserialize, register_serialization_family, serialize
from distributed.utils import ensure_memoryview, nbytes

import depot
from depot import connection
from depot.holdings import HOLDINGS, address, exists, exporter, part

__all__ = ["DEFAULT_THRESHOLD", "END_KEY", "FAMILY", "HANDSHAKE_KEY", "KEPT_HOOKS",
           "PROCESS_KEY", "TRANSFER_NAME", "Handing", "drop_in_process", "dumps_whole",
           "kept_frames", "new_end", "node_identity", "plain_total", "process_identity",
           "read_only", "set_threshold", "shares_daemon", "threshold", "transfer_stats"]

#: The serialization family's name.
FAMILY = "depot"
#: The name of the objects that carry transfers between processes (see ``depotctl ls``).
TRANSFER_NAME = "dask transfer"
#: The key of a comm's handshake that names the daemon its process uses.
HANDSHAKE_KEY = "depot-node"
#: The keys of a comm's handshake that name its process (process_identity) and its end of the
#: connection within the process (new_end).
PROCESS_KEY = "depot-process"
END_KEY = "depot-end"
#: Frames smaller than this travel over the socket as usual. Measured between two workers
#: (bench/dask/bench_workloads.py's sweep), a fetch through depot costs about 0.6 ms more than
#: Dask's own at 16-64 KiB (its round trips to the daemon), breaks even near 512 KiB and is
#: 20-40% faster at 1 MiB.
DEFAULT_THRESHOLD = 512 << 10

_lock = threading.Lock()
_threshold = DEFAULT_THRESHOLD
_stats = {"sent": 0, "sent_bytes": 0, "named": 0, "named_bytes": 0, "received": 0,
          "received_bytes": 0, "in_process": 0, "in_process_bytes": 0}
_process = (None, None)  # (pid, identity): made again in a forked child
_handed = {}  # token -> (reading end, frames) of the values handed to a reader in this process
_counter = itertools.count()


def set_threshold(size):
    """Frames of ``size`` bytes or more travel through depot, in this process."""
    global _threshold
    with _lock:
        _threshold = size


def threshold():
    """The size from which frames travel through depot, in this process."""
    return _threshold


def node_identity():
    """Which daemon this process uses: host, boot, daemon pid and socket. Two processes with
    the same identity can pass objects by GUID. None when no daemon answers."""
    try:
        return connection.daemon_identity()
    except depot.Error:
        return None


def process_identity():
    """This process, told apart from every other (a forked child included) for as long as the
    node runs."""
    global _process
    pid = os.getpid()
    with _lock:
        if _process[0] != pid:
            _process = (pid, f"{pid}/{uuid.uuid4().hex}")
        return _process[1]


def new_end():
    """A name for one end of a connection, unique in this process."""
    with _lock:
        return next(_counter)


def shares_daemon(context):
    """Whether the recipient named in a serialization context announced this process's daemon."""
    recipient = (context or {}).get("recipient") or {}
    identity = recipient.get(HANDSHAKE_KEY)
    return identity is not None and identity == node_identity()


# Values that hold no buffer of their own, and those whose size is their length.
_SCALARS = frozenset({int, float, bool, complex, type(None)})
_SIZED = frozenset({bytes, bytearray, str})


def _plain_size(x, depth=2):
    """The size of a plain value (a scalar, a string or bytes, or a short tuple of them), or None
    for any other: a refusal then costs no call of Dask's sizeof, which takes longer than the
    rest of it. Dask offers each element of a value sent on its own: a shuffle's piece of 780
    records is 780 offers."""
    t = type(x)
    if t in _SCALARS:
        return 0
    if t in _SIZED:
        return len(x)
    if t is tuple and depth and len(x) <= 8:
        total = 0
        for item in x:
            size = _plain_size(item, depth - 1)
            if size is None:
                return None
            total += size
        return total
    return None


def _dumps(x, context=None, every_frame=False, size=None):
    """Serializes with Dask's own families, then moves the large frames (``every_frame``: all of
    them) into one depot object, when the recipient uses the same daemon; declines
    (NotImplementedError) otherwise. `size`: sizeof(x), when the caller has it."""
    if size is None:
        size = _plain_size(x)
    if (size if size is not None else sizeof(x)) < _threshold:
        raise NotImplementedError("too small to be worth a trip through depot")  # most values
    if not shares_daemon(context):
        raise NotImplementedError("the recipient does not share this process's depot")
    try:
        header, frames = serialize(x, serializers=("dask", "pickle"), on_error="raise")
    except Exception as e:  # let the next family try, and report its error if it fails too
        raise NotImplementedError(str(e)) from e
    if any(c is not None for c in header.get("compression") or ()):
        raise NotImplementedError("frames already compressed")
    least = 1 if every_frame else _threshold
    moved = [i for i, frame in enumerate(frames) if nbytes(frame) >= least]
    if not moved:
        raise NotImplementedError("no frame large enough to be worth a trip through depot")
    recipient = context.get("recipient") or {}
    if recipient.get(PROCESS_KEY) == process_identity() and END_KEY in recipient:
        handed, views = {"token": _hand(recipient[END_KEY], [frames[i] for i in moved])}, None
    else:
        try:
            handed, views = _place([ensure_memoryview(frames[i]) for i in moved])
        except (depot.Error, BufferError, ValueError) as e:  # a full store, a strided buffer:
            raise NotImplementedError(str(e)) from e        # the socket still works
    moved_set = set(moved)
    read_only(header)
    if views is not None:
        _tell_kept(header, frames, moved, views)
    kept = [b"" if i in moved_set else frame for i, frame in enumerate(frames)]
    return {**handed, "moved": moved, "inner": header}, kept


def _plain_items(x, sample=None):
    """The total size of the values of a collection (a dict: its values), or of its first
    `sample`, when each is plain (see _plain_size); None for anything else."""
    if type(x) is dict:
        x = x.values()
    elif type(x) not in (list, tuple, set):
        return None
    total = 0
    for seen, item in enumerate(x):
        if seen == sample:
            break
        size = _plain_size(item)
        if size is None:
            return None
        total += size
    return total


def plain_total(x):
    """The size of a plain value, or of a collection of nothing but plain values; None for
    anything else."""
    size = _plain_size(x)
    return size if size is not None else _plain_items(x)


def dumps_whole(x, context):
    """A collection of small plain records, large as a whole, serialized in one piece through
    depot: Dask would offer each record on its own to every family, then serialize and send it
    as a frame of its own (a piece of 780 records of 1 KiB took 7.8 ms that way, 1.6 ms whole,
    on Dask 2022.12.1).
    The header and frames of a ``Serialized``; NotImplementedError when depot cannot take it, or
    when its records are large (each then goes its own way, as Dask sends them)."""
    if _plain_items(x, sample=8) is None or not x:  # the records of a bag, lines of text...
        raise NotImplementedError("not a collection of plain records")
    size = sizeof(x)
    if size >= _threshold * len(x):
        raise NotImplementedError("records large enough to travel on their own")
    header, frames = _dumps(x, context, every_frame=True, size=size)
    header["serializer"] = FAMILY
    return header, frames


def read_only(header):
    """Marks every frame of a header (and of the headers nested in it) read-only: the receiver's
    views of shared memory are, and Dask's deserializers copy a frame that should be writable
    but is not."""
    for key, value in header.items():
        if key == "writeable":
            header[key] = [False] * len(value)
        elif isinstance(value, dict):
            read_only(value)


class Handing:
    """What one write hands within this process (DepotComm.write sets HANDING to one): dropped
    when the write fails, and nothing more handed for it after that (a serialization offloaded
    to a thread goes on after the write it was for is cancelled)."""

    def __init__(self):
        self.tokens = []
        self.abandoned = False

    def abandon(self):
        with _lock:
            self.abandoned = True
            for token in self.tokens:
                _handed.pop(token, None)


#: The Handing of the write being serialized in this context.
HANDING = contextvars.ContextVar("depot_handing", default=None)


def _hand(end, frames):
    """Keeps read-only views of `frames` for the reading end `end` in this process; returns the
    token that names them."""
    views = [ensure_memoryview(frame).toreadonly() for frame in frames]
    handing = HANDING.get()
    identity = process_identity()
    with _lock:
        if handing is not None and handing.abandoned:
            raise NotImplementedError("the write this value was for failed")
        token = f"{identity}/{next(_counter)}"
        _handed[token] = (end, views)
        if handing is not None:
            handing.tokens.append(token)
    _count("in_process", sum(view.nbytes for view in views))
    return token


def drop_in_process(end):
    """The reading end `end` closed: drops what was handed to it and never taken."""
    with _lock:
        for token in [t for t, (to, _) in _handed.items() if to == end]:
            del _handed[token]


def _take(header):
    """The frames a sender moved out of the message: taken from this process, or mapped from
    depot, whose object is deleted then (the views keep the bytes until the value is dropped)."""
    if "token" in header:
        with _lock:
            handed = _handed.pop(header["token"], None)
        if handed is None:
            raise ValueError("a value handed within this process is gone: its connection or its"
                             " write failed, or it came from another process")
        return handed[1]
    c = connection.client()
    frames = {}
    views = []
    for guid, frame, offset, length, creator in header["places"]:
        if guid not in frames:
            obj = c.get(guid)
            if obj.creator_uid not in (creator, os.getuid()):
                raise depot.PermissionDenied(
                    f"object {guid} was created by uid {obj.creator_uid}, not by uid {creator} "
                    "that sent it: refusing its bytes")
            frames[guid] = obj.frames
            for i, view in enumerate(frames[guid]):
                HOLDINGS.add(view, guid, i, False, obj.creator_uid)
            _count("received", obj.size)
        views.append(part(frames[guid], guid, frame, offset, length))
    for guid in header.get("delete", ()):  # no sender keeps it: the views here keep its bytes
        try:
            c.delete(guid)
        except depot.NotFound:
            pass
    return views


def _loads(header, frames):
    """Puts back the frames the sender moved out (_take) and deserializes as Dask would have."""
    frames = list(frames)
    for i, view in zip(header["moved"], _take(header)):
        frames[i] = view
    return deserialize(header["inner"], frames)


# The objects this process put for values it still holds, by their buffers' (address, size):
# (weak references to the buffers' exporters, the object's frames). A later send of the same
# value names the object again; it goes when the value does (depot.holdings deletes it when the
# last view of it in this process goes).
_kept = {}
# The buffers being named or copied into depot now, by the same key: an Event set when done.
_placing = {}


def _place(buffers):
    """Where a receiver finds `buffers` in depot: the header part that names, per buffer, (guid,
    frame, offset, length, creator uid). A buffer that lies in an object this process maps (a
    value received through depot, or one put for an earlier send of the same value) is named,
    not copied; the others are copied into one new owner-scoped object, which this process keeps
    while their exporters live, so that every receiver of the value maps the same one.
    Also returns the new object's frames when this process keeps it, else None."""
    key = tuple((address(b), b.nbytes) for b in buffers)
    with _lock:
        kept = _kept.get(key)
    if kept is not None and all(ref() is not None for ref in kept[0]):
        guid, uid = kept[1], os.getuid()
        _count("named", sum(b.nbytes for b in buffers))
        return {"places": [(guid, i, 0, b.nbytes, uid) for i, b in enumerate(buffers)]}, None
    done = threading.Event()
    with _lock:
        _placing[key] = done
    try:
        return _name_or_copy(buffers, key)
    finally:
        with _lock:
            if _placing.get(key) is done:
                del _placing[key]
        done.set()


def _name_or_copy(buffers, key):
    """_place's work for buffers no kept object holds: names those found in HOLDINGS, copies
    the others into a new object."""
    c = connection.client()
    places = [HOLDINGS.find(b) for b in buffers]
    for guid in {p[0] for p in places if p is not None}:
        if not exists(c, guid):  # mapped here, gone from depot: its owner let it go
            places = [None if p is not None and p[0] == guid else p for p in places]
    places = [None if p is None else (p[0], p[1], p[2], b.nbytes, p[3])
              for p, b in zip(places, buffers)]
    named = sum(b.nbytes for p, b in zip(places, buffers) if p is not None)
    if named:
        _count("named", named)
    new = [i for i, p in enumerate(places) if p is None]
    if not new:
        return {"places": places}, None
    copied = [buffers[i] for i in new]
    guid = c.put(copied, name=TRANSFER_NAME, owner_scoped=True)
    _count("sent", sum(b.nbytes for b in copied))
    for frame, i in enumerate(new):
        places[i] = (guid, frame, 0, buffers[i].nbytes, os.getuid())
    handed = {"places": places}
    exporters = [exporter(b) for b in copied]
    try:
        refs = [weakref.ref(e) for e in exporters]
    except TypeError:  # bytes: no telling when they go
        refs = None
    if refs is None or len(new) < len(buffers):  # or part of a value named: its receiver
        handed["delete"] = [guid]                  # deletes it, as no later send finds it
        return handed, None
    views = c.get(guid).frames
    for frame, view in enumerate(views):
        HOLDINGS.add(view, guid, frame, True, os.getuid())
    with _lock:
        _kept[key] = (refs, guid, views)
    for e in {id(e): e for e in exporters}.values():
        weakref.finalize(e, _forget, key, guid)
    return handed, views


def kept_frames(buffers, wait=None):
    """The frames of the object this process put for `buffers` (a value's large frames, as
    serialized for an earlier send) and keeps while they live; None when there is none. When
    they are being copied into depot now, waits up to `wait` seconds for that to end."""
    key = tuple((address(b), b.nbytes) for b in buffers)
    with _lock:
        kept, placing = _kept.get(key), _placing.get(key)
    if kept is None and placing is not None and wait:
        placing.wait(wait)
        with _lock:
            kept = _kept.get(key)
    if kept is None or any(ref() is None for ref in kept[0]):
        return None
    return kept[2]


def _forget(key, guid):
    """The value of `key` went: its views go, and with the last of them, its object."""
    with _lock:
        if _kept.get(key, (None, None))[1] == guid:
            del _kept[key]


#: Callables told of each value whose large frames this process copied into an object it keeps:
#: f(header, frames, moved, views), the header marked read-only, `views` the object's frames in
#: the order of the indices `moved` of `frames`. depot.dask_data's worker data is one: it keeps
#: the value as a view of the object from then on.
KEPT_HOOKS = []


def _tell_kept(header, frames, moved, views):
    for hook in KEPT_HOOKS:
        hook(header, frames, moved, views)


def _count(direction, size):
    with _lock:
        _stats[direction] += 1
        _stats[direction + "_bytes"] += size


def transfer_stats():
    """This process's transfers through depot: how many were sent (copied into depot), named
    (sent by naming an object already there, copying nothing) and received, and bytes; and those
    handed to a reader in this process, which depot did not carry (``in_process``)."""
    with _lock:
        return dict(_stats)


register_serialization_family(FAMILY, _dumps, _loads)
