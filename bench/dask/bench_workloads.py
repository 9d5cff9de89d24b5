#!/usr/bin/python3
"""Dask on real workloads with and without depot, on both pools, and where depot starts to pay.

For each cluster size (2 and 4 worker processes of 1 thread each), two LocalClusters run at once,
each against a depotd of its own: one with the pool created on demand (the defaults), one with
the pool prefaulted (--prefault; --no-prefaulted leaves it out). Three columns (two without it)
are measured round by round, the order rotating, so that all see the same state of the machine:

- Dask over TCP: the first cluster with depot.dask's transfers off (the plugin disabled);
- depot, default pool: the first cluster with its transfers on;
- depot, prefaulted pool: the second cluster with its transfers on.

Workloads (the data made afresh before each measurement, outside the timing, so that no round
finds replicas a previous one left on a worker):

- transpose-sum: (x + x.T).sum() on an 8000 × 8000 random array persisted in 8 × 8 blocks of
  8 MB: every off-diagonal block needs its transposed block, which another worker may hold;
- bag shuffle: a dask.bag of 200k (key, 1 KiB bytes) records in 16 partitions, grouped on a random
  key (task-based shuffle: 256 pieces of about 800 KiB, 780 records each) and counted;
- map, reduce on one: 32 arrays of 16 MiB made on all workers, summed by one task on one worker;
- P2P rechunk: an n × n float64 array (--rechunk-mib, 512 MiB by default) persisted in column
  blocks of 256, rechunked to row blocks of 256 by Dask's P2P method (every output block takes a
  piece of every input block: 512 KiB shards) and summed; on a release without P2P rechunk
  (before 2023.2), by the task method, and the row says so. Where there is P2P, once more with
  its shards kept in memory rather than on each worker's disk (distributed.p2p.storage.disk
  off): the shards that come through depot are already in the node's shared memory.

Each row names the release (dask and distributed) it ran on: run the script once per release
(the venvs of ../shared/python-compat/make-venv for the newer ones).

Threshold sweep: one array of each size moved from worker A to worker B for a task there,
depot's threshold set to that size, so that the array's frame, and only it, goes through depot
(what a threshold at that size does); timed is the fetch as B's Dask logs it, without the
scheduling around it. Its rows tell from which size depot's transfers pay, which is what
depot.dask.DEFAULT_THRESHOLD is set from.

Figures are medians with the range of the rounds; ratios divide medians: "TCP / depot" above 1
means depot is faster, "default / prefaulted" at most 1.10 means the default pool is within 10%
of the prefaulted one. Each row carries the 1-minute load average when it finished. Prints
markdown.

Usage: bench_workloads.py [--quick] [--depotd PATH] [--workers 2,4] [--capacity 4GiB]
                          [--only workloads|rechunk|sweep] [--no-prefaulted] [--rechunk-mib 512]
                          [--rounds N]
Needs PYTHONPATH to hold the built package (BUILD_DIR/python); the daemon is $DEPOTD or --depotd.
"""

import argparse
import contextlib
import datetime
import json
import math
import os
import platform
import statistics
import time

import numpy as np

import dask
import dask.array as da
import dask.bag as db
import distributed
import depot.dask

from bench_dask import MIB, Daemon, fmt_bytes, fmt_time, log, machine, settle, summary

KIB = 1 << 10
RELEASE = f"dask {dask.__version__}, distributed {distributed.__version__}"


# --- what the workers run ------------------------------------------------------------------------


def set_transfers(on, threshold, dask_worker):
    if on:
        depot.dask.enable_transfers(dask_worker, threshold)
    else:
        depot.dask.disable_transfers(dask_worker)


def look(x):
    return x.nbytes


def last_fetch(dask_worker):
    return dask_worker.transfer_incoming_log[-1]["duration"]


def total(*arrays):
    return float(sum(a.sum() for a in arrays))


def records(seed, count):
    rng = np.random.default_rng(seed)
    return [(int(k), bytes(1024)) for k in rng.integers(0, 1 << 40, count)]


def first(record):
    return record[0]


def group_size(group):
    return len(group[1])


# --- the workloads: each makes its data, then times what it measures ------------------------------


