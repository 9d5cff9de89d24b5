#!/usr/bin/python3
"""The node's memory under Dask, over TCP and with depot, as the node has it and as Dask sees it.

Each round starts a LocalCluster of --workers worker processes (1 thread each, nannies, Dask's
defaults for spilling, pausing and restarting) with --memory-limit each, runs one workload on
it, and closes it: once over TCP, once with depot.dask.register_plugin against a depotd of the
run's own, the order alternating round by round. A value read on every worker fits the node
once, not once per worker. Sampled every 100 ms while the workload runs:

- node: the private memory of every process of the cluster (this one, which is scheduler and
  client, each nanny and worker, and depotd): Pss_Anon + Pss_File; plus shared memory in use,
  each page once: /proc/meminfo's Shmem less its figure before the cluster started;
- Dask's view: the sum of the workers' process memory as the scheduler has it
  (scheduler_info's metrics.memory, what the memory manager and the nanny act on);
- paused: worker samples whose status was "paused"; restarted: processes of the cluster that
  appeared after the first sample (a worker the nanny started again).

A workload that has not finished after --timeout seconds (workers restarted again and again)
is left, its wall time "inf". Spilled is the bytes the nannies and workers wrote from the
round's start (their /proc/PID/io write_bytes: spill files, and P2P's shards on disk); wall is
the workload's time. The peaks are of the round; the table gives the median over
rounds and the ratio depot / TCP of medians.

Workloads:
- fan-out: one array of --size made on one worker, read by a task on each of the others;
- several: three arrays of --size * 0.6, each read by a task on every worker;
- transpose: (x + x.T).sum() on a float64 array of --size * 2 in 8 x 8 chunks;
- rechunk: the same array from 16 column blocks to 16 row blocks, with P2P where the release has
  it (``array.rechunk.method``; tasks on 2022.12) and Dask's defaults otherwise, then its sum;
- weights: an array of --size * 0.5 read by 100 tasks across the workers.

Usage: node_memory.py [--workers 4] [--memory-limit 1.25GiB] [--size-mib 512] [--rounds 2]
                      [--only NAME,...] [--depotd PATH]
Needs PYTHONPATH to hold the built package (BUILD_DIR/python); the daemon is $DEPOTD or --depotd.
"""

import argparse
import math
import os
import statistics
import sys
import threading
import time

import dask
import dask.array as da
import distributed
import numpy as np
import psutil

import depot.dask
from bench_dask import MIB, Daemon, fmt_bytes, log, machine

RELEASE = f"dask {dask.__version__}, distributed {distributed.__version__}"


def meminfo_shmem():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("Shmem:"):
                return int(line.split()[1]) << 10
    return 0


def private(pid):
    total = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith(("Pss_Anon:", "Pss_File:")):
                    total += int(line.split()[1]) << 10
    except OSError:
        pass
    return total


