"""A Dask worker's memory as the node has it: shared pages counted at the worker's share.

Dask's worker memory manager (spill, pause) and its nanny (restart) compare a worker's RSS with
its ``memory_limit``. RSS counts every shared page a process has touched, so a worker that maps
one value depot holds once for the node counts all of it, as does every other worker that maps
it: four workers reading one 512 MiB value count 2 GiB, and are paused or restarted for memory
the node holds once. :func:`process_memory` counts the same as RSS but for shared memory, which
it counts at this process's share of each page (the kernel's proportional set size: a page
mapped by four processes counts a quarter in each). Summed over the node's processes it is the
node's memory, each shared page once.

The worker plugin and the nanny plugin (depot.dask) make Dask use it, through
depot.dask_compat: the worker's monitor (what its memory manager acts on and what it reports to
the scheduler) and the nanny's memory monitor (what restarts it). :func:`shared_memory` (the
shared pages a process maps, whole) is reported beside, as the worker metric ``depot_shared``.
"""

import os

__all__ = ["process_memory", "shared_memory", "memory_figures"]


def _fields(path, wanted):
    """The values in bytes of the ``Name: N kB`` lines `wanted` of a /proc file."""
    out = {}
    with open(path, "rb") as f:
        for line in f:
            name, _, rest = line.partition(b":")
            if name in wanted:
                out[name] = int(rest.split()[0]) << 10
    return out


def memory_figures(pid=None):
    """(RSS, shared memory in RSS, this process's share of that shared memory) of process
    `pid` (default: this one), in bytes, from /proc."""
    base = f"/proc/{pid or 'self'}"
    status = _fields(f"{base}/status", (b"VmRSS", b"RssShmem"))
    rollup = _fields(f"{base}/smaps_rollup", (b"Pss_Shmem",))
    return status[b"VmRSS"], status.get(b"RssShmem", 0), rollup.get(b"Pss_Shmem", 0)


def process_memory(pid=None):
    """RSS with each shared page counted at this process's share of it, in bytes."""
    rss, shmem, share = memory_figures(pid)
    return rss - shmem + share


def shared_memory(pid=None):
    """The shared memory process `pid` (default: this one) maps and has touched, in bytes."""
    return memory_figures(pid)[1]


if not os.path.exists("/proc/self/smaps_rollup"):  # Linux before 4.14
    raise ImportError("depot.dask_memory needs /proc/PID/smaps_rollup (Linux 4.14 or later)")
