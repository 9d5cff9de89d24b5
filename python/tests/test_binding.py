"""The binding's API: put and get, errors, lifetimes of views, zero-copy, the GIL."""

import gc
import math
import os
import signal
import subprocess
import threading
import time
import uuid

import numpy as np
import pytest

import depot


def fresh_guid():
    return str(uuid.uuid4())


def holders(client, guid):
    """How many connections hold the object (0 once every reference is released)."""
    return client.stat(guid)["refcount"]


def wait_until(predicate, timeout=2.0):
    """Releases travel with the next request or within a millisecond: poll briefly."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


# --- put and get ----------------------------------------------------------------------------


@pytest.mark.parametrize("data", [b"bytes", bytearray(b"bytearray"), memoryview(b"memoryview"),
                                  np.arange(5, dtype=np.int32)])
def test_put_takes_any_contiguous_buffer(client, data):
    guid = client.put(data)
    assert uuid.UUID(guid).version == 4
    assert bytes(client.get(guid).frames[0]) == bytes(memoryview(data).cast("B"))


def test_put_list_makes_one_frame_per_buffer(client):
    guid = client.put([b"one", b"", bytearray(b"three")], name="frames", metadata=b"meta")
    obj = client.get(guid)
    assert [bytes(f) for f in obj.frames] == [b"one", b"", b"three"]
    assert len(obj) == 3 and obj.size == 8 and obj.guid == guid
    assert obj.metadata == b"meta"
    assert client.stat(guid)["name"] == "frames"


@pytest.mark.parametrize("size", [(16 << 10) + 1, 64 << 10, 70 << 10])
def test_put_over_the_metadata_limit_is_refused_with_no_guid(client, size):
    # Refused before it is written anywhere: no GUID for an object the daemon would never keep,
    # and the connection goes on working.
    before = client.status()["objects_sealed"]
    with pytest.raises(depot.InvalidArgument, match="max_metadata"):
        client.put(b"data", metadata=b"m" * size)
    guid = client.put(b"after", metadata=b"m" * (16 << 10))
    assert bytes(client.get(guid).frames[0]) == b"after"
    assert client.status()["objects_sealed"] == before + 1
    client.delete(guid)


def test_large_put_round_trips(client):
    data = np.random.default_rng(1).integers(0, 255, 8 << 20, dtype=np.uint8)
    obj = client.get(client.put(data))
    assert np.array_equal(np.frombuffer(obj.frames[0], np.uint8), data)


def test_non_contiguous_buffer_is_refused(client):
    with pytest.raises((BufferError, ValueError)):  # numpy raises ValueError
        client.put(np.arange(10)[::2])


def test_proposed_guid_and_already_exists(client):
    guid = fresh_guid()
    assert client.put(b"x", guid=guid) == guid
    with pytest.raises(depot.AlreadyExists):
        client.put(b"y", guid=guid)


def test_object_names_its_creator(client):
    obj = client.get(client.put(b"x" * 100000))
    assert obj.creator_uid == os.getuid()
    assert obj.creator_pid == os.getpid()


def test_frames_are_read_only(client):
    view = client.get(client.put(b"abc")).frames[0]
    assert view.readonly
    with pytest.raises(TypeError):
        view[0] = 1


def test_get_many_delete_contains_list_status(client):
    guids = [client.put(bytes([i]) * 10) for i in range(3)]
    got = [bytes(o.frames[0]) for o in client.get_many(guids)]  # the objects are dropped here
    assert got == [bytes([i]) * 10 for i in range(3)]
    assert all(client.contains(g) for g in guids)
    listed = {o["guid"] for o in client.list()}
    assert set(guids) <= listed
    status = client.status()
    assert status["objects_sealed"] >= 3 and status["daemon_pid"] > 0
    client.delete(guids[0])
    client.delete(guids[1:])
    assert not any(client.contains(g) for g in guids)
    with pytest.raises(depot.NotFound):
        client.get_many([client.put(b"z"), guids[0]])


def test_status_has_every_field(client):
    guid = client.put(b"counted")
    status = client.status()
    for key in ("daemon_version", "socket", "capacity", "free_in_segments", "fragmentation",
                "objects_sealed", "connections", "errors", "per_user_namespaces", "namespaces",
                "user_quota_bytes", "user_quota_objects", "client_quota_bytes",
                "client_quota_objects", "users", "device_pools", "devices_unavailable"):
        assert key in status, key
    assert status["per_user_namespaces"] is False and status["namespaces"] == 1
    mine = [u for u in status["users"] if u["uid"] == os.getuid()]
    assert mine and mine[0]["objects"] >= 1 and mine[0]["bytes"] >= len(b"counted")
    client.delete(guid)


def test_create_seals_on_clean_exit(client):
    with client.create([3, 2], name="draft", metadata=b"m") as draft:
        draft.frames[0][:] = b"abc"
        np.frombuffer(draft.frames[1], np.uint8)[:] = [7, 8]
    assert not draft.open
    obj = client.get(draft.guid)
    assert [bytes(f) for f in obj.frames] == [b"abc", b"\x07\x08"]


def test_create_aborts_on_exception(client):
    with pytest.raises(RuntimeError):
        with client.create([16]) as draft:
            raise RuntimeError("the writer failed")
    assert not draft.open
    assert not client.contains(draft.guid)
    with pytest.raises(depot.NotFound):
        client.get(draft.guid)


def test_explicit_seal_inside_block_and_double_seal(client):
    with client.create([1]) as draft:
        draft.frames[0][:] = b"!"
        draft.seal()
    with pytest.raises(depot.InvalidArgument):
        draft.seal()
    assert bytes(client.get(draft.guid).frames[0]) == b"!"


# --- errors ---------------------------------------------------------------------------------


def test_errors_are_named_like_the_status_codes():
    for name in ["NotFound", "Timeout", "StoreFull", "AlreadyExists", "InvalidArgument",
                 "ProtocolError", "Disconnected", "PermissionDenied", "Unavailable"]:
        cls = getattr(depot, name)
        assert issubclass(cls, depot.Error) and cls.__name__ == name
        assert cls.__module__ == "depot"


def test_not_found_timeout_and_bad_guid(client):
    with pytest.raises(depot.NotFound, match="does not exist"):
        client.get(fresh_guid())
    start = time.monotonic()
    with pytest.raises(depot.Timeout):
        client.get(fresh_guid(), timeout=0.05)
    assert time.monotonic() - start >= 0.04
    with pytest.raises(depot.InvalidArgument, match="not a GUID"):
        client.get("not-a-guid")
    with pytest.raises(depot.InvalidArgument):
        client.get(fresh_guid(), timeout=-1)


def test_store_full(client, daemon):
    with pytest.raises(depot.StoreFull):
        client.create([2 << 30])


def test_no_daemon_is_unavailable(tmp_path):
    with pytest.raises(depot.Unavailable):
        depot.Client(str(tmp_path / "nobody.sock"))


def test_client_does_not_cross_fork(client):
    pid = os.fork()
    if pid == 0:
        try:
            client.ping()
            code = 1
        except depot.Disconnected:
            code = 0
        except BaseException:
            code = 2
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    client.ping()


GETPID = {"x86_64": 39, "aarch64": 172}.get(os.uname().machine)


def fail_getpid():
    """Makes getpid() fail in this process from now on (a seccomp filter: EPERM for it alone)."""
    import ctypes

    class Filter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte),
                    ("k", ctypes.c_uint32)]

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Filter))]

    load_nr, jump_if, ret = 0x20, 0x15, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ|K, BPF_RET|K
    steps = (Filter * 4)(Filter(load_nr, 0, 0, 0), Filter(jump_if, 0, 1, GETPID),
                         Filter(ret, 0, 0, 0x00050000 | 1), Filter(ret, 0, 0, 0x7FFF0000))
    program = Program(4, steps)
    libc = ctypes.CDLL(None, use_errno=True)
    no_new_privs, set_seccomp, mode_filter = 38, 22, 2
    if libc.prctl(no_new_privs, 1, 0, 0, 0) or \
            libc.prctl(set_seccomp, mode_filter, ctypes.byref(program), 0, 0):
        raise OSError(ctypes.get_errno(), "prctl")


@pytest.mark.skipif(GETPID is None, reason="getpid's system call number is known for x86_64 and "
                                           "aarch64 only")
def test_calls_ask_the_kernel_nothing_to_tell_a_forked_child(daemon):
    """Each call checks that its process was not forked since its client connected, with a count
    of forks rather than getpid(): a system call, about 1 µs on a virtual machine, which was
    most of a first get from Python. In a child whose getpid() fails, calls still work."""
    pid = os.fork()
    if pid == 0:
        code = 2
        try:
            c = depot.Client(daemon.socket)
            guid = c.put(b"x" * 64)
            fail_getpid()
            if os.getpid() != -1:
                code = 3  # the filter did not take
            elif bytes(c.get(guid).frames[0]) == b"x" * 64 and c.get(c.put(b"y")).size == 1:
                code = 0
        except BaseException as e:
            print(f"{type(e).__name__}: {e}", flush=True)
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_a_client_carries_on_when_the_daemon_is_replaced():
    from conftest import Daemon
    first = Daemon("64MiB")
    c = depot.Client(first.socket)
    held = c.put(b"before")
    view = c.get(held).frames[0]
    first.process.kill()
    first.process.wait()
    # The next daemon on the same socket (outside systemd nothing is kept: a new store).
    with open(first.log, "ab") as log:
        second = subprocess.Popen([os.environ["DEPOTD"], "--socket", first.socket,
                                   "--capacity", "64MiB"], stdout=log, stderr=subprocess.STDOUT)
    try:
        c.ping()  # waits for the next daemon, within reconnect_wait
        guid = c.put(b"after")
        assert bytes(c.get(guid).frames[0]) == b"after"
        assert bytes(view) == b"before"  # the old mapping stays readable
        with pytest.raises(depot.NotFound):
            c.get(held)
    finally:
        second.terminate()
        second.wait(timeout=10)
        first.stop()


def test_reconnect_wait_zero_never_reconnects():
    from conftest import Daemon
    first = Daemon("64MiB")
    c = depot.Client(first.socket, reconnect_wait=0)
    first.process.kill()
    first.process.wait()
    with pytest.raises(depot.Disconnected):
        c.ping()
    first.stop()
    with pytest.raises(depot.InvalidArgument):
        depot.Client(first.socket, reconnect_wait=-1)


def test_forked_child_drops_what_it_inherited_without_touching_the_parents(client):
    """A data loader's worker, forked while its parent holds objects, lets go of the parent's
    Client and Objects (at exit or by hand): that must neither hang (the parent's flusher thread
    is not in the child) nor release the parent's references."""
    guid = client.put(b"held by the parent")
    held = client.get(guid)
    for _ in range(3):
        client.get(client.put(b"dropped"))  # releases waiting in the batcher, its thread running
    gc.collect()
    pid = os.fork()
    if pid == 0:
        del held
        gc.collect()
        client.close()
        os._exit(0)
    deadline = time.monotonic() + 60
    while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    if done[0] == 0:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        pytest.fail("the forked child hung letting go of its parent's client")
    assert os.WEXITSTATUS(done[1]) == 0
    assert holders(client, guid) == 1
    assert bytes(held.frames[0]) == b"held by the parent"


