"""This process's connection to the node's depot, shared by depot's Python helpers.

The helpers that pass values between processes (depot.handoff, depot.cache, depot.dask) all use
one :class:`depot.Client` per process: it is made on first use, and made again in a child made
by fork() (a connection does not cross fork). Thread-safe.
"""

import os
import socket
import threading

import depot

_lock = threading.Lock()
_socket = None
_client = None
_client_pid = None
_identity = None


def configure(socket_path=None):
    """Sets the daemon socket this process's helpers use (default: $DEPOT_SOCKET, else the
    default path); the next :func:`client` call connects to it."""
    global _socket, _client, _client_pid, _identity
    with _lock:
        if socket_path is not None and socket_path != _socket:
            _socket, _client, _client_pid, _identity = socket_path, None, None, None


def socket_path():
    """The socket set by :func:`configure`, or None for the default."""
    return _socket


def client():
    """This process's depot.Client, connected on first use (and again in a forked child)."""
    global _client, _client_pid
    with _lock:
        if _client is None or _client_pid != os.getpid():
            _client = depot.Client(_socket)
            _client_pid = os.getpid()
        return _client


def daemon_identity():
    """Which daemon this process uses: host, boot, daemon pid and socket. Two processes with
    the same identity can pass objects by GUID. Raises the depot.Error that says why there is
    none when no daemon answers."""
    global _identity
    if _identity is None:
        status = client().status()
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot_id = f.read().strip()
        _identity = f"{socket.gethostname()}/{boot_id}/{status['daemon_pid']}/{status['socket']}"
    return _identity
