"""Every use depot makes of what differs between Dask releases, in one place.

depot works through Dask's public extension points (a comm backend, serialization families,
worker plugins, preloads); what is left is listed here, with the releases that need it, in the
table of docs/python-and-dask.md ("Dask releases"). Each function checks that the running
release has what it uses and raises :class:`UnsupportedDask`, saying what is missing, when it
does not: depot never falls back to Dask's TCP path without saying so.
"""

import distributed
from distributed.comm import registry
from distributed.comm.tcp import TCPListener

from depot import dask_comm

__all__ = ["OLDEST", "NEWEST", "UnsupportedDask", "adopt_worker", "register_plugin"]

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
