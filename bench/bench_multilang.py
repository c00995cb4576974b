"""The multilang hot path: tuples per second through a pass-through pystorm bolt (a subprocess speaking Storm's
multilang protocol), JSON against msgpack, beside the same topology with the pass-through in Python.

Not a test: `python bench/bench_multilang.py [--secs 5] [--runs 3] [--ackers 1]`. Local mode (one worker
process): ConstSpout → pass-through → DevNullBolt, local-or-shuffle, ``topology.max.spout.pending`` 1000; each run
counts the trees the spout sees acked over ``--secs`` after a warm-up, and the CPU of this process **and of the
subprocess** (psutil), so "per CPU-s" is the cost of a tuple on both sides of the pipe. The configurations run
interleaved, ``--runs`` times each; the table shows the median (best).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from cpu import Run, Sample, Summary, calls_per_cpu_sec  # noqa: E402
from examples import multilang, perf  # noqa: E402
from squall import LocalTopology, Topology  # noqa: E402
from squall.core.logs import configure_logging  # noqa: E402

#: streamparse's runner of pystorm components, beside this interpreter.
STREAMPARSE_RUN = str(Path(sys.executable).parent / "streamparse_run")
CONF = {"topology.max.spout.pending": 1000, "topology.message.timeout.secs": 60}


def topology(kind: str, ackers: int) -> Topology:
    if kind == "python":
        return perf.const_null(id_bolt=True, ackers=ackers)
    return multilang.passthrough(STREAMPARSE_RUN, kind, ackers=ackers)


def measure(kind: str, secs: float, ackers: int, warmup: float = 2.0) -> Run:
    running = LocalTopology(topology(kind, ackers), CONF, resources=REPO / "examples" / "resources").start()
    try:
        spout = running.tasks("spout")[0]
        pids = [] if kind == "python" else [running.tasks("pass")[0].pid]  # type: ignore[attr-defined]  # a shell executor's
        done = (lambda: spout.stats.acked) if ackers else (lambda: sum(e.stats.executed for e in running.tasks("null")))
        time.sleep(warmup)
        if running.errors:
            raise RuntimeError(f"{kind}: {running.errors}")
        first, start = done(), Sample.take(pids)
        time.sleep(secs)
        end, last = Sample.take(pids), done()
        return start.run_to(end, last - first)
    finally:
        running.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--secs", type=float, default=5.0, help="measured seconds per run")
    parser.add_argument("--runs", type=int, default=3, help="runs of each configuration, interleaved")
    parser.add_argument("--ackers", type=int, default=1, help="acker tasks (0: unreliable)")
    args = parser.parse_args()
    configure_logging(level="WARNING", stream=sys.stderr)
    print(
        f"machine: {platform.platform()}, {os.cpu_count()} cpus, load average "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; python {platform.python_version()}; "
        f"{calls_per_cpu_sec() / 1e6:.1f}M calls per CPU-s"
    )
    kinds = ("json", "msgpack", "python")
    runs: dict[str, list[Run]] = {kind: [] for kind in kinds}
    for _ in range(args.runs):
        for kind in kinds:
            runs[kind].append(measure(kind, args.secs, args.ackers))
    print(
        f"ConstSpout → pass-through → DevNull, {'acked' if args.ackers else 'unacked'}, {args.secs:g} s x "
        f"{args.runs} runs; median (best)"
    )
    print(f"{'pass-through':<28} {'tuples/s':>18} {'per CPU-s':>18} {'cores':>6}")
    labels = {
        "json": "pystorm subprocess, JSON",
        "msgpack": "pystorm subprocess, msgpack",
        "python": "Python bolt in the worker",
    }
    for kind in kinds:
        summary = Summary.of(runs[kind])
        print(f"{labels[kind]:<28} {summary.per_sec_cell:>18} {summary.per_cpu_sec_cell:>18} {summary.cores:>6.2f}")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
