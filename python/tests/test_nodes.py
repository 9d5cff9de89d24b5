"""Dask across nodes, with two daemons standing for two nodes: one real LocalCluster scheduler,
two worker processes on daemon A and one on daemon B (each finds its daemon through
$DEPOT_SOCKET, as it would on its own node). Data between A's workers goes through depot; to and
from B's, through Dask's TCP path; results are the same, and neither daemon keeps anything."""

import sys
import time

import distributed
import numpy as np
import pytest
from distributed.protocol.pickle import cloudpickle

import depot
import depot.dask

MIB = 1 << 20

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def make(n, seed):
    return np.random.default_rng(seed).random(n)


def summed(*arrays):
    return float(sum(a.sum() for a in arrays))


@pytest.fixture(scope="module")
def two_nodes(daemon, other_daemon):
    nodes = {"a": daemon.socket, "b": other_daemon.socket}
    cluster = distributed.LocalCluster(n_workers=0, processes=True, dashboard_address=":0",
                                       silence_logs=40)
    nannies = []

    async def start(socket):
        return await distributed.Nanny(cluster.scheduler_address, nthreads=1,
                                       env={"DEPOT_SOCKET": socket}, silence_logs=40)

    for node in ("a", "a", "b"):
        nannies.append((node, cluster.sync(start, nodes[node])))
    with distributed.Client(cluster) as client:
        client.wait_for_workers(3)
        depot.dask.register_plugin(client)
        by_node = {"a": [], "b": []}
        for node, nanny in nannies:
            by_node[node].append(nanny.worker_address)
        yield client, by_node, nodes
        for _, nanny in nannies:
            cluster.sync(nanny.close)
    cluster.close()


def test_transfers_use_depot_within_a_node_and_tcp_across(two_nodes, daemon, other_daemon):
    client, by_node, nodes = two_nodes
    (a1, a2), (b1,) = by_node["a"], by_node["b"]
    identities = client.run(depot.dask.node_identity)
    assert identities[a1] == identities[a2] != identities[b1]
    before = client.run(depot.dask.transfer_stats)

    x = client.submit(make, MIB, 1, workers=[a1], pure=False)
    y = client.submit(make, MIB, 2, workers=[b1], pure=False)
    want_x, want_y = make(MIB, 1).sum(), make(MIB, 2).sum()
    # a2 gets x before b1 holds a copy: a worker fetches a dependency from any holder, and from
    # b1 it would come over TCP.
    on_a = client.submit(summed, x, workers=[a2], pure=False)       # a1 -> a2: depot
    assert on_a.result() == pytest.approx(want_x)
    on_b = client.submit(summed, x, y, workers=[b1], pure=False)    # a1 or a2 -> b1: TCP
    back_on_a = client.submit(summed, y, workers=[a2], pure=False)  # b1 -> a2: TCP
    assert on_b.result() == pytest.approx(want_x + want_y)
    assert back_on_a.result() == pytest.approx(want_y)

    after = client.run(depot.dask.transfer_stats)
    moved = {w: after[w]["received"] - before[w]["received"] for w in after}
    assert moved[a2] == 1 and moved[b1] == 0  # only a1 -> a2 went through depot
    sent = {w: after[w]["sent"] - before[w]["sent"] for w in after}
    assert sent[a1] == 1 and sent[b1] == 0

    del x, y, on_a, on_b, back_on_a
    for d in (daemon, other_daemon):
        observer = depot.Client(d.socket)
        deadline = time.monotonic() + 5
        while [o for o in observer.list() if o["name"] == depot.dask.TRANSFER_NAME]:
            assert time.monotonic() < deadline, "a transfer object stayed behind"
            time.sleep(0.05)


def test_a_ref_used_on_another_node_names_its_node(two_nodes):
    client, by_node, nodes = two_nodes
    depot.dask.configure(nodes["a"])
    ref = depot.dask.put(np.arange(10.0))
    assert client.submit(lambda v: float(v.sum()), ref, workers=by_node["a"][:1],
                         pure=False).result() == 45.0
    elsewhere = client.submit(lambda v: float(v.sum()), ref, workers=by_node["b"], pure=False)
    with pytest.raises(depot.NotFound, match="belongs to the depot of node"):
        elsewhere.result()
    ref.delete()
