"""depot.dask with a real LocalCluster of worker processes and a real daemon.

One cluster serves the module (starting worker processes is what costs time here); the
transparent path is first measured off, then switched on with the plugin, so each result is
compared with Dask's own on the same workers. Without dask and distributed (scripts/deps installs
them) the module fails to import: these tests fail rather than skip.
"""

import gc
import os
import pickle
import sys
import time

import dask
import dask.array as da
import distributed
import numpy as np
import pytest
from distributed.protocol.pickle import cloudpickle

import depot
import depot.dask
import mappings
from mappings import in_shared_memory

MIB = 1 << 20

# Workers cannot import this file or its helpers: the functions they run travel by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])
cloudpickle.register_pickle_by_value(mappings)


@pytest.fixture(scope="module")
def cluster(daemon):
    # Worker processes are spawned: they find the daemon through the environment.
    os.environ["DEPOT_SOCKET"] = daemon.socket
    depot.dask.configure(daemon.socket)
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=":0", silence_logs=40)
    with distributed.Client(cluster) as c:
        yield c
    cluster.close()


def workers(client):
    return sorted(client.scheduler_info()["workers"])


def describe(array):
    """What a task reports about the array it received."""
    return {"sum": float(array.sum()), "shared": in_shared_memory(array),
            "writeable": bool(array.flags.writeable), "pid": os.getpid()}


def make(n, value, seed):
    return np.random.default_rng(seed).random(n) + value


def transfer_objects(c):
    return [o for o in c.list() if o["name"] == depot.dask.TRANSFER_NAME]


# --- explicit ------------------------------------------------------------------------------------


def test_put_ref_is_small_and_resolves_zero_copy_on_every_worker(cluster):
    array = np.arange(4 * MIB, dtype=np.float64)
    ref = depot.dask.put(array)
    assert len(pickle.dumps(ref)) < 400  # the GUID and the daemon's identity
    futures = [cluster.submit(lambda r: describe(r.get()), ref, workers=[w], pure=False)
               for w in workers(cluster)]
    reports = cluster.gather(futures)
    assert len({r["pid"] for r in reports}) == 2
    for report in reports:
        assert report["sum"] == float(array.sum())
        assert report["shared"] and not report["writeable"]


def test_put_pickles_other_values_with_buffers_out_of_band(cluster):
    value = {"weights": np.ones(MIB), "labels": ["a", "b"]}
    ref = depot.dask.put(value)
    report = cluster.submit(lambda r: (describe(r.get()["weights"]), r.get()["labels"]), ref,
                            pure=False).result()
    assert report[0]["sum"] == MIB and report[0]["shared"]
    assert report[1] == ["a", "b"]


def test_owning_ref_deletes_the_object_when_dropped(daemon):
    c = depot.Client(daemon.socket)
    ref = depot.dask.put(np.zeros(10))
    guid = ref.guid
    copy = pickle.loads(pickle.dumps(ref))
    del copy
    gc.collect()
    assert c.contains(guid)  # a copy does not own it
    del ref
    gc.collect()
    assert not c.contains(guid)


def test_refs_in_task_arguments_arrive_as_their_values(cluster, daemon):
    """With the plugin, a Ref at top level or inside lists, tuples and dicts of a task's
    arguments (submitted or in a graph) is the value in the task, zero-copy on every worker."""
    depot.dask.register_plugin(cluster, depot.dask.DepotPlugin(daemon.socket, transfers=False))
    array = np.arange(MIB, dtype=np.float64)
    ref = depot.dask.put(array)
    nested = [ref, (ref,), {"x": ref}]
    futures = [cluster.submit(lambda a, n, k: [describe(a), describe(n[0]), describe(n[1][0]),
                                               describe(n[2]["x"]), describe(k)],
                              ref, nested, k=ref, workers=[w], pure=False)
               for w in workers(cluster)]
    graph = dask.delayed(lambda n: describe(n[2]["x"]))(nested)
    reports = [r for rs in cluster.gather(futures) for r in rs] + [graph.compute()]
    assert len({r["pid"] for r in reports}) == 2
    for report in reports:
        assert report["sum"] == float(array.sum()) and report["shared"]
    assert ref.get().sum() == array.sum()  # the Ref itself still resolves with get()


def test_ref_of_another_node_names_its_node(daemon):
    depot.dask.configure(daemon.socket)
    stranger = depot.dask.Ref("00000000-0000-0000-0000-000000000001", "elsewhere/boot/1/sock")
    with pytest.raises(depot.NotFound, match="elsewhere/boot/1/sock"):
        stranger.get()


# --- transparent ----------------------------------------------------------------------------------


def exchange(client):
    """Work that moves arrays between the two workers: a pair of explicit transfers (8 MiB and a
    small one), and a rechunk that mixes every block with every other."""
    a, b = workers(client)
    big = client.submit(make, MIB, 1.0, 1, workers=[a], pure=False)
    small = client.submit(make, 1000, 2.0, 2, workers=[a], pure=False)
    seen = client.submit(lambda x, y: (describe(x), describe(y)), big, small, workers=[b],
                         pure=False).result()
    x = da.random.RandomState(3).random((2048, 2048), chunks=(256, 2048))
    mixed = (x.rechunk((2048, 256)) * 2).sum(axis=0).compute()
    return seen, client.gather(big), mixed