# --- lifetimes --------------------------------------------------------------------------------


def test_view_outlives_its_object(client, daemon):
    guid = client.put(b"outlives")
    view = client.get(guid).frames[0]  # the Object is gone at once
    gc.collect()
    assert bytes(view) == b"outlives"
    assert holders(client, guid) == 1


def test_deleted_object_stays_readable_through_a_held_view(client, daemon):
    data = np.arange(1 << 20, dtype=np.uint8)
    guid = client.put(data)
    view = client.get(guid).frames[0]
    client.delete(guid)
    # Asked through another connection: the C++ client answers contains() for an object its own
    # process holds from its cache, without asking the daemon.
    assert not depot.Client(daemon.socket).contains(guid)
    assert np.array_equal(np.frombuffer(view, np.uint8), data)


def test_reference_released_after_the_last_view(client):
    guid = client.put(b"released")
    obj = client.get(guid)
    first, second = obj.frames[0], obj.frames[0]
    array = np.frombuffer(second, np.uint8)
    del obj, first, second
    gc.collect()
    time.sleep(0.05)
    assert holders(client, guid) == 1  # the array still holds it
    del array
    gc.collect()
    assert wait_until(lambda: holders(client, guid) == 0)


def test_draft_view_outliving_the_draft_aborts_when_it_goes(client):
    draft = client.create([8])
    view = draft.frames[0]
    guid = draft.guid
    del draft
    view[:] = b"12345678"  # still mapped: the view holds the draft
    del view
    gc.collect()
    assert not client.contains(guid)


