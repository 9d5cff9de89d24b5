"""A worker's data with values that lie in depot: a real LocalCluster of two worker processes with
a memory limit (so Dask's SpillBuffer holds their values), the plugin and a real daemon.

A value received through depot weighs nothing in the receiver's managed memory, and spilling it
writes no byte; the sender, once it has put a value for a send, keeps it as a view of that object
and frees its private copy.
"""

import os
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
SIZE = 64 * MIB

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
        cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                           memory_limit="1GiB", dashboard_address=":0",
                                           silence_logs=40)
    with distributed.Client(cluster) as c:
        depot.dask.register_plugin(c, depot.dask.DepotPlugin(daemon.socket))
        yield c
    cluster.close()


def make(seed):
    return np.random.default_rng(seed).random(SIZE // 8)


def identity(x):
    return x


def total(x):
    return float(x.sum())


def weighed(key, dask_worker):
    return dask_worker.data.fast.weights.get(key)


def spill(key, dask_worker):
    """Evicts `key` as Dask's memory manager would; what Dask counts as written, and the files
    left in its spill directory."""
    data = dask_worker.data
    for other in [k for k in data.fast if k != key]:
        data[other]  # the most recently used: `key` is evicted first
    assert data.evict() != -1 and key not in data.fast
    directory = data._slow_uncached.inner.d.directory \
        if hasattr(data._slow_uncached, "inner") else data._slow_uncached.d.directory
    return data.spilled_total.disk, sum(len(f) for _, _, f in os.walk(directory))


def read_back(key, dask_worker):
    x = dask_worker.data[key]
    return float(x.sum()), in_shared_memory(x), key in dask_worker.data.fast


def anon(dask_worker):
    """This process's private resident memory, in bytes."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) << 10 for line in f if line.startswith("RssAnon"))


def held(key, dask_worker):
    x = dask_worker.data.fast.d.get(key)
    return None if x is None else (in_shared_memory(x), x.flags.writeable)


def test_a_received_value_weighs_nothing_and_spills_without_writing(cluster):
    a, b = sorted(cluster.scheduler_info()["workers"])
    x = cluster.submit(make, 1, workers=[a], pure=False)
    expected = cluster.submit(total, x, workers=[a], pure=False).result()
    # B's own result is the value it received through depot: it keeps it while y is held
    y = cluster.submit(identity, x, workers=[b], pure=False)
    key = y.key
    assert cluster.submit(total, y, workers=[b], pure=False).result() == expected
    assert cluster.run(held, key, workers=[b])[b] == (True, False)
    assert cluster.run(weighed, key, workers=[b])[b] < MIB, \
        "B weighs the depot-backed value at its full size in managed memory"
    written, files = cluster.run(spill, key, workers=[b])[b]
    assert (written, files) == (0, 0), \
        f"spilling a depot-backed value wrote {written} bytes in {files} files"
    assert cluster.run(read_back, key, workers=[b])[b] == (expected, True, True)
    del y, x


def test_the_sender_keeps_its_value_as_a_view_of_the_object_it_put(cluster):
    a, b = sorted(cluster.scheduler_info()["workers"])
    x = cluster.submit(make, 2, workers=[a], pure=False)
    x.result()
    before = cluster.run(anon, workers=[a])[a]
    assert cluster.run(held, x.key, workers=[a])[a] == (False, True)
    y = cluster.submit(total, x, workers=[b], pure=False)
    y.result()
    deadline = time.monotonic() + 10
    while cluster.run(held, x.key, workers=[a])[a] != (True, False) and \
            time.monotonic() < deadline:
        time.sleep(0.05)
    assert cluster.run(held, x.key, workers=[a])[a] == (True, False), \
        "the sender still holds its private copy of a value it put in depot"
    freed = before - cluster.run(anon, workers=[a])[a]
    assert freed > SIZE * 3 // 4, f"the sender freed {freed} bytes of a {SIZE}-byte value"
    assert cluster.run(weighed, x.key, workers=[a])[a] < MIB
    stats = cluster.run(depot.dask.transfer_stats, workers=[a])[a]
    z = cluster.submit(total, x, workers=[b], pure=False)  # a second send names it again
    assert z.result() == y.result()
    assert cluster.run(depot.dask.transfer_stats, workers=[a])[a]["sent_bytes"] == \
        stats["sent_bytes"]
    del x, y, z


def without_swaps(dask_worker):
    """Stops this worker's data from hearing of values sent (its swap): its values stay private
    after a send, as one is when the memory manager spills it before the swap comes."""
    from depot import dask_family
    getattr(dask_family, "KEPT_HOOKS", []).clear()  # none before swaps existed


def test_a_value_spilled_after_its_send_and_before_its_swap_writes_nothing(cluster):
    a, b = sorted(cluster.scheduler_info()["workers"])
    cluster.run(without_swaps, workers=[a])
    x = cluster.submit(make, 3, workers=[a], pure=False)
    expected = cluster.submit(total, x, workers=[b], pure=False).result()
    assert cluster.run(held, x.key, workers=[a])[a] == (False, True)  # private: no swap
    written, files = cluster.run(spill, x.key, workers=[a])[a]
    assert (written, files) == (0, 0), \
        f"spilling a value already copied into depot wrote {written} bytes in {files} files"
    assert cluster.run(read_back, x.key, workers=[a])[a] == (expected, True, True)
    del x
