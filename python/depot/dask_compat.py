"""Every use depot makes of what differs between Dask releases, in one place.

depot works through Dask's public extension points (a comm backend, serialization families,
worker plugins, preloads); what is left is listed here, with the releases that need it, in the
table of docs/python-and-dask.md ("Dask releases"). Each function checks that the running
release has what it uses and raises :class:`UnsupportedDask`, saying what is missing, when it
does not: depot never falls back to Dask's TCP path without saying so.
"""

import os

import distributed
import distributed.spill
import distributed.worker_memory
from distributed.comm import registry
from distributed.comm.tcp import TCPListener

from depot import dask_comm, dask_data, dask_family, dask_memory

__all__ = ["OLDEST", "NEWEST", "SHARED_METRIC", "SPILLED_METRIC", "UnsupportedDask",
           "adopt_data", "adopt_worker", "count_shared_once_in_nanny",
           "count_shared_once_in_worker", "register_plugin", "release_data"]

#: The worker metric (``scheduler_info()["workers"][address]["metrics"]``) that says how much
#: shared memory the worker maps, whole (depot.dask_memory.shared_memory).
SHARED_METRIC = "depot_shared"
#: The worker metric that says how many bytes of the worker's values are spilled to depot
#: (kept as views of its pages, nothing written: depot.dask_data).
SPILLED_METRIC = "depot_spilled"

#: The releases of dask and distributed depot is tested with (pyproject.toml declares the range).
OLDEST = "2022.12.1"
NEWEST = "2026.7.1"


class UnsupportedDask(RuntimeError):
    """The running Dask release lacks something depot needs (a release depot does not know)."""


def _unsupported(what):
    return UnsupportedDask(
        f"distributed {distributed.__version__}: {what}; depot supports distributed {OLDEST} to "
        f"{NEWEST} (docs/python-and-dask.md, 'Dask releases')")


def register_plugin(client, plugin):
    """Registers a worker plugin on every worker, now and to come, on any release:
    ``Client.register_plugin`` (2023.9.2 and later) or ``Client.register_worker_plugin``
    (until 2026.5, removed in 2026.6.0). Both raise the error of a worker whose setup failed."""
    register = getattr(client, "register_plugin", None) or \
        getattr(client, "register_worker_plugin", None)
    if register is None:
        raise _unsupported("Client has neither register_plugin nor register_worker_plugin")
    return register(plugin)


def adopt_worker(worker):
    """Gives a running worker of a ``tcp://`` (or ``depot://``) cluster depot's comms: the
    connections it accepts from now on (its listeners' comm class, an attribute of
    distributed.comm.tcp's listeners in every release) and those it opens (the ``tcp`` backend
    of this process's registry, public). Idle pooled connections, opened before, are closed."""
    listeners = getattr(worker, "listeners", None)
    if not listeners:
        raise _unsupported("the worker has no `listeners` to give depot's comms to")
    for listener in listeners:
        if issubclass(getattr(listener, "comm_class", type(None)), dask_comm.DepotComm):
            continue  # depot:// already, or adopted before
        if type(listener) is not TCPListener or not hasattr(listener, "comm_class"):
            raise UnsupportedDask(
                f"depot's transfers need workers listening on tcp:// or depot://; this one "
                f"listens on {listener.contact_address} ({type(listener).__name__})")
        listener.comm_class = dask_comm.DepotComm
    registry.backends["tcp"] = dask_comm.TcpBackend()
    worker.rpc.collect()


def count_shared_once_in_worker(worker):
    """Makes the worker's memory manager (spill, pause) and its reports to the scheduler count
    shared pages at the worker's share (depot.dask_memory.process_memory), and adds the metric
    SHARED_METRIC. Every release reads the worker's memory through
    ``worker.monitor.get_process_memory()`` and reports ``worker.metrics``."""
    monitor = getattr(worker, "monitor", None)
    if not callable(getattr(monitor, "get_process_memory", None)) or \
            not isinstance(getattr(worker, "metrics", None), dict):
        raise _unsupported("the worker has no monitor.get_process_memory or metrics to count "
                           "shared memory once with")
    pid = os.getpid()
    monitor.get_process_memory = lambda: dask_memory.process_memory(pid)
    worker.metrics[SHARED_METRIC] = lambda _worker: dask_memory.shared_memory(pid)


