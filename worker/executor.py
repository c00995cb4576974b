"""Executors: one per task. Each owns its component, its receive queue and its timers, implements the
component's :class:`~squall.api.component.Collector`, and does a slice of work per :meth:`Executor.step`.

The hot path is built for batches: an emit appends its row to the :class:`~squall.api.tuple.TupleBatch` its
target task gets at the end of the task thread's round (:class:`Outbox`), and a bolt's inputs come a
batch at a time, run through ``execute_batch`` or ``execute`` per row in one loop, with a Tuple made per
row only for the user's call. A local target gets the batches as they are; a remote worker gets their
columns encoded once per run by the transfer layer. Tracking follows Storm exactly: a fresh 64-bit edge
id per (anchor, target), XORed into the anchor's ``ackVal`` and into the new tuple's root → id map;
acks and fails go to the acker task that owns the root (``root % ackers``, the same in every worker),
gathered over a step into one message per acker (:class:`AckOut`).
"""

from __future__ import annotations

import importlib
import json
import _thread
import random
import struct
import threading
import time
import traceback
from collections import Counter, defaultdict, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from functools import reduce
from itertools import chain, count, islice
from operator import xor
from pathlib import Path
from typing import Any, TypeVar

import structlog

from squall.api.component import Bolt, Component, Spout, TopologyContext, attach, deliver, deliver_each, emit_problem
from squall.api.metrics import TaskMetrics
from squall.core.system_ids import (ACKER, ACK_ACK_STREAM, ACK_FAIL_STREAM, ACK_INIT_STREAM, ACK_RESET_TIMEOUT_STREAM,
                                    MASTER_HEARTBEAT_STREAM, RESERVED_PREFIX, SYSTEM_COMPONENT, TICK_STREAM)
from squall.api.tuple import Fields, Piece, Tuple, TupleBatch, tick_tuple
from squall.core.zk.records import ComponentType, TaskBeat, TaskStats
from worker.tracking import SpoutPending
from worker.grouping import constant_targets, make_grouper
from worker.layout import ComponentSpec, Placement, TopologyLayout

log = structlog.get_logger(__name__)

C = TypeVar("C", bound=Component)

ACK_INIT_FIELDS = Fields(["id", "init-val", "spout-task"])
ACK_ACK_FIELDS = Fields(["id", "ack-val"])
ACK_FAIL_FIELDS = Fields(["id"])

#: Longest a task thread sleeps with nothing to do, so control messages and stop are never late by more.
MAX_IDLE_SECS = 0.1
#: A tree the acker fails this close to its timeout (or later) counts as timed out: a timeout reset reaches
#: the spout a moment after the acker, so the spout's timer may have started a little later than the acker's.
TIMEOUT_SLACK_SECS = 0.5

_rand = random.Random()
_bits = _rand.getrandbits


def _edges(n: int) -> list[int]:
    """``n`` random non-zero 64-bit edge ids, made in C (one big random int cut in words)."""
    edges = list(struct.unpack(f"<{n}Q", _bits(64 * n).to_bytes(8 * n, "little"))) if n else []
    while 0 in edges:  # one in 2**64 per edge
        edges[edges.index(0)] = _bits(64) or 1
    return edges


class Wake:
    """``threading.Event``'s ``set``/``clear``/``wait`` for one waiting thread, on one raw lock (held = not set).

    A task thread waits up to a thousand times a second (a spout's 1 ms back-off): an Event's wait builds a
    Condition waiter each time and costs about a third more CPU per wait than a raw lock's timed acquire."""

    __slots__ = ("_lock",)

    def __init__(self) -> None:
        self._lock = _thread.allocate_lock()
        self._lock.acquire()

    def set(self) -> None:
        try:
            self._lock.release()
        except RuntimeError:
            pass  # already set

    def clear(self) -> None:
        self._lock.acquire(False)

    def wait(self, timeout: float) -> bool:
        """Until set or ``timeout`` seconds; stays set (until :meth:`clear`).

        Staying set goes through :meth:`set`: another thread's ``set`` between our acquire and our release
        already released the lock, and a bare release would then raise (it killed a worker's task thread)."""
        if self._lock.acquire(True, timeout):
            self.set()
            return True
        return False


class Inbox:
    """An executor's receive queue: tuple batches appended from any thread, taken by its task thread.

    ``size`` counts tuples (for backpressure; non-zero means the task thread has work for it);
    ``wake`` is the consuming thread's event.
    """

    __slots__ = ("_batches", "_lock", "size", "capacity", "wake")

    def __init__(self, capacity: int, wake: Wake) -> None:
        self._batches: deque[TupleBatch] = deque()
        self._lock = threading.Lock()
        self.size = 0
        self.capacity = capacity
        self.wake = wake

    def put(self, batches: list[TupleBatch], wake: bool = True) -> None:
        """Append ``batches``; ``wake=False`` when the consuming thread itself puts them (it steps this
        executor before it sleeps, so setting its event would only cost it a wasted round)."""
        rows = sum(map(len, batches))
        with self._lock:
            self._batches.extend(batches)
            self.size += rows
        if wake:
            self.wake.set()

    def take_some(self, most: int) -> list[TupleBatch]:
        """The oldest batches, up to ``most`` of them (fewer: the queue is empty now), with one lock for all: a
        bolt's step takes a round's batches at once (16 pieces of a batch tree spout's step)."""
        batches = self._batches
        if not batches:
            return []
        with self._lock:
            taken = [batches.popleft() for _ in range(min(most, len(batches)))]
            self.size -= sum([len(batch.rows) if batch.__class__ is TupleBatch else len(batch) for batch in taken])
        return taken

    def take(self) -> TupleBatch | None:
        """The oldest batch, or None. Rows are counted as ``len(batch.rows)`` (no Python call) for a local
        batch, ``len(batch)`` for a :class:`~squall.api.tuple.ColumnBatch` from another worker (no rows built)."""
        if not self._batches:
            return None
        with self._lock:
            batch = self._batches.popleft()
            self.size -= len(batch.rows) if batch.__class__ is TupleBatch else len(batch)
        return batch


#: Forms of an outgoing batch (see :class:`~squall.api.tuple.TupleBatch`): rows only, one root per row, root maps.
PLAIN, ROOTS, ANCHORS = 0, 1, 2


class Outbox:
    """Tuple batches emitted on one task thread this round, by target task; ``flush`` hands them over.

    An emit extends the batch its target got last this round when that batch has the emit's key (same
    task, stream and form: :attr:`StreamOut.keys`), else opens a new one, so each target receives rows in
    emit order. ``deliver_batches(task, batches, wake)`` gets the owning thread's ``wake`` event and says
    whether ``task`` runs on that same thread (then it must not set the event: see :meth:`Inbox.put`).
    """

    def __init__(self, deliver_batches: Callable[[int, list[TupleBatch], Wake], bool], wake: Wake) -> None:
        self.pending: defaultdict[int, list[TupleBatch]] = defaultdict(list)
        #: The batch each target got last this round.
        self.last: dict[int, TupleBatch] = {}
        self._deliver = deliver_batches
        self._wake = wake

    def add(self, target: int, batch: TupleBatch) -> TupleBatch:
        """Queue ``batch`` for ``target`` after everything emitted to it so far this round."""
        self.pending[target].append(batch)
        self.last[target] = batch
        return batch

    def flush(self) -> bool:
        """Hand every target its batches; True if some went to a task of this thread, which has work now."""
        if not self.pending:
            return False
        batches = list(self.pending.items())
        self.pending.clear()
        self.last.clear()
        deliver, wake, own = self._deliver, self._wake, False
        for task, batch in batches:
            if deliver(task, batch, wake):
                own = True
        return own


