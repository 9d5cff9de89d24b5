#!/usr/bin/python3
"""Draws node_memory.py's tables (as a results note keeps them) into one chart: the node's peak
memory per workload, over TCP and with depot, one panel per Dask release.

Usage: node_memory_chart.py NOTE.md OUT.png
Reads every table node_memory.py printed in NOTE.md, each under the line that names its release
("dask X, distributed Y; ..."). Needs matplotlib.
"""

import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 (after the backend is chosen)

UNITS = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def size(text):
    number, unit = text.split()
    return float(number) * UNITS[unit]


def tables(path):
    """{release: [(workload, TCP node bytes, depot node bytes, depot's wall / TCP's)]}."""
    out, release = {}, None
    with open(path) as f:
        for line in f:
            if line.startswith("dask "):
                release = line.split(";")[0].split(", ")[1]  # "distributed X"
                out.setdefault(release, [])
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if release is None or len(cells) != 6 or " / " not in cells[1] or \
                    cells[0] == "workload":
                continue
            out[release].append((cells[0], size(cells[1].split(" / ")[0]),
                                 size(cells[2].split(" / ")[0]), cells[5]))
    return out


def wall(ratio):
    """The label of a wall-time ratio cell (inf: depot did not finish; 0.00: TCP did not)."""
    if ratio == "inf":
        return "depot: unfinished"
    if float(ratio) == 0:
        return "TCP: unfinished"
    return f"wall {ratio}×"


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__.split("\n\n")[1])
    found = tables(sys.argv[1])
    fig, axes = plt.subplots(1, len(found), figsize=(5.2 * len(found), 4.2), squeeze=False)
    for ax, (release, rows) in zip(axes[0], found.items()):
        x = range(len(rows))
        ax.bar([i - 0.2 for i in x], [r[1] / (1 << 30) for r in rows], 0.4, label="TCP")
        ax.bar([i + 0.2 for i in x], [r[2] / (1 << 30) for r in rows], 0.4, label="depot")
        ax.set_xticks(list(x), [f"{r[0]}\n{wall(r[3])}" for r in rows], fontsize=8)
        ax.set_ylabel("node peak memory (GiB)")
        ax.set_title(f"{release}, 4 workers at 1.25 GiB", fontsize=10)
        ax.legend(fontsize=8)
    fig.suptitle("Node memory under Dask: private memory of every process plus shared memory "
                 "once", fontsize=10)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=90)


if __name__ == "__main__":
    main()
