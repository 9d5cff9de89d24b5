"""depot's Dask comms on every release: a cluster on depot:// addresses (no plugin, no preload:
the comm backend found through its entry point), P2P rechunk shards, scatter and results, and
the refusals that keep depot from falling back to TCP without saying so."""

import asyncio
import os
import sys
import threading
import types

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

cloudpickle.register_pickle_by_value(sys.modules[__name__])
cloudpickle.register_pickle_by_value(mappings)

# P2P rechunk came with distributed 2023.2; Debian's 2022.12 has none.
HAS_P2P_RECHUNK = "method" in __import__("inspect").signature(da.Array.rechunk).parameters


@pytest.fixture(scope="module")
def depot_cluster(daemon):
    os.environ["DEPOT_SOCKET"] = daemon.socket
    depot.dask.configure(daemon.socket)
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       protocol="depot://", dashboard_address=":0",
                                       silence_logs=40)
    with cluster, distributed.Client(cluster) as client:
        yield client


def describe(array):
    return {"sum": float(array.sum()), "shared": in_shared_memory(array),
            "writeable": bool(array.flags.writeable)}


def make(n, seed):
    return np.random.default_rng(seed).random(n)


def received(client):
    return sum(s["received_bytes"] for s in client.run(depot.dask.transfer_stats).values())


def test_a_depot_cluster_moves_large_values_through_depot(depot_cluster):
    """Fails on any release where the values go by TCP instead (silently): the array arrives
    as a read-only view of shared memory, and the workers count its bytes."""
    client = depot_cluster
    a, b = sorted(client.scheduler_info()["workers"])
    assert a.startswith("depot://") and b.startswith("depot://")
    before = received(client)
    x = client.submit(make, MIB, 1, workers=[a], pure=False)
    seen = client.submit(describe, x, workers=[b], pure=False).result(timeout=60)
    assert seen == {"sum": float(make(MIB, 1).sum()), "shared": True, "writeable": False}
    assert received(client) - before >= 8 * MIB


def test_scatter_and_results_to_the_client_go_through_depot(depot_cluster):
    client = depot_cluster
    a = sorted(client.scheduler_info()["workers"])[0]
    before = received(client)
    array = make(MIB, 2)
    [scattered] = client.scatter([array], workers=[a], direct=True)
    assert client.submit(describe, scattered, workers=[a], pure=False).result(timeout=60) == \
        {"sum": float(array.sum()), "shared": True, "writeable": False}
    assert received(client) - before >= 8 * MIB
    mine = depot.dask.transfer_stats()["received_bytes"]
    # Gathered from the worker directly: what passes through the scheduler stays on Dask's path
    # (the scheduler forwards values unread, to clients that may be on other nodes).
    back = client.gather(client.submit(make, MIB, 3, workers=[a], pure=False), direct=True)
    assert np.array_equal(back, make(MIB, 3)) and in_shared_memory(back)
    assert depot.dask.transfer_stats()["received_bytes"] - mine >= 8 * MIB


def records(n, seed):
    """A dask.bag's kind of piece: n (key, 1 KiB of bytes) records."""
    rng = np.random.default_rng(seed)
    return [(int(k), rng.bytes(1024)) for k in rng.integers(0, 1 << 30, n)]


def test_a_large_collection_of_small_records_goes_through_depot_whole(depot_cluster):
    """Dask serializes a list marked for serialization record by record, each a frame of its
    own on the socket: 1,000 records of 1 KiB never reached depot's threshold. Fails if the
    piece goes any way but whole through depot, or arrives changed."""
    client = depot_cluster
    a, b = sorted(client.scheduler_info()["workers"])
    before = received(client)
    piece = client.submit(records, 1000, 6, workers=[a], pure=False)
    got = client.submit(lambda p: p, piece, workers=[b], pure=False).result(timeout=60)
    assert got == records(1000, 6)
    assert received(client) - before >= 1000 * 1024


def test_a_message_is_prepared_for_a_peer_of_the_same_daemon(daemon):
    """What DepotComm.write does before Dask serializes a message: a large collection of small
    plain records becomes one depot object (read back equal), and the families are asked only
    where a value may be large: a small one, alone or in a collection of plain values, is not
    offered to them; an array, records that are large each, or a message deeper than is looked
    into are."""
    from distributed.protocol.serialize import Serialize, Serialized, deserialize

    from depot import dask_comm, dask_family
    depot.dask.configure(daemon.socket)
    context = {"recipient": {dask_family.HANDSHAKE_KEY: dask_family.node_identity()}}
    piece = records(1000, 7)

    def prepare(msg):
        return dask_comm._through_depot(msg, context, dask_comm._DEPTH)

    msg = {"op": "get_data-reply", "data": {"x": Serialize(piece), "y": Serialize(3)}}
    out, offer = prepare(msg)
    assert not offer
    whole = out["data"]["x"]
    assert isinstance(whole, Serialized) and whole.header["serializer"] == "depot"
    assert out["data"]["y"] is msg["data"]["y"] and isinstance(msg["data"]["x"], Serialize)
    assert deserialize(whole.header, whole.frames) == piece

    small = {"data": {"x": Serialize(records(10, 8)), "y": Serialize("text")}}
    assert prepare(small) == (small, False)
    for value in (make(MIB, 9), [(1, bytes(MIB)), (2, bytes(MIB))]):
        message = [{"data": Serialize(value)}]
        assert prepare(message) == (message, True)
    deep = [[[[[Serialize(b"")]]]]]
    assert prepare(deep) == (deep, True)