class AckOut:
    """What a task tells the ackers in one step, gathered per acker and sent at the end of the step as one
    tuple per acker and kind carrying all of the step's roots as lists: a message per root cost more than
    the tuple it tracked. From a spout, ``__ack_init ([root...], [xor...], spout task)``; from a bolt,
    ``__ack_ack ([root...], [value...])``, ``__ack_fail ([root...],)`` and ``__ack_reset_timeout ([root...],)``.
    Position ``i`` of each list of lists is for ``ackers[i]``, the owner of every root with
    ``root % len(ackers) == i``; callers append in place (the per-tuple path)::

        out = AckOut(ackers=(7, 8), component="split", task=3, spout=False)
        out.roots[root % 2].append(root); out.values[root % 2].append(ack_value)
        out.fails[other % 2].append(other)
        out.flush(outbox)                 # acker tasks 7 and 8: one tuple per kind that has roots
    """

    __slots__ = ("ackers", "roots", "values", "fails", "resets", "_component", "_task", "_first")

    def __init__(self, ackers: Sequence[int], component: str, task: int, *, spout: bool) -> None:
        self.ackers = ackers
        self.roots: list[list[int]] = [[] for _ in ackers]
        self.values: list[list[int]] = [[] for _ in ackers]  # init XORs (spout) or ack values (bolt)
        self.fails: list[list[int]] = [[] for _ in ackers]
        self.resets: list[list[int]] = [[] for _ in ackers]
        self._component, self._task = component, task
        self._first = (ACK_INIT_STREAM, ACK_INIT_FIELDS, (task,)) if spout else (ACK_ACK_STREAM, ACK_ACK_FIELDS, ())

    def flush(self, outbox: Outbox) -> None:
        """Queue this step's messages in ``outbox`` and start empty."""
        component, task = self._component, self._task
        stream, fields, extra = self._first
        for i, acker in enumerate(self.ackers):
            if self.roots[i]:
                outbox.add(acker, TupleBatch([(self.roots[i], self.values[i], *extra)], fields, component, stream,
                                             task))
                self.roots[i], self.values[i] = [], []
            if self.fails[i]:
                outbox.add(acker, TupleBatch([(self.fails[i],)], ACK_FAIL_FIELDS, component, ACK_FAIL_STREAM, task))
                self.fails[i] = []
            if self.resets[i]:
                outbox.add(acker, TupleBatch([(self.resets[i],)], ACK_FAIL_FIELDS, component,
                                             ACK_RESET_TIMEOUT_STREAM, task))
                self.resets[i] = []


class Pressure:
    """Worker-wide backpressure with hysteresis: ``high`` from when any receive queue or send backlog
    (``fill()``, the fullest one's fill ratio) passes the high water mark until all are back under the
    low one. While it is high the receiver stops reading the network and tells every peer so
    (:data:`~worker.wire.THROTTLE_ON`); ``held()`` says whether some peer told this worker that. Spouts stop
    emitting while either holds (:attr:`hold_spouts`): a full queue downstream paces the spouts feeding it in
    every worker, as Storm 2's backpressure does. Only spouts wait on a peer; bolts never block and the receiver
    stops only for its own worker's queues, so a DAG cannot deadlock."""

    def __init__(self, fill: Callable[[], float], *, enabled: bool, high: float, low: float,
                 held: Callable[[], bool] = lambda: False) -> None:
        self._fill = fill
        self._held = held
        self.enabled = enabled
        self.high_mark, self.low_mark = high, low
        self.high = False
        self.hold_spouts = False
        self.relieved = threading.Event()
        self.relieved.set()

    def update(self) -> None:
        if not self.enabled:
            return
        fill = self._fill()
        if self.high and fill <= self.low_mark:
            self.high = False
            self.relieved.set()
        elif not self.high and fill >= self.high_mark:
            self.high = True
            self.relieved.clear()
        self.hold_spouts = self.high or self._held()


@dataclass
class Stats:
    """Counters a task keeps for benchmarks and the topology master (spout: roots; bolt: inputs).

    Totals are always kept. By key (a spout's output stream, a bolt's input ``component:stream``) they
    are kept only where the key is not implied: spouts, and bolts with more than one input stream.
    """

    emitted: int = 0
    executed: int = 0
    acked: int = 0
    failed: int = 0
    #: Of ``failed``: a spout's trees that timed out, a bolt's inputs failed because execute raised.
    failed_timeout: int = 0
    failed_exception: int = 0
    #: Seconds spent in ``execute`` (bolts).
    execute_secs: float = 0.0
    #: Complete latencies (seconds) of acked roots, sampled at ``topology.stats.sample.rate``; the newest only.
    latencies: deque[float] = field(default_factory=lambda: deque(maxlen=10_000))
    executed_by: Counter[str] = field(default_factory=Counter)
    acked_by: Counter[str] = field(default_factory=Counter)
    failed_by: Counter[str] = field(default_factory=Counter)
    #: Latency sums (seconds) by key and how many values each sum holds.
    latency_by: Counter[str] = field(default_factory=Counter)
    timed_by: Counter[str] = field(default_factory=Counter)
    #: Process latency (bolts; Storm's: from the start of the input's execute to its ack): seconds summed over
    #: the acks timed, and how many were timed, in total and by key as above.
    process_secs: float = 0.0
    processed: int = 0
    process_by: Counter[str] = field(default_factory=Counter)
    processed_by: Counter[str] = field(default_factory=Counter)


class ErrorThrottle:
    """At most ``limit`` reports per ``interval`` seconds per task (Storm's error throttle); the rest
    are counted and the count is said with the next report that gets through."""

    def __init__(self, limit: int, interval: float) -> None:
        self.limit, self.interval = limit, interval
        self._window_start = -float("inf")
        self._in_window = 0
        self.suppressed = 0

    def allow(self, now: float) -> bool:
        if now - self._window_start >= self.interval:
            self._window_start, self._in_window = now, 0
        if self._in_window < self.limit:
            self._in_window += 1
            return True
        self.suppressed += 1
        return False


@dataclass(frozen=True)
class ExecutorEnv:
    """What every executor of a worker shares."""

    topology_id: str
    #: ``report(task, text)``: the error goes to ``/taskerrors`` (cluster) or the log only (local mode).
    report: Callable[[int, str], None]
    pressure: Pressure
    #: Exceptions from user code stop the worker instead of failing the tuple (``topology.worker.exit.on.error``).
    on_fatal: Callable[[BaseException], None]
    #: Where the topology master sends the latest task heartbeats (nimbus, or nowhere in local mode).
    report_beats: Callable[[dict[int, TaskBeat]], None]
    #: The working directory of shell (multilang) components: the code package's ``resources/`` (None: this
    #: process's working directory).
    resources_dir: Path | None = None


class StreamOut:
    """One declared output stream of a task: its fields, how to pick target tasks, and its counters.

    ``constant`` holds the targets when they do not depend on the values (then no grouper is called);
    ``keys`` tell this stream's outgoing batches apart per form (:data:`PLAIN`, :data:`ROOTS`,
    :data:`ANCHORS`). Emits are counted; copies sent (Storm's "transferred") are derived from the fixed
    number of targets per emit (``fanout``) without touching the hot path, except behind a custom
    grouping, whose route counts them as it goes.
    """

    __slots__ = ("fields", "width", "direct", "route", "constant", "split", "direct_targets", "fanout", "keys",
                 "emitted", "_base_emitted", "_base_transferred")

    def __init__(self, fields: Fields, direct: bool, route: Callable[[Sequence[Any]], Sequence[int]],
                 direct_targets: frozenset[int], fanout: int | None, constant: tuple[int, ...] | None = None,
                 split: Callable[[int], list[tuple[tuple[int], int]]] | None = None) -> None:
        self.fields = fields
        self.width = len(fields)
        self.direct = direct
        self.direct_targets = direct_targets
        self.fanout = 1 if direct else fanout
        self.constant = None if direct else constant
        #: A shuffle's bulk form: how many of n consecutive rows go to each target (see ``_Shuffle.split``).
        self.split = None if direct else split
        self.keys = (object(), object(), object())
        self.emitted = 0
        self._base_emitted = self._base_transferred = 0
        self.route = route if self.fanout is not None else self._counting(route)

    def _counting(self, route: Callable[[Sequence[Any]], Sequence[int]]) -> Callable[[Sequence[Any]], Sequence[int]]:
        def counted(values: Sequence[Any]) -> Sequence[int]:
            targets = route(values)
            self._base_transferred += len(targets)
            return targets
        return counted

    @property
    def transferred(self) -> int:
        if self.fanout is None:
            return self._base_transferred
        return self._base_transferred + (self.emitted - self._base_emitted) * self.fanout

    def carry_counts(self, old: StreamOut) -> None:
        """Keep the counts of the stream this one replaces (a refresh may change the fanout)."""
        self.emitted = self._base_emitted = old.emitted
        self._base_transferred = old.transferred


def _no_targets(_values: Sequence[Any]) -> Sequence[int]:
    return ()


def build_outputs(layout: TopologyLayout, placement: Placement, component: str, task: int) -> dict[str, StreamOut]:
    """Every stream ``component`` declares, with groupers for its subscribers as seen from ``task``."""
    outs = {}
    for stream, spec in layout.components[component].streams.items():
        subs = layout.subscribers.get((component, stream), ())
        groupers = [make_grouper(s.grouping, output_fields=spec.fields, targets=s.tasks,
                                 local=placement.local, seed=task)
                    for s in subs if s.tasks and s.grouping.direct is None]
        direct = frozenset(t for s in subs if s.grouping.direct is not None for t in s.tasks)
        routed = [s for s in subs if s.tasks and s.grouping.direct is None]
        fanout = None if any(s.grouping.custom_serialized is not None for s in routed) else \
            sum(len(s.tasks) if s.grouping.all is not None else 1 for s in routed)
        if not groupers:
            route = _no_targets
        elif len(groupers) == 1:
            route = groupers[0]
        else:
            route = _fan_out(groupers)
        split = getattr(groupers[0], "split", None) if len(groupers) == 1 else None
        outs[stream] = StreamOut(spec.fields, spec.direct, route, direct, fanout, constant_targets(groupers), split)
    return outs


