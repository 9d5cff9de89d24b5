"""Refs: values put into the node's depot once and named by a small picklable handle.

``ref = depot.refs.put(value)`` (also ``depot.dask.put``) copies a value into depot and returns
a :class:`Ref`; any process of the node gets the value back zero-copy with ``ref.get()``.

In a process where :func:`resolve_when_unpickled` is on (Dask workers with depot.dask's plugin,
the workers of depot's local scheduler), a Ref that is unpickled becomes its value: this is how
tasks receive values instead of Refs, whatever the Dask release's representation of tasks (their
arguments reach a worker process pickled, however they are represented).
"""

import os
import pickle
import weakref

import depot
from depot import connection

__all__ = ["Ref", "UnresolvedRef", "put", "resolve_when_unpickled", "store", "value_of"]

_PICKLE_METADATA = b'{"depot.pickle": 5}'

_resolving = False


def resolve_when_unpickled(on=True):
    """In this process, from now on, a Ref being unpickled becomes its value (on) or stays a Ref
    (off, the default)."""
    global _resolving
    _resolving = on


class Ref:
    """A reference to a value in depot: small, picklable, resolved with :meth:`get`.

    The ``Ref`` returned by :func:`put` owns the object and deletes it when it is garbage
    collected (or at :meth:`delete`); copies made by pickling (the ones tasks receive) do not.
    Keep the owner alive while tasks may still get the value: a task holding the value keeps its
    bytes mapped after the delete, but a get after it raises ``depot.NotFound``. ``node`` names
    the daemon that holds the object (see ``connection.daemon_identity``).
    """

    __slots__ = ("guid", "node", "_finalizer", "__weakref__")

    def __init__(self, guid, node=None, *, _owner=False):
        self.guid = guid
        self.node = node
        self._finalizer = (weakref.finalize(self, _delete_quietly, guid, os.getpid())
                           if _owner else None)

    def get(self, timeout=None):
        """The value, zero-copy: an ndarray is a read-only view of the shared pages; another
        value is unpickled with its out-of-band buffers left in shared memory. A Ref of another
        node's daemon raises depot.NotFound naming that node."""
        try:
            obj = connection.client().get(self.guid, timeout)
        except depot.NotFound:
            here = connection.daemon_identity()
            if self.node is not None and self.node != here:
                raise depot.NotFound(
                    f"{self!r} belongs to the depot of node {self.node}; this process uses "
                    f"{here}: a Ref is usable only on the node that put it") from None
            raise
        return value_of(obj)

    def delete(self):
        """Deletes the object now (the owner's business; copies may call it too)."""
        if self._finalizer is not None:
            self._finalizer()
        else:
            _delete_quietly(self.guid, os.getpid())

    def __reduce__(self):
        return (_unpickle, (self.guid, self.node))

    def __eq__(self, other):
        return isinstance(other, Ref) and other.guid == self.guid

    def __hash__(self):
        return hash(self.guid)

    def __repr__(self):
        return f"depot.refs.Ref({self.guid!r})"


def put(value, *, name=None):
    """Copies ``value`` into depot once and returns an owning :class:`Ref` to it (stored as
    :func:`store` does)."""
    guid = store(connection.client(), value, name=name)
    return Ref(guid, connection.daemon_identity(), _owner=True)


def store(client, value, *, name=None, guid=None, evictable=False):
    """Copies ``value`` into a new object and returns its GUID; :func:`value_of` reads it back.

    A numpy array is stored as its bytes with dtype and shape; any other value is pickled
    (protocol 5), its large buffers (numpy arrays inside, for instance) kept out of band as
    frames of their own, so that they too come back zero-copy.
    """
    import numpy as np

    if isinstance(value, np.ndarray) and not value.dtype.hasobject:
        return client.put_array(value, name=name, guid=guid, evictable=evictable)
    buffers = []

    def out_of_band(buffer):
        try:
            buffers.append(buffer.raw())
            return False
        except BufferError:  # not contiguous: pickled in band
            return True

    data = pickle.dumps(value, protocol=5, buffer_callback=out_of_band)
    return client.put([data, *buffers], name=name, metadata=_PICKLE_METADATA, guid=guid,
                      evictable=evictable)


def value_of(obj):
    """The value :func:`store` put in ``obj`` (a depot.Object), zero-copy: an ndarray is a
    read-only view of the shared pages; another value is unpickled around its out-of-band
    buffers, left in shared memory."""
    if obj.metadata == _PICKLE_METADATA:
        return pickle.loads(obj.frames[0], buffers=obj.frames[1:])
    return depot.array_of(obj)


def _delete_quietly(guid, pid):
    if os.getpid() != pid:
        return  # a forked child's copy of the owner: the parent deletes
    try:
        connection.client().delete(guid)
    except depot.Error:
        pass  # already deleted, or the daemon is gone: nothing left to free


def _unpickle(guid, node):
    """A Ref, or its value where Refs are resolved as they are unpickled. A Ref that cannot be
    resolved (another node's) becomes an :class:`UnresolvedRef`: an error here could be raised
    while Dask reads a message, far from the task that should fail."""
    ref = Ref(guid, node)
    if not _resolving:
        return ref
    try:
        return ref.get()
    except depot.Error as e:
        return UnresolvedRef(ref, e)


class UnresolvedRef:
    """What a task receives for a Ref whose value could not be got where it was unpickled: any
    attribute raises the error that the get raised (depot.NotFound naming the Ref's node, for a
    Ref of another node)."""

    __slots__ = ("ref", "error")

    def __init__(self, ref, error):
        self.ref = ref
        self.error = error

    def __getattr__(self, name):
        raise self.error

    def __reduce__(self):
        return (_unpickle, (self.ref.guid, self.ref.node))

    def __repr__(self):
        return f"depot.refs.UnresolvedRef({self.ref.guid!r}: {self.error})"
