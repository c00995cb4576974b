"""``storm monitor``: a running topology's throughput, polled from the stats nimbus already has.

Every task's counters travel with its heartbeat to nimbus, and ``getTopologyInfo`` returns them per
executor as Storm's ``ExecutorStats`` (window ``:all-time``: counts since the task started). One
monitor round is one such call; a rate is the growth of the counts between two rounds divided by the
time between them. :func:`snapshot`, :func:`component_rows` and :func:`stream_row` are pure and tested
on plain values; :func:`monitor` is the loop around them.

Two views:

* ``storm monitor NAME -m COMPONENT [-s STREAM] [-w emitted|transferred]`` is Storm's: a header, then
  one tab-separated line per interval — topology, component, parallelism, stream, milliseconds since
  the previous round, tuples counted in between, throughput in thousands of tuples per second. As in
  Storm, the first line counts everything since the tasks started and shows throughput 0.0.
* ``storm monitor NAME`` is Squall's (Storm only lists the components there): a table of every user
  component — tasks, emitted, acked and failed since the tasks started, and their rates per second
  over the last interval — redrawn every interval. System components and streams (``__*``) are left out.

``-n N`` stops after N rounds (scripts, tests); otherwise Ctrl-C ends it.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from squall.cli.options import positive
from squall.core.names import is_system
from squall.core.nimbus_client import nimbus_client
from squall.core.stats import ALL_TIME

WATCHES = ("emitted", "transferred")
#: Storm's header for ``-m``; the watched count's name goes in the middle.
STREAM_HEADER = "topology\tcomponent\tparallelism\tstream\ttime-diff ms\t{watch}\tthroughput (Kt/s)"
TABLE_ROW = "{:<20} {:>5} {:>12} {:>12} {:>9} {:>11} {:>11} {:>9}"
TABLE_HEADER = TABLE_ROW.format("Component", "Tasks", "Emitted", "Acked", "Failed", "Emitted/s", "Acked/s", "Failed/s")


class MonitorError(ValueError):
    """What the operator asked for is not in the topology (a component or stream name)."""


@dataclass(frozen=True)
class TaskCounts:
    """One task's counters since it started, as its latest heartbeat reported them."""

    component: str
    spout: bool
    emitted: Mapping[str, int]  # output stream → count
    transferred: Mapping[str, int]
    acked: int  # spout: trees completed; bolt: inputs acked (user streams only)
    failed: int


@dataclass(frozen=True)
class Snapshot:
    """One round: when it was taken (monotonic seconds) and the counts of every task that has reported.

    ``parallelism`` counts every user component's tasks, including those with no stats yet.

    >>> Snapshot(0.0, "wc", {"split": 1}, {3: TaskCounts("split", False, {"default": 9}, {}, 3, 0)}).time_secs
    0.0
    """

    time_secs: float
    topology: str
    parallelism: Mapping[str, int]
    tasks: Mapping[int, TaskCounts]


@dataclass(frozen=True)
class ComponentRow:
    """A line of the table: totals since the tasks started, rates per second (None on the first round)."""

    component: str
    tasks: int
    emitted: int
    acked: int
    failed: int
    emitted_rate: float | None = None
    acked_rate: float | None = None
    failed_rate: float | None = None


@dataclass(frozen=True)
class StreamRow:
    """A line of Storm's ``-m`` view; ``throughput`` is tuples per millisecond (= thousands per second)."""

    topology: str
    component: str
    parallelism: int
    stream: str
    time_diff_ms: int
    count: int
    throughput: float

    def __str__(self) -> str:
        return "\t".join(
            map(
                str,
                (
                    self.topology,
                    self.component,
                    self.parallelism,
                    self.stream,
                    self.time_diff_ms,
                    self.count,
                    self.throughput,
                ),
            )
        )


def _user_input(key: Any) -> bool:
    """A bolt input (``GlobalStreamId``) or spout stream (``str``) that is not a system one (ticks, acks)."""
    if isinstance(key, str):
        return not is_system(key)
    return not (is_system(key.componentId) or is_system(key.streamId))


