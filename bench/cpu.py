"""CPU time of the processes doing a benchmark's work, and repeated runs summarised as median and best.

Why: this machine is shared (other jobs, hypervisor steal), so the same run's wall-clock rate moves 2-4x
between runs. Items per CPU-second of the processes that did the work move much less, though not nothing: the
VM's CPU itself does 12-19M trivial Python calls per CPU-second from one minute to the next
(:func:`calls_per_cpu_sec`). So benches report both rates, and compare systems on per-CPU-second medians of runs
interleaved within one invocation.

    >>> start = Sample.take()               # this process, all threads (Bytewax runs its workers as threads)
    >>> items = sum(1 for _ in range(100_000))
    >>> run = start.run_to(Sample.take(), items)
    >>> run.items, run.cores <= 1.5
    (100000, True)
    >>> print(Summary.of([Run(10, 1.0, 0.5), Run(30, 1.0, 1.0), Run(20, 2.0, 1.0)]).per_cpu_sec_cell)
    20 (30)
"""

from __future__ import annotations

import _thread
import statistics
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


def cpu_seconds(pid: int | None = None) -> float:
    """User + system CPU seconds used so far: by this process (all its threads) when ``pid`` is None, else by
    process ``pid`` and its live descendants (a launcher script may sit between us and the JVM doing the work)."""
    if pid is None:
        return time.process_time()
    try:
        import psutil
    except ImportError as exc:
        raise RuntimeError("psutil is not installed: pip install -e '.[bench]'") from exc
    process = psutil.Process(pid)
    total = 0.0
    for p in [process, *process.children(recursive=True)]:
        try:
            times = p.cpu_times()
        except psutil.NoSuchProcess:  # a descendant that ended between listing and reading
            continue
        total += times.user + times.system
    return total


def calls_per_cpu_sec(calls: int = 2_000_000) -> float:
    """Trivial Python calls this process makes per CPU-second: the machine's speed at the moment. On a shared VM it
    swings (12-19M within a minute here), and per-CPU-second rates swing with it; benches print it beside them."""

    def call(x: int) -> int:
        return x

    start = time.process_time()
    for i in range(calls):
        call(i)
    return calls / (time.process_time() - start)


def paced_floor(fraction: float, wait: float, seconds: float) -> Run:
    """The cheapest worker there is, paced at ``fraction`` of its own capacity with a ``wait``-second sleep after each
    round: what any worker at that fraction costs on this machine at least, printed beside ``--load`` runs.

    Why: a worker at 10 % of its capacity should use at most 15 % of a core. Beyond its tuples such a
    worker pays per wake-up (Storm's spout wait sleeps 1 ms once a spout runs dry: ~1,000 wake-ups a second), and on
    a VM a wake-up's price is the hypervisor's: 28-100 µs of CPU here in one session, 2-4x less in others. This loop
    (one spout call and one bolt call per row, rounds of up to 1,600 rows as a spout step) first runs saturated for
    a second to find its capacity, then paced. When it is over a target, so is every worker at that moment.

        >>> paced_floor(fraction=0.1, wait=0.001, seconds=0.3).cores < 1
        True
    """
    capacity = _paced_loop(float("inf"), 0.0, 1.0).per_cpu_sec
    return _paced_loop(fraction * capacity, wait, seconds)


def _paced_loop(rate: float, wait: float, seconds: float) -> Run:
    rows: list[tuple[str]] = []
    value = ("some data",)

    def next_tuple() -> None:
        rows.append(value)

    def execute(values: tuple[str]) -> None:
        pass

    lock = _thread.allocate_lock()
    lock.acquire()  # never released: a timed acquire sleeps as a task thread's Wake.wait does
    emitted = 0
    start = time.monotonic()
    cpu = time.thread_time()
    while (now := time.monotonic()) < start + seconds:
        due = emitted + 1600 if rate == float("inf") else min(int((now - start) * rate), emitted + 1600)
        while emitted < due:
            next_tuple()
            emitted += 1
        taken, rows = rows, []  # next_tuple appends to the new list: ``rows`` is a cell the closure shares
        for values in taken:
            execute(values)
        if wait:
            lock.acquire(True, wait)
    return Run(emitted, time.monotonic() - start, time.thread_time() - cpu)


@dataclass(frozen=True)
class Run:
    """One measured run: ``items`` processed in ``wall`` seconds, using ``cpu`` CPU-seconds in all.

    >>> Run(items=1_000, wall=2.0, cpu=1.0).per_sec, Run(1_000, 2.0, 1.0).per_cpu_sec, Run(1_000, 2.0, 1.0).cores
    (500.0, 1000.0, 0.5)
    """

    items: float
    wall: float
    cpu: float

    @property
    def per_sec(self) -> float:
        return self.items / self.wall

    @property
    def per_cpu_sec(self) -> float:
        return self.items / self.cpu if self.cpu > 0 else float("nan")

    @property
    def cores(self) -> float:
        """Cores busy on average: 1.0 is one core the whole time."""
        return self.cpu / self.wall


@dataclass(frozen=True)
class Sample:
    """Wall clock and CPU seconds at one instant; two samples make a :class:`Run`."""

    wall: float
    cpu: float

    @classmethod
    def take(cls, pids: Iterable[int] = ()) -> Sample:
        """Now: this process's CPU plus that of ``pids`` (and their descendants)."""
        return cls(time.perf_counter(), cpu_seconds() + sum(cpu_seconds(pid) for pid in pids))

    def run_to(self, end: Sample, items: float) -> Run:
        return Run(items, end.wall - self.wall, end.cpu - self.cpu)


@dataclass(frozen=True)
class Summary:
    """Median and best (highest) of repeated runs, for the wall-clock rate and the per-CPU-second rate;
    ``cores`` is the median of the runs' cores."""

    per_sec: float
    best_per_sec: float
    per_cpu_sec: float
    best_per_cpu_sec: float
    cores: float

    @classmethod
    def of(cls, runs: Sequence[Run]) -> Summary:
        if not runs:
            raise ValueError("no runs to summarise")
        return cls(
            statistics.median(r.per_sec for r in runs),
            max(r.per_sec for r in runs),
            statistics.median(r.per_cpu_sec for r in runs),
            max(r.per_cpu_sec for r in runs),
            statistics.median(r.cores for r in runs),
        )

    @property
    def per_sec_cell(self) -> str:
        return f"{self.per_sec:,.0f} ({self.best_per_sec:,.0f})"

    @property
    def per_cpu_sec_cell(self) -> str:
        return f"{self.per_cpu_sec:,.0f} ({self.best_per_cpu_sec:,.0f})"
