"""depot for Dask: one copy of a large array per node instead of one per worker.

Explicit (the ``ray.put`` pattern): :func:`put` stores a value in the node's depot and returns a
small picklable :class:`Ref`; any task on any worker of the node calls ``ref.get()`` and receives
the value zero-copy (a read-only ``ndarray`` over the shared pages). With the worker plugin, a
Ref passed to a task (in its arguments, at any depth, or as a dependency's result) arrives in
the task as the value itself::

    ref = depot.dask.put(weights)                       # one copy, into shared memory
    futures = client.map(score, [ref] * n, range(n))    # score(weights, i)

The local process scheduler: ``dask.compute(x, scheduler=depot.dask.get)`` (or
``scheduler="depot"``) runs Dask's multiprocessing scheduler with the buffers of task results
passed through depot instead of pipes (see depot.local_scheduler).

Transparent: a cluster on ``depot://`` addresses (``LocalCluster(protocol="depot")``,
``dask worker --protocol depot``: depot.dask_comm), or the worker plugin
(``depot.dask.register_plugin(client)``), or the setting ``distributed.worker.preload:
[depot.dask]``: every large value sent between processes of one node (results fetched between
workers, P2P shards, scatter, results) travels through depot: the sender copies its large frames
into shared memory once per value and keeps the value as a view of them (depot.dask_data), every
receiver maps them (zero-copy, read-only), and only a small message goes over the socket.
Processes on other nodes, or without depot, use Dask's usual path, unchanged.

Memory: with the plugins (``register_plugin`` registers a nanny plugin beside the worker one),
each worker's memory manager and nanny count the shared pages a worker maps at its share of
them, not whole (depot.dask_memory), and a worker's managed memory leaves out the bytes of its
values that lie in depot, which it spills without writing them (depot.dask_data): a worker is not
paused, spilled or restarted for memory the node holds once.
"""

import os

import dask.base
from distributed import Nanny
from distributed.diagnostics.plugin import NannyPlugin, WorkerPlugin

import depot
from depot import connection, dask_comm, dask_compat, dask_family, refs
from depot.dask_compat import SHARED_METRIC, UnsupportedDask
from depot.dask_family import (DEFAULT_THRESHOLD, FAMILY, TRANSFER_NAME, node_identity,
                               shares_daemon, threshold, transfer_stats)
from depot.local_scheduler import ProcessScheduler, get
from depot.refs import Ref, put

__all__ = ["DepotNannyPlugin", "DepotPlugin", "ProcessScheduler", "Ref", "UnsupportedDask",
           "client", "configure", "disable_transfers", "enable_transfers", "get",
           "node_identity", "put", "register_plugin", "resolve_refs_in_tasks", "shares_daemon",
           "threshold", "transfer_stats", "DEFAULT_THRESHOLD", "FAMILY", "SHARED_METRIC",
           "TRANSFER_NAME"]

# dask.compute(..., scheduler="depot"): Dask looks names up in this table.
dask.base.named_schedulers.setdefault("depot", get)


def configure(socket_path=None, threshold=None):
    """Sets the daemon socket (default: $DEPOT_SOCKET, else the default path) and the size
    from which frames travel through depot, for this process."""
    connection.configure(socket_path)
    if threshold is not None:
        dask_family.set_threshold(threshold)


def client():
    """This process's depot.Client, connected on first use (and again in a forked child)."""
    return connection.client()


def register_plugin(dask_client, plugin=None):
    """Registers ``plugin`` on every worker (or nanny, for a NannyPlugin) of ``dask_client``'s
    cluster, on any Dask release; raises when a worker's setup fails. Default: ``DepotPlugin()``
    on the workers and ``DepotNannyPlugin()`` on their nannies."""
    if plugin is not None:
        return dask_compat.register_plugin(dask_client, plugin)
    dask_compat.register_plugin(dask_client, DepotNannyPlugin())
    return dask_compat.register_plugin(dask_client, DepotPlugin())


def enable_transfers(worker, threshold=None):
    """Makes the large values this worker exchanges with processes of its node travel through
    depot (depot.dask_comm), on a ``tcp://`` cluster as on a ``depot://`` one. Raises when no
    daemon answers, or :class:`UnsupportedDask` when this release lacks what it needs."""
    configure(threshold=threshold)
    connection.daemon_identity()  # raises when no daemon answers
    dask_comm.enable(True)
    dask_compat.adopt_worker(worker)


def disable_transfers(worker):
    """Back to Dask's own path for the values this process sends, and it announces no daemon
    on the connections it makes or accepts from now on."""
    dask_comm.enable(False)
    worker.rpc.collect()


def resolve_refs_in_tasks(on=True):
    """Makes a Ref that reaches this process (in a task's arguments, or a dependency's result)
    arrive as its value: depot.refs resolves Refs as they are unpickled, whatever the Dask
    release's task representation."""
    refs.resolve_when_unpickled(on)


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
    """Connects each worker to depot and, with ``transfers`` (the default), sends the large
    values exchanged by processes of one node through it (see the module's documentation).

    ``socket``: the daemon's socket (default: $DEPOT_SOCKET, else the default path);
    ``threshold``: frames from this size go through depot; ``refs`` (the default): Refs reaching
    the worker's tasks arrive as their values (:func:`resolve_refs_in_tasks`); ``count_shared``
    (the default): the worker's memory manager counts shared pages at its share
    (depot.dask_memory) and reports the shared memory it maps as the metric ``depot_shared``,
    and its SpillBuffer weighs, spills and keeps values that lie in depot as such
    (depot.dask_data).
    When the worker closes, the transfers it sent that no receiver took are deleted. Register it
    with :func:`register_plugin`.
    """

    name = "depot"

    def __init__(self, socket=None, transfers=True, threshold=DEFAULT_THRESHOLD, refs=True,
                 count_shared=True):
        self.socket = socket
        self.transfers = transfers
        self.threshold = threshold
        self.refs = refs
        self.count_shared = count_shared

    def setup(self, worker):
        configure(self.socket, self.threshold)
        client()  # fail here, visibly, when no daemon answers
        resolve_refs_in_tasks(self.refs)
        if self.count_shared:
            dask_compat.count_shared_once_in_worker(worker)
            dask_compat.adopt_data(worker)
        if self.transfers:
            enable_transfers(worker, self.threshold)
        else:
            disable_transfers(worker)

    def teardown(self, worker):
        dask_compat.release_data(worker)
        pid = os.getpid()
        try:
            _delete_transfers(lambda creator: creator == pid)
        except depot.Error:
            pass  # the daemon went first: it took the objects with it


class DepotNannyPlugin(NannyPlugin):
    """Makes a nanny's memory monitor, which restarts its worker past the terminate fraction of
    its ``memory_limit``, count the shared pages the worker maps at its share of them
    (depot.dask_memory). Registered beside DepotPlugin by :func:`register_plugin`."""

    name = "depot-nanny"
    restart = False

    def setup(self, nanny):
        dask_compat.count_shared_once_in_nanny(nanny)


def dask_setup(server):
    """The preload hook: ``distributed.worker.preload: [depot.dask]`` sets a worker up as
    DepotPlugin does, ``distributed.nanny.preload: [depot.dask]`` a nanny as DepotNannyPlugin."""
    if isinstance(server, Nanny):
        DepotNannyPlugin().setup(server)
    else:
        DepotPlugin().setup(server)


def dask_teardown(server):
    if not isinstance(server, Nanny):
        DepotPlugin().teardown(server)
