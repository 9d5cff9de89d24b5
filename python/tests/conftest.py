"""Fixtures shared by the tests: a depotd of their own on a temporary socket.

The daemon's path comes from $DEPOTD (ctest sets it to the one just built). Without it the tests
fail, saying so: a run that cannot start a daemon must not pass by skipping everything.
"""

import os
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

import depot


class Daemon:
    """A depotd serving a socket in a temporary directory, stopped by stop()."""

    def __init__(self, capacity, daemon="DEPOTD", args=()):
        """``daemon``: the environment variable naming the executable (ctest sets DEPOTD and
        MEMFD_DEPOTD, the test daemon whose GPUs are memfd stand-ins)."""
        path = os.environ.get(daemon)
        if not path or not os.access(path, os.X_OK):
            pytest.fail(f"set {daemon} to the daemon to test with (got {path!r}); ctest sets it",
                        pytrace=False)
        self.dir = tempfile.mkdtemp(prefix="depot-pytest-")
        self.socket = os.path.join(self.dir, "depot.sock")
        self.log = os.path.join(self.dir, "depotd.log")
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                [path, "--socket", self.socket, "--capacity", capacity, *args],
                stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 10
        while True:
            try:
                depot.Client(self.socket)
                return
            except depot.Unavailable:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    pytest.fail(f"depotd did not start:\n{self.read_log()}", pytrace=False)
                time.sleep(0.02)

    def read_log(self):
        with open(self.log, errors="replace") as f:
            return f.read()

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=10)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def daemon():
    d = Daemon("1GiB")
    yield d
    d.stop()


@pytest.fixture
def client(daemon):
    return depot.Client(daemon.socket)


@pytest.fixture(scope="module")
def other_daemon():
    """A second daemon, standing for another node's."""
    d = Daemon("256MiB")
    yield d
    d.stop()


@pytest.fixture(autouse=True)
def deadline():
    """Fails a test that runs past 120 s (a cluster whose comms fail hangs rather than fails),
    with a traceback of where it waited; ctest's timeout would end the whole suite instead."""
    def expire(signum, frame):
        raise TimeoutError("the test ran past its 120 s deadline")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(120)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)
