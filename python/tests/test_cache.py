"""@depot.cache with real processes and a real daemon: one computation per node, shared by every
process; concurrent first calls compute once; a claimant killed mid-computation hands over."""

import multiprocessing
import os
import signal
import threading
import time

import numpy as np
import pytest

import depot
from depot import connection, node_cache

MIB = 1 << 20


@pytest.fixture
def workdir(daemon, tmp_path):
    os.environ["DEPOT_SOCKET"] = daemon.socket  # spawned processes find the daemon through it
    connection.configure(daemon.socket)
    return tmp_path


@depot.cache
def expensive(workdir, n, seconds=0.0):
    """Appends a line to workdir/calls for every computation; waits while workdir/hold exists."""
    with open(os.path.join(workdir, "calls"), "a") as f:
        f.write(f"{os.getpid()}\n")
    while os.path.exists(os.path.join(workdir, "hold")):
        time.sleep(0.01)
    time.sleep(seconds)
    return {"array": np.arange(n, dtype=np.float64), "n": n}


def calls(workdir):
    try:
        with open(os.path.join(workdir, "calls")) as f:
            return f.read().split()
    except FileNotFoundError:
        return []


def call_and_describe(workdir, n, seconds=0.0):
    value = expensive(str(workdir), n, seconds)
    return float(value["array"].sum()), value["n"]


def spawn_pool(n):
    return multiprocessing.get_context("spawn").Pool(n)


def test_computed_once_per_node_and_shared(workdir, daemon):
    first = expensive(str(workdir), MIB)
    again = expensive(str(workdir), MIB)
    assert np.array_equal(first["array"], np.arange(MIB)) and again["n"] == MIB
    assert not again["array"].flags.writeable  # a view of the stored result
    with spawn_pool(1) as pool:
        assert pool.apply(call_and_describe, (workdir, MIB)) == (float(np.arange(MIB).sum()), MIB)
    assert calls(workdir) == [str(os.getpid())]
    expensive(str(workdir), MIB + 1)  # other arguments, another result
    assert len(calls(workdir)) == 2
    stored = [o for o in depot.Client(daemon.socket).list() if o["name"] == node_cache.CACHE_NAME]
    assert len(stored) >= 2 and all(o["evictable"] for o in stored)


def test_a_result_gone_is_computed_again(workdir):
    expensive(str(workdir), 10)
    expensive.forget(str(workdir), 10)
    expensive(str(workdir), 10)
    assert len(calls(workdir)) == 2
    assert expensive.key(str(workdir), 10) != expensive.key(str(workdir), 11)


def test_concurrent_first_calls_compute_once(workdir):
    with spawn_pool(3) as pool:
        results = pool.starmap(call_and_describe, [(workdir, 1000, 0.3)] * 3)
    assert results == [(float(np.arange(1000).sum()), 1000)] * 3
    assert len(calls(workdir)) == 1


def test_killed_claimant_hands_over_to_a_waiter(workdir):
    hold = os.path.join(workdir, "hold")
    open(hold, "w").close()
    claimant = multiprocessing.get_context("spawn").Process(
        target=call_and_describe, args=(workdir, 100))
    claimant.start()
    deadline = time.monotonic() + 30
    while not calls(workdir):
        assert time.monotonic() < deadline and claimant.is_alive(), "the claimant never started"
        time.sleep(0.01)
    os.remove(hold)  # the claimant goes on waiting: it only looked before its sleep
    os.kill(claimant.pid, signal.SIGSTOP)  # frozen mid-computation, holding the claim
    result = []
    waiter = threading.Thread(target=lambda: result.append(call_and_describe(workdir, 100)))
    waiter.start()
    time.sleep(0.3)
    assert waiter.is_alive() and not result  # waits for the claimant's result
    os.kill(claimant.pid, signal.SIGKILL)
    claimant.join()
    waiter.join(timeout=30)
    assert result == [(float(np.arange(100).sum()), 100)]
    assert calls(workdir) == [str(claimant.pid), str(os.getpid())]
