"""Dask's memory manager and nanny with depot's shared pages: counted at each process's share.

A real daemon, real worker processes with their nannies and Dask's own memory limits: a worker
that maps a value the node holds once must not be paused or restarted for it.
"""

import os
import subprocess
import sys
import time

import distributed
import numpy as np
import psutil
import pytest
from distributed.protocol.pickle import cloudpickle

import depot
import depot.dask
from conftest import Daemon
from depot import dask_memory

MIB = 1 << 20

cloudpickle.register_pickle_by_value(sys.modules[__name__])

_HOLD = """
import sys, time, depot
obj = depot.Client(sys.argv[1]).get(sys.argv[2])
total = sum(bytes(view[::4096]).count(0) for view in obj.frames)  # touch every page
print("mapped", flush=True)
time.sleep(60)
"""


@pytest.fixture(scope="module")
def big_daemon():
    d = Daemon("1GiB")
    yield d
    d.stop()


def touch(array):
    return int(array[::512].sum())  # one read per page of float64


def test_a_shared_page_counts_at_this_process_share(big_daemon):
    c = depot.Client(big_daemon.socket)
    guid = c.put_array(np.ones(64 * MIB // 8))
    array = c.get_array(guid)
    touch(array)
    alone = dask_memory.memory_figures()
    other = subprocess.Popen([sys.executable, "-c", _HOLD, big_daemon.socket, guid],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout.readline().strip() == "mapped"
        rss, shmem, share = dask_memory.memory_figures()
        assert shmem >= 64 * MIB and shmem == alone[1]
        # This process and the other map the same 64 MiB: each counts about half of it.
        assert alone[2] - share > 24 * MIB, (alone, (rss, shmem, share))
        assert dask_memory.process_memory() < rss - 24 * MIB
        assert dask_memory.shared_memory(other.pid) >= 64 * MIB
    finally:
        other.kill()
        other.wait()
    c.delete(guid)


LIMIT = 512 * MIB


def hold(weights):
    """Keeps the value on the worker (out of its data: what is measured is the process's memory)
    and reads every page of it."""
    distributed.get_worker()._depot_test_held = weights
    return touch(weights), os.getpid()


def worker_figures(dask_client):
    (address, info), = dask_client.scheduler_info()["workers"].items()
    return info["status"], info["metrics"]


def test_a_worker_is_neither_paused_nor_restarted_for_pages_it_shares(big_daemon):
    """A 512 MiB value mapped by the client and two workers with a memory limit of 512 MiB:
    each worker's RSS passes its terminate fraction (95%) through the shared pages alone; its
    share of them (a third) leaves it below its pause fraction (80%)."""
    os.environ["DEPOT_SOCKET"] = big_daemon.socket
    depot.dask.configure(big_daemon.socket)
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       memory_limit=LIMIT, dashboard_address=":0",
                                       silence_logs=40)
    try:
        with distributed.Client(cluster) as dask_client:
            depot.dask.register_plugin(dask_client)
            ref = depot.dask.put(np.ones(LIMIT // 8))
            touch(ref.get())
            workers = sorted(dask_client.scheduler_info()["workers"])
            first = {w: dask_client.submit(hold, ref, workers=[w], pure=False).result()
                     for w in workers}
            pids = {w: pid for w, (_, pid) in first.items()}
            for pid in pids.values():  # the pages are there: RSS alone would restart it
                assert psutil.Process(pid).memory_info().rss > 0.95 * LIMIT
            time.sleep(3)  # the memory monitors run every 100 ms (worker) and 100 ms (nanny)
            info = dask_client.scheduler_info()["workers"]
            assert sorted(info) == workers, "a worker was restarted"
            for w in workers:
                assert info[w]["status"] == "running", f"{w} is {info[w]['status']}"
                assert info[w]["metrics"]["memory"] < 0.8 * LIMIT
                assert info[w]["metrics"][depot.dask.SHARED_METRIC] >= LIMIT
                pid = dask_client.run(os.getpid, workers=[w])[w]
                assert pid == pids[w], "a worker was restarted"
            del ref
    finally:
        cluster.close()
