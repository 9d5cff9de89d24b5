#!/usr/bin/python3
"""Dask with and without depot, side by side in one run.

On a LocalCluster of 2 and of 4 worker processes (1 thread each), against one depotd of its own:

- transfer: a task on worker B needs a numpy array that worker A holds; timed from submitting
  the task to its result, with a task that only looks at the array (``nbytes``) and one that
  reads every byte (``sum``);
- small transfers: 100 arrays of 64 KiB, each moved from A to B by a task (below depot.dask's
  threshold: both columns take Dask's own path, which is the point of the row);
- broadcast: a 1 GiB array sent to every worker and summed there: ``Client.scatter(...,
  broadcast=True)`` against ``depot.dask.put`` with the Ref passed as the task's argument (the
  worker plugin resolves it to the array); wall time and the memory the
  data adds on the node (workers' private memory, measured inside the tasks while they hold the
  array, plus depot's shared memory);
- rechunk: ``dask.array`` rechunk from row blocks to column blocks (every output block takes a
  piece of every input block) and a sum, on a persisted random array.

"Dask" is Dask's own TCP path; "depot" is the same cluster with depot.dask's transfers on (the
plugin) or, for the broadcast, depot.dask.put. The two alternate round by round, the order
rotating; figures are medians, with the range of rounds in brackets, ratios divide medians.
Prints markdown. Real workloads on both pools in one run, and the sweep that sets depot.dask's
threshold, are bench_workloads.py; compare_pools.py puts two runs of this one side by side.

Usage: bench_dask.py [--quick] [--prefault] [--depotd PATH] [--workers 2,4]
Needs PYTHONPATH to hold the built package (BUILD_DIR/python); the daemon is $DEPOTD or --depotd.
"""

import argparse
import datetime
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

import dask
import dask.array as da
import distributed
import depot
import depot.dask

MIB = 1 << 20
GIB = 1 << 30


def log(*parts):
    print(*parts, file=sys.stderr, flush=True)


# --- what the workers run ------------------------------------------------------------------------


def set_transfers(on, dask_worker):
    if on:
        depot.dask.enable_transfers(dask_worker)
    else:
        depot.dask.disable_transfers(dask_worker)


def private_memory():
    """This process's private resident bytes outside depot's mappings. A page of depot's that
    only this process has touched yet counts as private to it, so the shared memory is counted
    once, from the daemon, instead."""
    import psutil
    return sum(m.private_clean + m.private_dirty for m in psutil.Process().memory_maps()
               if not m.path.startswith("/memfd:depot-"))


def look(x):
    return x.nbytes


def read(x):
    return float(x.sum())


def read_and_measure(x):
    return float(x.sum()), private_memory()


# --- helpers -------------------------------------------------------------------------------------


class Daemon:
    def __init__(self, path, capacity, prefault):
        self.dir = tempfile.mkdtemp(prefix="depot-dask-bench-")
        self.socket = os.path.join(self.dir, "depot.sock")
        self.log = open(os.path.join(self.dir, "depotd.log"), "wb")
        args = [path, "--socket", self.socket, "--capacity", capacity]
        self.process = subprocess.Popen(args + (["--prefault"] if prefault else []),
                                        stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 10
        while True:
            try:
                self.client = depot.Client(self.socket)
                return
            except depot.Unavailable:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"depotd did not start (log in {self.dir})")
                time.sleep(0.05)

    def stop(self):
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=30)
        shutil.rmtree(self.dir, ignore_errors=True)


def fmt_time(seconds):
    return f"{seconds * 1000:.0f} ms" if seconds < 10 else f"{seconds:.1f} s"


def fmt_bytes(n):
    if abs(n) >= GIB:
        return f"{n / GIB:.2f} GiB".replace(".00 ", " ")
    return f"{n / MIB:.0f} MiB" if abs(n) >= MIB else f"{n / 1024:.0f} KiB"


def summary(samples, fmt):
    med = statistics.median(samples)
    if len(samples) == 1:
        return med, fmt(med)
    return med, f"{fmt(med)} ({fmt(min(samples))}–{fmt(max(samples))})"


def settle(client):
    """Lets released keys leave the workers before the next measurement."""
    time.sleep(0.3)
    client.run(lambda: __import__("gc").collect())