def _fan_out(groupers: list[Callable[[Sequence[Any]], Sequence[int]]]) -> Callable[[Sequence[Any]], Sequence[int]]:
    return lambda values: [t for grouper in groupers for t in grouper(values)]


def component_context(layout: TopologyLayout, spec: ComponentSpec, task: int) -> TopologyContext:
    return TopologyContext(topology_id=layout.topology_id, topology_name=layout.name, component_id=spec.id,
                           task_id=task, component_tasks=layout.component_tasks, conf=spec.conf)


class Executor:
    """The part every task shares: outputs, heartbeats to the topology master, errors, the acker route."""

    def __init__(self, task: int, layout: TopologyLayout, placement: Placement, outbox: Outbox,
                 inbox: Inbox, env: ExecutorEnv) -> None:
        self.task = task
        self.component = layout.task_component[task]
        self.spec = layout.components[self.component]
        self.inbox = inbox
        self.env = env
        self.stats = Stats()
        self._outbox = outbox
        self._last = outbox.last  # target → the batch it got last this round (see Outbox)
        self._started = time.monotonic()
        conf = self.spec.conf
        self._beat_every = float(conf["task.heartbeat.frequency.secs"])
        self._next_beat = 0.0
        self._throttle = ErrorThrottle(int(conf["topology.max.error.report.per.interval"]),
                                       float(conf["topology.error.throttle.interval.secs"]))
        self._exit_on_error = bool(conf["topology.worker.exit.on.error"])
        self._now = 0.0
        #: When its task thread next steps it even without input (``time.monotonic()``): set from what
        #: :meth:`step` returns; 0 steps it in the next round (new, or after an operator call).
        self.due = 0.0
        self.user: Component | None = None  # the user's spout or bolt, once started
        self.metrics: TaskMetrics | None = None  # its user metrics (its context's), once started
        self.refresh(layout, placement)

    # -- routing ---------------------------------------------------------------------------------

    def refresh(self, layout: TopologyLayout, placement: Placement) -> None:
        """Rebuild routes for a new assignment (called on the task thread, between rounds)."""
        outs = build_outputs(layout, placement, self.component, self.task)
        self._beat_out = outs.get(MASTER_HEARTBEAT_STREAM)
        old = getattr(self, "_outs", {})
        self._outs = {stream: out for stream, out in outs.items() if not stream.startswith(RESERVED_PREFIX)}
        for stream, out in self._outs.items():
            if stream in old:
                out.carry_counts(old[stream])
        #: The user streams this component consumes, as ``component:stream`` (the keys of its input stats).
        self._inputs = sorted(f"{source}:{stream}" for (source, stream), subs in layout.subscribers.items()
                              if not stream.startswith(RESERVED_PREFIX) and any(s.component == self.component for s in subs))
        self._keyed_inputs = len(self._inputs) > 1
        #: Spouts count acks by stream only when they have several (else the totals are the stream's).
        self._keyed_outputs = len(self._outs) > 1
        self._ackers = layout.component_tasks.get(ACKER, ())
        self._n_ackers = len(self._ackers)
        #: Positions in ``_ackers`` of the ackers in this worker: spouts pick root ids they own.
        self._local_ackers = [i for i, task in enumerate(self._ackers) if task in placement.local]
        if hasattr(self, "_acks"):
            self._acks.flush(self._outbox)  # acks from calls before the refresh go by the old routes
        self._acks = AckOut(self._ackers, self.component, self.task, spout=self.spec.kind is ComponentType.SPOUT)
        self._layout = layout

    def _targets(self, values: Sequence[Any], stream: str, direct_task: int | None) -> tuple[StreamOut, Sequence[int]]:
        out = self._outs.get(stream)
        if out is None or len(values) != out.width or out.direct != (direct_task is not None):
            raise ValueError(emit_problem(self._outs, stream, values, direct_task))
        if direct_task is None:
            return out, out.route(values) if out.constant is None else out.constant
        self._check_direct(out, stream, direct_task)
        return out, (direct_task,)

    @staticmethod
    def _check_direct(out: StreamOut, stream: str, direct_task: int) -> None:
        if direct_task not in out.direct_targets:
            raise ValueError(f"emit on direct stream {stream!r} to task {direct_task}, which does not subscribe "
                             f"to it with direct grouping (subscribed tasks: {sorted(out.direct_targets)})")

    def _check_rows(self, rows: list[tuple[Any, ...]], stream: str, direct_task: int | None) -> StreamOut:
        """The stream's output, once every row is checked as ``emit`` checks one (width, direct target)."""
        out = self._outs.get(stream)
        if out is None or out.direct != (direct_task is not None):
            raise ValueError(emit_problem(self._outs, stream, (None,) * (out.width if out else 0), direct_task))
        if direct_task is not None:
            self._check_direct(out, stream, direct_task)
        width = out.width
        if rows and set(map(len, rows)) != {width}:
            bad = next(values for values in rows if len(values) != width)
            raise ValueError(emit_problem(self._outs, stream, bad, direct_task))
        return out

    def _open(self, target: int, stream: str, out: StreamOut, form: int) -> TupleBatch:
        """A new batch of ``stream`` in ``form`` for ``target``, queued after what it got so far this round."""
        batch = TupleBatch([], out.fields, self.component, stream, self.task, None if form == PLAIN else [],
                           [] if form == ROOTS else None, [] if form == ANCHORS else None, out.keys[form])
        return self._outbox.add(target, batch)

    def _batch_for(self, target: int, stream: str, out: StreamOut, form: int) -> TupleBatch:
        """The batch ``target`` got last this round if it is this stream's in ``form``, else a new one (per-row
        loops inline this lookup: a call per row costs more than the append)."""
        batch = self._last.get(target)
        if batch is None or batch.key is not out.keys[form]:
            batch = self._open(target, stream, out, form)
        return batch

    def _emit_plain(self, rows: list[tuple[Any, ...]], stream: str, out: StreamOut, direct_task: int | None) -> None:
        """Untracked ``rows`` to their targets."""
        for target, part in self._parts(rows, out, direct_task):
            self._batch_for(target, stream, out, PLAIN).rows.extend(part)

    def _parts(self, rows: list[tuple[Any, ...]], out: StreamOut,
               direct_task: int | None) -> Iterable[tuple[int, list[tuple[Any, ...]]]]:
        """``rows`` by target task, in order within each: whole when the targets do not depend on the values."""
        targets = out.constant if direct_task is None else (direct_task,)
        if targets is not None:
            return [(target, rows) for target in targets]
        if out.split is not None:  # shuffle: consecutive rows to each target, as many as per-row calls give it
            parts, start = [], 0
            for (target,), size in out.split(len(rows)):
                parts.append((target, rows[start:start + size]))
                start += size
            return parts
        by_target: dict[int, list[tuple[Any, ...]]] = {}
        route = out.route
        for values in rows:
            for target in route(values):
                part = by_target.get(target)
                if part is None:
                    by_target[target] = [values]
                else:
                    part.append(values)
        return by_target.items()

    def _emit_pieces(self, rows: list[tuple[Any, ...]], stream: str, out: StreamOut, direct_task: int | None,
                     root: int) -> int:
        """``rows`` in ``root``'s tree as one :class:`~squall.api.tuple.Piece` per target task (one batch, one random
        edge each, never extended by later emits); returns the XOR of the edges (0: sent nowhere)."""
        targets = out.constant if direct_task is None else (direct_task,)
        if targets is not None and len(targets) == 1 and rows:  # the usual case, without splitting: one piece
            edge = _bits(64) or 1
            self._outbox.add(targets[0], TupleBatch(rows, out.fields, self.component, stream, self.task,
                                                    piece=Piece(root, edge, len(rows))))
            return edge
        parts, init = list(self._parts(rows, out, direct_task)), 0
        shared = len(parts) > 1 and parts[0][1] is parts[-1][1]  # every target gets ``rows`` itself: copies
        component, task, add, fields = self.component, self.task, self._outbox.add, out.fields
        for target, part in parts:
            if part:
                edge = _bits(64) or 1
                init ^= edge
                add(target, TupleBatch(list(part) if shared else part, fields, component, stream, task,
                                       piece=Piece(root, edge, len(part))))
        return init

    # -- timers, heartbeats, errors --------------------------------------------------------------

    def _heartbeat(self, now: float) -> None:
        if now < self._next_beat:
            return
        self._next_beat = now + self._beat_every
        out = self._beat_out
        if out is not None:
            values = (self.task, int(now - self._started), _to_wire(self.task_stats()))
            for target in out.route(values):
                self._outbox.add(target, TupleBatch([values], out.fields, self.component, MASTER_HEARTBEAT_STREAM,
                                                    self.task))

    def task_stats(self) -> TaskStats:
        """This task's counters as the topology master reports them; a lone input's counts are the totals."""
        stats = self.stats
        emitted = {s: out.emitted for s, out in self._outs.items() if out.emitted}
        transferred = {s: out.transferred for s, out in self._outs.items() if out.transferred}
        if len(self._inputs) == 1:
            (key,) = self._inputs
            by = {"executed": {key: stats.executed}, "acked": {key: stats.acked}, "failed": {key: stats.failed},
                  "latency_ms": {key: 1000 * stats.execute_secs / stats.executed} if stats.executed else {},
                  "process_ms": {key: 1000 * stats.process_secs / stats.processed} if stats.processed else {},
                  "processed": {key: stats.processed}}
        elif not self._inputs and len(self._outs) == 1:  # a spout with one stream
            (key,) = self._outs
            by = {"executed": {}, "acked": {key: stats.acked}, "failed": {key: stats.failed},
                  "latency_ms": {key: 1000 * stats.latency_by[key] / stats.timed_by[key]} if stats.timed_by[key] else {}}
        else:
            by = {"executed": dict(stats.executed_by), "acked": dict(stats.acked_by),
                  "failed": dict(stats.failed_by),
                  "latency_ms": {k: 1000 * t / stats.timed_by[k] for k, t in stats.latency_by.items() if stats.timed_by[k]},
                  "process_ms": {k: 1000 * t / stats.processed_by[k] for k, t in stats.process_by.items()
                                 if stats.processed_by[k]},
                  "processed": dict(stats.processed_by)}
        by["failed_by_reason"] = {"timeout": stats.failed_timeout, "exception": stats.failed_exception,
                                  "explicit": stats.failed - stats.failed_timeout - stats.failed_exception}
        counters, gauges = self._user_metrics()
        return TaskStats(emitted=emitted, transferred=transferred, user_counters=counters, user_gauges=gauges,
                         **{name: {k: v for k, v in counts.items() if v} for name, counts in by.items()})

    def _user_metrics(self) -> tuple[dict[str, int], dict[str, float]]:
        """The user metrics' values now; a gauge that cannot be read is reported as the task's error."""
        if not self.metrics:
            return {}, {}
        counters, gauges, problems = self.metrics.read()
        for problem in problems:
            self.report_error(problem)
        return counters, gauges

    def report_error(self, error: BaseException | str) -> None:
        """A component's ``report_error`` and uncaught exceptions: logged and sent to ``/taskerrors``, throttled."""
        if isinstance(error, BaseException):
            text = "".join(traceback.format_exception(type(error), error, error.__traceback__)).rstrip()
        else:
            text = str(error)
        if not self._throttle.allow(time.monotonic()):
            return
        if self._throttle.suppressed:
            text += f"\n({self._throttle.suppressed} more errors of this task were not reported: throttled)"
            self._throttle.suppressed = 0
        log.error("task error", topology_id=self.env.topology_id, component=self.component, task=self.task,
                  error=text)
        self.env.report(self.task, text)

    def _user_code_failed(self, exc: BaseException, already_reported: bool = False) -> None:
        if not already_reported:
            self.report_error(exc)
        if self._exit_on_error:
            self.env.on_fatal(exc)

    def _attach_user(self, base: type[C]) -> tuple[C, TopologyContext]:
        """The user's component, built from its spec, checked to be a ``base`` and connected to this executor."""
        component = build_component(self.spec)
        if not isinstance(component, base):
            raise TypeError(f"{self.component!r} is a {type(component).__name__}, not a squall {base.__name__}")
        context = component_context(self._layout, self.spec, self.task)
        attach(component, self, context)
        self.user, self.metrics = component, context.metrics
        return component, context

    # -- what a task thread calls ----------------------------------------------------------------

    def start(self) -> None:
        """Build and open the component (on its task thread); an exception here stops the worker."""

    def step(self, now: float) -> float:
        """Do a slice of work; return how long this task can wait for new input (0: call again now).

        The task thread steps it again when that time is up or as soon as its inbox has input, so the
        wait must cover every timer (heartbeat, ticks, expiry) and nothing may need a step otherwise."""
        raise NotImplementedError

    def set_active(self, active: bool) -> None:
        """The topology was (de)activated; only spouts care."""

    def update_conf(self, conf: Mapping[str, Any]) -> None:
        """The topology's conf changed: hand it to the component (a failure is reported like any user error)."""
        if self.user is not None:
            try:
                self.user.update(conf)
            except Exception as exc:
                self._user_code_failed(exc)

    def close(self) -> None:
        """Shut the component down (best effort)."""


