"""bench/charts.py draws every chart the benchmarks record, from points shaped as they write them
(depot_bench --data and bench_workloads.py --data), and refuses a file that is not chart data."""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CHARTS = os.path.join(HERE, "..", "bench", "charts.py")
PNG = b"\x89PNG\r\n\x1a\n"


def points():
    cpu = ["client on CPU 0 (the servers' CPU)", "client on CPU 1 (another CPU)"]
    for panel in cpu:
        for size in (64, 4096, 1 << 20, 64 << 20):
            yield "get-latency", panel, "depot get, not held", size, 3e-7
            yield "get-latency", panel, "depot get, held", size, 2e-8
            yield "get-latency", panel, "Redis GET", size, 1e-5 + size * 4e-9
            yield "get-latency", panel, "socket round trip, 16 B", size, 1.2e-5
            yield "put-bandwidth", panel, "depot Put", size, 9e9
            yield "put-bandwidth", panel, "memcpy", size, 1e10
    for n in (1, 2, 4):
        yield "pairs", "every client process on CPU 0", "depot put+get", n, 150000.0 * n
        yield "pairs", "every client process on CPU 0", "Redis SET+GET", n, 30000.0 * n
    for stored in (52505, 1042505):
        yield "scale", "", "64 B get, not held (p50)", stored, 7e-7
        yield "scale", "", "socket round trip, 16 B", stored, 1.2e-5
    for workers in (2, 4):
        panel = f"dask 2022.12.1, distributed 2022.12.1, {workers} workers"
        for workload in ("transpose-sum", "bag shuffle", "P2P rechunk"):
            yield "dask-workloads", panel, "Dask over TCP", workload, 2.0
            yield "dask-workloads", panel, "depot, default pool", workload, 1.0


def run(data, out):
    return subprocess.run([sys.executable, CHARTS, data, out], capture_output=True, text=True)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "data.jsonl")
        with open(data, "w", encoding="utf-8") as f:
            for chart, panel, series, x, y in points():
                f.write(json.dumps({"chart": chart, "panel": panel, "series": series, "x": x,
                                    "y": y}) + "\n")
        out = os.path.join(tmp, "charts")
        r = run(data, out)
        assert r.returncode == 0, r.stderr
        wanted = ["get-latency", "put-bandwidth", "pairs", "scale", "dask-workloads"]
        assert r.stdout.split() == [os.path.join(out, f"{c}.png") for c in wanted], r.stdout
        for c in wanted:
            with open(os.path.join(out, f"{c}.png"), "rb") as f:
                head = f.read(8)
            assert head == PNG, f"{c}.png is not a PNG"
            assert os.path.getsize(os.path.join(out, f"{c}.png")) > 10000, f"{c}.png is empty"

        # A line that is not a point, and a chart nobody draws: refused, saying which.
        with open(data, "a", encoding="utf-8") as f:
            f.write('{"chart": "pairs", "x": 1}\n')
        r = run(data, out)
        assert r.returncode != 0 and "not a chart point" in r.stderr, r.stderr
        with open(data, "w", encoding="utf-8") as f:
            f.write(json.dumps({"chart": "pie", "panel": "", "series": "a", "x": 1, "y": 1}) + "\n")
        r = run(data, out)
        assert r.returncode != 0 and "pie" in r.stderr, r.stderr
    print("bench/charts.py drew every chart and refused bad data")


if __name__ == "__main__":
    main()