def _all_time(windows: Mapping[str, Mapping[Any, int]] | None) -> Mapping[Any, int]:
    return (windows or {}).get(ALL_TIME) or {}


def snapshot(info: Any, time_secs: float) -> Snapshot:
    """The user components' counts out of a ``TopologyInfo`` (one executor per task in Squall)."""
    parallelism: dict[str, int] = {}
    tasks = {}
    for executor in info.executors:
        component = executor.component_id
        if is_system(component):
            continue
        parallelism[component] = parallelism.get(component, 0) + 1
        stats = executor.stats
        if stats is None or stats.specific is None:
            continue  # no heartbeat with stats yet
        specific = stats.specific.spout or stats.specific.bolt
        tasks[executor.executor_info.task_start] = TaskCounts(
            component,
            stats.specific.spout is not None,
            dict(_all_time(stats.emitted)),
            dict(_all_time(stats.transferred)),
            sum(n for k, n in _all_time(specific.acked).items() if _user_input(k)),
            sum(n for k, n in _all_time(specific.failed).items() if _user_input(k)),
        )
    return Snapshot(time_secs, info.name, parallelism, tasks)


def _growth(before: int | None, after: int) -> int:
    """How much a task's counter grew; a task new since the last round, or restarted, counts from zero."""
    return after - before if before is not None and after >= before else after


def _rate(grown: int, secs: float) -> float:
    return grown / secs if secs > 0 else 0.0


def _emitted(counts: TaskCounts) -> int:
    return sum(n for stream, n in counts.emitted.items() if not is_system(stream))


#: The table's counted columns: emitted (user streams), acked, failed.
_COLUMNS: tuple[Callable[[TaskCounts], int], ...] = (_emitted, attrgetter("acked"), attrgetter("failed"))


def component_rows(before: Snapshot | None, after: Snapshot) -> list[ComponentRow]:
    """The table: spouts first, then bolts, each by name; rates only when there is an earlier round.

    >>> then = Snapshot(2.0, "wc", {"split": 1}, {3: TaskCounts("split", False, {"default": 10}, {}, 10, 1)})
    >>> now = Snapshot(4.0, "wc", {"split": 1}, {3: TaskCounts("split", False, {"default": 90}, {}, 30, 1)})
    >>> row = component_rows(then, now)[0]
    >>> row.component, row.emitted, row.acked, row.failed, row.emitted_rate, row.acked_rate, row.failed_rate
    ('split', 90, 30, 1, 40.0, 10.0, 0.0)
    """
    spouts = {t.component for t in after.tasks.values() if t.spout}
    rows = []
    for component in sorted(after.parallelism, key=lambda c: (c not in spouts, c)):
        mine = {task: counts for task, counts in after.tasks.items() if counts.component == component}
        totals = [sum(column(c) for c in mine.values()) for column in _COLUMNS]
        rates: list[float | None] = [None] * len(_COLUMNS)
        if before is not None:
            secs = after.time_secs - before.time_secs
            rates = [
                _rate(
                    sum(
                        _growth(column(then) if (then := before.tasks.get(task)) else None, column(now))
                        for task, now in mine.items()
                    ),
                    secs,
                )
                for column in _COLUMNS
            ]
        rows.append(ComponentRow(component, after.parallelism[component], *totals, *rates))
    return rows


def stream_row(before: Snapshot | None, after: Snapshot, component: str, stream: str, watch: str) -> StreamRow:
    """Storm's line for one component's stream; ``MonitorError`` names what exists when it is not there."""
    if component not in after.parallelism:
        raise MonitorError(
            f"component {component!r} not found; {after.topology} has "
            f"{', '.join(sorted(after.parallelism)) or 'no user components'}"
        )
    mine = {task: getattr(c, watch) for task, c in after.tasks.items() if c.component == component}
    streams = {s for counts in mine.values() for s in counts}
    if mine and stream not in streams:
        raise MonitorError(
            f"stream {stream!r} not found; {component} has {watch} counts on "
            f"{', '.join(sorted(streams)) or 'no stream yet'}"
        )
    grown = 0
    for task, counts in mine.items():
        then = getattr(before.tasks[task], watch).get(stream) if before and task in before.tasks else None
        grown += _growth(then, counts.get(stream, 0))
    diff_ms = round((after.time_secs - before.time_secs) * 1000) if before is not None else 0
    return StreamRow(
        after.topology,
        component,
        after.parallelism[component],
        stream,
        diff_ms,
        grown,
        grown / diff_ms if grown and diff_ms else 0.0,
    )