# --- zero-copy -----------------------------------------------------------------------------------


def shm_mappings():
    """(start, end) of this process's mappings of depot segments (memfds)."""
    ranges = []
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            if len(fields) >= 6 and fields[5].startswith("/memfd:depot-"):
                start, end = (int(x, 16) for x in fields[0].split("-"))
                ranges.append((start, end))
    return ranges


def test_two_gets_share_memory(client):
    guid = client.put_array(np.arange(1 << 18, dtype=np.float64))
    a, b = client.get_array(guid), client.get_array(guid)
    assert np.shares_memory(a, b)
    assert not a.flags.writeable


def test_view_address_lies_inside_a_shared_mapping(client):
    array = client.get_array(client.put_array(np.ones(1 << 20)))
    address = array.__array_interface__["data"][0]
    assert any(start <= address and address + array.nbytes <= end
               for start, end in shm_mappings())


def test_get_array_round_trips_dtype_shape_and_order(client):
    cases = [np.arange(24, dtype=np.int16).reshape(2, 3, 4),
             np.asfortranarray(np.arange(12.0).reshape(3, 4)),
             np.arange(10)[::3],
             np.array(3.5),
             np.zeros((0, 4), dtype=np.complex64),
             np.array([(1, 2.0)], dtype=[("a", "<i4"), ("b", "<f8")])]
    for original in cases:
        back = client.get_array(client.put_array(original))
        assert back.dtype == original.dtype and back.shape == original.shape
        assert np.array_equal(back, original)
    assert client.get_array(client.put_array(cases[1])).flags.f_contiguous


