#!/usr/bin/env python3
"""A get of a sealed object not held yet, from Python, binding included.

Prints a markdown table: for each size, depot.Client.get of an object this process does not
hold (through the namespace's shared index: no round trip), the Object dropped before the next
get, beside a bare round trip over a socketpair to a forked peer (16 bytes there and back) and,
with --previous-depotd, the same get against a daemon built before the shared index (a round
trip). Every figure in alternating rounds of one run; p50 over all samples, p99 likewise.

Then the same get at scale: each of distinct 64-byte objects not held yet, got once (and let
go), while the node stores 1,000,000 objects and this process holds 100,000 (a tenth of each
with --quick), as section 9 of depot_bench does from C++.

Usage: first_get.py [--quick] [--depotd PATH] [--previous-depotd PATH]
Needs PYTHONPATH to hold the built package (BUILD_DIR/python).
"""

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import depot


def start_depotd(binary, sock, capacity):
    proc = subprocess.Popen([binary, "--socket", sock, "--capacity", str(capacity)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(3000):
        if os.path.exists(sock):
            try:
                return proc, depot.Client(sock)
            except Exception:
                pass
        time.sleep(0.01)
    proc.kill()
    raise RuntimeError(f"{binary} did not start on {sock}")


class Peer:
    """A forked process answering 16 bytes with 16 bytes: the floor under any round trip."""

    def __init__(self):
        self.mine, theirs = socket.socketpair()
        self.pid = os.fork()
        if self.pid == 0:
            self.mine.close()
            while True:
                got = theirs.recv(16)
                if not got:
                    os._exit(0)
                theirs.sendall(got)
        theirs.close()

    def ping(self):
        self.mine.sendall(b"x" * 16)
        got = 0
        while got < 16:
            got += len(self.mine.recv(16 - got))

    def close(self):
        self.mine.close()
        os.waitpid(self.pid, 0)


def percentile(samples, p):
    s = sorted(samples)
    return s[min(len(s) - 1, int(len(s) * p))]


def fmt_time(t):
    return f"{t * 1e9:.0f} ns" if t < 1e-6 else f"{t * 1e6:.2f} µs"


def fmt_bytes(n):
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n // size} {unit}"
    return f"{n} B"


def scale(args, peer, tmp):
    stored, held_count = (100_000, 10_000) if args.quick else (1_000_000, 100_000)
    samples_wanted = 1000 if args.quick else 4000
    proc, writer = start_depotd(args.depotd, os.path.join(tmp, "scale.sock"), 1 << 30)
    try:
        data = bytes(64)
        ids = [writer.put(data) for _ in range(stored + samples_wanted)]
        writer.status()  # every put taken
        reader = depot.Client(writer.socket)
        held = [reader.get(guid) for guid in ids[:held_count]]
        rest = iter(ids[held_count:])
        floor, gets = [], []
        for r in range(4):
            for k in range(2):
                if (k + r) % 2 == 0:
                    for _ in range(samples_wanted // 4):
                        t0 = time.perf_counter_ns()
                        peer.ping()
                        floor.append(time.perf_counter_ns() - t0)
                else:
                    for _ in range(samples_wanted // 4):
                        guid = next(rest)
                        t0 = time.perf_counter_ns()
                        obj = reader.get(guid)
                        gets.append(time.perf_counter_ns() - t0)
                        del obj
        get = statistics.median(gets) / 1e9
        print(f"\n#### At scale\n\nThe first get of each of {len(gets)} distinct 64-byte objects "
              f"not held yet (each let go after), while depotd stores {stored + samples_wanted:,} "
              f"objects and this process holds {len(held):,}; depotd at its defaults.\n")
        print("| store | floor p50 | get p50 | get p99 | ≤ 3 µs |")
        print("|---|---:|---:|---:|---|")
        print(f"| {stored + samples_wanted:,} stored, {len(held):,} held | "
              f"{fmt_time(statistics.median(floor) / 1e9)} | {fmt_time(get)} | "
              f"{fmt_time(percentile(gets, 0.99) / 1e9)} | {'met' if get <= 3e-6 else 'missed'} |",
              flush=True)
    finally:
        proc.terminate()
        proc.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--depotd", default=os.environ.get("DEPOTD", "build/daemon/depotd"))
    ap.add_argument("--previous-depotd")
    args = ap.parse_args()
    sizes = [64, 4 << 10, 1 << 20, 64 << 20] + ([] if args.quick else [1 << 30])
    per_round = 300 if args.quick else 2000
    rounds = 3 if args.quick else 5
    capacity = sizes[-1] + (256 << 20)
    tmp = tempfile.mkdtemp(prefix="depot-first-get-")
    daemons = [("get", args.depotd)]
    if args.previous_depotd:
        daemons.append(("previous get", args.previous_depotd))
    procs, clients = [], {}
    peer = Peer()
    try:
        for name, binary in daemons:
            proc, writer = start_depotd(binary, os.path.join(tmp, f"{len(procs)}.sock"), capacity)
            procs.append(proc)
            clients[name] = (writer, depot.Client(writer.socket))
        print(f"\n### From Python (binding included)\n\n{rounds} rounds of {per_round} samples "
              f"per method and size; Python {sys.version.split()[0]}. The floor is 16 bytes "
              "there and back over a socketpair to a forked peer, from Python.\n")
        head = ["size", "floor p50", "get p50", "get p99", "get / floor", "≤ 0.25× floor",
                "≤ 3 µs"]
        if args.previous_depotd:
            head += ["previous get p50", "previous / get"]
        print("| " + " | ".join(head) + " |")
        print("|" + "|".join(["---"] + ["---:"] * 4 + ["---"] * 2 +
                             ["---:"] * (len(head) - 7)) + "|")
        for size in sizes:
            data = bytes(size)
            ids = {}
            for name, (writer, reader) in clients.items():
                ids[name] = writer.put(data)
                reader.get(ids[name])  # brings the segment's descriptor: not timed
            samples = {"floor": []}
            samples.update({name: [] for name in clients})

            def once(method):
                if method == "floor":
                    t0 = time.perf_counter_ns()
                    peer.ping()
                    return time.perf_counter_ns() - t0
                reader = clients[method][1]
                guid = ids[method]
                t0 = time.perf_counter_ns()
                obj = reader.get(guid)
                t = time.perf_counter_ns() - t0
                del obj
                return t

            methods = list(samples)
            for m in methods:
                once(m)
            for r in range(rounds):
                for k in range(len(methods)):
                    m = methods[(k + r) % len(methods)]
                    samples[m] += [once(m) for _ in range(per_round)]
            for name, (writer, _) in clients.items():
                writer.delete(ids[name])
            floor = statistics.median(samples["floor"]) / 1e9
            get = statistics.median(samples["get"]) / 1e9
            row = [fmt_bytes(size), fmt_time(floor), fmt_time(get),
                   fmt_time(percentile(samples["get"], 0.99) / 1e9), f"{get / floor:.3f}×",
                   "met" if get <= 0.25 * floor else "missed",
                   "met" if get <= 3e-6 else "missed"]
            if args.previous_depotd:
                prev = statistics.median(samples["previous get"]) / 1e9
                row += [fmt_time(prev), f"{prev / get:.1f}×"]
            print("| " + " | ".join(row) + " |", flush=True)
        for proc in procs:
            proc.terminate()
            proc.wait()
        procs.clear()
        scale(args, peer, tmp)
    finally:
        peer.close()
        for proc in procs:
            proc.terminate()
            proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
