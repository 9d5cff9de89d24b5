"""Values handed between processes through depot: depot.handoff with Python's process pools,
and Dask's process scheduler with its data through depot (depot.dask.get), with real worker
processes and a real daemon.
"""

import concurrent.futures
import gc
import multiprocessing
import os
import pickle

import dask
import numpy as np
import pytest

import depot
import depot.dask
from depot import connection, handoff
from conftest import Daemon
from mappings import in_shared_memory

MIB = 1 << 20


def handoffs(c):
    return [o for o in c.list() if o["name"] == handoff.HANDOFF_NAME]


@pytest.fixture(scope="module")
def scheduler(daemon):
    os.environ["DEPOT_SOCKET"] = daemon.socket  # spawned workers find the daemon through it
    connection.configure(daemon.socket)
    with depot.dask.ProcessScheduler(2) as s:
        yield s


def make(i):
    return np.arange(MIB // 8, dtype=np.float64) * i


def describe(*arrays):
    return [(float(a.sum()), in_shared_memory(a), os.getpid()) for a in arrays]


def fail(_):
    raise ValueError("the task's own error")


def test_dumps_and_loads_share_large_buffers_and_copy_small_ones(daemon):
    connection.configure(daemon.socket)
    value = {"big": make(3), "small": np.ones(10), "text": "kept"}
    payload = handoff.dumps(value)
    assert len(payload) < 4096
    back = handoff.loads(payload)
    assert np.array_equal(back["big"], value["big"]) and back["text"] == "kept"
    assert in_shared_memory(back["big"]) and not back["big"].flags.writeable
    assert not in_shared_memory(back["small"])
    # Handing on a value already in depot names its object again instead of copying it.
    again = handoff.loads(handoff.dumps(back["big"]))
    assert again.__array_interface__["data"] == back["big"].__array_interface__["data"]
    c = depot.Client(daemon.socket)
    assert len(handoffs(c)) == 1
    del back, again
    gc.collect()
    assert not handoffs(c)  # deleted by its owner when the last view went


def test_a_buffer_handed_on_names_the_frame_it_lies_in(daemon):
    connection.configure(daemon.socket)
    back = handoff.loads(handoff.dumps([make(1), make(2)]))  # one object, a frame each
    again = handoff.loads(handoff.dumps(back[1]))
    assert np.array_equal(again, make(2))
    assert again.__array_interface__["data"] == back[1].__array_interface__["data"]


def test_process_pools_return_results_through_depot(daemon):
    os.environ["DEPOT_SOCKET"] = daemon.socket
    c = depot.Client(daemon.socket)
    spawn = multiprocessing.get_context("spawn")
    with spawn.Pool(1) as pool:
        results = pool.map(handoff.through_depot(make), [1, 2])
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=spawn) as pool:
        results += list(pool.map(handoff.through_depot(make), [3]))
    for i, result in enumerate(results, 1):
        assert np.array_equal(result, make(i))
        assert in_shared_memory(result)
    del results, result
    gc.collect()
    assert not handoffs(c)


def test_scheduler_passes_results_and_inputs_through_depot(scheduler, daemon):
    parts = [dask.delayed(make)(i) for i in range(4)]
    total = dask.delayed(sum)(parts)
    seen = dask.delayed(describe)(*parts)
    got_total, got_seen = dask.compute(total, seen, scheduler=scheduler.get)
    want_total, = dask.compute(total, scheduler="threads")
    assert np.array_equal(got_total, want_total)
    assert in_shared_memory(got_total)
    assert [s[0] for s in got_seen] == [float(make(i).sum()) for i in range(4)]
    assert all(s[1] for s in got_seen) and got_seen[0][2] != os.getpid()
    del got_total
    gc.collect()
    assert not handoffs(depot.Client(daemon.socket))


def test_scheduler_resolves_refs_in_task_arguments(scheduler):
    ref = depot.dask.put(make(5))
    task = dask.delayed(lambda a, b, c: describe(a, b[0], c["x"]))(ref, [ref], {"x": (ref,)[0]})
    seen, = dask.compute(task, scheduler=scheduler.get)
    assert [s[0] for s in seen] == [float(make(5).sum())] * 3
    assert all(s[1] for s in seen)


def test_scheduler_raises_the_task_error_and_is_registered_by_name(scheduler):
    with pytest.raises(ValueError, match="the task's own error"):
        dask.compute(dask.delayed(fail)(1), scheduler=scheduler.get)
    assert dask.base.get_scheduler(scheduler="depot") is depot.dask.get


MALLORY = 41003  # a throwaway uid: no account needs to exist for a process to run as one


def test_loads_refuses_an_object_another_uid_made_under_the_senders_guid():
    """The sender's object is gone (its connection closed, say) and another user creates one
    under the same GUID, with bytes of its own: loads refuses it rather than unpickle them."""
    if os.geteuid() != 0:
        pytest.skip("needs root to run a process as another uid")
    d = Daemon("256MiB", args=["--socket-mode", "0666", "--allow-users", str(MALLORY)])
    before = connection.socket_path()
    try:
        os.chmod(d.dir, 0o755)
        connection.configure(d.socket)
        payload = handoff.dumps(make(5))
        (guid, *_), = pickle.loads(payload)[1]
        depot.Client(d.socket).delete(guid)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                os.setgroups([])
                os.setresgid(MALLORY, MALLORY, MALLORY)
                os.setresuid(MALLORY, MALLORY, MALLORY)
                depot.Client(d.socket).put(make(7), guid=guid)
                code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert depot.Client(d.socket).stat(guid)["creator_uid"] == MALLORY
        with pytest.raises(depot.PermissionDenied, match=f"created by uid {MALLORY}"):
            handoff.loads(payload)
        # The sender's own objects still load.
        assert np.array_equal(handoff.loads(handoff.dumps(make(3))), make(3))
    finally:
        if before is not None:
            connection.configure(before)
        d.stop()


def test_loads_refuses_bytes_a_payload_names_past_its_frame(daemon):
    connection.configure(daemon.socket)
    data, places = pickle.loads(handoff.dumps(make(1)))
    guid, frame, offset, length, owned, creator = places[0]
    forged = pickle.dumps((data, [(guid, frame, offset, length + 8, owned, creator)]))
    with pytest.raises(ValueError, match="has no bytes"):
        handoff.loads(forged)