def build_component(spec: ComponentSpec) -> Component:
    """``module.Class(*args, **kwargs)`` from a component's ``python_object`` (JSON arguments only)."""
    py = spec.obj.python_object
    if py is None:
        raise ValueError(f"component {spec.id!r} is not a Python component (a shell component runs on "
                         "worker.multilang's executors)")
    cls = getattr(importlib.import_module(py.module_name), py.class_name)
    args = json.loads(py.args_json) if py.args_json else []
    kwargs = json.loads(py.kwargs_json) if py.kwargs_json else {}
    return cls(*args, **kwargs)


class SpoutExecutor(Executor):
    """Calls ``next_tuple`` in bursts while the topology is active, the pending cap allows and the
    worker is not backpressured; feeds ``ack``/``fail`` back from the acker and the message timeout.
    After a ``next_tuple`` that emits nothing, or a ``next_batch`` that emits fewer rows than it was asked for
    (all the spout had), it waits ``topology.sleep.spout.wait.strategy.time.ms`` (1) before the next call, even
    while acks arrive (Storm's sleep wait strategy), so a spout ahead of its rate or reading a trickle wakes once
    per millisecond. A spout that keeps emitting nothing at all waits twice as long after each such step, up to
    ``topology.sleep.spout.wait.strategy.max.time.ms`` (8), so an active spout with nothing to emit costs its
    worker little; a step that emits anything starts again from the shortest wait."""

    #: A step emits up to this many bursts of ``topology.transfer.batch.size`` tuples unless the spout runs dry
    #: first: each target then gets one batch per step (without ackers; a piece per burst with them), and a round's
    #: fixed cost (a flush, the bolt's step, a batch object: ~10 µs, as much as a ``next_batch`` of 100 rows; with
    #: ackers also the init and ack messages, the acker's step and the completions) is paid once. A remote target's
    #: round costs more (a run queued for its sender, a message encoded, read, decoded and stepped: ~30 µs), so 16
    #: bursts, each remote target's ~800 rows a message, took the batch API's shuffle across two workers from 0.80x
    #: to 0.83x of one worker per CPU-s. With ackers a ``next_tuple`` spout's step is one burst.
    BURSTS_PER_STEP = 16
    #: With ackers a ``next_batch`` step also ends once it has taken this long: a tree's complete latency holds its
    #: whole step and the acks of it (8 bursts unbounded took the batch API's p99 at half capacity from 5 to 11 ms).
    ACKED_STEP_SECS = 0.0005
    #: Most timed-out trees a step fails (a ``fail`` call each): tens of thousands at once held the task thread, and
    #: with it every task's heartbeat, past nimbus's task timeout. The rest are failed in the next rounds.
    EXPIRED_PER_STEP = 5_000

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        conf = self.spec.conf
        max_pending = conf.get("topology.max.spout.pending")
        timeout = float(conf["topology.message.timeout.secs"])
        self.pending = SpoutPending(max_pending, timeout if conf["topology.enable.message.timeouts"] else float("inf"))
        self._burst = int(conf["topology.transfer.batch.size"])
        self._idle_secs = int(conf["topology.sleep.spout.wait.strategy.time.ms"]) / 1000
        self._max_idle_secs = max(self._idle_secs, int(conf["topology.sleep.spout.wait.strategy.max.time.ms"]) / 1000)
        #: The wait after the next step that emits nothing at all: doubles with each such step, up to the max.
        self._backoff = self._idle_secs
        self._step_rows = self.BURSTS_PER_STEP * self._burst
        self._sample_every = _sample_period(conf["topology.stats.sample.rate"])
        self._active = False
        self._activated = False
        self._acked_at_emit: list[Any] = []
        self._next_expiry = 0.0
        #: No ``next_tuple`` before this: set ``_idle_secs`` ahead when a call emitted nothing.
        self._next_emit = 0.0
        self.spout: Spout
        self._next_batch: Callable[[int], None] | None = None
        self._on_ack: Callable[[Any], None] | None = None
        self._on_fail: Callable[[Any], None] | None = None

    def start(self) -> None:
        self.spout, context = self._attach_user(Spout)
        #: The spout's own ``next_batch`` if it has one (called once per burst), else None (``next_tuple`` in a loop).
        self._next_batch = self.spout.next_batch if type(self.spout).next_batch is not Spout.next_batch else None
        #: The spout's ``ack``/``fail``, or None where it keeps Spout's, which does nothing: no call per message.
        self._on_ack = self.spout.ack if type(self.spout).ack is not Spout.ack else None
        self._on_fail = self.spout.fail if type(self.spout).fail is not Spout.fail else None
        self.spout.open(context.conf, context)

    def set_active(self, active: bool) -> None:
        if active == self._active:
            return
        self._active = active
        try:
            if active:
                self._activated = True
                self.spout.activate()
            elif self._activated:
                self.spout.deactivate()
        except Exception as exc:
            self._user_code_failed(exc)

    # -- Collector -------------------------------------------------------------------------------

    def emit(self, values: tuple[Any, ...], stream: str, anchors: tuple[Tuple, ...], direct_task: int | None,
             msg_id: Any) -> Sequence[int]:
        out = self._outs.get(stream)
        if out is None or len(values) != out.width or direct_task is not None or out.direct:
            out, targets = self._targets(values, stream, direct_task)
        else:
            targets = out.route(values) if out.constant is None else out.constant
        self.stats.emitted += 1
        out.emitted += 1
        last = self._last
        if msg_id is None or not self._n_ackers:
            key = out.keys[PLAIN]
            for target in targets:  # none for a stream nobody subscribes to
                batch = last.get(target)
                if batch is None or batch.key is not key:
                    batch = self._open(target, stream, out, PLAIN)
                batch.rows.append(values)
            if msg_id is not None:
                self._acked_at_emit.append(msg_id)  # no ackers: acked as soon as it is emitted (Storm)
                if self._keyed_outputs:
                    self.stats.acked_by[stream] += 1
            return targets
        root, xor, now, key = next(self._roots), 0, self._now, out.keys[ROOTS]
        for target in targets:
            edge = _bits(64) or 1
            xor = xor ^ edge if xor else edge  # (0 ^ edge would make a new int)
            batch = last.get(target)
            if batch is None or batch.key is not key:
                batch = self._open(target, stream, out, ROOTS)
            batch.rows.append(values)
            batch.ids.append(edge)  # type: ignore[union-attr]
            batch.roots.append(root)  # type: ignore[union-attr]
        owner, acks = self._root_owner, self._acks
        acks.roots[owner].append(root)
        acks.values[owner].append(xor)
        self.pending.entries[root] = (msg_id, now, stream, now)  # SpoutPending.sent, without the call
        return targets

    def emit_many(self, rows: list[tuple[Any, ...]], stream: str, direct_task: int | None,
                  msg_ids: Sequence[Any] | None, msg_id: Any = None) -> None:
        """``emit`` of every row, checked once and routed in bulk; ``msg_ids[i]`` (if given) is row i's, or
        ``msg_id`` is the whole batch's (one tree)."""
        out = self._check_rows(rows, stream, direct_task)
        if msg_ids is not None and len(msg_ids) != len(rows):
            raise ValueError(f"emit_many of {len(rows)} rows with {len(msg_ids)} msg_ids: give one per row")
        if msg_id is not None and msg_ids is not None:
            raise TypeError("emit_many takes msg_ids (a tree per row) or msg_id (one tree for the batch), not both")
        tracked = (msg_ids is not None or msg_id is not None) and self._n_ackers
        targets = (direct_task,) if direct_task is not None else out.constant
        if tracked and msg_id is None and (targets is None or len(targets) != 1):  # a tree per row, per row
            for values, row_id in zip(rows, msg_ids):  # type: ignore[arg-type]
                self.emit(values, stream, (), direct_task, row_id)
            return
        self.stats.emitted += len(rows)
        out.emitted += len(rows)
        if not tracked:
            self._emit_plain(rows, stream, out, direct_task)
            acked = msg_ids if msg_id is None else (msg_id,)
            if acked is not None:  # no ackers: acked as soon as emitted (Storm)
                self._acked_at_emit.extend(acked)
                if self._keyed_outputs:
                    self.stats.acked_by[stream] += len(acked)
            return
        if msg_id is not None:
            self._emit_tree(rows, stream, out, direct_task, msg_id)
            return
        now, owner, (target,) = self._now, self._root_owner, targets  # one target for every row: columns in C
        roots = list(islice(self._roots, len(rows)))
        edges = _edges(len(rows))
        batch = self._batch_for(target, stream, out, ROOTS)
        batch.rows.extend(rows)
        batch.ids.extend(edges)  # type: ignore[union-attr]
        batch.roots.extend(roots)  # type: ignore[union-attr]
        self._acks.roots[owner].extend(roots)
        self._acks.values[owner].extend(edges)  # one edge per root: the init XOR is the edge
        self.pending.entries.update(zip(roots, [(row_id, now, stream, now) for row_id in msg_ids]))  # type: ignore[union-attr]

    def _emit_tree(self, rows: list[tuple[Any, ...]], stream: str, out: StreamOut, direct_task: int | None,
                   msg_id: Any) -> None:
        """``rows`` as one tuple tree: one root and one pending entry for the batch, and one edge per target task:
        the rows each target gets are one :class:`~squall.api.tuple.Piece` (one batch, one edge), so the init is the
        XOR of a few edges, and a bolt that settles the piece whole acks it with one value (``_settle_rest``)."""
        root = next(self._roots)
        init = self._emit_pieces(rows, stream, out, direct_task, root)
        owner = self._root_owner
        self._acks.roots[owner].append(root)
        self._acks.values[owner].append(init)  # 0 (sent nowhere): the acker acks it at once
        self.pending.sent(root, msg_id, self._now, stream, len(rows))

    def refresh(self, layout: TopologyLayout, placement: Placement) -> None:
        """Routes as every executor, and where this task's root ids start (the ackers may have moved).

        Root ids count up by the number of ackers from a random 62-bit start: cheap, never repeated by a
        task, and not by two tasks unless their random starts lie closer than the ids they use; all owned
        (``root % ackers``) by one acker, in this worker when it has one, so the init and the completion
        of a tree never cross workers, and every worker agrees on the owner."""
        super().refresh(layout, placement)
        n, local = self._n_ackers, self._local_ackers
        self._root_owner = (local[self.task % len(local)] if local else self.task % n) if n else 0
        self._roots = count(n * (1 + _bits(62) // n) + self._root_owner, n) if n else count()

    def ack(self, tup: Tuple) -> None:
        raise TypeError("spouts do not ack tuples: the acker calls the spout's ack(msg_id)")

    fail = ack

    # -- the loop --------------------------------------------------------------------------------

    def step(self, now: float) -> float:
        self._now = now
        self._heartbeat(now)
        self._drain(now)
        if now >= self._next_expiry:
            expired = self.pending.expire(now, self.EXPIRED_PER_STEP)
            # More due than a step takes (a rebalance timed out a backlog): the rest next round, after the inputs.
            self._next_expiry = now if len(expired) == self.EXPIRED_PER_STEP else now + 1.0
            for msg_id, stream in expired:
                self.stats.failed += 1
                self.stats.failed_timeout += 1
                if self._keyed_outputs:
                    self.stats.failed_by[stream] += 1
                self._call(self.spout.fail, msg_id)
        wait = self._next_tuples(now)
        self._acks.flush(self._outbox)  # the step's inits: one message for all its roots
        return wait

    def _next_tuples(self, now: float) -> float:
        """``next_tuple`` in a burst, when active and allowed; how long to wait before the next burst."""
        if not self._active:
            return self._wait(now)
        if now < self._next_emit:  # backing off: input (acks), not its turn, brought this step
            return self._next_emit - now
        if self.env.pressure.hold_spouts or not self.pending.can_emit():
            return self._idle_secs if self.env.pressure.hold_spouts else self._wait(now)
        stats, pending, idle, burst = self.stats, self.pending, False, self._burst
        cap, entries, emitted = pending.max_pending, pending.entries, stats.emitted
        # With ackers a batch step also ends after ACKED_STEP_SECS: a tree's complete latency holds its whole step.
        acking = bool(self._n_ackers)
        until = time.monotonic() + self.ACKED_STEP_SECS if acking else float("inf")
        try:
            if self._next_batch is not None:
                next_batch, left = self._next_batch, self._step_rows
                while left > 0:
                    rows = min(burst, left) if cap is None else min(burst, left, cap - len(pending))
                    if rows <= 0:
                        break  # at the pending cap
                    before = stats.emitted
                    next_batch(rows)
                    if stats.emitted - before < rows:  # a short batch: all it had (paced, or a trickle): back off
                        idle = True
                        break
                    left -= stats.emitted - before
                    if time.monotonic() >= until:
                        break
            else:  # per tuple, one burst with ackers: more raised the p99 at half capacity from 3.5 to 12 ms
                next_tuple = self.spout.next_tuple
                for _ in range(burst if acking else self._step_rows):
                    before = stats.emitted
                    next_tuple()
                    if stats.emitted == before:
                        idle = True
                        break
                    if cap is not None and len(entries) + pending.extra >= cap:
                        break
        except Exception as exc:
            self._user_code_failed(exc)
        if self._acked_at_emit:
            self._ack_emitted()
        if not idle:
            self._backoff = self._idle_secs
            return 0.0
        if stats.emitted == emitted:  # nothing at all: wait longer each time, up to the max
            wait = self._backoff
            self._backoff = min(wait * 2, self._max_idle_secs)
        else:  # all it had (a paced spout, a trickle): the shortest wait
            wait = self._backoff = self._idle_secs
        self._next_emit = now + wait
        return wait

    def _ack_emitted(self) -> None:
        """Ack what was emitted with a message id while the topology has no ackers (Storm acks it at once)."""
        acked, self._acked_at_emit = self._acked_at_emit, []
        self.stats.acked += len(acked)
        ack = self._on_ack
        for msg_id in acked if ack is not None else ():
            try:
                ack(msg_id)
            except Exception as exc:
                self._user_code_failed(exc)

    def _wait(self, now: float) -> float:
        return max(0.0, min(self._next_beat, self._next_expiry) - now)

    def _drain(self, now: float) -> None:
        """From the acker: ``([root...],)`` completions (``__ack_ack``/``__ack_fail``) and timeout resets."""
        take, pending, stats, keyed = self.inbox.take, self.pending, self.stats, self._keyed_outputs
        while (batch := take()) is not None:
            stream = batch.stream
            for (roots,) in batch.rows:
                if stream == ACK_RESET_TIMEOUT_STREAM:
                    for root in roots:
                        pending.reset_timeout(root, now)
                    continue
                done = pending.complete_many(roots)  # the unknown ones timed out already: Storm ignores them
                if stream == ACK_ACK_STREAM:
                    every, before = self._sample_every, stats.acked
                    stats.acked += len(done)
                    for _, started, out, _ in done[(-before - 1) % every::every]:  # every n-th ack's latency
                        stats.latencies.append(now - started)
                        stats.latency_by[out] += now - started
                        stats.timed_by[out] += 1
                    counts, method = stats.acked_by, self._on_ack
                else:
                    stats.failed += len(done)
                    # The acker fails the trees it timed out this way too: those whose timer ran out.
                    cutoff = now - pending.timeout_secs + TIMEOUT_SLACK_SECS
                    stats.failed_timeout += sum(1 for _, _, _, timer in done if timer <= cutoff)
                    counts, method = stats.failed_by, self._on_fail
                if keyed:
                    counts.update(out for _, _, out, _ in done)
                if method is None:
                    continue
                for msg_id, _, _, _ in done:
                    try:
                        method(msg_id)
                    except Exception as exc:
                        self._user_code_failed(exc)

    def _call(self, method: Callable[[Any], None], msg_id: Any) -> None:
        try:
            method(msg_id)
        except Exception as exc:
            self._user_code_failed(exc)

    def close(self) -> None:
        try:
            if self._active:
                self.spout.deactivate()
            self.spout.close()
        except Exception:
            log.exception("spout close failed", component=self.component, task=self.task)
        self._acks.flush(self._outbox)  # inits of what deactivate/close emitted leave with the thread's last flush


class BoltExecutor(Executor):
    """Runs the bolt over its receive queue, a few batches per round: ``execute_batch`` once per batch when
    the bolt defines one, else ``execute`` per tuple in one loop (:func:`squall.api.component.deliver_each`);
    sends tick tuples when ``topology.tick.tuple.freq.secs`` is set for the component.

    Process latency (Storm's: from the start of an input's execute to its ack, sampled at
    ``topology.stats.sample.rate``) costs the hot path next to nothing: every n-th batch is sampled, a local
    countdown per batch. Per tuple, its first row is timed to its ack, whenever that comes, so held inputs
    count as well as auto-acked ones; ``ack`` looks it up only while some are timed. A batch bolt's rows acked
    by the end of its ``execute_batch`` call each take the call's time (see :meth:`_run_batch`)."""

    #: Batches taken per round before other tasks of the thread get a turn: as many as a spout step's bursts
    #: (``SpoutExecutor.BURSTS_PER_STEP``), so a batch tree spout's step (a piece per burst) is taken in one round.
    BATCHES_PER_ROUND = 16
    #: Most inputs timed to their ack at once: none is sampled while this many wait (a bolt that never acks
    #: some inputs cannot grow it).
    MAX_TIMED = 64

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        freq = self.spec.conf.get("topology.tick.tuple.freq.secs")
        self._tick_every = float(freq) if freq else None
        self._next_tick = float("inf")
        self.bolt: Bolt
        self._execute_batch: Callable[[TupleBatch], None] | None = None
        #: The input batch ``execute_batch`` is working on, and the ids of its rows the bolt acked or failed.
        self._batch: TupleBatch | None = None
        self._settled: set[int] = set()
        #: Per-tuple delivery: the sampled inputs not yet acked or failed, ``id(view) -> (view, execute start)``.
        self._timed: dict[int, tuple[Tuple, float]] = {}
        self._sample_every = _sample_period(self.spec.conf["topology.stats.sample.rate"])
        self._batches_to_sample = 1

    def refresh(self, layout: TopologyLayout, placement: Placement) -> None:
        """Routes as every executor; ticks, when the bolt has them, are an input stream of their own (Storm
        counts them executed and acked under ``__system:__tick``, which its UI leaves out of the totals)."""
        super().refresh(layout, placement)
        if self.spec.conf.get("topology.tick.tuple.freq.secs"):
            self._inputs = sorted({*self._inputs, TICK_INPUT})
            self._keyed_inputs = True

    def start(self) -> None:
        self.bolt, context = self._attach_user(Bolt)
        if type(self.bolt).execute_batch is not Bolt.execute_batch:
            self._execute_batch = self.bolt.execute_batch
        self.bolt.prepare(context.conf, context)
        if self._tick_every:
            self._next_tick = time.monotonic() + self._tick_every

    # -- Collector -------------------------------------------------------------------------------

    def emit(self, values: tuple[Any, ...], stream: str, anchors: tuple[Tuple, ...], direct_task: int | None,
             msg_id: Any) -> Sequence[int]:
        out = self._outs.get(stream)
        if out is None or len(values) != out.width or direct_task is not None or out.direct:
            out, targets = self._targets(values, stream, direct_task)
        else:
            targets = out.route(values) if out.constant is None else out.constant
        out.emitted += 1
        last = self._last
        if not anchors or not self._n_ackers or (len(anchors) == 1 and not anchors[0]._anchors):
            key = out.keys[PLAIN]
            for target in targets:  # none for a stream nobody subscribes to: no edges either
                batch = last.get(target)
                if batch is None or batch.key is not key:
                    batch = self._open(target, stream, out, PLAIN)
                batch.rows.append(values)
            return targets
        if len(anchors) == 1 and len(anchors[0]._anchors) == 1:  # one root: its edge is the row's id
            (anchor,) = anchors
            (root,) = anchor._anchors
            key = out.keys[ROOTS]
            for target in targets:
                edge = _bits(64) or 1
                anchor._ack_val ^= edge
                batch = last.get(target)
                if batch is None or batch.key is not key:
                    batch = self._open(target, stream, out, ROOTS)
                batch.rows.append(values)
                batch.ids.append(edge)  # type: ignore[union-attr]
                batch.roots.append(root)  # type: ignore[union-attr]
            return targets
        key = out.keys[ANCHORS]
        for target in targets:
            ids: dict[int, int] = {}
            first = 0
            for anchor in anchors:
                roots = anchor._anchors
                if roots:
                    edge = _bits(64) or 1
                    anchor._ack_val ^= edge
                    first = first or edge
                    for root in roots:
                        ids[root] = ids.get(root, 0) ^ edge
            batch = last.get(target)
            if batch is None or batch.key is not key:
                batch = self._open(target, stream, out, ANCHORS)
            batch.rows.append(values)
            batch.ids.append(first)  # type: ignore[union-attr]
            batch.anchors.append(ids)  # type: ignore[union-attr]
        return targets

    def emit_batch(self, rows: Sequence[tuple[Any, ...]], stream: str, anchors: tuple[Tuple, ...]) -> None:
        """``emit`` of every row anchored to all of ``anchors`` (a batch bolt's output), with the per-root
        work in C. An anchor whose roots no other anchor has takes one edge per emitted copy shared with
        all such anchors (each root's tree still sees every copy's edge exactly once), XORed into its
        ``ackVal`` once at the end; anchors sharing a root get an edge each, as ``emit`` gives them."""
        rows = rows if isinstance(rows, list) else list(rows)
        out = self._check_rows(rows, stream, None)
        out.emitted += len(rows)
        seen = Counter(root for anchor in anchors for root in anchor._anchors) if self._n_ackers else Counter()
        if not seen:
            self._emit_plain(rows, stream, out, None)
            return
        lone = [a for a in anchors if a._anchors and all(seen[root] == 1 for root in a._anchors)]
        shared = [a for a in anchors if a._anchors and any(seen[root] > 1 for root in a._anchors)]
        lone_roots = [root for anchor in lone for root in anchor._anchors]
        last, key, route, lone_edges = self._last, out.keys[ANCHORS], out.route, 0
        for values in rows:
            for target in route(values) if out.constant is None else out.constant:
                edge = _bits(64) or 1
                lone_edges ^= edge
                ids = dict.fromkeys(lone_roots, edge)
                for anchor in shared:
                    own = _bits(64) or 1
                    anchor._ack_val ^= own
                    for root in anchor._anchors:
                        ids[root] = ids.get(root, 0) ^ own
                batch = last.get(target)
                if batch is None or batch.key is not key:
                    batch = self._open(target, stream, out, ANCHORS)
                batch.rows.append(values)
                batch.ids.append(edge)  # type: ignore[union-attr]
                batch.anchors.append(ids)  # type: ignore[union-attr]
        for anchor in lone:
            anchor._ack_val ^= lone_edges

    def emit_each(self, rows: Sequence[tuple[Any, ...]], stream: str, inputs: TupleBatch,
                  index: Sequence[int] | None) -> None:
        """Row ``k`` anchored to ``inputs[index[k]]`` (``inputs[k]`` without ``index``), routed in bulk; no Tuple
        is made unless the inputs are tracked."""
        rows = rows if isinstance(rows, list) else list(rows)
        if index is None and len(rows) != len(inputs):
            raise ValueError(f"emit_each of {len(rows)} rows for {len(inputs)} inputs: pass index=[input "
                             "position of each row] when the rows are not one per input")
        if index is not None and len(index) != len(rows):
            raise ValueError(f"emit_each of {len(rows)} rows with {len(index)} index entries: give one per row")
        out = self._check_rows(rows, stream, None)
        if not inputs.tracked or not self._n_ackers or out.constant == ():  # untracked, or subscribed by none
            out.emitted += len(rows)
            self._emit_plain(rows, stream, out, None)
            return
        piece = inputs.piece
        if piece is not None and piece.left > 0 and not inputs._views:  # inputs of one piece, none settled yet
            out.emitted += len(rows)  # the outputs are pieces of its tree, acked with the input piece
            piece.fold ^= self._emit_pieces(rows, stream, out, None, piece.root)
            return
        positions = range(len(rows)) if index is None else index
        if inputs.roots is None or inputs._views:  # several roots per input, or views made: per row
            for values, i in zip(rows, positions):
                self.emit(values, stream, (inputs[i],), None, None)
            return
        out.emitted += len(rows)
        xor = inputs._xor
        if xor is None:
            xor = inputs._xor = [0] * len(inputs)
        last, route, constant = self._last, out.route, out.constant
        plain, tracked = out.keys[PLAIN], out.keys[ROOTS]
        roots = [inputs.roots[i] for i in positions]
        if constant is not None and len(constant) == 1 and 0 not in roots:  # one target, every input tracked
            edges = _edges(len(rows))
            for i, edge in zip(positions, edges):
                xor[i] ^= edge
            batch = self._batch_for(constant[0], stream, out, ROOTS)
            batch.rows.extend(rows)
            batch.ids.extend(edges)  # type: ignore[union-attr]
            batch.roots.extend(roots)  # type: ignore[union-attr]
            return
        for values, i, root in zip(rows, positions, roots):
            for target in route(values) if constant is None else constant:
                batch = last.get(target)
                if not root:  # an untracked input
                    if batch is None or batch.key is not plain:
                        batch = self._open(target, stream, out, PLAIN)
                    batch.rows.append(values)
                    continue
                edge = _bits(64) or 1
                xor[i] ^= edge
                if batch is None or batch.key is not tracked:
                    batch = self._open(target, stream, out, ROOTS)
                batch.rows.append(values)
                batch.ids.append(edge)  # type: ignore[union-attr]
                batch.roots.append(root)  # type: ignore[union-attr]

    def ack(self, tup: Tuple) -> None:
        self.stats.acked += 1
        if self._keyed_inputs:
            self.stats.acked_by[f"{tup._component}:{tup._stream}"] += 1
        if self._timed:
            timed = self._timed.pop(id(tup), None)  # the view is held there, so its id is no other tuple's
            if timed is not None:
                self._time_process(tup._component, tup._stream, time.perf_counter() - timed[1], 1)
        if self._batch is not None:
            self._settled.add(id(tup))
        roots = tup._anchors
        if roots and self._n_ackers:
            ack_val, n, acks = tup._ack_val, self._n_ackers, self._acks
            if roots.__class__ is not dict and isinstance(roots, Piece):  # a row of a piece: it acks with its last row
                value = roots.ack_row(tup)
                if value is not None:
                    for root in roots:
                        acks.roots[root % n].append(root)
                        acks.values[root % n].append(value)
                return
            for root, edge in roots.items():
                acks.roots[root % n].append(root)
                acks.values[root % n].append(edge ^ ack_val)

    def fail(self, tup: Tuple) -> None:
        self.stats.failed += 1
        if self._raised_on(tup):
            self.stats.failed_exception += 1
        if self._keyed_inputs:
            self.stats.failed_by[f"{tup._component}:{tup._stream}"] += 1
        if self._timed:
            self._timed.pop(id(tup), None)  # a failed input has no process latency
        if self._batch is not None:
            self._settled.add(id(tup))
        if tup._anchors and self._n_ackers:
            n, fails, piece = self._n_ackers, self._acks.fails, tup._anchors
            if piece.__class__ is not dict and isinstance(piece, Piece) and not piece.fail_row(tup):  # failed already
                return
            for root in tup._anchors:
                fails[root % n].append(root)

    def reset_timeout(self, tup: Tuple) -> None:
        """Storm's resetTimeout: each root's acker restarts the tree's timer and forwards the reset to the spout."""
        if self._n_ackers:
            n, resets = self._n_ackers, self._acks.resets
            for root in tup._anchors:
                resets[root % n].append(root)

    # -- the loop --------------------------------------------------------------------------------

    def step(self, now: float) -> float:
        self._now = now
        self._heartbeat(now)
        bolt = self.bolt
        if now >= self._next_tick:
            self._next_tick = now + self._tick_every  # type: ignore[operator]
            started = time.perf_counter()
            self._execute(bolt, tick_tuple(self._tick_every))  # type: ignore[arg-type]
            self._count_executed(TICK_INPUT, 1, time.perf_counter() - started)  # Storm's: an input of its own
        clock, execute_batch = time.perf_counter, self._execute_batch
        to_sample = self._batches_to_sample  # a local: the batches not sampled cost a decrement each
        batches = self.inbox.take_some(self.BATCHES_PER_ROUND)
        for batch in batches:
            started = clock()
            to_sample -= 1
            if to_sample:
                if execute_batch is not None:
                    self._run_batch(execute_batch, batch)
                elif not batch.tracked or not self._n_ackers:  # acking only counts them: no call per tuple
                    self._count_acks(batch, deliver_each(bolt, batch.views(), self._failed_input, count_acks=True))
                elif batch.roots is not None:  # one root per row: acked all at once, not a call per tuple
                    acked: list[Tuple] = []
                    deliver_each(bolt, batch.views(), self._failed_input, auto_acked=acked)
                    self._ack_views(batch, acked)
                else:  # root maps, or a piece
                    deliver_each(bolt, batch.views(), self._failed_input)
            else:
                to_sample = self._sample_every
                self._run_sampled(execute_batch, batch, started)
            rows = len(batch.rows) if batch.__class__ is TupleBatch else len(batch)  # as Inbox.take counts
            self._count_executed(f"{batch.component}:{batch.stream}" if self._keyed_inputs else None, rows,
                                 clock() - started)
        self._batches_to_sample = to_sample
        self._acks.flush(self._outbox)  # the step's acks: one message per acker and kind for all its roots
        if len(batches) < self.BATCHES_PER_ROUND:  # the inbox is empty: wait for input or the next timer
            return max(0.0, min(self._next_beat, self._next_tick) - now)
        return 0.0

    def _count_executed(self, key: str | None, rows: int, elapsed: float) -> None:
        """``rows`` inputs executed in ``elapsed`` seconds, also under their input ``key`` (``component:stream``)
        unless None; one stream per batch, so each tuple takes the batch's mean time."""
        stats = self.stats
        stats.executed += rows
        stats.execute_secs += elapsed
        if key is not None:
            stats.executed_by[key] += rows
            stats.latency_by[key] += elapsed
            stats.timed_by[key] += rows

    def _count_acks(self, batch: TupleBatch, acked: int) -> None:
        """``acked`` inputs of ``batch`` were acked (counted, nothing to tell an acker)."""
        self.stats.acked += acked
        if self._keyed_inputs:
            self.stats.acked_by[f"{batch.component}:{batch.stream}"] += acked

    def _ack_views(self, batch: TupleBatch, views: list[Tuple]) -> None:
        """:meth:`ack` of each of ``views``, rows of a batch of one root per row (each view's anchors ``{root:
        id}``, or none: an untracked row) that no sampled timing holds, in a loop of its own: no call per tuple."""
        self._count_acks(batch, len(views))
        n, acks = self._n_ackers, self._acks
        if n == 1:  # a tracked view has its edge as id, an untracked one 0 and no anchors
            acks.roots[0].extend([root for tup in views for root in tup._anchors])
            acks.values[0].extend([tup._id ^ tup._ack_val for tup in views if tup._id])
            return
        for tup in views:
            for root in tup._anchors:
                acks.roots[root % n].append(root)
                acks.values[root % n].append(tup._id ^ tup._ack_val)

    def _run_sampled(self, execute_batch: Callable[[TupleBatch], None] | None, batch: TupleBatch,
                     started: float) -> None:
        """A batch whose process latency is sampled, from ``started``. Per tuple, its first row is timed to its
        ack, whenever that comes; a batch bolt's acks made by the end of the call each take the call's time (see
        :meth:`_run_batch`)."""
        if execute_batch is not None:
            acked = self.stats.acked
            self._run_batch(execute_batch, batch)
            acked = self.stats.acked - acked
            if acked:
                self._time_process(batch.component, batch.stream, (time.perf_counter() - started) * acked, acked)
            return
        views = batch.views()
        first = next(views, None)
        if first is None:
            return
        if len(self._timed) < self.MAX_TIMED:
            self._timed[id(first)] = (first, started)
        deliver_each(self.bolt, chain((first,), views), self._failed_input)

    def _time_process(self, component: str, stream: str, secs: float, count: int) -> None:
        stats = self.stats
        stats.process_secs += secs
        stats.processed += count
        if self._keyed_inputs:
            key = f"{component}:{stream}"
            stats.process_by[key] += secs
            stats.processed_by[key] += count

    def _raised_on(self, tup: Tuple) -> bool:
        """Whether ``tup`` fails because user code raised on it: deliver_each fails the input execute raised on
        while it is still the bolt's current input (Bolt.fail clears that first)."""
        return self.bolt._input is tup

    def _failed_input(self, exc: Exception) -> None:
        self._user_code_failed(exc, already_reported=True)

    def _run_batch(self, execute_batch: Callable[[TupleBatch], None], batch: TupleBatch) -> None:
        """``execute_batch`` with ``deliver``'s semantics per row: under ``auto_ack`` the rows the bolt did not
        ack or fail are acked when it returns; an exception is reported once and fails every such row.

        Process latency, in a sampled batch (:meth:`_run_sampled`): each ack made by the call's end (auto-acked
        rows and rows acked inside) takes the call's time, as all its rows began together. Rows held past the
        call are not timed (that would cost every ack a lookup on the hot path); an earlier call's row acked in
        this one counts this call's time."""
        self._batch = batch
        try:
            execute_batch(batch)
        except Exception as exc:
            self.bolt.report_error(exc)
            failed_before = self.stats.failed
            self._settle_rest(batch, failed=True)
            self.stats.failed_exception += self.stats.failed - failed_before
            self._user_code_failed(exc, already_reported=True)
        else:
            if self.bolt.auto_ack:
                self._settle_rest(batch, failed=False)
        finally:
            self._batch = None
            self._settled.clear()

    def _settle_rest(self, batch: TupleBatch, *, failed: bool) -> None:
        views, settled = batch._views or {}, self._settled
        if batch.piece is not None and self._n_ackers:
            self._settle_piece(batch, batch.piece, views, failed)
            return
        if batch.tracked and self._n_ackers and not views and batch.roots is not None:
            self._settle_columns(batch, failed)
            return
        if batch.tracked and self._n_ackers:
            settle = self.fail if failed else self.ack
            for i in range(len(batch)):
                tup = views.get(i)
                if tup is None:
                    settle(batch[i])
                elif id(tup) not in settled:
                    settle(tup)
            return
        # Untracked rows: settling them only counts them.
        rest = (len(batch.rows) if batch.__class__ is TupleBatch else len(batch)) - \
            sum(1 for tup in views.values() if id(tup) in settled)
        stats = self.stats
        if failed:
            stats.failed += rest
        else:
            stats.acked += rest
        if self._keyed_inputs:
            (stats.failed_by if failed else stats.acked_by)[f"{batch.component}:{batch.stream}"] += rest

    def _settle_piece(self, batch: TupleBatch, piece: Piece, views: dict[int, Tuple], failed: bool) -> None:
        """Ack or fail the rows of a piece batch the bolt did not settle, in O(1) plus its views: one ack (the
        piece's edge XOR what was anchored to its rows) once no row is left, or one fail for the root. The rows
        left are the piece's count, not the batch's minus its settled views: a row may have been acked through a
        view the batch does not keep (``batch.view(i)``)."""
        ack_val, done = 0, 0
        for view in views.values():
            if view._anchors is piece:
                ack_val ^= view._ack_val
                view._anchors = piece.settled or piece._settled()
            else:
                done += 1  # settled by the bolt (stats counted there)
        rows = (len(batch.rows) if batch.__class__ is TupleBatch else len(batch)) - done
        stats, n, root = self.stats, self._n_ackers, piece.root
        if failed:
            stats.failed += rows
            if piece.fail():
                self._acks.fails[root % n].append(root)
        else:
            stats.acked += rows
            if piece.left > 0:  # every row not yet acked: piece.settle(ack_val, piece.left), without the call
                piece.fold ^= ack_val
                piece.left = 0
                self._acks.roots[root % n].append(root)
                self._acks.values[root % n].append(piece.edge ^ piece.fold)
        if self._keyed_inputs:
            (stats.failed_by if failed else stats.acked_by)[f"{batch.component}:{batch.stream}"] += rows

    def _settle_columns(self, batch: TupleBatch, failed: bool) -> None:
        """Ack or fail every row of a batch no view was made of, from its columns: each tracked row has one
        root, whose edge is its id, and what was anchored to it is in ``batch._xor``, so no Tuple is needed."""
        rows, stats, n, acks, roots = len(batch), self.stats, self._n_ackers, self._acks, batch.roots
        one = (roots[0] if roots and roots[0] and roots[0] == roots[-1] and roots.count(roots[0]) == rows  # type: ignore[index,union-attr]
               else None)
        if failed:
            stats.failed += rows
            for root in (one,) if one else roots:  # type: ignore[union-attr]
                if root:
                    acks.fails[root % n].append(root)
        else:
            stats.acked += rows
            anchored = batch._xor  # what was emitted anchored to each row (emit_each)
            values = batch.ids if anchored is None else list(map(xor, batch.ids, anchored))  # type: ignore[arg-type]
            if one:  # one tree (a spout batch's): its rows' acks XOR into one
                acks.roots[one % n].append(one)
                acks.values[one % n].append(reduce(xor, values, 0))
            elif n == 1 and 0 not in batch.ids:  # type: ignore[operator]
                acks.roots[0].extend(batch.roots)  # type: ignore[arg-type]
                acks.values[0].extend(values)
            else:
                for root, value in zip(batch.roots, values):  # type: ignore[arg-type]
                    if root:
                        acks.roots[root % n].append(root)
                        acks.values[root % n].append(value)
        if self._keyed_inputs:
            (stats.failed_by if failed else stats.acked_by)[f"{batch.component}:{batch.stream}"] += rows

    def _execute(self, bolt: Bolt, tup: Tuple) -> None:
        try:
            deliver(bolt, tup)
        except Exception as exc:
            self._user_code_failed(exc, already_reported=True)

    def close(self) -> None:
        try:
            self.bolt.cleanup()
        except Exception:
            log.exception("bolt cleanup failed", component=self.component, task=self.task)
        self._acks.flush(self._outbox)  # acks made in cleanup leave with the thread's last flush


#: The input stats key of tick tuples.
TICK_INPUT = f"{SYSTEM_COMPONENT}:{TICK_STREAM}"


def _sample_period(rate: float) -> int:
    """Every how many acks one latency is kept, for ``topology.stats.sample.rate``."""
    return max(1, round(1 / rate)) if rate > 0 else 1 << 62


def _to_wire(stats: TaskStats) -> dict[str, Any]:
    """Stats as a plain dict for the heartbeat tuple (msgpack between workers)."""
    return {f.name: getattr(stats, f.name) for f in fields(stats)}
