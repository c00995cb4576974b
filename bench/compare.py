"""Two checkouts' data path, measured alternately: bench_topology.py of an old and a new checkout, one run each per
configuration per round (the order flips every round), so a busy stretch of a shared machine hits both alike.
Prints each run, then median (best) per wall-clock second and per CPU-second, and new/old of the medians.

    python bench/compare.py OLD_CHECKOUT NEW_CHECKOUT --rounds 5 --seconds 5 \\
        --config const-null,workers=2,grouping=shuffle,api=batch --config const-null,workers=2,grouping=shuffle

Each checkout runs its own bench/bench_topology.py with only itself on PYTHONPATH. Not a test.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys

#: What bench_topology.py prints on stderr after each run.
RUN = re.compile(r"\]\s.*?: ([\d,]+)/s, ([\d,]+) per CPU-s, ([\d.]+) cores")


def run(checkout: str, config: str, seconds: float, warmup: float) -> tuple[int, int, float] | None:
    """(tuples/s, tuples per CPU-s, cores) of one run of ``config`` in ``checkout``; None if it failed."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": checkout}
    done = subprocess.run(
        [
            sys.executable,
            os.path.join(checkout, "bench", "bench_topology.py"),
            "--config",
            config,
            "--repeat",
            "1",
            "--seconds",
            str(seconds),
            "--warmup",
            str(warmup),
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    found = RUN.search(done.stderr)
    if found is None:
        print(f"{checkout} {config}: failed\n{done.stderr[-2000:]}", file=sys.stderr, flush=True)
        return None
    return int(found[1].replace(",", "")), int(found[2].replace(",", "")), float(found[3])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--config", action="append", required=True, help="a bench_topology.py --config")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    args = parser.parse_args()
    sides = {"old": args.old, "new": args.new}
    results: dict[tuple[str, str], list[tuple[int, int, float]]] = {(s, c): [] for s in sides for c in args.config}
    for r in range(args.rounds):
        for config in args.config:
            for side in ("old", "new") if r % 2 == 0 else ("new", "old"):
                measured = run(sides[side], config, args.seconds, args.warmup)
                if measured is not None:
                    results[(side, config)].append(measured)
                    print(
                        f"round {r + 1} {side} {config}: {measured[0]:,}/s, {measured[1]:,} per CPU-s, "
                        f"{measured[2]:.2f} cores",
                        flush=True,
                    )
    print("| configuration | checkout | tuples/s median (best) | per CPU-s median (best) |\n|---|---|---:|---:|")
    for config in args.config:
        medians = {}
        for side in sides:
            runs = results[(side, config)]
            if not runs:
                continue
            wall, cpu = [w for w, _, _ in runs], [c for _, c, _ in runs]
            medians[side] = statistics.median(wall), statistics.median(cpu)
            print(
                f"| {config} | {side} | {medians[side][0]:,.0f} ({max(wall):,}) "
                f"| {medians[side][1]:,.0f} ({max(cpu):,}) |"
            )
        if len(medians) == 2:
            print(
                f"| {config} | new/old | {medians['new'][0] / medians['old'][0]:.2f} "
                f"| {medians['new'][1] / medians['old'][1]:.2f} |"
            )


if __name__ == "__main__":
    main()
