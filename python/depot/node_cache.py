"""A node-wide memoizing cache: ``@depot.cache`` (defined here) stores a function's results once per node.

Every process of the node that calls the decorated function with the same arguments (Dask
workers, pool workers, separate programs of the same user) shares one stored result::

    @depot.cache
    def load(path, scale=1.0):
        return np.load(path) * scale

    x = load("a.npy")        # computed once on the node; later calls map the stored result

The key is a SHA-256 of the function's module and qualified name and of its arguments (bound to
its parameters, defaults applied) pickled with protocol 5, large buffers hashed in place; the result's GUID is made from it, so any process
finds it without asking anyone. Results are evictable objects: when the store needs room, the
least recently used go first, and the next call computes again. The first calls from several
processes at once compute once: the first takes a claim (an unsealed object under a second GUID
made from the key) and the others wait for the result; a claim is dropped when its process fails
or dies (the daemon aborts the drafts of a closed connection), and a waiter then takes it.

Results come back as :func:`depot.refs.store` values do: arrays read-only over the shared pages.
"""

import functools
import hashlib
import inspect
import pickle
import uuid

import depot
from depot import connection, refs

__all__ = ["cache", "key_of", "CACHE_NAME"]

#: The name of the objects that hold cached results (claims are named CACHE_NAME + " claim").
CACHE_NAME = "depot.cache"
# How often a waiter checks that the process computing the result is still at it.
_POLL_SECONDS = 0.05


def key_of(function, args, kwargs):
    """The cache key (bytes) of a call: stable across processes and runs. Arguments are bound
    to the function's parameters first, defaults applied, so that ``f(1)``, ``f(1, 2)`` and
    ``f(x=1)`` share a result when 2 is the default of ``f``'s second parameter."""
    try:
        bound = inspect.signature(function).bind(*args, **kwargs)
        bound.apply_defaults()
        args, kwargs = bound.args, bound.kwargs
    except (TypeError, ValueError):  # no signature, or a call that will fail: hash as given
        pass
    # multiprocessing's spawned children import the main script as __mp_main__: the same
    # functions as the parent's __main__.
    module = "__main__" if function.__module__ == "__mp_main__" else function.__module__
    digest = hashlib.sha256()
    digest.update(f"{module}.{function.__qualname__}".encode())

    def hash_in_place(buffer):
        try:
            raw = buffer.raw()
        except BufferError:  # not contiguous: pickled in band
            return True
        digest.update(raw.nbytes.to_bytes(8, "little"))
        digest.update(raw)
        return False

    digest.update(pickle.dumps((args, sorted(kwargs.items())), protocol=5,
                               buffer_callback=hash_in_place))
    return digest.digest()


def _guid(key, purpose):
    return str(uuid.UUID(bytes=hashlib.sha256(purpose + key).digest()[:16]))


def cache(function=None):
    """Memoizes ``function`` node-wide (see the module's documentation). The wrapper has
    ``key(*args, **kwargs)`` and ``forget(*args, **kwargs)``, which deletes a stored result."""
    if function is None:
        return cache

    @functools.wraps(function)
    def cached(*args, **kwargs):
        key = key_of(function, args, kwargs)
        return _lookup(function, args, kwargs, _guid(key, b"result"), _guid(key, b"claim"))

    def forget(*args, **kwargs):
        try:
            connection.client().delete(_guid(key_of(function, args, kwargs), b"result"))
        except depot.NotFound:
            pass

    cached.key = lambda *args, **kwargs: key_of(function, args, kwargs)
    cached.forget = forget
    return cached


def _lookup(function, args, kwargs, guid, claim_guid):
    c = connection.client()
    while True:
        try:
            return refs.value_of(c.get(guid))
        except depot.NotFound:
            pass
        try:
            claim = c.create([0], guid=claim_guid, name=CACHE_NAME + " claim")
        except depot.AlreadyExists:
            obj = _wait(c, guid, claim_guid)
            if obj is not None:
                return refs.value_of(obj)
            continue  # the claim went without a result: try to take it
        try:
            try:  # computed and stored meanwhile, between the miss and the claim
                return refs.value_of(c.get(guid))
            except depot.NotFound:
                pass
            value = function(*args, **kwargs)
            try:
                refs.store(c, value, name=CACHE_NAME, guid=guid, evictable=True)
            except depot.StoreFull:
                return value  # too large for the store: computed, not kept
            obj = c.get(guid)  # held before the claim goes, so that no eviction comes between
        finally:
            claim.abort()
        return refs.value_of(obj)


def _wait(c, guid, claim_guid):
    """Waits while another process holds the claim: the result's Object once it is there, None
    when the claim went without one."""
    while True:
        try:
            return c.get(guid, _POLL_SECONDS)
        except (depot.Timeout, depot.NotFound):
            pass
        try:
            c.stat(claim_guid)
        except depot.NotFound:
            # The claim went: the result is there (stored just before), or its process failed.
            try:
                return c.get(guid)
            except depot.NotFound:
                return None
