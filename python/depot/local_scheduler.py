"""Dask's multiprocessing scheduler with task results passed through depot.

``dask.compute(x, scheduler=depot.dask.get)`` (or ``scheduler="depot"`` once depot.dask is
imported) runs the graph on worker processes of this node, as ``scheduler="processes"`` does,
but the large buffers of task results and task inputs travel through depot (depot.handoff):
a worker copies a result's buffers into shared memory once, and the scheduler and the next
worker map them, instead of pickling them through pipes twice. Refs in task arguments arrive as
their values.

The worker processes are kept between computations (spawning them and importing numpy and Dask
costs about a second): ``depot.dask.get`` uses one :class:`ProcessScheduler` per worker count,
made on first use and closed at exit; make your own to choose its size and lifetime.
"""

import atexit
import functools
import os
import threading
from concurrent.futures import ProcessPoolExecutor

import dask
import dask.multiprocessing

from depot import connection, handoff, refs

__all__ = ["ProcessScheduler", "get"]


class ProcessScheduler:
    """A pool of worker processes that run Dask graphs with their data passed through depot.

    ``scheduler.get`` is a Dask scheduler (``dask.compute(x, scheduler=scheduler.get)``);
    a context manager, or :meth:`close`, ends the workers. Computations may run from several
    threads at once (the pool is thread-safe); ``num_workers`` defaults to Dask's setting, else
    the number of CPUs.
    """

    def __init__(self, num_workers=None, threshold=handoff.DEFAULT_THRESHOLD):
        self.num_workers = num_workers or dask.config.get("num_workers", None) or os.cpu_count()
        self.threshold = threshold
        # As Dask's own process scheduler does: one hash seed for every worker, so that tasks
        # hashing strings agree across processes (the variable is inherited at spawn).
        if os.environ.get("PYTHONHASHSEED") in (None, "0"):
            os.environ["PYTHONHASHSEED"] = "6640"
        self._pool = ProcessPoolExecutor(
            self.num_workers, mp_context=dask.multiprocessing.get_context(),
            initializer=_start_worker, initargs=(connection.socket_path(),))

    def get(self, dsk, keys, **kwargs):
        """Computes ``keys`` of the graph ``dsk`` (the signature of Dask's schedulers)."""
        # One task per message unless told otherwise: with payloads this small, batching (Dask's
        # default is 6 tasks) saves little and leaves workers idle when a batch holds the rest.
        kwargs.setdefault("chunksize", 1)
        return dask.multiprocessing.get(
            dsk, keys, pool=self._pool, func_dumps=functools.partial(_dumps, self.threshold),
            func_loads=handoff.loads, **kwargs)

    def close(self):
        self._pool.shutdown()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _start_worker(socket_path):
    # What a worker loads is a task and its inputs, where Refs arrive as their values; what the
    # scheduler loads is a result, where they stay Refs.
    refs.resolve_when_unpickled(True)
    connection.configure(socket_path)
    dask.multiprocessing.default_initializer()


def _dumps(threshold, value):
    return handoff.dumps(value, threshold)


_schedulers = {}
_schedulers_lock = threading.Lock()


def get(dsk, keys, num_workers=None, **kwargs):
    """A Dask scheduler: the graph runs on this node's :class:`ProcessScheduler` of
    ``num_workers`` workers (made on first use, kept until exit), its data through depot."""
    with _schedulers_lock:
        scheduler = _schedulers.get(num_workers)
        if scheduler is None:
            scheduler = _schedulers[num_workers] = ProcessScheduler(num_workers)
            atexit.register(scheduler.close)
    return scheduler.get(dsk, keys, **kwargs)
