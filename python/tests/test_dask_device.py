"""Device values between two Dask workers through depot's device pools (depot.dask_device),
against the test daemon whose GPUs are memfd stand-ins: a type with a "cuda" serializer (here a
stand-in device array over host memory, as the stand-ins' device memory is host memory) moves
from one worker to the other as device frames of a depot object, never merged or copied through
Dask's socket. Not GPU coverage: nothing here has run on a GPU."""

import os
import sys

import distributed
import numpy as np
import pytest
from distributed.protocol.pickle import cloudpickle

import depot
import depot.dask
from conftest import Daemon
from stand_in_device import StandInDeviceArray

cloudpickle.register_pickle_by_value(sys.modules[__name__])

MIB = 1 << 20


def make(seed):
    return StandInDeviceArray(np.random.default_rng(seed).integers(0, 255, 2 * MIB, np.uint8))


@pytest.fixture(scope="module")
def stand_in():
    d = Daemon("64MiB", daemon="MEMFD_DEPOTD", args=("--device-chunk-size", "16MiB"))
    yield d
    d.stop()


def test_device_values_move_between_workers_as_device_frames(stand_in):
    previous = os.environ.get("DEPOT_SOCKET")
    os.environ["DEPOT_SOCKET"] = stand_in.socket
    try:
        cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                           dashboard_address=":0", silence_logs=40)
    finally:
        if previous is not None:
            os.environ["DEPOT_SOCKET"] = previous
    with cluster, distributed.Client(cluster) as client:
        depot.dask.register_plugin(client, depot.dask.DepotPlugin(stand_in.socket))
        a, b = sorted(client.scheduler_info()["workers"])
        x = client.submit(make, 7, workers=[a], pure=False)
        seen = client.submit(lambda v: v, x, workers=[b], pure=False).result()
        assert seen == {"frame type": "DeviceFrame",
                        "sum": int(make(7).data.sum(dtype=np.uint64))}
        del x
    observer = depot.Client(stand_in.socket)
    assert not observer.list()  # the transfer's object went with its receiver's delete
    assert all(p["used"] == 0 for p in observer.status()["device_pools"])


class Formatted:
    """A host value that counts how often it is turned into text."""

    def __init__(self):
        self.formatted = 0

    def __str__(self):
        self.formatted += 1
        return "formatted"

    __repr__ = __str__


def test_host_values_are_declined_on_their_type_without_being_formatted(stand_in):
    """Every value a worker sends with the plugin on is offered to the device family first:
    it declines a host value without serializing it, which would format it (milliseconds for a
    dataframe), and the value then travels by Dask's own families as before."""
    from distributed.protocol.serialize import serialize

    depot.dask.configure(stand_in.socket)
    context = {"recipient": {"depot-node": depot.dask.node_identity()}}
    value = Formatted()
    header, _ = serialize(value, serializers=("depot-cuda", "pickle"), context=context)
    assert header["serializer"] == "pickle"
    assert value.formatted == 0
