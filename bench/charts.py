"""Draws the benchmarks' charts from the points they recorded (depot_bench --data FILE and
bench_workloads.py --data FILE: one JSON object a line, {"chart", "panel", "series", "x", "y"}).

Usage: charts.py DATA OUT_DIR [--title-note TEXT]

Writes one PNG per chart found in DATA to OUT_DIR, named after the chart:
  get-latency.png     get latency against object size, log-log: depot's get of an object not
                      held and of one held, Redis GET, the socket copy of the bytes, the bare
                      socket round trip; one plot per placement of the client
  put-bandwidth.png   put bandwidth against object size: depot's Put, memcpy, Redis SET
  pairs.png           1 KiB put+get pairs a second against Redis's SET+GET, by client processes
  scale.png           gets of objects not held as the store grows to a million objects
  dask-workloads.png  the Dask workloads' times with and without depot, one plot per release and
                      cluster size
A point recorded again (a later run appended to the same file) replaces the earlier one. Prints
the files it wrote. Needs matplotlib (Debian's python3-matplotlib).
"""
import argparse
import collections
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 (the backend is chosen first)
import matplotlib.ticker  # noqa: E402

def size_label(n, _pos=None):
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div:
            return f"{n / div:g} {unit}"
    return f"{n:g} B"


def count_label(n, _pos=None):
    return f"{n:,.0f}"


def duration_label(seconds, _pos=None):
    for unit, mul in (("ns", 1e9), ("µs", 1e6), ("ms", 1e3)):
        if seconds * mul < 1000:
            return f"{seconds * mul:g} {unit}"
    return f"{seconds:g} s"


def load(path):
    """chart -> panel -> series -> {x: y}, in the order first seen; later points replace."""
    charts = {}
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                p = json.loads(line)
                chart, panel, series, x, y = (p["chart"], p["panel"], p["series"], p["x"],
                                              float(p["y"]))
            except (ValueError, KeyError, TypeError) as e:
                sys.exit(f"{path}:{number}: not a chart point ({e}): {line.strip()}")
            panels = charts.setdefault(chart, {})
            panels.setdefault(panel, {}).setdefault(series, {})[x] = y
    return charts


def figure(panels, width=6.4, height=4.4):
    fig, axes = plt.subplots(1, len(panels), figsize=(width * len(panels), height), squeeze=False)
    return fig, list(axes[0])


def lines(ax, series, log_y=True):
    for name, points in series.items():
        xs = sorted(points)
        ax.plot(xs, [points[x] for x in xs], marker="o", label=name)
    if log_y:
        ax.set_yscale("log")
    ax.grid(True, which="major", alpha=0.4)
    ax.legend(fontsize=8)


def measured(series):
    """Every x a series of the plot has, in order: where the ticks go."""
    return sorted({x for points in series.values() for x in points})


def sizes_axis(ax, series):
    """A log axis of object sizes, a tick at each size measured."""
    ax.set_xscale("log", base=2)
    ax.set_xticks(measured(series))
    ax.xaxis.set_major_formatter(size_label)
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax.set_xlabel("object size")


def draw_get_latency(panels):
    fig, axes = figure(panels)
    for ax, (panel, series) in zip(axes, panels.items()):
        lines(ax, series)
        sizes_axis(ax, series)
        ax.yaxis.set_major_formatter(duration_label)
        ax.set_ylabel("time to have the object (p50)")
        ax.set_title(panel, fontsize=10)
    fig.suptitle("Get latency by object size: depot's get maps, the others copy")
    return fig


def draw_put_bandwidth(panels):
    fig, axes = figure(panels)
    for ax, (panel, series) in zip(axes, panels.items()):
        lines(ax, {k: {x: y / 1e9 for x, y in v.items()} for k, v in series.items()}, log_y=False)
        sizes_axis(ax, series)
        ax.set_ylabel("GB/s (p50)")
        ax.set_ylim(bottom=0)
        ax.set_title(panel, fontsize=10)
    fig.suptitle("Put bandwidth against memcpy and Redis SET")
    return fig


def draw_pairs(panels):
    fig, axes = figure(panels, width=5)
    for ax, (panel, series) in zip(axes, panels.items()):
        lines(ax, series, log_y=False)
        ax.set_xticks(measured(series))
        ax.yaxis.set_major_formatter(count_label)
        ax.set_xlabel("client processes")
        ax.set_ylabel("1 KiB put+get pairs a second (median)")
        ax.set_ylim(bottom=0)
        ax.set_title(panel, fontsize=10)
    fig.suptitle("Small objects: depot's pairs against Redis's")
    return fig


def draw_scale(panels):
    fig, axes = figure(panels, width=7)
    for ax, (panel, series) in zip(axes, panels.items()):
        lines(ax, series)
        ax.set_xscale("log")
        ax.set_xticks(measured(series))
        ax.xaxis.set_major_formatter(count_label)
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.yaxis.set_major_formatter(duration_label)
        ax.set_xlabel("objects stored")
        ax.set_ylabel("time")
        if panel:
            ax.set_title(panel, fontsize=10)
    fig.suptitle("Gets of objects not held as the store grows")
    return fig


def draw_dask_workloads(panels):
    fig, axes = figure(panels, width=6.4, height=4.8)
    for ax, (panel, series) in zip(axes, panels.items()):
        workloads = list(dict.fromkeys(x for p in series.values() for x in p))
        width = 0.8 / len(series)
        for i, (name, points) in enumerate(series.items()):
            xs = [k + (i - (len(series) - 1) / 2) * width for k in range(len(workloads))]
            ax.bar(xs, [points.get(w, 0) for w in workloads], width, label=name)
        ax.set_xticks(range(len(workloads)), workloads, rotation=15, fontsize=8)
        ax.set_ylabel("seconds (median)")
        ax.set_title(panel, fontsize=9)
        ax.grid(True, axis="y", alpha=0.4)
        ax.legend(fontsize=8)
    fig.suptitle("Dask workloads with and without depot (shorter is better)")
    return fig


DRAW = {
    "get-latency": draw_get_latency,
    "put-bandwidth": draw_put_bandwidth,
    "pairs": draw_pairs,
    "scale": draw_scale,
    "dask-workloads": draw_dask_workloads,
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data")
    parser.add_argument("out_dir")
    parser.add_argument("--title-note", default="", help="added under each chart's title")
    args = parser.parse_args()
    charts = load(args.data)
    unknown = set(charts) - set(DRAW)
    if unknown:
        sys.exit(f"{args.data}: charts this script cannot draw: {', '.join(sorted(unknown))}")
    os.makedirs(args.out_dir, exist_ok=True)
    for name, panels in charts.items():
        fig = DRAW[name](collections.OrderedDict(panels))
        if args.title_note:
            fig.text(0.5, 0.005, args.title_note, ha="center", fontsize=8, color="0.3")
        fig.tight_layout(rect=(0, 0.03, 1, 1))
        path = os.path.join(args.out_dir, f"{name}.png")
        fig.savefig(path, dpi=90)
        plt.close(fig)
        print(path)


if __name__ == "__main__":
    main()
