"""Soak: a dev cluster at half its measured capacity for a long time, a worker SIGKILLed every few minutes.

A :class:`~squall.dev.cluster.DevCluster` (its own ZooKeeper, or ``--zookeeper HOST:PORT``; one nimbus; two
supervisors) runs a reliable spout → sink topology on ``--workers`` workers (bench/soaktopology.py). First it
measures capacity: ``--calibrate`` seconds unpaced, bounded by ``topology.max.spout.pending``. Then the same
topology, paced at ``--load`` (default 0.5) of that rate, runs ``--minutes`` (default 30) while every
``--kill-every`` seconds a worker not hosting the spout is SIGKILLed (a spout's own counters die with its
process; a real source resumes from its offsets) and its supervisor restarts it. Every ``--sample`` seconds it
prints throughput and the RSS of every daemon and worker (psutil). At the end the spout stops emitting, the
topology drains, and the bench prints lost messages (emitted, never acked), a table of RSS and throughput
over time with sparklines (matplotlib is not a dependency), and writes the samples as CSV and the table as
text beside it.

    python bench/soak.py [--minutes 30] [--kill-every 180] [--workers 3] [--out soak]

Not a test: numbers depend on the machine. docs/performance.md records a run.
"""

from __future__ import annotations

import argparse
import csv
import os
import random
import signal
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "bench")]

import psutil  # noqa: E402

from clusterbench import dev_cluster  # noqa: E402
from soaktopology import PacedNumbers, Sink, read_status  # noqa: E402
from squall import Topology, build_package, submit_topology  # noqa: E402
from squall.core.thrift import storm  # noqa: E402
from squall.core.zk import paths  # noqa: E402
from squall.core.zk.records import TopologyTasks  # noqa: E402
from squall.dev.cluster import DevCluster, wait_for  # noqa: E402

SUPERVISORS = ("supervisor-1", "supervisor-2")
SPARK = "▁▂▃▄▅▆▇█"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30, help="how long the paced run lasts (default 30)")
    parser.add_argument("--kill-every", type=float, default=180, help="seconds between worker kills (default 180)")
    parser.add_argument("--load", type=float, default=0.5, help="fraction of measured capacity (default 0.5)")
    parser.add_argument("--rate", type=float, default=0, help="tuples/s to run at; skips the capacity measure")
    parser.add_argument("--calibrate", type=float, default=30, help="seconds of the capacity measure (default 30)")
    parser.add_argument("--workers", type=int, default=3, help="workers of the topology (default 3)")
    parser.add_argument("--pending", type=int, default=1000, help="topology.max.spout.pending (default 1000)")
    parser.add_argument("--sample", type=float, default=10, help="seconds between samples (default 10)")
    parser.add_argument("--zookeeper", help="HOST:PORT of a ZooKeeper to use instead of starting one")
    parser.add_argument("--out", type=Path, default=Path("soak"), help="writes OUT.csv and OUT.txt (default soak)")
    args = parser.parse_args(argv)
    for name in ("minutes", "kill_every", "load", "calibrate", "sample"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name.replace('_', '-')} must be > 0, got {getattr(args, name)}")
    if args.workers < 2:
        parser.error("--workers must be >= 2: one hosts the spout, the others are the ones killed")
    return args


def soak_topology(name: str, rate: float, seconds: float, status: Path, workers: int, pending: int) -> Topology:
    status.mkdir(parents=True)
    t = Topology(
        name, {"topology.workers": workers, "topology.max.spout.pending": pending, "topology.message.timeout.secs": 10}
    )
    numbers = t.spout("numbers", PacedNumbers, args=[rate, seconds, str(status)])
    t.bolt("sink", Sink, parallelism=workers * 2).shuffle(numbers)
    return t