class _Process:
    """A psutil.Process whose memory_info() has its rss counted as
    depot.dask_memory.process_memory counts it."""

    def __init__(self, process):
        self._process = process

    def __getattr__(self, name):
        return getattr(self._process, name)

    def memory_info(self):
        info = self._process.memory_info()  # raises as psutil does for a process gone
        try:
            return info._replace(rss=dask_memory.process_memory(self._process.pid))
        except (OSError, KeyError):  # gone since, or /proc not readable: RSS, as Dask had it
            return info


class _Psutil:
    """psutil, with Process as above and everything else its own."""

    def __init__(self, real):
        self.real = real

    def __getattr__(self, name):
        return getattr(self.real, name)

    def Process(self, *args, **kwargs):  # noqa: N802 (psutil's name)
        return _Process(self.real.Process(*args, **kwargs))


def count_shared_once_in_nanny(nanny):
    """Makes the nanny's memory monitor, which restarts its worker past the terminate fraction of
    ``memory_limit``, count shared pages at the worker's share. Every release's monitor
    (``NannyMemoryManager.memory_monitor`` in distributed.worker_memory) reads the worker's RSS as
    ``psutil.Process(pid).memory_info().rss``, through that module's ``psutil``, which this
    process's nanny alone uses."""
    module = distributed.worker_memory
    if not hasattr(module, "NannyMemoryManager") or not hasattr(module, "psutil") or \
            not hasattr(getattr(nanny, "memory_manager", None), "memory_monitor"):
        raise _unsupported("distributed.worker_memory has no NannyMemoryManager reading psutil")
    if not isinstance(module.psutil, _Psutil):
        module.psutil = _Psutil(module.psutil)


def adopt_data(worker):
    """Gives the worker's SpillBuffer depot's weight, slow side and swap (depot.dask_data), and
    adds the metric SPILLED_METRIC; returns the WorkerData, or None for a worker whose data is
    not a SpillBuffer (no ``memory_limit``, or a mapping of the user's: nothing is weighed or
    spilled then). Every release's SpillBuffer is a zict.Buffer: its ``weight`` and that of its
    ``fast`` LRU (whose dict is ``fast.d``) weigh values, and its ``slow`` is a zict.Cache over
    the ``data`` that pickles to disk. Values already in memory keep the weight they had."""
    buffer = getattr(worker, "data", None)
    if not isinstance(buffer, distributed.spill.SpillBuffer):
        return None
    fast, slow = getattr(buffer, "fast", None), getattr(buffer, "slow", None)
    if not all(hasattr(o, a) for o, a in ((buffer, "weight"), (fast, "weight"), (fast, "d"),
                                          (slow, "data"))):
        raise _unsupported("its SpillBuffer is not a zict.Buffer over an LRU and a Cache")
    if isinstance(slow.data, dask_data.DepotSlow):
        return slow.data.data  # adopted before
    data = dask_data.WorkerData(buffer, worker.loop)
    buffer.weight = fast.weight = data.weight
    slow.data = dask_data.DepotSlow(slow.data, data)
    dask_family.KEPT_HOOKS.append(data.kept)
    worker.metrics[SPILLED_METRIC] = lambda _worker: slow.data.kept_bytes
    return data


def release_data(worker):
    """The worker closes: its data hears of no more values kept by dask_family."""
    slow = getattr(getattr(worker, "data", None), "slow", None)
    data = getattr(getattr(slow, "data", None), "data", None)
    if isinstance(data, dask_data.WorkerData) and data.kept in dask_family.KEPT_HOOKS:
        dask_family.KEPT_HOOKS.remove(data.kept)
