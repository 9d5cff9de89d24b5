"""One copy of a value per node: a real LocalCluster of four worker processes with the plugin
and a real daemon. However many workers of the node read a value, and whichever of them sends
it on, it enters depot once; nothing is left when the keys go or a worker is killed.
"""

import os
import signal
import sys
import time

import dask
import distributed
import numpy as np
import pytest
from distributed.protocol.pickle import cloudpickle

import depot
import depot.dask
import mappings
from mappings import in_shared_memory

MIB = 1 << 20

cloudpickle.register_pickle_by_value(sys.modules[__name__])
cloudpickle.register_pickle_by_value(mappings)


@pytest.fixture(scope="module")
def cluster(daemon):
    os.environ["DEPOT_SOCKET"] = daemon.socket
    depot.dask.configure(daemon.socket)
    # Dask's Active Memory Manager drops replicas it deems extra, the sender's among them, on a
    # timer; the sender then deletes the object it put, and a worker that sends its copy on puts
    # another (docs/python-and-dask.md). Off here, so that each test sees one sender.
    with dask.config.set({"distributed.scheduler.active-memory-manager.start": False}):
        cluster = distributed.LocalCluster(n_workers=4, threads_per_worker=1, processes=True,
                                           dashboard_address=":0", silence_logs=40)
    with distributed.Client(cluster) as c:
        depot.dask.register_plugin(c, depot.dask.DepotPlugin(daemon.socket))
        yield c
    cluster.close()


def make(seed):
    return np.random.default_rng(seed).random(2 * MIB)


def identity(x):
    return x


def look(x):
    return float(x.sum()), in_shared_memory(x), os.getpid()


def transfers(c):
    return [o for o in c.list() if o["name"] == depot.dask.TRANSFER_NAME]


def gone(observer, timeout=10):
    """Waits until no transfer object is left; returns those left at the deadline."""
    deadline = time.monotonic() + timeout
    while (left := transfers(observer)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def sealed_transfers(events):
    guids = set()
    while (event := events.next(timeout=0.5)) is not None:
        if event.get("name") == depot.dask.TRANSFER_NAME and event["event"] == "sealed":
            guids.add(event["guid"])
    return guids


def copied(cluster):
    return {w: s["sent_bytes"] for w, s in cluster.run(depot.dask.transfer_stats).items()}


def test_three_workers_reading_one_value_leave_one_object(cluster, daemon):
    observer = depot.Client(daemon.socket)
    events = observer.subscribe()
    a, *others = sorted(cluster.scheduler_info()["workers"])
    before = copied(cluster)
    x = cluster.submit(make, 1, workers=[a], pure=False)
    seen = [cluster.submit(look, x, workers=[w], pure=False).result() for w in others]
    expected = float(make(1).sum())
    assert all(s[0] == expected and s[1] for s in seen)
    assert len({s[2] for s in seen}) == 3
    assert len(sealed_transfers(events)) == 1  # one object for the three readers
    after = copied(cluster)
    assert after[a] - before[a] == 2 * MIB * 8
    assert all(after[w] == before[w] for w in others)
    del x
    assert not gone(observer)  # the key went: so did its object


def test_a_value_received_through_depot_and_sent_on_copies_nothing(cluster, daemon):
    observer = depot.Client(daemon.socket)
    events = observer.subscribe()
    a, b, c, d = sorted(cluster.scheduler_info()["workers"])
    x = cluster.submit(make, 2, workers=[a], pure=False)
    y = cluster.submit(identity, x, workers=[b], pure=False)  # b holds the view it received
    y.result()
    before = copied(cluster)
    assert cluster.submit(look, y, workers=[c], pure=False).result()[1]
    assert cluster.submit(look, y, workers=[d], pure=False).result()[1]
    assert copied(cluster) == before  # b named a's object; nobody copied
    assert len(sealed_transfers(events)) == 1
    del x, y
    assert not gone(observer)


def test_a_killed_worker_leaves_no_object(cluster, daemon):
    observer = depot.Client(daemon.socket)
    a, b, *_ = sorted(cluster.scheduler_info()["workers"])
    x = cluster.submit(make, 3, workers=[a], pure=False)
    assert cluster.submit(look, x, workers=[b], pure=False).result()[1]
    assert transfers(observer)
    pid = cluster.run(os.getpid, workers=[a])[a]
    os.kill(pid, signal.SIGKILL)
    assert not gone(observer)  # owner-scoped: it went with the worker's connection
    del x
    cluster.wait_for_workers(4, timeout=30)  # the nanny starts it again
