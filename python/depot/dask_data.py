"""A Dask worker's data (its SpillBuffer) when values lie in depot.

Dask keeps a worker's values in a SpillBuffer: values in memory weighed with ``sizeof`` (the
worker's managed memory, which it spills to disk past ``target``), the others pickled to files.
A value whose bytes lie in depot (one received through depot, or one this worker sent and now
keeps as a view of the object it put) holds no private copy of them: the node holds them once,
in shared memory, which the memory manager counts at the worker's share (depot.dask_memory).
:class:`WorkerData` makes the SpillBuffer treat such values as what they are:

- **Weight.** A value is weighed at its ``sizeof`` less the bytes of its arrays that lie in
  depot objects: shared bytes do not fill the worker's managed memory, so they never make it
  spill.
- **Spill.** A value evicted from memory whose large frames all lie in depot, or were copied
  there for a send (a sender spilled before the swap below), is kept as its serialized frames,
  views of depot's pages, and nothing is written to disk; read again, it is deserialized over
  the same pages. Dask's spilled bytes (``spilled_total``) do not count it;
  :meth:`WorkerData.stats` does.
- **One copy at the sender.** When depot.dask_family copies a value's frames into an object for
  a send, and keeps that object while the value lives, the worker's value under that key is
  replaced (on the event loop) by the same value deserialized over the object's frames: its
  private copy goes, once no task holds it. The value is read-only from then on, as a value
  received through depot is.

Arrays are found without serializing: a numpy array, a pandas object's columns, and those of the
items of a short list, tuple or dict. depot.dask_compat.adopt_data installs it on a worker.
"""

import copy
import threading
import weakref
from collections.abc import MutableMapping

import numpy as np
from distributed.protocol.serialize import deserialize, serialize
from distributed.sizeof import safe_sizeof
from distributed.utils import ensure_memoryview

from depot import dask_family
from depot.holdings import HOLDINGS, address, exporter

__all__ = ["DepotSlow", "WorkerData", "arrays", "depot_bytes"]

#: A frame smaller than this may stay private in a value spilled to depot (a header, an index).
SMALL_FRAME = 64 << 10
#: The seconds a spill waits for a send that is copying the value into depot (a copy of 1 GiB
#: takes 0.1-0.6 s here): the event loop waits with it, as it would while Dask writes the value
#: to disk.
PUT_WAIT = 10


def arrays(value, depth=2):
    """The contiguous numpy arrays `value` keeps its bytes in: itself when it is one, a pandas
    object's columns, those of the items of a list, tuple or dict of at most 64 items (to
    `depth` levels); empty for any other value, without serializing it."""
    if isinstance(value, np.ndarray):
        flags = value.flags
        return [value] if flags.c_contiguous or flags.f_contiguous else []
    manager = getattr(value, "_mgr", None)  # pandas DataFrame and Series
    if manager is not None and isinstance(getattr(manager, "arrays", None), list):
        return [a for column in manager.arrays for a in arrays(column, 0)]
    if depth and type(value) in (list, tuple, dict) and len(value) <= 64:
        items = value.values() if type(value) is dict else value
        return [a for item in items for a in arrays(item, depth - 1)]
    return []


def _start(array):
    return array.__array_interface__["data"][0]


def depot_bytes(value):
    """The bytes of `value`'s arrays (see arrays) that lie in depot objects this process maps,
    each range counted once."""
    found = {}
    for a in arrays(value):
        if a.nbytes and HOLDINGS.find_at(_start(a), a.nbytes) is not None:
            found[_start(a)] = max(found.get(_start(a), 0), a.nbytes)
    return sum(found.values())