class Bench:
    def __init__(self, client, daemon, rounds):
        self.client = client
        self.daemon = daemon
        self.rounds = rounds
        self.workers = sorted(client.scheduler_info()["workers"])
        self.rows = []

    def modes(self, r):
        return ["dask", "depot"] if r % 2 == 0 else ["depot", "dask"]

    def mode(self, name):
        self.client.run(set_transfers, name == "depot")

    def row(self, workload, results, fmt=fmt_time, note=""):
        dask_med, dask_text = summary(results["dask"], fmt)
        depot_med, depot_text = summary(results["depot"], fmt)
        ratio = dask_med / depot_med if depot_med else float("nan")
        self.rows.append((workload, len(self.workers), dask_text, depot_text, f"{ratio:.2f}×",
                          note))
        log(f"  {workload}: dask {dask_text}, depot {depot_text}, {ratio:.2f}×")

    def warm_up(self):
        """One transfer each way first: connections between workers are opened lazily."""
        for mode in ("dask", "depot"):
            self.mode(mode)
            source = self.client.submit(np.full, MIB, 1.0, workers=[self.workers[0]], pure=False)
            self.client.submit(look, source, workers=[self.workers[1]], pure=False).result()
            del source
        settle(self.client)

    def transfer(self, size, task, label):
        c = self.client
        a, b = self.workers[0], self.workers[1]
        results = {"dask": [], "depot": []}
        for r in range(self.rounds):
            for mode in self.modes(r):
                self.mode(mode)
                source = c.submit(np.full, size // 8, 1.0, workers=[a], pure=False)
                distributed.wait(source)
                start = time.perf_counter()
                c.submit(task, source, workers=[b], pure=False).result()
                results[mode].append(time.perf_counter() - start)
                del source
                settle(c)
        self.row(f"transfer {fmt_bytes(size)}, task {label}", results)

    def small_transfers(self, count=100, size=64 << 10):
        c = self.client
        a, b = self.workers[0], self.workers[1]
        results = {"dask": [], "depot": []}
        for r in range(self.rounds):
            for mode in self.modes(r):
                self.mode(mode)
                sources = [c.submit(np.full, size // 8, float(i), workers=[a], pure=False)
                           for i in range(count)]
                distributed.wait(sources)
                start = time.perf_counter()
                c.gather([c.submit(look, s, workers=[b], pure=False) for s in sources])
                results[mode].append(time.perf_counter() - start)
                del sources
                settle(c)
        threshold = depot.dask.DEFAULT_THRESHOLD
        note = (f"below the {fmt_bytes(threshold)} threshold: both take Dask's path"
                if size < threshold else f"from the {fmt_bytes(threshold)} threshold up")
        self.row(f"{count} transfers of {size >> 10} KiB, task nbytes", results, note=note)

    def broadcast(self, size):
        c = self.client
        array = np.full(size // 8, 1.0)
        times = {"dask": [], "depot": []}
        memory = {"dask": [], "depot": []}
        for r in range(self.rounds):
            for mode in self.modes(r):
                self.mode("dask")  # Dask's scatter; depot.dask.put needs no transfers
                idle = sum(c.run(private_memory).values())
                shared_before = self.daemon.client.status()["used"]
                start = time.perf_counter()
                if mode == "dask":
                    data = c.scatter(array, broadcast=True)
                    futures = [c.submit(read_and_measure, data, workers=[w], pure=False)
                               for w in self.workers]
                else:
                    data = depot.dask.put(array)  # a Ref: the plugin resolves it in the task
                    futures = [c.submit(read_and_measure, data, workers=[w], pure=False)
                               for w in self.workers]
                reports = c.gather(futures)
                times[mode].append(time.perf_counter() - start)
                shared = self.daemon.client.status()["used"] - shared_before
                memory[mode].append(sum(m for _, m in reports) - idle + shared)
                del data, futures
                settle(c)
        self.row(f"broadcast {fmt_bytes(size)} to every worker, task sum: wall time", times,
                 note="Dask: Client.scatter(broadcast=True); depot: depot.dask.put, the Ref "
                      "passed as the task's argument")
        self.row(f"broadcast {fmt_bytes(size)}: memory the data adds on the node", memory,
                 fmt=fmt_bytes,
                 note="workers' private memory while the tasks hold it, plus depot's pool")

    def rechunk(self, n):
        c = self.client
        blocks = 16
        self.mode("dask")
        x = da.random.RandomState(0).random((n, n), chunks=(n // blocks, n)).persist()
        distributed.wait(x)
        results = {"dask": [], "depot": []}
        expected = None
        for r in range(self.rounds):
            for mode in self.modes(r):
                self.mode(mode)
                start = time.perf_counter()
                total = x.rechunk((n, n // blocks)).sum(axis=0).compute()
                results[mode].append(time.perf_counter() - start)
                expected = total if expected is None else expected
                assert np.array_equal(total, expected), "results differ with depot"
                settle(c)
        del x
        settle(c)
        self.row(f"rechunk {fmt_bytes(n * n * 8)} rows→columns ({blocks}×{blocks} pieces of "
                 f"{fmt_bytes(n * n * 8 // blocks // blocks)}) + sum", results)


def machine():
    with open("/proc/meminfo") as f:
        total = int(f.readline().split()[1]) * 1024
    cpu = "unknown CPU"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return (f"{platform.node()}, Linux {platform.release()}, {os.cpu_count()} × {cpu}, "
            f"{total / GIB:.1f} GiB RAM")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds and smaller sizes")
    parser.add_argument("--depotd", default=os.environ.get("DEPOTD"), help="the daemon to run")
    parser.add_argument("--workers", default="2,4", help="cluster sizes, comma separated")
    parser.add_argument("--capacity", default="6GiB", help="the daemon's pool")
    parser.add_argument("--prefault", action="store_true",
                        help="reserve and touch the daemon's whole pool at start-up")
    parser.add_argument("--note", default="", help="a line for the header")
    args = parser.parse_args()
    if not args.depotd:
        parser.error("give --depotd or set DEPOTD")

    rounds = 1 if args.quick else 3
    sizes = [64 * MIB, 256 * MIB] if args.quick else [4 * MIB, 64 * MIB, 256 * MIB, GIB]
    broadcast_size = 256 * MIB if args.quick else GIB
    rechunk_n = 4096 if args.quick else 16384

    daemon = Daemon(args.depotd, args.capacity, args.prefault)
    os.environ["DEPOT_SOCKET"] = daemon.socket
    depot.dask.configure(daemon.socket)
    started = datetime.datetime.now(datetime.timezone.utc)
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    rows = []
    try:
        for n in (int(w) for w in args.workers.split(",")):
            log(f"LocalCluster of {n} worker processes")
            # The Active Memory Manager off: its ReduceReplicas policy drops the copies that
            # Client.scatter(broadcast=True) makes, and when a copy takes longer than its
            # 2-second interval the broadcast never completes (dask/distributed#8796: Dask's
            # own docs say to turn it off for a broadcast).
            with dask.config.set({"distributed.scheduler.active-memory-manager.start": False,
                                  "distributed.worker.memory.target": False,
                                  "distributed.worker.memory.spill": False,
                                  "distributed.worker.memory.pause": False,
                                  "distributed.worker.memory.terminate": False}), \
                    distributed.LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                                             dashboard_address=":0", silence_logs=40) as cluster, \
                    distributed.Client(cluster) as client:
                depot.dask.register_plugin(client, depot.dask.DepotPlugin(daemon.socket))
                bench = Bench(client, daemon, rounds)
                bench.warm_up()
                for size in sizes:
                    bench.transfer(size, look, "nbytes")
                    bench.transfer(size, read, "sum")
                bench.small_transfers()
                bench.broadcast(broadcast_size)
                bench.rechunk(rechunk_n)
                sent = sum(s["sent"] for s in client.run(depot.dask.transfer_stats).values())
                log(f"  transfers through depot on this cluster: {sent}")
                rows += bench.rows
    finally:
        daemon.stop()

    print("# depot with Dask\n")
    print(f"{started:%Y-%m-%d %H:%M} UTC; {'quick' if args.quick else 'full'} run.\n")
    print(f"- machine: {machine()}")
    print(f"- load average (1, 5, 15 min) at start: {load}")
    print(f"- Python {platform.python_version()}, numpy {np.__version__}, dask "
          f"{dask.__version__}, distributed {distributed.__version__}")
    pool = ("prefaulted at start-up (--prefault: one segment, reserved and kept)" if args.prefault
            else "created on demand (segments of 64 MiB, larger ones for larger objects; empty "
                 "ones kept warm up to keep_warm)")
    print(f"- depotd with a {args.capacity} pool {pool}; transfers through depot from "
          f"{fmt_bytes(depot.dask.DEFAULT_THRESHOLD)} per frame")
    print(f"- method: {rounds} rounds, Dask's TCP path and depot alternating (the order "
          "rotating); median with the range of the rounds; ratio = Dask / depot (above 1: depot "
          "is faster or smaller)")
    if args.note:
        print(f"- {args.note}")
    print()
    print("| workload | workers | Dask over TCP | Dask with depot | Dask / depot | note |")
    print("|---|---:|---:|---:|---:|---|")
    for workload, workers, dask_text, depot_text, ratio, note in rows:
        print(f"| {workload} | {workers} | {dask_text} | {depot_text} | {ratio} | {note} |")


if __name__ == "__main__":
    main()