def transpose_sum(client, n=8000, blocks=8):
    x = client.persist(da.random.RandomState(0).random((n, n), chunks=(n // blocks, n // blocks)))
    distributed.wait(x)
    start = time.perf_counter()
    result = client.compute((x + x.T).sum()).result()
    return time.perf_counter() - start, result


def bag_shuffle(client, count=200_000, partitions=16):
    bag = client.persist(db.from_delayed(
        [dask.delayed(records)(i, count // partitions) for i in range(partitions)]))
    distributed.wait(bag)
    start = time.perf_counter()
    grouped = bag.groupby(first, shuffle="tasks", npartitions=partitions)
    result = client.compute(grouped.map(group_size).sum()).result()
    return time.perf_counter() - start, result


HAS_P2P_RECHUNK = "method" in __import__("inspect").signature(da.Array.rechunk).parameters


def p2p_rechunk(mib, block=256, disk=True):
    """With disk False, P2P keeps the shards a worker receives in memory instead of writing them
    to its disk and reading them back (`distributed.p2p.storage.disk`, read where the graph is
    made)."""
    n = int(math.sqrt(mib * MIB / 8)) // block * block

    def run(client):
        x = client.persist(da.random.RandomState(0).random((n, n), chunks=(n, block)))
        distributed.wait(x)
        start = time.perf_counter()
        with dask.config.set({"distributed.p2p.storage.disk": disk}):
            y = x.rechunk((block, n), method="p2p") if HAS_P2P_RECHUNK else x.rechunk((block, n))
        result = client.compute(y.sum()).result()
        return time.perf_counter() - start, result
    return run, n


def map_reduce_on_one(client, count=32, size=16 * MIB):
    workers = sorted(client.scheduler_info()["workers"])
    arrays = [client.submit(np.full, size // 8, float(i), workers=[workers[i % len(workers)]],
                            pure=False) for i in range(count)]
    distributed.wait(arrays)
    start = time.perf_counter()
    result = client.submit(total, *arrays, workers=[workers[0]], pure=False).result()
    return time.perf_counter() - start, result


def transfer(size):
    """Moves one array from worker A to worker B; what counts is the fetch as B's Dask logs it,
    from its request to the value deserialized (both sides' serialization included, the
    scheduling of the task, which is the same either way and ten times longer, left out)."""
    def run(client):
        a, b = sorted(client.scheduler_info()["workers"])[:2]
        source = client.submit(np.full, size // 8, 1.0, workers=[a], pure=False)
        distributed.wait(source)
        result = client.submit(look, source, workers=[b], pure=False).result()
        return client.run(last_fetch, workers=[b])[b], result
    return run


def fmt_fine(seconds):
    return f"{seconds * 1000:.2f} ms"


# --- the harness ---------------------------------------------------------------------------------


class Column:
    """One way of running a workload: a cluster's client and whether its transfers use depot."""

    def __init__(self, label, client, transfers):
        self.label = label
        self.client = client
        self.transfers = transfers

    def run(self, workload, threshold):
        self.client.run(set_transfers, self.transfers, threshold)
        before = received_through_depot(self.client)
        with self.client.as_current():  # distributed.wait looks for it there
            seconds, result = workload(self.client)
        settle(self.client)  # the workload's data goes with its last reference, here
        self.moved = received_through_depot(self.client) - before
        return seconds, result


class Bench:
    """The rows of one cluster size: each workload measured in every column."""

    def __init__(self, columns, rounds, workers, data=None):
        self.columns = columns
        self.rounds = rounds
        self.workers = workers
        self.data = data
        self.rows = []

    def measure(self, name, workload, threshold=depot.dask.DEFAULT_THRESHOLD, rounds=None,
                fmt=fmt_time, note="", chart=None):
        """Runs the workload in every column, round by round, the order rotating; checks that
        the columns agree on the result. With `chart` (a short name), each column's median goes
        to the chart data too."""
        samples = {c.label: [] for c in self.columns}
        moved = []
        expected = None
        for r in range(rounds or self.rounds):
            k = r % len(self.columns)
            for column in self.columns[k:] + self.columns[:k]:
                seconds, result = column.run(workload, threshold)
                samples[column.label].append(seconds)
                if column is self.columns[1]:
                    moved.append(column.moved)
                expected = result if expected is None else expected
                assert math.isclose(result, expected, rel_tol=1e-9), \
                    f"{name}: {column.label} gives {result}, another column {expected}"
        medians = [statistics.median(samples[c.label]) for c in self.columns]
        if chart and self.data:
            for c, m in zip(self.columns, medians):
                plot(self.data, "dask-workloads", f"{RELEASE}, {self.workers} workers", c.label,
                     chart, m)
        texts = [summary(samples[c.label], fmt)[1] for c in self.columns]
        tcp, default, prefaulted = (medians + [None])[:3]
        ratios = [f"{tcp / default:.2f}×"] + (
            [f"{tcp / prefaulted:.2f}×", f"{default / prefaulted:.2f}×"] if prefaulted else [])
        load = f"{os.getloadavg()[0]:.1f}"
        self.rows.append((name, RELEASE, self.workers, *texts, *ratios,
                          fmt_bytes(int(statistics.median(moved))),
                          load, note))
        log(f"  {name}: " + ", ".join(f"{c.label} {t}" for c, t in zip(self.columns, texts)) +
            f"; {' '.join(ratios)}; load {load}")
        return medians


def plot(path, chart, panel, series, x, y):
    """Appends one point for bench/charts.py, as depot_bench --data does."""
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps({"chart": chart, "panel": panel, "series": series, "x": x, "y": y})
                + "\n")


def pays_from(sweep):
    """The smallest size from which depot's median (default pool) beats TCP's at that size and
    every larger one; None when it never does."""
    found = None
    for size, (tcp, default, *_) in sorted(sweep.items(), reverse=True):
        if default >= tcp:
            break
        found = size
    return found


@contextlib.contextmanager
def cluster(workers, daemon):
    with distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                  dashboard_address=":0", silence_logs=40) as c, \
            distributed.Client(c, set_as_default=False) as client:
        depot.dask.register_plugin(client, depot.dask.DepotPlugin(daemon.socket))
        yield client


def received_through_depot(client):
    return sum(s["received_bytes"] for s in client.run(depot.dask.transfer_stats).values())


def sent_through_depot(client):
    return sum(s["sent"] for s in client.run(depot.dask.transfer_stats).values())


def table(rows, first, prefaulted):
    both = ("depot, prefaulted pool", "TCP / prefaulted", "default / prefaulted")
    heads = ["release", "workers", "Dask over TCP", "depot, default pool", both[0],
             "TCP / default", *both[1:], "through depot (median)", "load", "note"]
    heads = [h for h in heads if prefaulted or h not in both]
    lines = [f"| {first} | " + " | ".join(heads) + " |",
             "|---|---|" + "---:|" * (len(heads) - 2) + "---|"]
    lines += ["| " + " | ".join(str(x) for x in row) + " |" for row in rows]
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds and sweep sizes")
    parser.add_argument("--depotd", default=os.environ.get("DEPOTD"), help="the daemon to run")
    parser.add_argument("--workers", default="2,4", help="cluster sizes, comma separated")
    parser.add_argument("--capacity", default="4GiB", help="each daemon's pool")
    parser.add_argument("--only", choices=("workloads", "rechunk", "sweep"),
                        help="the workloads, the P2P rechunk's two rows or the threshold sweep "
                        "alone")
    parser.add_argument("--note", default="", help="a line for the header")
    parser.add_argument("--data", help="append the workloads' medians to this file, one JSON "
                        "line each, for bench/charts.py")
    parser.add_argument("--no-prefaulted", dest="prefaulted", action="store_false",
                        help="leave out the cluster on a prefaulted pool")
    parser.add_argument("--rechunk-mib", type=int, default=512,
                        help="the size of the P2P rechunk's array, MiB")
    parser.add_argument("--rounds", type=int,
                        help="rounds of each workload (3 with --quick, 5 otherwise)")
    args = parser.parse_args()
    if not args.depotd:
        parser.error("give --depotd or set DEPOTD")
    if args.rounds is not None and args.rounds < 1:
        parser.error("--rounds must be at least 1")

    rounds = args.rounds or (3 if args.quick else 5)
    sweep_rounds = 7 if args.quick else 11
    sweep_sizes = ([64 * KIB, 256 * KIB, 512 * KIB, MIB, 4 * MIB] if args.quick else
                   [16 * KIB, 64 * KIB, 256 * KIB, 512 * KIB, MIB, 4 * MIB, 16 * MIB])

    started = datetime.datetime.now(datetime.timezone.utc)
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    on_demand = Daemon(args.depotd, args.capacity, prefault=False)
    prefaulted = Daemon(args.depotd, args.capacity, prefault=True) if args.prefaulted else None
    workload_rows, sweep_rows, verdicts, sent = [], [], [], []
    settings = {"distributed.worker.memory.target": False, "distributed.worker.memory.spill": False,
                "distributed.worker.memory.pause": False,
                "distributed.worker.memory.terminate": False}
    try:
        for n in (int(w) for w in args.workers.split(",")):
            log(f"LocalClusters of {n} worker processes")
            with dask.config.set(settings), cluster(n, on_demand) as first, \
                    (cluster(n, prefaulted) if prefaulted else contextlib.nullcontext()) as second:
                columns = [Column("Dask over TCP", first, False),
                           Column("depot, default pool", first, True)]
                if second:
                    columns.append(Column("depot, prefaulted pool", second, True))
                bench = Bench(columns, rounds, n, args.data)
                for c in columns:  # connections between workers are opened lazily
                    c.run(transfer(MIB), depot.dask.DEFAULT_THRESHOLD)
                if args.only in (None, "workloads"):
                    bench.measure("transpose-sum: (x + x.T).sum(), x 8000² in 8×8 blocks of "
                                  "8 MB", transpose_sum, chart="transpose-sum")
                    bench.measure("bag shuffle: 200k records of 1 KiB in 16 partitions, grouped on "
                                  "a random key, counted", bag_shuffle,
                                  note="a piece goes whole through depot",
                                  chart="bag shuffle")
                    bench.measure("map, reduce on one: 32 arrays of 16 MiB summed on one "
                                  "worker", map_reduce_on_one, chart="map, reduce on one")
                if args.only != "sweep":
                    rechunk, side = p2p_rechunk(args.rechunk_mib)
                    on_disk = bench.measure(
                        f"P2P rechunk: {side}² float64 ({fmt_bytes(side * side * 8)}), 256-column"
                        " blocks to 256-row blocks, sum", rechunk,
                        note="method p2p" if HAS_P2P_RECHUNK else
                        "no P2P rechunk in this release: method tasks", chart="P2P rechunk")
                    if HAS_P2P_RECHUNK:
                        kept, _ = p2p_rechunk(args.rechunk_mib, disk=False)
                        in_memory = bench.measure("P2P rechunk, the same, its shards kept in "
                                                  "memory", kept)
                        bench.rows[-1] = bench.rows[-1][:-1] + (
                            "distributed.p2p.storage.disk off in both columns; Dask over TCP "
                            f"with it on / depot with it off: {on_disk[0] / in_memory[1]:.2f}×",)
                    workload_rows += bench.rows
                    bench.rows = []
                if args.only in (None, "sweep"):
                    sweep = {size: bench.measure(f"{fmt_bytes(size)}: the fetch",
                                                 transfer(size), threshold=size,
                                                 rounds=sweep_rounds, fmt=fmt_fine)
                             for size in sweep_sizes}
                    sweep_rows += bench.rows
                    verdicts.append((n, pays_from(sweep)))
                sent.append((n, sent_through_depot(first),
                             sent_through_depot(second) if second else None))
    finally:
        on_demand.stop()
        if prefaulted:
            prefaulted.stop()

    print("# Dask on real workloads, with and without depot, on both pools\n")
    print(f"{started:%Y-%m-%d %H:%M} UTC; {'quick' if args.quick else 'full'} run.\n")
    print(f"- machine: {machine()}")
    print(f"- load average (1, 5, 15 min) at start: {load}; at the end: "
          + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    print(f"- Python {platform.python_version()}, numpy {np.__version__}, {RELEASE}")
    print(f"- depotd with {args.capacity} pools: " + (
        "one created on demand (the defaults), one prefaulted (--prefault); two LocalClusters "
        "of the same size at once, one on each" if args.prefaulted else
        "created on demand (the defaults); one LocalCluster"))
    print(f"- method: {rounds} rounds for the workloads, {sweep_rounds} for the sweep, the three "
          "columns alternating (the order rotating); median with the range of the rounds; "
          "ratios divide medians; load: the 1-minute load average when the row finished")
    print("- transfers through depot: " + "; ".join(
        f"{n} workers: {a} on the default pool" + (f", {b} on the prefaulted one" if b else "")
        for n, a, b in sent))
    if args.note:
        print(f"- {args.note}")
    if workload_rows:
        print(f"\n## Workloads (depot's threshold: {fmt_bytes(depot.dask.DEFAULT_THRESHOLD)})\n")
        print(table(workload_rows, "workload", args.prefaulted))
    if sweep_rows:
        print("\n## Threshold sweep (depot's threshold set to the array's size)\n")
        print(table(sweep_rows, "one array from A to B", args.prefaulted))
        print()
    for n, size in verdicts:
        print(f"- {n} workers: depot (default pool) beats TCP "
              + (f"from {fmt_bytes(size)} up" if size else "at no size measured"))


if __name__ == "__main__":
    main()