class Soak:
    """One bench run on ``cluster``: submit, sample, kill, drain."""

    def __init__(self, cluster: DevCluster, tmp: Path, args: argparse.Namespace) -> None:
        self.cluster, self.tmp, self.args = cluster, tmp, args
        self.package = build_package([REPO / "bench" / "soaktopology.py"], tmp / "soak.zip")

    def submit(self, name: str, rate: float, seconds: float) -> tuple[str, Path]:
        status = self.tmp / name
        topology = soak_topology(name, rate, seconds, status, self.args.workers, self.args.pending)
        topology_id = submit_topology(self.cluster.conf, topology, package=self.package, zk=self.cluster.zk)
        wait_for(lambda: read_status(status).get("acked", 0) > 0, 120, f"{name} to ack its first tuples")
        return topology_id, status

    def kill(self, name: str) -> None:
        with self.cluster.client() as client:
            client.killTopologyWithOpts(name, storm.KillOptions(wait_secs=0))

    def capacity(self) -> float:
        """Acked tuples per second, unpaced, after a warm-up of a third of the measure."""
        topology_id, status = self.submit("calibrate", 0, 10**9)
        time.sleep(self.args.calibrate / 3)  # warm-up: a bench measures over wall time
        start, t0 = read_status(status)["acked"], time.monotonic()
        time.sleep(self.args.calibrate)
        rate = (read_status(status)["acked"] - start) / (time.monotonic() - t0)
        self.kill("calibrate")
        wait_for(lambda: not self.cluster.zk.exists(paths.topology(topology_id)), 60, "calibrate to be removed")
        return rate

    def processes(self, topology_id: str) -> dict[str, int]:
        """Label → pid of every daemon and of the topology's workers ("worker host:port")."""
        found = {name: p.pid for name, p in self.cluster.daemons.items()}
        if self.cluster.zookeeper is not None:
            found["zookeeper"] = self.cluster.zookeeper.pid
        for name in SUPERVISORS:
            for record in self.cluster.workers(name):
                if record.topology_id == topology_id:
                    found[f"worker {name[-1]}:{record.port}"] = record.pid
        return found

    def kill_a_worker(self, topology_id: str) -> str | None:
        """SIGKILL one worker that does not host the spout; its label, or None if none runs."""
        tasks = wait_for(lambda: self.cluster.zk.read(paths.tasks(topology_id), TopologyTasks), 60, "the task ids")
        spout_tasks = {t for t, info in tasks.tasks.items() if info.component == "numbers"}
        victims = [
            (name, record)
            for name in SUPERVISORS
            for record in self.cluster.workers(name)
            if record.topology_id == topology_id
            and not spout_tasks & set(record.tasks)
            and psutil.pid_exists(record.pid)
        ]
        if not victims:
            return None
        name, record = random.choice(victims)
        os.killpg(record.pid, signal.SIGKILL)
        return f"worker {name[-1]}:{record.port}"

    @staticmethod
    def drain(status: Path, timeout: float = 120) -> dict[str, int]:
        """The spout's counters once nothing is in flight (emission has stopped), or at ``timeout``."""
        deadline = time.monotonic() + timeout
        while (counters := read_status(status))["pending"] and time.monotonic() < deadline:
            time.sleep(0.5)  # the topology's doings, seen through its status file
        return counters

    def run(self) -> int:
        rate = self.args.rate or self.capacity() * self.args.load
        seconds = self.args.minutes * 60
        print(
            f"# soak: {rate:,.0f} tuples/s for {self.args.minutes:g} min, a worker killed every "
            f"{self.args.kill_every:g} s; {os.cpu_count()} cores",
            flush=True,
        )
        topology_id, status = self.submit("soak", rate, seconds)
        samples: list[dict[str, float]] = []
        kills: list[tuple[float, str]] = []
        start = time.monotonic()
        last_acked, last_t, next_kill = read_status(status).get("acked", 0), start, start + self.args.kill_every
        while (now := time.monotonic()) - start < seconds:
            time.sleep(min(self.args.sample, max(0.0, start + seconds - now)))
            now = time.monotonic()
            counters = read_status(status)
            row: dict[str, float] = {
                "t": round(now - start),
                "tuples/s": (counters["acked"] - last_acked) / (now - last_t),
            }
            last_acked, last_t = counters["acked"], now
            for label, pid in sorted(self.processes(topology_id).items()):
                try:
                    row[f"{label} MB"] = psutil.Process(pid).memory_info().rss / 2**20
                except psutil.Error:
                    pass  # gone between the listing and the read: a worker just killed
            samples.append(row)
            print(" ".join(f"{k}={v:,.0f}" for k, v in row.items()), flush=True)
            if now >= next_kill:
                victim = self.kill_a_worker(topology_id)
                if victim:
                    kills.append((round(now - start), victim))
                    print(f"t={now - start:,.0f} killed {victim}", flush=True)
                next_kill = now + self.args.kill_every
        totals = self.drain(status)
        report = table(samples, kills, totals, rate)
        print(report)
        self.args.out.with_suffix(".txt").write_text(report + "\n")
        write_csv(self.args.out.with_suffix(".csv"), samples)
        return 0 if totals["emitted"] - totals["acked"] == 0 else 1


def sparkline(values: Sequence[float]) -> str:
    """▁…█ between the series' own minimum and maximum.

    >>> sparkline([1, 2, 3, 4])
    '▁▃▆█'
    """
    low, high = min(values), max(values)
    span = (high - low) or 1
    return "".join(SPARK[round((v - low) / span * (len(SPARK) - 1))] for v in values)


def table(
    samples: Sequence[dict[str, float]], kills: Sequence[tuple[float, str]], totals: dict[str, int], rate: float
) -> str:
    """What the run did, as Markdown: lost messages, then a row per series (first, last, min, max, sparkline)."""
    lines = [
        f"paced at {rate:,.0f} tuples/s; emitted {totals['emitted']:,}, acked {totals['acked']:,}, "
        f"lost {totals['emitted'] - totals['acked']:,} (failed and replayed {totals['failed']:,}); "
        f"{len(kills)} worker kills at t = {', '.join(f'{t:g} s' for t, _ in kills) or '-'}",
        "",
        "| series | first | last | min | median | max | over time (its own min to max) |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for key in sorted({k for row in samples for k in row} - {"t"}, key=lambda k: (k != "tuples/s", k)):
        series = [row[key] for row in samples if key in row]
        digits = 0 if key == "tuples/s" else 1  # MB: a tenth shows whether memory stays flat
        cells = " | ".join(
            f"{v:,.{digits}f}" for v in (series[0], series[-1], min(series), statistics.median(series), max(series))
        )
        lines.append(f"| {key} | {cells} | {sparkline(series)} |")
    return "\n".join(lines)


def write_csv(path: Path, samples: Sequence[dict[str, float]]) -> None:
    columns = sorted({k for row in samples for k in row}, key=lambda k: (k != "t", k != "tuples/s", k))
    with open(path, "w", newline="") as out:
        writer = csv.DictWriter(out, columns)
        writer.writeheader()
        writer.writerows({k: round(v, 1) for k, v in row.items()} for row in samples)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    with dev_cluster(SUPERVISORS, args.zookeeper) as (cluster, tmp):
        return Soak(cluster, tmp, args).run()


if __name__ == "__main__":
    sys.exit(main())
