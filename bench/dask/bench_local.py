#!/usr/bin/python3
"""Processes of one node handing each other large results: Dask's local schedulers against
depot's, and Python's process pools with and without depot, side by side in one run.

- scheduler: 16 tasks, each a GIL-holding Python loop that then returns a 32 MiB array, reduced
  by one task, on 2 workers: ``scheduler="threads"``, ``"processes"`` (Dask's, a pool spawned per
  computation as Dask does) and ``depot.dask.get`` (its pool kept between computations; the
  first computation, which spawns it, is reported on its own row). Then the same with loops 4×
  longer, where threads wait for the GIL the longer;
- pools: ``multiprocessing.Pool(2).map`` of 16 tasks returning 32 MiB arrays, and the same
  with ``depot.handoff.through_depot``; timed until the parent holds every result and has
  summed them;
- cache: ``@depot.cache`` on a function returning a 32 MiB array: a miss, a hit in the process
  that computed it, a hit from another process, against calling the function.

Rounds alternate the order of the columns; figures are medians with the range of the rounds in
brackets; ratios divide medians. Prints markdown.

Usage: bench_local.py [--quick] [--depotd PATH]
Needs PYTHONPATH to hold the built package (BUILD_DIR/python); the daemon is $DEPOTD or --depotd.
"""

import argparse
import datetime
import multiprocessing
import os
import platform
import statistics
import sys
import time

import numpy as np

import dask

MIB = 1 << 20
TASKS = 16
RESULT = 32 * MIB


def log(*parts):
    print(*parts, file=sys.stderr, flush=True)


# --- what the workers run ------------------------------------------------------------------------


