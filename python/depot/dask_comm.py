"""Dask comms that send large values through depot: the ``depot://`` comm backend.

A ``depot://`` address is a TCP address (``depot://10.0.0.5:8786``): the connection is Dask's
own TCP comm, and a :class:`DepotComm` on top of it

- announces, in its handshake, the daemon its process uses (when it deserializes what it reads:
  the scheduler, which passes data on without reading it, announces nothing, so nothing meant for
  a worker on another node is left in this node's depot), and
- writes to a peer that announced the same daemon with the ``"depot-cuda"`` and ``"depot"``
  serialization families first (depot.dask_device, depot.dask_family): each large value's large
  frames go through depot, zero-copy on the receiving side, and only headers cross the socket;
  to a peer in its own process (a worker's P2P shards for its own outputs) they are handed by
  reference instead, and only headers cross the socket.

Every message benefits: results fetched between workers, P2P shuffle and rechunk shards, scatter,
results sent to a client, whichever Dask release. A peer on another node, or without depot,
announces no daemon or another one: the families decline and Dask's own path is taken.

Dask finds the backend by its scheme through the ``distributed.comm.backends`` entry point that
the package declares; importing depot.dask registers it too. A cluster that already runs on
``tcp://`` gets the same comms from the worker plugin (depot.dask_compat.adopt_worker).
"""

import weakref

from distributed.comm import CommClosedError, registry
from distributed.comm.tcp import TCP, TCPBackend, TCPConnector, TCPListener
from distributed.protocol.serialize import Serialize, Serialized

from depot import connection, dask_device, dask_family

__all__ = ["DepotBackend", "DepotComm", "FAMILIES", "SCHEME", "TcpBackend", "enable", "enabled"]

#: The address scheme of the comm backend.
SCHEME = "depot"
#: The families a DepotComm asks for first, in order: device values, then host values.
FAMILIES = (dask_device.FAMILY, dask_family.FAMILY)
_DEFAULT_SERIALIZERS = ("dask", "pickle")  # what Dask uses when a write names none

_enabled = True
_families = None


def _families_here():
    """FAMILIES, less the device one when the daemon has no device pools: each family tried
    costs every value of a message a refusal (Dask tries them value by value in collections)."""
    global _families
    if _families is None:
        pools = connection.client().status().get("device_pools")
        _families = FAMILIES if pools else (dask_family.FAMILY,)
    return _families


def enable(on=True):
    """Turns this process's DepotComms' transfers through depot on or off (on by default)."""
    global _enabled
    _enabled = on


def enabled():
    return _enabled


_DEPTH = 4  # how deep in a message _through_depot looks for values marked to be serialized


def _through_depot(msg, context, depth):
    """Prepares a message for a peer of the same daemon: returns it with each large collection of
    plain records marked to be serialized (a dask.bag's piece, say) replaced by its serialization
    in one piece through depot (dask_family.dumps_whole; only the containers on the way to one
    are copied), and whether a large value is left for the families to take, value by value.
    When none is, the families are not asked at all: each value Dask offers them costs a
    refusal, 22% more time for a message of 780 small records."""
    if isinstance(msg, Serialize):
        try:
            return Serialized(*dask_family.dumps_whole(msg.data, context)), False
        except NotImplementedError:
            size = dask_family.plain_total(msg.data)
            return msg, size is None or size >= dask_family.threshold()
    kind = type(msg)
    if kind not in (dict, list, tuple) or not msg:
        return msg, False
    if depth == 0:
        return msg, True  # not looked into: the families may find something there
    offer = False
    if kind is dict:
        out = None
        for key, value in msg.items():
            new, more = _through_depot(value, context, depth - 1)
            offer = offer or more
            if new is not value:
                out = out or dict(msg)
                out[key] = new
        return (msg if out is None else out), offer
    items = []
    for value in msg:
        new, more = _through_depot(value, context, depth - 1)
        offer = offer or more
        items.append(new)
    changed = any(new is not old for new, old in zip(items, msg))
    return (kind(items) if changed else msg), offer


class DepotComm(TCP):
    """Dask's TCP comm, with large values sent through depot to peers of the same daemon.
    As thread-safe as Dask's comms (one event loop)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._end = dask_family.new_end()
        # What was handed to this end within the process and never read goes with the end: when
        # it closes, aborts, reads the end of its stream, or is collected.
        weakref.finalize(self, dask_family.drop_in_process, self._end)

    def handshake_info(self):
        # Comm.handshake_info is a staticmethod before distributed 2023.5 and a method since:
        # super() calls either.
        info = super().handshake_info()
        if _enabled and self.deserialize:
            identity = dask_family.node_identity()
            if identity is not None:
                info[dask_family.HANDSHAKE_KEY] = identity
                info[dask_family.PROCESS_KEY] = dask_family.process_identity()
                info[dask_family.END_KEY] = self._end
        return info

    def _drop_in_process(self):
        dask_family.drop_in_process(self._end)

    async def write(self, msg, serializers=None, on_error="message"):
        context = {"recipient": self.remote_info}
        if not (_enabled and dask_family.shares_daemon(context)):
            return await super().write(msg, serializers, on_error)  # nothing to hand or put
        handing = dask_family.Handing()
        reset = dask_family.HANDING.set(handing)
        try:
            msg, offer = _through_depot(msg, context, _DEPTH)
            if offer:
                serializers = (*_families_here(), *(serializers or _DEFAULT_SERIALIZERS))
            return await super().write(msg, serializers, on_error)
        except BaseException:
            handing.abandon()
            raise
        finally:
            dask_family.HANDING.reset(reset)

    async def read(self, deserializers=None):
        if deserializers is not None:  # a reader that names its families accepts ours too
            deserializers = (*FAMILIES, *deserializers)
        try:
            return await super().read(deserializers)
        except CommClosedError:
            self._drop_in_process()
            raise

    def abort(self):
        self._drop_in_process()
        super().abort()

    def close(self):
        self._drop_in_process()
        return super().close()


class _DepotConnector(TCPConnector):
    prefix = SCHEME + "://"
    comm_class = DepotComm


class _DepotListener(TCPListener):
    prefix = SCHEME + "://"
    comm_class = DepotComm


class DepotBackend(TCPBackend):
    """The ``depot://`` backend: Dask's TCP backend with DepotComms."""

    def get_connector(self):
        return _DepotConnector()

    def get_listener(self, loc, handle_comm, deserialize, **connection_args):
        return _DepotListener(loc, handle_comm, deserialize, **connection_args)


class _TcpConnector(TCPConnector):
    comm_class = DepotComm


class TcpBackend(TCPBackend):
    """The ``tcp://`` backend with DepotComms, for the connections a worker of a ``tcp://``
    cluster opens once depot is enabled in it."""

    def get_connector(self):
        return _TcpConnector()


registry.backends.setdefault(SCHEME, DepotBackend())
