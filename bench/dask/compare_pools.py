#!/usr/bin/python3
"""The default pool against the prefaulted one, from two runs of bench_dask.py.

scripts/bench runs bench_dask.py twice, with the pool created on demand (the default) and with
it prefaulted; this puts the two runs' depot columns side by side, row by row, with the ratio
default / prefaulted (at most 1.10: the default pool within 10% of the prefaulted one), and
Dask's TCP column of each run beside them, as the two runs were made minutes apart and the
machine may have changed in between. (bench_workloads.py measures both pools in one run, their
rounds alternating.) Prints markdown.

Usage: compare_pools.py DEFAULT.md PREFAULT.md
"""

import argparse
import re

UNITS = {"ms": 1e-3, "s": 1.0, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def median(cell):
    """The median of a cell such as '898 ms (838 ms–1115 ms)'."""
    number, unit = re.match(r"([\d.]+) (\w+)", cell).groups()
    return float(number) * UNITS[unit]


def rows(path):
    """(workload, workers) -> (Dask over TCP cell, Dask with depot cell), in the file's order;
    and the file's header lines."""
    table, header = {}, []
    with open(path) as f:
        for line in f:
            if line.startswith("- "):
                header.append(line.strip())
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) == 6 and cells[1].isdigit():
                table[(cells[0], cells[1])] = (cells[2], cells[3])
    return table, header


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("default", help="bench_dask.py's output with the default pool")
    parser.add_argument("prefault", help="bench_dask.py's output with --prefault")
    args = parser.parse_args()
    default, default_header = rows(args.default)
    prefault, prefault_header = rows(args.prefault)

    print("# depot with Dask: the default pool against the prefaulted one\n")
    print(f"From {args.default} and {args.prefault}.\n")
    for name, header in (("default pool run", default_header),
                         ("prefaulted pool run", prefault_header)):
        loads = [h for h in header if h.startswith("- load average")]
        print(f"- {name}: " + (loads[0][2:] if loads else "no load average recorded"))
    print()
    print("| workload | workers | depot, default pool | depot, prefaulted pool | default / "
          "prefaulted | TCP in the default run | TCP in the prefaulted run |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for key, (tcp, depot) in default.items():
        if key not in prefault:
            continue
        tcp_p, depot_p = prefault[key]
        ratio = median(depot) / median(depot_p)
        print(f"| {key[0]} | {key[1]} | {depot} | {depot_p} | {ratio:.2f}× | {tcp} | {tcp_p} |")


if __name__ == "__main__":
    main()