def test_a_peer_in_the_same_process_is_handed_large_frames_by_reference(daemon):
    """Two depot:// comms of one process (a worker sending P2P shards to itself): a large array
    arrives as a read-only view of the sender's own memory, neither copied nor put into depot;
    a value handed for a write that failed goes at once, and one the reader never took goes when
    the reader's end closes."""
    from distributed.comm import connect, listen
    from distributed.protocol import to_serialize

    from depot import dask_family
    depot.dask.configure(daemon.socket)

    async def main():
        accepted = asyncio.Queue()
        async with listen("depot://127.0.0.1:0", accepted.put) as listener:
            writer = await connect(listener.contact_address)
            reader = await accepted.get()

            def handed():  # what waits for the reader (the module's cluster may hand its own)
                return [v for end, v in dask_family._handed.values() if end == reader._end]

            array = make(MIB, 10)
            before = depot.dask.transfer_stats()
            await writer.write({"x": to_serialize(array)})
            got = (await reader.read())["x"]
            after = depot.dask.transfer_stats()
            assert np.array_equal(got, array) and not got.flags.writeable
            assert np.shares_memory(got, array)
            assert after["in_process_bytes"] - before["in_process_bytes"] == array.nbytes
            assert after["sent"] == before["sent"] and after["received"] == before["received"]
            assert not handed()
            with pytest.raises(TypeError):  # the array is handed, then the lock fails
                await writer.write({"x": to_serialize(array), "y": to_serialize(threading.Lock())},
                                   on_error="raise")
            assert not handed()
            await writer.write({"x": to_serialize(make(MIB, 11))})
            while not handed():  # serialized, maybe not yet read
                await asyncio.sleep(0.01)
            reader.abort()
            assert not handed()
            await writer.close()

    asyncio.run(main())


def rechunk_through_depot(client):
    """A P2P rechunk of a 32 MiB array between two workers: every output block takes a piece of
    every input block, so about half of the bytes cross between the workers as P2P shards, and
    the other half go from each worker to itself. Returns the fractions of the array's bytes
    that went through depot and that were handed within a worker."""
    x = da.random.RandomState(5).random((2048, 2048), chunks=(2048, 256))
    expected = x.compute(scheduler="sync").sum(axis=1)
    before = client.run(depot.dask.transfer_stats)
    got = x.rechunk((256, 2048), method="p2p").sum(axis=1).compute()
    assert np.allclose(got, expected)
    after = client.run(depot.dask.transfer_stats)
    return tuple(sum(after[w][key] - before[w][key] for w in after) / x.nbytes
                 for key in ("received_bytes", "in_process_bytes"))


@pytest.mark.skipif(not HAS_P2P_RECHUNK, reason=f"distributed {distributed.__version__} has no "
                    "P2P rechunk (it came with 2023.2)")
def test_p2p_rechunk_shards_go_through_depot_on_a_depot_cluster(depot_cluster):
    through_depot, in_process = rechunk_through_depot(depot_cluster)
    assert through_depot >= 0.4 and in_process >= 0.4


@pytest.mark.skipif(not HAS_P2P_RECHUNK, reason=f"distributed {distributed.__version__} has no "
                    "P2P rechunk (it came with 2023.2)")
def test_p2p_rechunk_shards_go_through_depot_with_the_plugin(daemon):
    """On a tcp:// cluster with the plugin: shards travel by shuffle_receive, not by the
    fetches of gather_dep, and must go through depot all the same."""
    os.environ["DEPOT_SOCKET"] = daemon.socket
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=":0", silence_logs=40) as cluster, \
            distributed.Client(cluster) as client:
        depot.dask.register_plugin(client, depot.dask.DepotPlugin(daemon.socket))
        through_depot, in_process = rechunk_through_depot(client)
        assert through_depot >= 0.4 and in_process >= 0.4


def test_refs_resolve_on_a_depot_cluster(depot_cluster):
    """Refs arrive as values with the plugin's refs setting, on whatever tasks a release makes."""
    client = depot_cluster
    depot.dask.register_plugin(client, depot.dask.DepotPlugin())
    ref = depot.dask.put(make(MIB, 4))
    graph = dask.delayed(lambda n: describe(n[0]["x"]))([{"x": ref}])
    assert graph.compute() == {"sum": float(make(MIB, 4).sum()), "shared": True,
                               "writeable": False}


def test_register_plugin_refuses_a_client_it_does_not_know():
    with pytest.raises(depot.dask.UnsupportedDask, match="register_plugin"):
        depot.dask.register_plugin(types.SimpleNamespace(), depot.dask.DepotPlugin())


def test_transfers_refuse_a_worker_they_cannot_adopt(daemon):
    """A listener depot cannot give its comms to (another transport, or another release's
    class) raises instead of leaving the worker on Dask's path."""
    depot.dask.configure(daemon.socket)
    listener = types.SimpleNamespace(contact_address="ucx://10.0.0.1:1234", comm_class=object)
    worker = types.SimpleNamespace(listeners=[listener], rpc=None)
    with pytest.raises(depot.dask.UnsupportedDask, match="ucx://"):
        depot.dask.enable_transfers(worker)
    with pytest.raises(depot.dask.UnsupportedDask, match="listeners"):
        depot.dask.enable_transfers(types.SimpleNamespace(rpc=None))