class WorkerData:
    """depot's part in one worker's SpillBuffer (see the module's documentation). Counters:
    :meth:`stats`."""

    def __init__(self, buffer, loop):
        self.buffer = buffer
        self._loop = loop
        self._lock = threading.Lock()
        self._keys = {}  # start of a large private array -> (weak ref to its owner, key)
        self._pruned = 0
        self._stats = {"spilled": 0, "spilled_bytes": 0, "unspilled": 0, "swapped": 0,
                       "swapped_bytes": 0}

    def weight(self, key, value):
        """What `value` weighs in managed memory: its sizeof less its bytes in depot. Remembers
        the key of each large private array, for :meth:`kept`."""
        shared = 0
        for a in arrays(value):
            if not a.nbytes:
                continue
            if HOLDINGS.find_at(_start(a), a.nbytes) is not None:
                shared += a.nbytes
            elif a.nbytes >= dask_family.threshold():
                self._remember(_start(a), a, key)
        return max(safe_sizeof(value) - shared, 0)

    def _remember(self, start, array, key):
        try:
            ref = weakref.ref(exporter(array))
        except TypeError:
            return  # bytes: no telling when they go
        with self._lock:
            self._keys[start] = (ref, key)
            if len(self._keys) > 2 * self._pruned + 64:  # drop those gone, now and then
                self._keys = {s: e for s, e in self._keys.items() if e[0]() is not None}
                self._pruned = len(self._keys)

    def kept(self, header, frames, moved, views):
        """dask_family's KEPT_HOOKS: a value's frames `moved` were copied into an object this
        process keeps, of frames `views`. Replaces the worker's value by one over `views`."""
        start = address(ensure_memoryview(frames[moved[0]]))
        with self._lock:
            ref, key = self._keys.get(start, (None, None))
        if ref is None or ref() is None:
            return
        frames = list(frames)
        for i, view in zip(moved, views):
            frames[i] = view
        self._loop.add_callback(self._swap, key, start, copy.deepcopy(header), frames)

    def _swap(self, key, start, header, frames):
        fast = self.buffer.fast
        if key not in fast:
            return  # spilled or released since
        value = fast.d[key]  # not fast[key]: that would make it the most recently used
        if not any(_start(a) == start for a in arrays(value)):
            return  # replaced since
        new = deserialize(header, frames)
        shared = depot_bytes(new)
        if not shared:
            return  # the deserializer copied: the old value is as good
        self.buffer[key] = new
        self._count("swapped", shared)

    def record(self, value):
        """`value` serialized, when every frame of it of SMALL_FRAME bytes or more lies in depot,
        or was copied there for a send (dask_family.kept_frames): (header, frames), the large
        frames views of depot's pages; else None."""
        if not arrays(value):
            return None
        try:
            header, frames = serialize(value, serializers=("dask", "pickle"), on_error="raise")
        except Exception:
            return None  # Dask's own spill reports it
        if any(c is not None for c in header.get("compression") or ()):
            return None
        frames = [ensure_memoryview(f) for f in frames]
        sent = [i for i, f in enumerate(frames) if f.nbytes >= dask_family.threshold()]
        # A value being copied into depot for a send now (its sender's memory holds it twice
        # meanwhile, which is what made the memory manager spill it) waits for that copy: then
        # it spills as one copied before does, over the object's frames.
        views = dask_family.kept_frames([frames[i] for i in sent], wait=PUT_WAIT) \
            if sent else None
        if views is not None:  # a value sent before, spilled before its swap: the same swap
            for i, view in zip(sent, views):
                frames[i] = view
            dask_family.read_only(header)
        large = [f for f in frames if f.nbytes >= SMALL_FRAME]
        if not large or any(HOLDINGS.find(f) is None for f in large):
            return None
        return header, frames

    def _count(self, what, size=None):
        with self._lock:
            self._stats[what] += 1
            if size is not None:
                self._stats[what + "_bytes"] += size

    def stats(self):
        """Values spilled to depot (kept as views, nothing written) and read back, and values
        replaced by views of the object they were sent in, with bytes, since the worker
        started."""
        with self._lock:
            return dict(self._stats)


class DepotSlow(MutableMapping):
    """The SpillBuffer's slow side: a value that lies in depot (WorkerData.record) is kept as its
    frames; any other goes to Dask's own `inner` (pickled to disk). Dask's attributes of its
    slow side (total_weight, metrics...) are `inner`'s."""

    def __init__(self, inner, data):
        self.inner = inner
        self.data = data
        self.kept = {}  # key -> (header, frames, their size)
        self.kept_bytes = 0

    def __getattr__(self, name):
        if name in ("inner", "data", "kept", "kept_bytes"):
            raise AttributeError(name)
        return getattr(self.inner, name)

    def __setitem__(self, key, value):
        record = self.data.record(value)
        if record is None:
            self.inner[key] = value
            return
        size = sum(len(ensure_memoryview(f)) for f in record[1])
        self.kept[key] = (*record, size)
        self.kept_bytes += size
        self.data._count("spilled", size)

    def __getitem__(self, key):
        record = self.kept.get(key)
        if record is None:
            return self.inner[key]
        self.data._count("unspilled")
        return deserialize(record[0], record[1])

    def __delitem__(self, key):
        record = self.kept.pop(key, None)
        if record is None:
            del self.inner[key]
        else:
            self.kept_bytes -= record[2]

    def __contains__(self, key):
        return key in self.kept or key in self.inner

    def __iter__(self):
        yield from self.kept
        yield from self.inner

    def __len__(self):
        return len(self.kept) + len(self.inner)
