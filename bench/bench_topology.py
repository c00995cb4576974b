"""Topology throughput and latency, reported like Storm's storm-perf: tuples/s reaching the last bolt,
acks/s at the spouts, complete latency mean and p99.

Every configuration runs in fresh worker processes (``--workers`` of them), each a real
:class:`~worker.runtime.WorkerRuntime` listening on its own port, tasks split round robin per
component, talking msgpack batches over loopback TCP; spouts start once every worker is reachable.
Nothing else runs in them (no ZooKeeper, no nimbus: this measures the data path). After
``--warmup`` seconds the parent sums the workers' counters over ``--seconds``.

    python bench/bench_topology.py                        # the storm-perf matrix below, as a table
    python bench/bench_topology.py --peers                # also Bytewax and PySpark on the same workloads
    python bench/bench_topology.py --only const-null --ackers 1 --rate 80000 --workers 1

Not a test: numbers depend on the machine. README's Performance section records them.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from examples import perf, wordcount  # noqa: E402
from squall.devzk import free_port  # noqa: E402
from squall.dsl import Topology  # noqa: E402
from worker.layout import Placement, TopologyLayout  # noqa: E402

#: The sink whose executed count is the throughput, per workload.
SINKS = {"const-null": "null", "const-id-null": "null", "wordcount": "count"}


@dataclass(frozen=True)
class Config:
    workload: str  # const-null | const-id-null | wordcount
    ackers: int = 0  # 0: acking off; otherwise on, with one acker per worker
    grouping: str = "local_or_shuffle"
    workers: int = 1
    parallelism: int = 1  # spouts and each bolt
    rate: float | None = None  # const spouts: tuples/s in total
    max_pending: int | None = None

    @property
    def label(self) -> str:
        parts = [self.workload, f"acking {'on' if self.ackers else 'off'}", self.grouping.replace("_", "-"),
                 f"{self.workers} worker{'s' if self.workers > 1 else ''}"]
        if self.parallelism > 1:
            parts.append(f"x{self.parallelism}")
        if self.rate:
            parts.append(f"rate {self.rate:,.0f}/s")
        if self.max_pending:
            parts.append(f"pending {self.max_pending}")
        return ", ".join(parts)


#: storm-perf's topologies in the variants the issue asks for.
MATRIX = [
    Config("const-null"),
    Config("const-null", grouping="shuffle"),
    Config("const-null", ackers=1),
    Config("const-null", ackers=1, max_pending=2000),
    Config("const-null", ackers=1, rate=50_000, max_pending=2000),  # below saturation: latency, not queueing
    Config("const-null", workers=2, parallelism=2),
    Config("const-null", workers=2, parallelism=2, grouping="shuffle"),
    Config("const-null", workers=2, parallelism=2, ackers=1, max_pending=2000),
    Config("const-id-null"),
    Config("const-id-null", ackers=1, max_pending=2000),
    Config("wordcount", ackers=1, max_pending=1000),
    Config("wordcount", ackers=1, max_pending=1000, workers=2, parallelism=2),
]


def build(config: Config) -> Topology:
    conf: dict[str, Any] = {}
    if config.max_pending:
        conf["topology.max.spout.pending"] = config.max_pending
    ackers = config.workers if config.ackers else 0  # acking on: one acker per worker, Storm's default
    if config.workload == "wordcount":
        t = wordcount.topology(rounds=None, workers=config.workers, spouts=config.parallelism,
                               bolts=config.parallelism)
        return t.conf({"topology.acker.executors": ackers, **conf})
    return perf.const_null(grouping=config.grouping, ackers=ackers, workers=config.workers,
                           spouts=config.parallelism, bolts=config.parallelism,
                           id_bolt=config.workload == "const-id-null", rate=config.rate, conf=conf)


def split_placement(layout: TopologyLayout, workers: int, index: int, ports: list[int]) -> Placement:
    """Each component's tasks dealt round robin over the workers; worker ``index``'s share is local."""
    owner = {}
    turn = 0
    for component in sorted(layout.component_tasks):
        for task in layout.component_tasks[component]:
            owner[task] = turn % workers
            turn += 1
    return Placement(frozenset(t for t, w in owner.items() if w == index),
                     {t: ("127.0.0.1", ports[w]) for t, w in owner.items() if w != index})


# -- the worker side ---------------------------------------------------------------------------------


def run_worker(config: Config, index: int, ports: list[int]) -> None:
    """One benchmark worker: run its share and print a JSON line of counters every second."""
    from squall.logs import configure_logging
    from worker.local import compile_topology
    from worker.runtime import WorkerRuntime

    configure_logging("bench-worker", level="WARNING", stream=sys.stderr)
    layout, conf = compile_topology(build(config), {"squall.log.level": "WARNING"})
    placement = split_placement(layout, config.workers, index, ports)
    runtime = WorkerRuntime(layout, placement, conf, report_error=lambda task, text: print(text, file=sys.stderr),
                            listen=("127.0.0.1", ports[index])).start()
    stop = threading.Event()
    runtime.wait_for_peers(30, stop)
    runtime.set_active(True)
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    sink = SINKS[config.workload]
    executors = runtime.executors
    while not stop.wait(1.0):
        spouts = [e for e in executors.values() if hasattr(e, "pending")]
        latencies = []
        for spout in spouts:
            samples = spout.stats.latencies
            latencies += list(samples)
            samples.clear()
        print(json.dumps({
            "time": time.monotonic(),
            "executed": sum(e.stats.executed for e in executors.values() if e.component == sink),
            "acked": sum(s.stats.acked for s in spouts), "failed": sum(s.stats.failed for s in spouts),
            "latencies": latencies, "failure": repr(runtime.failure) if runtime.failure else None,
        }), flush=True)
    runtime.stop()


# -- the parent side ---------------------------------------------------------------------------------


@dataclass
class Result:
    config: Config
    tuples_per_sec: float
    acks_per_sec: float
    failed: int
    latencies_ms: list[float] = field(default_factory=list)

    def row(self) -> str:
        mean = f"{sum(self.latencies_ms) / len(self.latencies_ms):.2f}" if self.latencies_ms else "-"
        p99 = f"{sorted(self.latencies_ms)[int(len(self.latencies_ms) * 0.99)]:.2f}" if self.latencies_ms else "-"
        acks = f"{self.acks_per_sec:,.0f}" if self.config.ackers else "-"
        return f"| {self.config.label} | {self.tuples_per_sec:,.0f} | {acks} | {mean} | {p99} |"


def measure(config: Config, seconds: float, warmup: float) -> Result:
    ports = [free_port() for _ in range(config.workers)]
    spec = json.dumps(config.__dict__)
    children = [subprocess.Popen([sys.executable, __file__, "--worker", spec, str(i), ",".join(map(str, ports))],
                                 stdout=subprocess.PIPE, text=True) for i in range(config.workers)]
    lines: list[list[dict[str, Any]]] = [[] for _ in children]
    readers = [threading.Thread(target=lambda c=c, out=out: out.extend(map(json.loads, c.stdout)), daemon=True)
               for c, out in zip(children, lines)]
    for reader in readers:
        reader.start()
    try:
        time.sleep(warmup)
        start = [_latest(out) for out in lines]
        time.sleep(seconds)
        end = [_latest(out) for out in lines]
    finally:
        for child in children:
            child.send_signal(signal.SIGTERM)
        for child in children:
            child.wait(30)
    failures = [e["failure"] for e in end if e["failure"]]
    if failures:
        raise RuntimeError(f"{config.label}: a worker failed: {failures}")
    span = max(e["time"] for e in end) - min(s["time"] for s in start)
    window = [line for out, s in zip(lines, start) for line in out if line["time"] > s["time"]]
    return Result(config,
                  tuples_per_sec=sum(e["executed"] - s["executed"] for s, e in zip(start, end)) / span,
                  acks_per_sec=sum(e["acked"] - s["acked"] for s, e in zip(start, end)) / span,
                  failed=sum(e["failed"] - s["failed"] for s, e in zip(start, end)),
                  latencies_ms=[1000 * x for line in window for x in line["latencies"]])


def _latest(out: list[Mapping[str, Any]]) -> Mapping[str, Any]:
    deadline = time.monotonic() + 30
    while not out:
        if time.monotonic() > deadline:
            raise RuntimeError("a benchmark worker reported nothing: did it start?")
        time.sleep(0.1)
    return out[-1]


def peer_rows(seconds: float, results: list[Result]) -> list[str]:
    """Bytewax and Spark on const→null and word count, and Squall's ratio to each."""
    import peers

    best = {w: max((r.tuples_per_sec for r in results if r.config.workload == w and r.config.workers == 1),
                   default=0.0) for w in ("const-null", "wordcount")}
    measured = [("Bytewax", "const-null", peers.bytewax_const_null()),
                ("Bytewax", "wordcount", peers.bytewax_word_count()[0]),
                ("PySpark Structured Streaming", "const-null", peers.spark_const_null(seconds)),
                ("PySpark Structured Streaming", "wordcount", peers.spark_word_count(seconds)[0])]
    return [f"| {peer} | {w} | {rate:,.0f} | {best[w]:,.0f} | {best[w] / rate:.2f} |" for peer, w, rate in measured]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--worker", nargs=3, metavar=("SPEC", "INDEX", "PORTS"), help=argparse.SUPPRESS)
    parser.add_argument("--only", choices=sorted(SINKS), help="one workload instead of the matrix")
    parser.add_argument("--ackers", type=int, default=0)
    parser.add_argument("--grouping", default="local_or_shuffle", choices=["local_or_shuffle", "shuffle"])
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--parallelism", type=int, default=1)
    parser.add_argument("--rate", type=float)
    parser.add_argument("--max-pending", type=int)
    parser.add_argument("--seconds", type=float, default=10.0, help="measured seconds per configuration")
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--repeat", type=int, default=3,
                        help="runs per configuration; the best is reported (a shared VM's steal time only slows runs)")
    parser.add_argument("--peers", action="store_true", help="also run Bytewax and PySpark (needs '.[bench]')")
    args = parser.parse_args()
    if args.worker:
        spec, index, ports = args.worker
        run_worker(Config(**json.loads(spec)), int(index), [int(p) for p in ports.split(",")])
        return
    configs = MATRIX if args.only is None else [
        Config(args.only, args.ackers, args.grouping, args.workers, args.parallelism, args.rate, args.max_pending)]
    print(f"# {platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}; best of {args.repeat} "
          f"runs of {args.seconds:g} s measured after {args.warmup:g} s warm-up")
    print("| topology | tuples/s | acks/s | complete latency mean ms | p99 ms |\n|---|---:|---:|---:|---:|")
    results = []
    for config in configs:
        runs = [measure(config, args.seconds, args.warmup) for _ in range(args.repeat)]
        results.append(max(runs, key=lambda r: r.tuples_per_sec))
        print(results[-1].row(), flush=True)
    if args.peers:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        print("\n| peer | workload | peer rate | Squall (1 worker) | Squall / peer |\n|---|---|---:|---:|---:|")
        for row in peer_rows(args.seconds, results):
            print(row, flush=True)


if __name__ == "__main__":
    main()