def produce(i, loop):
    """Holds the GIL for `loop` iterations of Python, then returns a 32 MiB array."""
    s = 0
    for k in range(loop):
        s += k ^ i
    return np.full(RESULT // 8, float(i + s % 2))


def combine(arrays):
    return float(sum(float(a[:: 4096].sum()) for a in arrays))


def produce_plain(i):
    return produce(i, 0)


def features(seed):
    """What the cache benchmark memoizes: 32 MiB of float64 made with some work."""
    rng = np.random.default_rng(seed)
    return np.cumsum(rng.random(RESULT // 8))


def hit_latency(seed, calls):
    """Median seconds of a cached call of ``features`` in this process, after a first one."""
    import depot

    cached = depot.cache(features)
    cached(seed)
    samples = []
    for _ in range(calls):
        start = time.perf_counter()
        cached(seed)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def memory_for_result(use_cache, seed):
    """This process's private memory growth while it holds the result (a pool task)."""
    import depot
    from bench_dask import private_memory

    before = private_memory()
    value = depot.cache(features)(seed) if use_cache else features(seed)
    return private_memory() - before, float(value[-1])


# --- measurements --------------------------------------------------------------------------------


def median_text(samples):
    med = statistics.median(samples)
    text = f"{med * 1000:.0f} ms"
    if len(samples) > 1:
        text += f" ({min(samples) * 1000:.0f}–{max(samples) * 1000:.0f})"
    return med, text


def timed(fn):
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def scheduler_rows(loop, rounds, label):
    import depot.dask

    def graph():
        return dask.delayed(combine)([dask.delayed(produce)(i, loop) for i in range(TASKS)])

    kinds = {"threads": "threads", "processes": "processes", "depot": depot.dask.get}
    samples = {k: [] for k in kinds}
    rows = []
    expected = None
    first = None
    for r in range(rounds):
        order = list(kinds)[r % 3:] + list(kinds)[:r % 3]
        for kind in order:
            seconds, (value,) = timed(lambda: dask.compute(graph(), scheduler=kinds[kind],
                                                           num_workers=2))
            expected = value if expected is None else expected
            assert value == expected, f"{kind} computed {value}, not {expected}"
            if kind == "depot" and first is None:
                first = seconds  # spawned the pool: reported apart
                seconds, _ = timed(lambda: dask.compute(graph(), scheduler=kinds[kind],
                                                        num_workers=2))
            samples[kind].append(seconds)
    meds = {k: median_text(v) for k, v in samples.items()}
    log(f"  {label}: " + ", ".join(f"{k} {t}" for k, (_, t) in meds.items()))
    rows.append((label, meds["threads"][1], meds["processes"][1], meds["depot"][1],
                 f"{meds['processes'][0] / meds['depot'][0]:.1f}×",
                 f"{meds['depot'][0] / meds['threads'][0]:.2f}×"))
    return rows, first


def pool_row(rounds):
    from depot.handoff import through_depot

    spawn = multiprocessing.get_context("spawn")
    samples = {"default": [], "depot": []}
    with spawn.Pool(2) as pool:
        pool.map(produce_plain, range(2))  # the workers have started and imported numpy
        for r in range(rounds):
            for kind in (["default", "depot"] if r % 2 == 0 else ["depot", "default"]):
                fn = produce_plain if kind == "default" else through_depot(produce_plain)
                seconds, _ = timed(lambda: combine(pool.map(fn, range(TASKS))))
                samples[kind].append(seconds)
    meds = {k: median_text(v) for k, v in samples.items()}
    log(f"  pool: default {meds['default'][1]}, depot {meds['depot'][1]}")
    return (f"multiprocessing.Pool(2).map, {TASKS} results of 32 MiB", meds["default"][1],
            meds["depot"][1], f"{meds['default'][0] / meds['depot'][0]:.1f}×")


def cache_rows(daemon):
    import depot

    cached = depot.cache(features)
    plain = [timed(lambda: features(1))[0] for _ in range(3)]
    miss, _ = timed(lambda: cached(2))
    here = hit_latency(2, 200)
    spawn = multiprocessing.get_context("spawn")
    with spawn.Pool(4) as pool:
        other = pool.apply(hit_latency, (2, 200))
        used = daemon.client.status()["used"]
        private = {}
        for use_cache in (False, True):
            reports = pool.starmap(memory_for_result, [(use_cache, 3)] * 4, chunksize=1)
            assert len({value for _, value in reports}) == 1
            private[use_cache] = sum(m for m, _ in reports)
        shared = daemon.client.status()["used"] - used
    log(f"  cache: compute {statistics.median(plain) * 1000:.1f} ms, miss {miss * 1000:.1f} ms, "
        f"hit {here * 1e6:.0f} µs here, {other * 1e6:.0f} µs in another process")
    return [
        ("call the function (no cache)", f"{statistics.median(plain) * 1000:.1f} ms"),
        ("first call (miss: compute and store)", f"{miss * 1000:.1f} ms"),
        ("hit, in the process that computed it", f"{here * 1e6:.0f} µs"),
        ("hit, in another process", f"{other * 1e6:.0f} µs"),
        ("memory for one result held by 4 processes, no cache",
         f"{private[False] / MIB:.0f} MiB private"),
        ("memory for one result held by 4 processes, cached",
         f"{private[True] / MIB:.0f} MiB private + {shared / MIB:.0f} MiB in depot"),
    ]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    parser.add_argument("--depotd", default=os.environ.get("DEPOTD"), help="the daemon to run")
    parser.add_argument("--loop", type=int, default=150_000,
                        help="iterations of each task's Python loop (the issue's shape)")
    parser.add_argument("--note", default="", help="a line for the header")
    args = parser.parse_args()
    if not args.depotd:
        parser.error("give --depotd or set DEPOTD")
    rounds = 2 if args.quick else 5

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__))))
    from bench_dask import Daemon, machine

    daemon = Daemon(args.depotd, "4GiB", False)
    os.environ["DEPOT_SOCKET"] = daemon.socket
    from depot import connection
    connection.configure(daemon.socket)
    started = datetime.datetime.now(datetime.timezone.utc)
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    try:
        log("scheduler")
        rows, first = scheduler_rows(args.loop, rounds, f"{TASKS} tasks → 32 MiB each, + reduce")
        longer, _ = scheduler_rows(args.loop * 4, rounds, "the same, loops 4× longer")
        rows += longer
        log("pools")
        pool = pool_row(rounds)
        log("cache")
        cached = cache_rows(daemon)
        for o in daemon.client.list():
            daemon.client.delete(o["guid"])  # the cached results, deliberately kept so far
        left = [o for o in daemon.client.list()]
        assert not left, f"objects left in the daemon: {left}"
    finally:
        daemon.stop()

    print("# Processes of one node with depot: Dask's local scheduler and process pools\n")
    print(f"{started:%Y-%m-%d %H:%M} UTC; {'quick' if args.quick else 'full'} run.\n")
    print(f"- machine: {machine()}")
    print(f"- load average (1, 5, 15 min) at start: {load}")
    print(f"- Python {platform.python_version()}, numpy {np.__version__}, dask {dask.__version__}")
    print(f"- method: {rounds} rounds, the order of the columns rotating; median (range); "
          f"{args.loop} loop iterations per task; 2 workers")
    if args.note:
        print(f"- {args.note}")
    print()
    print("| workload | threads | processes | depot.dask.get | processes / depot | "
          "depot / threads |")
    print("|---|---:|---:|---:|---:|---:|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print(f"\nThe first depot.dask.get computation, which spawns its 2 workers: "
          f"{first * 1000:.0f} ms.\n")
    print("| workload | default (pickled through the pool's pipe) | through_depot | "
          "default / depot |")
    print("|---|---:|---:|---:|")
    print("| " + " | ".join(pool) + " |")
    print("\n@depot.cache on a function returning 32 MiB (np.cumsum of random numbers):\n")
    print("| measure | figure |")
    print("|---|---:|")
    for row in cached:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