def written(pid):
    try:
        with open(f"/proc/{pid}/io") as f:
            for line in f:
                if line.startswith("write_bytes:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class Sampler(threading.Thread):
    """Samples the node and Dask's view of it every 100 ms until stopped."""

    def __init__(self, client, extra_pids):
        super().__init__(daemon=True)
        self.client, self.extra = client, extra_pids
        self.base_shmem = meminfo_shmem()
        self.node = self.dask = 0
        self.paused = 0
        self.pids = set()  # every process of the cluster seen: a restarted worker is a new one
        self.first = None
        # Bytes written by the cluster's processes (Dask's spill files; P2P's shards on disk),
        # from when the sampler started; not this process's nor the daemon's.
        self.quiet = {psutil.Process().pid, *extra_pids}
        self.writes = {}
        self.writes_before = {p.pid: written(p.pid)
                              for p in psutil.Process().children(recursive=True)}
        self.running = True

    def sample(self):
        me = psutil.Process()
        pids = {me.pid, *self.extra, *(p.pid for p in me.children(recursive=True))}
        self.pids |= pids
        self.first = self.first or len(pids)
        node = sum(private(p) for p in pids) + max(0, meminfo_shmem() - self.base_shmem)
        self.node = max(self.node, node)
        for p in pids - self.quiet:
            before = self.writes_before.get(p, 0)
            self.writes[p] = max(self.writes.get(p, 0), written(p) - before)
        info = self.client.scheduler_info()["workers"]
        self.dask = max(self.dask, sum(w["metrics"]["memory"] for w in info.values()))
        self.paused += sum(w.get("status") == "paused" for w in info.values())

    def run(self):
        while self.running:
            try:
                self.sample()
            except Exception as e:  # a worker restarting: the next sample sees it
                log("sample:", e)
            time.sleep(0.1)

    def stop(self):
        self.running = False
        self.join()
        self.sample()
        return {"node": self.node, "dask": self.dask, "paused": self.paused,
                "restarted": len(self.pids) - self.first,
                "spilled": sum(self.writes.values())}


# --- workloads: each runs on a client and returns when its result is in -----------------------


def make(size, seed):
    return np.random.default_rng(seed).random(size // 8)


def read(*arrays):
    return float(sum(a[::4096].sum() for a in arrays))


def fan_out(client, size):
    first, *others = sorted(client.scheduler_info()["workers"])
    x = client.submit(make, size, 1, workers=[first], pure=False)
    client.gather([client.submit(read, x, workers=[w], pure=False) for w in others])


def several(client, size):
    workers = sorted(client.scheduler_info()["workers"])
    part = int(size * 0.6)
    xs = [client.submit(make, part, i, workers=[workers[i % len(workers)]], pure=False)
          for i in range(3)]
    client.gather([client.submit(read, *xs, workers=[w], pure=False) for w in workers])


def transpose(client, size):
    n = int((size * 2 / 8) ** 0.5)
    x = da.random.random((n, n), chunks=(n // 8, n // 8))
    client.compute((x + x.T).sum()).result()


def rechunk(client, size):
    """A P2P rechunk with Dask's defaults (2022.12 has no P2P rechunk: tasks there)."""
    n = int((size * 2 / 8) ** 0.5)
    x = da.random.random((n, n), chunks=(n, n // 16))
    with dask.config.set({"array.rechunk.method": "p2p"}):
        y = x.rechunk((n // 16, n))
    client.compute(y.sum()).result()


def weights(client, size):
    w = client.submit(make, size // 2, 7, pure=False)
    client.gather(client.map(lambda w, i: read(w) + i, [w] * 100, range(100), pure=False))


WORKLOADS = {"fan-out": fan_out, "several": several, "transpose": transpose, "rechunk": rechunk,
             "weights": weights}


def measure(workload, size, args, with_depot):
    """One round, against a depotd of its own: pages an earlier round's daemon kept in its pool
    would hold this round's shared memory without raising the node's Shmem."""
    daemon = Daemon(args.depotd, args.capacity, False)
    os.environ["DEPOT_SOCKET"] = daemon.socket
    depot.dask.configure(daemon.socket)
    try:
        return _measure(workload, size, args, daemon, with_depot)
    finally:
        daemon.stop()


def _measure(workload, size, args, daemon, with_depot):
    with distributed.LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True,
                                  memory_limit=args.memory_limit, dashboard_address=":0",
                                  silence_logs=50) as cluster, \
            distributed.Client(cluster) as client:
        if with_depot:
            depot.dask.register_plugin(client)
        sampler = Sampler(client, [daemon.process.pid])
        sampler.start()
        start = time.perf_counter()
        run = threading.Thread(target=WORKLOADS[workload], args=(client, size), daemon=True)
        run.start()
        run.join(args.timeout)
        wall = time.perf_counter() - start if not run.is_alive() else math.inf
        out = sampler.stop()
        out["wall"] = wall
        return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--memory-limit", default="1.25GiB")
    parser.add_argument("--size-mib", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--only", default=",".join(WORKLOADS))
    parser.add_argument("--capacity", default="6GiB", help="depotd's pool")
    parser.add_argument("--timeout", type=float, default=180,
                        help="seconds a workload may take; past them its wall is 'inf'")
    parser.add_argument("--depotd", default=os.environ.get("DEPOTD"))
    args = parser.parse_args()
    if not args.depotd:
        raise SystemExit("name the daemon: --depotd PATH or $DEPOTD")
    size = args.size_mib * MIB
    print(f"# Node memory under Dask: TCP and depot\n\n{RELEASE}; {machine()}; {args.workers} "
          f"workers, memory_limit {args.memory_limit}, --size-mib {args.size_mib}, "
          f"{args.rounds} rounds (order alternating); medians.\n")
    print("| workload | TCP node / Dask / spilled / paused / restarted / wall | depot node / "
          "Dask / spilled / paused / restarted / wall | node depot/TCP | Dask's view / node "
          "(depot) | wall depot/TCP |")
    print("|---|---|---|---:|---:|---:|")
    for workload in args.only.split(","):
        runs = {False: [], True: []}
        for r in range(args.rounds):
            for with_depot in ((False, True) if r % 2 == 0 else (True, False)):
                got = measure(workload, size, args, with_depot)
                log(workload, "depot" if with_depot else "TCP", got)
                runs[with_depot].append(got)
        med = {d: {k: statistics.median(x[k] for x in runs[d]) for k in runs[d][0]}
               for d in runs}

        def cell(m):
            return (f"{fmt_bytes(m['node'])} / {fmt_bytes(m['dask'])} / "
                    f"{fmt_bytes(m['spilled'])} / {m['paused']:.0f} / {m['restarted']:.0f} / "
                    f"{m['wall']:.1f} s")

        print(f"| {workload} | {cell(med[False])} | {cell(med[True])} | "
              f"{med[True]['node'] / med[False]['node']:.2f} | "
              f"{med[True]['dask'] / med[True]['node']:.2f} | "
              f"{med[True]['wall'] / med[False]['wall']:.2f} |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