def table(before: Snapshot | None, after: Snapshot, info: Any, interval: float) -> str:
    """The table view of one round, with a title line saying what the rates cover."""
    span = f"rates over the last {after.time_secs - before.time_secs:.1f} s" if before else "rates from the next round"
    lines = [
        f"{info.name} ({info.id}) {info.status}, uptime {info.uptime_secs} s — every {interval:g} s, {span}",
        TABLE_HEADER,
    ]
    for row in component_rows(before, after):
        rates = [f"{r:.1f}" if r is not None else "-" for r in (row.emitted_rate, row.acked_rate, row.failed_rate)]
        lines.append(TABLE_ROW.format(row.component, row.tasks, row.emitted, row.acked, row.failed, *rates))
    return "\n".join(lines)


def _rounds(interval: float, count: int) -> Iterator[float]:
    """Monotonic poll times aligned to start + k × interval (a slow poll never shifts the later ones)."""
    start = time.monotonic()
    k = 0
    while count == 0 or k < count:
        time.sleep(max(0.0, start + k * interval - time.monotonic()))
        yield time.monotonic()
        k += 1


def monitor(conf: Mapping[str, Any], args: argparse.Namespace) -> int:
    """``storm monitor NAME [-i SECS] [-m COMPONENT [-s STREAM] [-w emitted|transferred]] [-n ROUNDS]``."""
    if args.component is None and (args.stream is not None or args.watch is not None):
        print("storm monitor: -s and -w watch one component's stream; add -m COMPONENT", file=sys.stderr)
        return 2
    stream, watch = args.stream or "default", args.watch or "emitted"
    if args.interval <= (beat := conf["task.heartbeat.frequency.secs"]):
        print(
            f"storm monitor: warning: counts reach nimbus every {beat} s (task.heartbeat.frequency.secs), so "
            f"rounds of -i {args.interval} s often see no change: use -i {beat + 1} or more",
            file=sys.stderr,
        )
    clear = sys.stdout.isatty()
    before: Snapshot | None = None
    try:
        with nimbus_client(conf) as nimbus:
            if args.component is not None:
                print(STREAM_HEADER.format(watch=watch), flush=True)
            for now in _rounds(args.interval, args.rounds):
                info = nimbus.getTopologyInfoByName(args.name)
                after = snapshot(info, now)
                if args.component is not None:
                    print(stream_row(before, after, args.component, stream, watch), flush=True)
                else:
                    print(
                        ("\033[H\033[2J" if clear else "") + table(before, after, info, args.interval) + "\n",
                        flush=True,
                    )
                before = after
    except MonitorError as exc:
        print(f"storm monitor: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``storm monitor``'s options (Storm's -i -m -s -w, plus -n)."""
    parser.add_argument("name", metavar="NAME", help="the topology")
    parser.add_argument(
        "-i",
        "--interval",
        type=positive,
        default=4,
        metavar="SECS",
        help="seconds between rounds (default 4, as Storm)",
    )
    parser.add_argument("-m", "--component", help="Storm's view: one line per round for this component")
    parser.add_argument("-s", "--stream", help="with -m: the stream to watch (default: default)")
    parser.add_argument("-w", "--watch", choices=WATCHES, help="with -m: emitted (default) or transferred")
    parser.add_argument(
        "-n", "--rounds", type=positive, default=0, metavar="N", help="stop after N rounds (default: until Ctrl-C)"
    )