def test_transparent_transfers_give_identical_results_through_depot(cluster, daemon):
    observer = depot.Client(daemon.socket)
    plain_seen, plain_big, plain_mixed = exchange(cluster)
    assert not plain_seen[0]["shared"]  # Dask's own path: a copy in the receiver

    depot.dask.register_plugin(cluster, depot.dask.DepotPlugin(daemon.socket))
    events = observer.subscribe()
    before = cluster.run(depot.dask.transfer_stats)
    seen, big, mixed = exchange(cluster)
    after = cluster.run(depot.dask.transfer_stats)

    assert np.array_equal(big, plain_big) and np.array_equal(mixed, plain_mixed)
    assert seen[0]["sum"] == plain_seen[0]["sum"] and seen[1]["sum"] == plain_seen[1]["sum"]
    # The large array was mapped from shared memory, the small one came over the socket.
    assert seen[0]["shared"] and not seen[0]["writeable"]
    assert not seen[1]["shared"]

    sent = sum(s["sent"] - before[w]["sent"] for w, s in after.items())
    received = sum(s["received"] - before[w]["received"] for w, s in after.items())
    assert sent >= 2 and received == sent

    # The daemon saw each transfer sealed and deleted (by its receiver).
    sealed, deleted = set(), set()
    while (event := events.next(timeout=0.5)) is not None:
        if event.get("name") == depot.dask.TRANSFER_NAME:
            (sealed if event["event"] == "sealed" else deleted).add(event["guid"])
    assert len(sealed) == sent
    assert sealed <= deleted
    assert not transfer_objects(observer)


def test_recipients_on_another_daemon_fall_back():
    """A recipient that announces another node's daemon gets Dask's ordinary serialization."""
    from distributed.protocol.serialize import serialize

    other = {"recipient": {"depot-node": "another-host/boot/1/sock"}}
    header, frames = serialize(np.ones(MIB), serializers=("depot", "dask", "pickle"),
                               context=other)
    assert header["serializer"] == "dask"
    header, _ = serialize(np.ones(MIB), serializers=("depot", "dask", "pickle"), context={})
    assert header["serializer"] == "dask"


def test_plain_records_are_sized_without_dask_sizeof(daemon, monkeypatch):
    """Dask offers each record of a collection (a bag shuffle's piece of hundreds of records) to
    each family on its own: depot sizes plain records (scalars, strings, bytes, short tuples of
    them) itself, as Dask's sizeof took longer than the rest of a refusal. A plain record above
    the threshold still goes through depot."""
    from distributed.protocol.serialize import deserialize, serialize

    from depot import connection, dask_family

    connection.configure(daemon.socket)
    measured = []
    real = dask_family.sizeof
    monkeypatch.setattr(dask_family, "sizeof", lambda x: measured.append(x) or real(x))
    same = {"recipient": {dask_family.HANDSHAKE_KEY: dask_family.node_identity()}}
    families = ("depot", "dask", "pickle")
    for record in [(7, b"r" * 1024), ("key", 2.5, None), b"s" * 100, ((1, "a"), (2, "b"))]:
        header, frames = serialize(record, serializers=families, context=same)
        assert header["serializer"] != "depot" and deserialize(header, frames) == record
    large = (1, b"a" * MIB, b"b" * MIB)
    header, frames = serialize(large, serializers=families, context=same)
    assert header["serializer"] == "depot" and deserialize(header, frames) == large
    assert not measured
    serialize({"a": [1, 2]}, serializers=families, context=same)  # not plain: Dask sizes it
    assert measured

def test_preload_setting_and_cleanup_after_workers_exit(daemon):
    """The one setting `distributed.worker.preload: [depot.dask]` enables transfers (an array
    between two workers arrives as a view of shared memory, not by TCP, which a release where
    the preload fails would do with only a log line); transfers no receiver took are deleted
    when their worker closes, and its connections go with it."""
    os.environ["DEPOT_SOCKET"] = daemon.socket
    observer = depot.Client(daemon.socket)
    clients_before = observer.status()["clients"]

    def orphan():
        from distributed.protocol.serialize import serialize
        listener = distributed.get_worker().listener
        assert issubclass(listener.comm_class, depot.dask_comm.DepotComm)
        recipient = {"depot-node": depot.dask.node_identity()}
        value = distributed.get_worker()._depot_test_value = np.ones(2 * MIB)  # kept: its object
        header, _ = serialize(value, serializers=("depot",), context={"recipient": recipient})
        return header["places"][0][0]

    with dask.config.set({"distributed.worker.preload": ["depot.dask"]}):
        cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                           dashboard_address=":0", silence_logs=40)
    with cluster, distributed.Client(cluster) as c:
        a, b = workers(c)
        x = c.submit(make, MIB, 1.0, 1, workers=[a], pure=False)
        seen = c.submit(describe, x, workers=[b], pure=False).result(timeout=60)
        assert seen["shared"] and not seen["writeable"]
        del x
        guid = c.submit(orphan, pure=False).result()
        assert observer.contains(guid)
    assert not observer.contains(guid)
    assert not transfer_objects(observer)
    deadline = time.monotonic() + 5  # the daemon notices closed connections on its own time
    while observer.status()["clients"] > clients_before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert observer.status()["clients"] <= clients_before
