"""Topology throughput and latency, reported like Storm's storm-perf: tuples/s reaching the last bolt,
acks/s at the spouts, complete latency mean and p99.

Every configuration runs in fresh worker processes (``--workers`` of them), each a real
:class:`~worker.runtime.WorkerRuntime` listening on its own port, tasks split round robin per
component, talking msgpack batches over loopback TCP; spouts start once every worker is reachable.
Nothing else runs in them (no ZooKeeper, no nimbus: this measures the data path). After
``--warmup`` seconds the parent sums the workers' counters and CPU seconds over ``--seconds``.

Each configuration runs ``--repeat`` times, round by round (with ``--peers``, Bytewax and PySpark runs take their
turn in every round), so a busy stretch of the shared machine hits all of them alike. Rates are printed as median
(best) per wall-clock second and per CPU-second of the processes doing the work (cpu.py); the per-CPU-second
medians are the ones to compare, as wall-clock moves with whatever else the machine runs.

    python bench/bench_topology.py                        # the storm-perf matrix below, as a table
    python bench/bench_topology.py --peers                # also Bytewax and PySpark on the same workloads
    python bench/bench_topology.py --only const-null --ackers 1 --rate 80000 --workers 1
    python bench/bench_topology.py --config const-null --config wordcount,ackers=1,max-pending=1000 --load 0.1
    python bench/bench_topology.py --peers --config const-null --config const-null,api=batch --svg peers.svg

Not a test: numbers depend on the machine. docs/performance.md records today's; bench/JOURNAL.md the dated runs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import peers
from cpu import Run, Summary, calls_per_cpu_sec, paced_floor
from examples import perf
from plot import bar_chart_svg
from squall import Topology
from squall.core.config.keys import KEY_BY_NAME
from squall.core.config.loading import parse_override
from squall.dev.zookeeper import free_port
from worker.layout import Placement, TopologyLayout

#: The sink whose executed count is the throughput, per workload.
SINKS = {"const-null": "null", "const-id-null": "null", "wordcount": "count"}
#: Workloads whose spout takes a rate, so ``--load`` can run them below capacity.
RATED = ("const-null", "const-id-null")
GROUPINGS = ("local_or_shuffle", "shuffle")
APIS = ("tuple", "batch")


@dataclass(frozen=True)
class Config:
    workload: str  # const-null | const-id-null | wordcount
    ackers: int = 0  # 0: acking off; otherwise on, with one acker per worker
    grouping: str = "local_or_shuffle"
    workers: int = 1
    parallelism: int = 1  # spouts and each bolt
    rate: float | None = None  # const spouts: tuples/s in total
    max_pending: int | None = None
    conf: tuple[tuple[str, Any], ...] = ()  # topology conf overrides (--conf KEY=VALUE)
    api: str = "tuple"  # tuple: storm-perf's per-tuple components; batch: the same through the batch API

    @classmethod
    def from_json(cls, text: str) -> Config:
        spec = json.loads(text)
        return cls(**{**spec, "conf": tuple(map(tuple, spec["conf"]))})

    @property
    def label(self) -> str:
        parts = [
            self.workload,
            f"acking {'on' if self.ackers else 'off'}",
            self.grouping.replace("_", "-"),
            f"{self.workers} worker{'s' if self.workers > 1 else ''}",
        ]
        if self.parallelism > 1:
            parts.append(f"x{self.parallelism}")
        if self.rate:
            parts.append(f"rate {self.rate:,.0f}/s")
        if self.api != "tuple":
            parts.append(f"{self.api} API")
        if self.max_pending:
            parts.append(f"pending {self.max_pending}")
        parts += [f"{key}={value}" for key, value in self.conf]
        return ", ".join(parts)


#: What ``--config`` may set after the workload, and how each value is read.
KNOBS: dict[str, Callable[[str], Any]] = {
    "ackers": int,
    "grouping": str,
    "workers": int,
    "parallelism": int,
    "rate": float,
    "max_pending": int,
    "api": str,
}


def parse_config(text: str) -> Config:
    """``--config`` text → Config: ``wordcount,ackers=1,max-pending=1000`` is
    ``Config("wordcount", ackers=1, max_pending=1000)``."""
    workload, *pairs = text.split(",")
    if workload not in SINKS:
        raise argparse.ArgumentTypeError(f"{text!r}: the workload comes first, one of {', '.join(SINKS)}")
    knobs: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        name = key.strip().replace("-", "_")
        if not sep or name not in KNOBS:
            raise argparse.ArgumentTypeError(
                f"{pair!r} in {text!r}: expected KEY=VALUE, KEY one of {', '.join(k.replace('_', '-') for k in KNOBS)}"
            )
        try:
            knobs[name] = KNOBS[name](value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{pair!r} in {text!r}: not a number") from None
    if knobs.get("grouping", GROUPINGS[0]) not in GROUPINGS:
        raise argparse.ArgumentTypeError(f"{text!r}: grouping is one of {', '.join(GROUPINGS)}")
    if knobs.get("api", APIS[0]) not in APIS:
        raise argparse.ArgumentTypeError(f"{text!r}: api is one of {', '.join(APIS)}")
    return Config(workload, **knobs)


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
    Config("wordcount"),
    Config("wordcount", ackers=1, max_pending=1000),
    Config("wordcount", ackers=1, max_pending=1000, workers=2, parallelism=2),
]


def build(config: Config) -> Topology:
    conf: dict[str, Any] = dict(config.conf)
    if config.max_pending:
        conf["topology.max.spout.pending"] = config.max_pending
    ackers = config.workers if config.ackers else 0  # acking on: one acker per worker, Storm's default
    if config.workload == "wordcount":
        t = perf.wordcount_topology(
            api=config.api, workers=config.workers, spouts=config.parallelism, bolts=config.parallelism
        )
        return t.conf({"topology.acker.executors": ackers, **conf})
    return perf.const_null(
        grouping=config.grouping,
        ackers=ackers,
        workers=config.workers,
        spouts=config.parallelism,
        bolts=config.parallelism,
        id_bolt=config.workload == "const-id-null",
        rate=config.rate,
        conf=conf,
        api=config.api,
    )


def split_placement(layout: TopologyLayout, workers: int, index: int, ports: list[int]) -> Placement:
    """Each component's tasks dealt round robin over the workers; worker ``index``'s share is local."""
    owner = {}
    turn = 0
    for component in sorted(layout.component_tasks):
        for task in layout.component_tasks[component]:
            owner[task] = turn % workers
            turn += 1
    return Placement(
        frozenset(t for t, w in owner.items() if w == index),
        {t: ("127.0.0.1", ports[w]) for t, w in owner.items() if w != index},
    )


# -- the worker side ---------------------------------------------------------------------------------


def run_worker(config: Config, index: int, ports: list[int]) -> None:
    """One benchmark worker: run its share and print a JSON line of counters every second, with the CPU seconds
    this process (all its threads: tasks, senders, receivers) has used."""
    from squall.core.logs import configure_logging
    from squall.dev.local import compile_topology
    from worker.runtime import WorkerRuntime

    configure_logging("bench-worker", level="WARNING", stream=sys.stderr)
    layout, conf = compile_topology(build(config), {"squall.log.level": "WARNING"})
    # Each worker compiles the topology itself, and the id compile_topology gives holds the second it ran: the
    # workers of one run must agree on it (it is their handshake), so they take one derived from the run's ports.
    conf["topology.id"] = f"{layout.name}-1-{ports[0]}"
    layout = replace(layout, topology_id=conf["topology.id"])
    placement = split_placement(layout, config.workers, index, ports)
    runtime = WorkerRuntime(
        layout,
        placement,
        conf,
        report_error=lambda task, text: print(text, file=sys.stderr),
        listen=("127.0.0.1", ports[index]),
    ).start()
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
        print(
            json.dumps(
                {
                    "time": time.monotonic(),
                    "cpu": time.process_time(),
                    "executed": sum(e.stats.executed for e in executors.values() if e.component == sink),
                    "acked": sum(s.stats.acked for s in spouts),
                    "failed": sum(s.stats.failed for s in spouts),
                    "latencies": latencies,
                    "failure": repr(runtime.failure) if runtime.failure else None,
                }
            ),
            flush=True,
        )
    runtime.stop()


# -- the parent side ---------------------------------------------------------------------------------


@dataclass
class Measured:
    """One run: items and CPU seconds (the workers', summed) over the window, acks/s, failures, latency samples."""

    run: Run
    acks_per_sec: float = 0.0
    failed: int = 0
    latencies_ms: list[float] = field(default_factory=list)


def measure(config: Config, seconds: float, warmup: float) -> Measured:
    ports = [free_port() for _ in range(config.workers)]
    spec = json.dumps(asdict(config))
    children = [
        subprocess.Popen(
            [sys.executable, __file__, "--worker", spec, str(i), ",".join(map(str, ports))],
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(config.workers)
    ]
    lines: list[list[dict[str, Any]]] = [[] for _ in children]
    readers = [
        threading.Thread(target=lambda c=c, out=out: out.extend(map(json.loads, c.stdout)), daemon=True)
        for c, out in zip(children, lines)
    ]
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
    run = Run(
        items=sum(e["executed"] - s["executed"] for s, e in zip(start, end)),
        wall=span,
        cpu=sum(e["cpu"] - s["cpu"] for s, e in zip(start, end)),
    )
    return Measured(
        run,
        acks_per_sec=sum(e["acked"] - s["acked"] for s, e in zip(start, end)) / span,
        failed=sum(e["failed"] - s["failed"] for s, e in zip(start, end)),
        latencies_ms=[1000 * x for line in window for x in line["latencies"]],
    )


def _latest(out: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    deadline = time.monotonic() + 30
    while not out:
        if time.monotonic() > deadline:
            raise RuntimeError("a benchmark worker reported nothing: did it start?")
        time.sleep(0.1)
    return out[-1]


@dataclass(frozen=True)
class Job:
    """Something measured once per round: a Squall configuration (``config``) or a ``peer`` on ``workload``."""

    label: str
    workload: str
    run: Callable[[], Measured]
    config: Config | None = None  # None: a peer
    peer: str = ""

    @property
    def acking(self) -> bool:
        return self.config is not None and self.config.ackers > 0


def squall_job(config: Config, seconds: float, warmup: float) -> Job:
    return Job(config.label, config.workload, lambda: measure(config, seconds, warmup), config)


def peer_jobs(seconds: float) -> list[Job]:
    """Bytewax and Spark on const→null and word count, each run about ``seconds`` long (word counts checked exact)."""

    def counted(run_and_counts: tuple[Run, dict[str, int]]) -> Measured:
        run, counts = run_and_counts
        if peers.whole_passes(counts) is None:
            raise RuntimeError(f"a peer's word counts are wrong: {counts}")
        return Measured(run)

    bytewax, spark = "Bytewax 0.21.1, 1 worker", "PySpark Structured Streaming, local[2]"
    tuples, passes = round(seconds * peers.BYTEWAX_ITEMS_PER_SEC), round(seconds * peers.BYTEWAX_PASSES_PER_SEC)
    return [
        Job(f"{bytewax}: const-null", "const-null", lambda: Measured(peers.bytewax_const_null(tuples)), peer=bytewax),
        Job(f"{bytewax}: wordcount", "wordcount", lambda: counted(peers.bytewax_word_count(passes)), peer=bytewax),
        Job(f"{spark}: const-null", "const-null", lambda: Measured(peers.spark_const_null(seconds)), peer=spark),
        Job(f"{spark}: wordcount", "wordcount", lambda: counted(peers.spark_word_count(seconds)), peer=spark),
    ]


def floor_job(args: argparse.Namespace) -> Job:
    """The cheapest paced loop at ``--load`` of its own capacity, with the spout wait the workers have
    (cpu.paced_floor): run in the same rounds, it says what the machine allows at that moment."""
    key = "topology.sleep.spout.wait.strategy.time.ms"
    wait_ms = dict(args.conf).get(key, KEY_BY_NAME[key].default)
    return Job(
        f"bare Python loop at {args.load:g} x its capacity, {wait_ms} ms wait (this machine's floor)",
        "floor",
        lambda: Measured(paced_floor(args.load, wait_ms / 1000, args.seconds)),
    )


def interleave(jobs: list[Job], repeat: int) -> list[list[Measured]]:
    """Every job ``repeat`` times, round by round, each round starting one job later; each run is logged on stderr."""
    results: list[list[Measured]] = [[] for _ in jobs]
    for r in range(repeat):
        for i in [(r + k) % len(jobs) for k in range(len(jobs))]:
            results[i].append(m := jobs[i].run())
            failed = f", {m.failed:,} FAILED (timed out or failed: acks/s counts only the rest)" if m.failed else ""
            print(
                f"[round {r + 1}/{repeat}] {jobs[i].label}: {m.run.per_sec:,.0f}/s, "
                f"{m.run.per_cpu_sec:,.0f} per CPU-s, {m.run.cores:.2f} cores{failed}",
                file=sys.stderr,
                flush=True,
            )
    return results


TABLE = (
    "| topology | tuples/s median (best) | per CPU-s median (best) | cores | acks/s | complete latency mean ms "
    "| p99 ms |\n|---|---:|---:|---:|---:|---:|---:|"
)


def row(job: Job, runs: list[Measured]) -> str:
    """Rates as median (best); cores, acks/s and latencies as medians over the runs."""
    s = Summary.of([m.run for m in runs])
    acks = f"{statistics.median(m.acks_per_sec for m in runs):,.0f}" if job.acking else "-"
    sampled = [sorted(m.latencies_ms) for m in runs if m.latencies_ms]
    mean = f"{statistics.median(sum(x) / len(x) for x in sampled):.2f}" if sampled else "-"
    p99 = f"{statistics.median(x[int(len(x) * 0.99)] for x in sampled):.2f}" if sampled else "-"
    return f"| {job.label} | {s.per_sec_cell} | {s.per_cpu_sec_cell} | {s.cores:.2f} | {acks} | {mean} | {p99} |"


def ratio_rows(jobs: list[Job], results: list[list[Measured]]) -> list[str]:
    """Each 1-worker Squall configuration against each peer on its workload: ratios of the medians."""
    summary = [Summary.of([m.run for m in runs]) for runs in results]
    peer_runs = [(job, s) for job, s in zip(jobs, summary) if job.config is None]
    return [
        f"| {job.label} | {peer.peer} | {s.per_cpu_sec:,.0f} | {p.per_cpu_sec:,.0f} "
        f"| {s.per_cpu_sec / p.per_cpu_sec:.2f} | {s.per_sec / p.per_sec:.2f} |"
        for job, s in zip(jobs, summary)
        if job.config and job.config.workers == 1 and not job.config.rate
        for peer, p in peer_runs
        if peer.workload == job.workload
    ]


def capacity(config: Config, runs: list[Measured]) -> float:
    """Tuples/s the configuration would sustain with a whole core per worker (Python's GIL keeps a worker near one
    busy core): its median per CPU-second x workers. A wall-clock median would shrink with other jobs' load."""
    return Summary.of([m.run for m in runs]).per_cpu_sec * config.workers


def machine() -> str:
    return (
        f"{platform.machine()}, nproc {len(os.sched_getaffinity(0))}, load average "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}, {calls_per_cpu_sec() / 1e6:.1f}M Python calls per "
        f"CPU-s, Python {platform.python_version()}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--worker", nargs=3, metavar=("SPEC", "INDEX", "PORTS"), help=argparse.SUPPRESS)
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--only", choices=sorted(SINKS), help="one workload, set by the options below, not the matrix")
    which.add_argument(
        "--config",
        type=parse_config,
        action="append",
        metavar="WORKLOAD[,KEY=VALUE...]",
        help="a configuration to run instead of the matrix (repeatable), e.g. wordcount,ackers=1,"
        "max-pending=1000 or const-null,workers=2,parallelism=2,grouping=shuffle",
    )
    parser.add_argument("--ackers", type=int, default=0)
    parser.add_argument("--grouping", default="local_or_shuffle", choices=GROUPINGS)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--parallelism", type=int, default=1)
    parser.add_argument("--rate", type=float)
    parser.add_argument(
        "--api",
        default="tuple",
        choices=APIS,
        help="components: storm-perf's per-tuple ones, or the same through the batch API",
    )
    parser.add_argument("--max-pending", type=int)
    parser.add_argument(
        "--conf",
        type=parse_override,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="topology conf for every configuration, e.g. topology.transfer.batch.size=1000",
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="measured seconds per run")
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--repeat", type=int, default=3, help="rounds: every configuration (and peer) once per round")
    parser.add_argument(
        "--peers", action="store_true", help="also run Bytewax and PySpark in every round (needs '.[bench]')"
    )
    parser.add_argument(
        "--load",
        type=float,
        metavar="F",
        help="then rerun each const configuration at F x its capacity (per CPU-s x workers): cores used, latency",
    )
    parser.add_argument("--svg", metavar="FILE", help="also draw the per-CPU-s medians as a bar chart (bench/plot.py)")
    args = parser.parse_args()
    if args.worker:
        spec, index, ports = args.worker
        run_worker(Config.from_json(spec), int(index), [int(p) for p in ports.split(",")])
        return
    configs = args.config or (
        MATRIX
        if args.only is None
        else [
            Config(
                args.only,
                args.ackers,
                args.grouping,
                args.workers,
                args.parallelism,
                args.rate,
                args.max_pending,
                api=args.api,
            )
        ]
    )
    configs = [replace(c, conf=tuple(args.conf)) for c in configs]
    jobs = [squall_job(c, args.seconds, args.warmup) for c in configs]
    if args.peers:
        jobs += peer_jobs(args.seconds)
        print("warming Spark's JVM (its JIT state carries over to every later Spark run)", file=sys.stderr, flush=True)
        peers.warm_spark()
    print(
        f"# {machine()}; median (best) of {args.repeat} runs of {args.seconds:g} s after {args.warmup:g} s "
        f"warm-up, round by round\n# command: python {shlex.join(sys.argv)}\n# per CPU-s: tuples per CPU-second "
        "of the processes doing the work (Squall: its workers; Bytewax: its process; Spark: JVM + driver, after "
        "warm-up); cores: their CPU-seconds per second",
        flush=True,
    )
    results = interleave(jobs, args.repeat)
    print(TABLE)
    for job, runs in zip(jobs, results):
        print(row(job, runs))
    if args.peers:
        print(
            "\n| Squall topology | peer | Squall per CPU-s | peer per CPU-s | Squall / peer per CPU-s "
            "| Squall / peer wall |\n|---|---|---:|---:|---:|---:|"
        )
        print("\n".join(ratio_rows(jobs, results)))
    if args.svg:
        bars = [(job.label, Summary.of([m.run for m in runs]).per_cpu_sec) for job, runs in zip(jobs, results)]
        unit = f"tuples per CPU-second, median of {args.repeat} interleaved rounds"
        with open(args.svg, "w") as out:
            out.write(bar_chart_svg(bars, "Throughput per CPU-second", unit))
    if args.load:
        loaded = [
            replace(job.config, rate=round(args.load * capacity(job.config, runs)))
            for job, runs in zip(jobs, results)
            if job.config and job.config.workload in RATED and not job.config.rate
        ]
        load_jobs = [squall_job(c, args.seconds, args.warmup) for c in loaded] + [floor_job(args)]
        load_results = interleave(load_jobs, args.repeat)
        print(
            f"\nAt {args.load:g} x capacity (median per CPU-s above x workers: the rate on a core per worker, "
            f"whatever else the machine runs):\n{TABLE}"
        )
        for job, runs in zip(load_jobs, load_results):
            print(row(job, runs))
    print(f"# at the end: {machine()}")


if __name__ == "__main__":
    main()