def test_get_array_of_other_objects_and_object_arrays(client):
    with pytest.raises(depot.InvalidArgument, match="put_array"):
        client.get_array(client.put(b"plain bytes"))
    with pytest.raises(TypeError):
        client.put_array(np.array([object()]))


# --- the GIL ---------------------------------------------------------------------------------


def test_gil_released_while_a_get_waits(client):
    """A get waiting for an object must let the thread that creates it run."""
    guid = fresh_guid()
    result = {}

    def waiter():
        result["data"] = bytes(client.get(guid, timeout=10).frames[0])

    thread = threading.Thread(target=waiter)
    start = time.monotonic()
    thread.start()
    time.sleep(0.1)  # the waiter is parked in the daemon now
    spins = 0
    while time.monotonic() - start < 0.3:  # Python code runs meanwhile
        spins += 1
    client.put(b"arrived", guid=guid)
    thread.join(5)
    assert result.get("data") == b"arrived"
    assert spins > 1000
    assert time.monotonic() - start < 5


def test_infinite_timeout_waits(client):
    guid = fresh_guid()
    threading.Timer(0.05, lambda: client.put(b"late", guid=guid)).start()
    assert bytes(client.get(guid, timeout=math.inf).frames[0]) == b"late"


def test_subscription_sees_events(client):
    subscription = client.subscribe()
    guid = client.put(b"watched", name="watched")
    events = []
    while True:
        event = subscription.next(timeout=1)
        if event is None:
            break
        events.append(event)
        if event["event"] == "sealed" and event.get("guid") == guid:
            break
    assert any(e["event"] == "sealed" and e["name"] == "watched" for e in events)


def test_any_number_of_guids_in_get_many_contains_and_delete(client):
    guids = [client.put(i.to_bytes(4, "little")) for i in range(4500)]  # three batches
    objects = client.get_many(guids)
    assert [int.from_bytes(o.frames[0], "little") for o in objects] == list(range(4500))
    missing = "00000000-0000-0000-0000-000000000001"
    assert client.contains(guids + [missing]) == [True] * 4500 + [False]
    assert client.contains(guids[0]) is True
    with pytest.raises(depot.NotFound):
        client.get_many(guids + [missing])
    client.delete(guids)
    assert client.contains(guids) == [False] * 4500
    assert client.contains([]) == []


def test_checksums_verify_and_catch_a_changed_byte(client):
    obj = client.get(client.put(b"x" * 10000, checksum=True))
    assert isinstance(obj.checksum, int)
    obj.verify()
    plain = client.get(client.put(b"y"))
    assert plain.checksum is None
    with pytest.raises(depot.InvalidArgument):
        plain.verify()
    draft = client.create([4096], checksum=True)
    view = draft.frames[0]
    view[:] = b"a" * 4096
    draft.seal()
    sealed = client.get(draft.guid)
    sealed.verify()
    view[0] = ord("b")  # its writer breaks the rule: written after sealing
    with pytest.raises(depot.DataLoss):
        sealed.verify()


def test_client_as_a_context_manager_closes(daemon):
    with depot.Client(daemon.socket) as c:
        obj = c.get(c.put(b"kept"))
        view = obj.frames[0]
    with pytest.raises(depot.Disconnected, match="closed"):
        c.ping()
    assert bytes(view) == b"kept" and bytes(obj.frames[0]) == b"kept"
    c.close()  # twice: harmless


def test_owner_scoped_objects_go_with_their_process_even_killed(client, daemon):
    import signal
    import subprocess
    import sys

    code = ("import depot, sys, time; c = depot.Client(sys.argv[1]); "
            "print(c.put(b'x' * 100000, owner_scoped=True), c.put(b'kept'), flush=True); "
            "time.sleep(60)")
    owner = subprocess.Popen([sys.executable, "-c", code, daemon.socket], stdout=subprocess.PIPE,
                             text=True)
    scoped, kept = owner.stdout.readline().split()
    view = client.get(scoped).frames[0]
    owner.send_signal(signal.SIGKILL)
    owner.wait()
    deadline = time.monotonic() + 10
    while True:
        try:
            client.stat(scoped)
        except depot.NotFound:
            break
        assert time.monotonic() < deadline, "the owner-scoped object outlived its process"
        time.sleep(0.01)
    assert client.contains(kept) and bytes(view[:3]) == b"xxx"
    client.delete(kept)
