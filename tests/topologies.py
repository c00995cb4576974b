"""Components for worker tests. In local mode tests read their attributes directly; across worker
processes they append JSON lines under ``record_dir`` (one file per task), which tests then read.

This module travels to worker processes inside a code package, so it imports only squall.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

from squall.api.component import Bolt, Spout, Stream
from squall.api.dsl import Topology
from squall.api.spark import SparkBolt
from squall.api.stateful import StatefulBolt
from squall.api.tuple import Tuple, TupleBatch

#: Gates a test opens to let held tuples through (in-process only), by name.
GATES: dict[str, threading.Event] = {}


class _Records:
    """Appends JSON lines to ``<record_dir>/<kind>-<task>.jsonl`` when a record dir is given."""

    record_dir: str | None = None

    def record(self, kind: str, value: Any) -> None:
        if self.record_dir is None:
            return
        path = Path(self.record_dir) / f"{kind}-{self.context.task_id}.jsonl"
        with open(path, "a") as out:
            out.write(json.dumps(value) + "\n")


def read_records(record_dir: Path, kind: str) -> list[Any]:
    """Every record of ``kind`` written by any task, in file order per task (a line still being written is
    not one yet)."""
    return [json.loads(line) for path in sorted(record_dir.glob(f"{kind}-*.jsonl"))
            for line in path.read_text().split("\n")[:-1] if line]


class Numbers(Spout, _Records):
    """Emits ``(key, n)`` for this task's share of ``range(count)`` (n % tasks == index), key = ``k<n % keys>``;
    reliable by default (msg id n), replaying failed numbers before new ones."""

    outputs = ["key", "n"]

    def __init__(self, count: int, keys: int = 10, reliable: bool = True, record_dir: str | None = None) -> None:
        self.count, self.keys, self.reliable, self.record_dir = count, keys, reliable, record_dir
        self.calls = 0
        self.acked: list[int] = []
        self.failed: list[int] = []
        self.events: list[str] = []

    def open(self, conf: Any, context: Any) -> None:
        self.fresh = iter(range(context.task_index, self.count, len(context.tasks)))
        self.replays: deque[int] = deque()

    def next_tuple(self) -> None:
        self.calls += 1
        n = self.replays.popleft() if self.replays else next(self.fresh, None)
        if n is not None:
            self.emit([f"k{n % self.keys}", n], msg_id=n if self.reliable else None)

    def ack(self, msg_id: int) -> None:
        self.acked.append(msg_id)
        self.record("acked", msg_id)

    def fail(self, msg_id: int) -> None:
        self.failed.append(msg_id)
        self.replays.append(msg_id)

    def activate(self) -> None:
        self.events.append("activate")

    def deactivate(self) -> None:
        self.events.append("deactivate")


class Snoop(Spout, _Records):
    """Records what its worker lets user code see — its conf, its environment, and the conf file its worker was
    started with (the path after ``--config`` on the worker's command line) — then reports an error."""

    outputs = ["n"]

    def __init__(self, record_dir: str) -> None:
        self.record_dir = record_dir

    def open(self, conf: Any, context: Any) -> None:
        argv = Path("/proc/self/cmdline").read_bytes().split(b"\0")
        conf_file = Path(argv[argv.index(b"--config") + 1].decode())
        self.record("seen", {"conf": dict(conf), "env": dict(os.environ), "conf_file": conf_file.read_text()})
        self.report_error("snooped")

    def next_tuple(self) -> None:
        pass


class Spy(Spout, _Records):
    """Tries to read each of ``targets`` (a file's bytes, a directory's listing) and records, per path, the
    exception's type name or ``"read"``: what a worker's user code can reach on its host."""

    outputs = ["n"]

    def __init__(self, record_dir: str, targets: list[str]) -> None:
        self.record_dir = record_dir
        self.targets = targets

    def open(self, conf: Any, context: Any) -> None:
        found = {}
        for target in self.targets:
            try:
                os.listdir(target) if Path(target).is_dir() else Path(target).read_bytes()
                found[target] = "read"
            except OSError as exc:
                found[target] = type(exc).__name__
        self.record("spied", found)

    def next_tuple(self) -> None:
        pass


class Paced(Spout):
    """Emits ``(n,)`` reliably at ``rate`` tuples/s and nothing while ahead of it; counts its ``calls``
    and ``emitted`` tuples."""

    outputs = ["n"]

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.calls = self.emitted = 0

    def open(self, conf: Any, context: Any) -> None:
        self.start = time.monotonic()

    def next_tuple(self) -> None:
        self.calls += 1
        if self.emitted < (time.monotonic() - self.start) * self.rate:
            self.emit([self.emitted], msg_id=self.emitted)
            self.emitted += 1


class PacedBatch(Paced):
    """``Paced`` through the batch API: ``next_batch`` emits what is due, at most ``max_rows``, in one
    ``emit_many``; ``calls`` counts its calls."""

    def next_batch(self, max_rows: int) -> None:
        self.calls += 1
        due = min(max_rows, int((time.monotonic() - self.start) * self.rate) - self.emitted)
        if due > 0:
            ns = range(self.emitted, self.emitted + due)
            self.emitted += due
            self.emit_many([(n,) for n in ns], msg_ids=ns)


class Recorder(Bolt, _Records):
    """Keeps (source component, stream, values) of every input; records ``values`` as ``seen``, and
    when each tick came (``time.monotonic()``) as ``tick_times``."""

    def __init__(self, record_dir: str | None = None) -> None:
        self.record_dir = record_dir
        self.seen: list[tuple[str, str, tuple[Any, ...]]] = []
        self.tick_times: list[float] = []

    def execute(self, tup: Tuple) -> None:
        if tup.is_tick:
            self.seen.append(("__tick", "__tick", tup.values))
            self.tick_times.append(time.monotonic())
            return
        self.seen.append((tup.component, tup.stream, tup.values))
        self.record("seen", list(tup.values))


class Arrivals(Bolt, _Records):
    """A sink that records when each input arrived (``time.time()``) as ``arrived``: the rate it saw."""

    def __init__(self, record_dir: str) -> None:
        self.record_dir = record_dir

    def execute(self, tup: Tuple) -> None:
        self.record("arrived", time.time())


class Forward(Bolt):
    """Re-emits each input, anchored to it (auto_ack)."""

    outputs = ["key", "n"]

    def execute(self, tup: Tuple) -> None:
        self.emit(tup.values)


class RootsOf(Bolt):
    """Keeps the root ids of each input (``tup.anchors``: the spout tuples it descends from) by its ``n``."""

    def __init__(self) -> None:
        self.roots: dict[int, list[int]] = {}

    def execute(self, tup: Tuple) -> None:
        self.roots[tup["n"]] = list(tup.anchors)


class Tag(Bolt):
    """Forwards ``(key, n)`` as ``(key, n, release, task)``, where ``release`` is ``VERSION`` of the ``release``
    module shipped in the code package (which code each task runs) plus the conf's ``tag.suffix`` (which
    conf it runs with: updated in place by ``update``)."""

    outputs = ["key", "n", "release", "task"]

    def prepare(self, conf: Any, context: Any) -> None:
        import release  # from the code package, so each code version brings its own

        self.version, self.task = release.VERSION, context.task_id
        self.update(conf)

    def update(self, conf: Any) -> None:
        self.release = self.version + conf.get("tag.suffix", "")

    def execute(self, tup: Tuple) -> None:
        self.emit([*tup.values, self.release, self.task])


class EmitTwice(Bolt):
    """Emits each input twice in one tuple anchored to it twice (Storm: two edges, one ack)."""

    outputs = ["key", "n"]
    auto_ack = False

    def execute(self, tup: Tuple) -> None:
        self.emit(tup.values, anchors=[tup, tup])
        self.ack(tup)


class EvenTwice(Bolt):
    """Re-emits each input, and even n a second time: two tuples of one tree (auto_ack anchors both)."""

    outputs = ["key", "n"]

    def execute(self, tup: Tuple) -> None:
        for _ in range(2 if tup["n"] % 2 == 0 else 1):
            self.emit(tup.values)


class BatchOf(Bolt):
    """Every ``size`` inputs: ``rows`` tuples ``(batch number, row)`` anchored to the whole batch, then acks it."""

    outputs = ["key", "n"]
    auto_ack = False

    def __init__(self, size: int, rows: int) -> None:
        self.size, self.rows = size, rows
        self.batch: list[Tuple] = []
        self.batches = 0

    def execute(self, tup: Tuple) -> None:
        self.batch.append(tup)
        if len(self.batch) == self.size:
            self.batches += 1
            self.emit_batch([(f"b{self.batches}", row) for row in range(self.rows)], anchors=self.batch)
            for held in self.batch:
                self.ack(held)
            self.batch = []


class Holdout(Bolt):
    """Acks every input except those whose n is in ``never`` (held forever: their trees time out)."""

    auto_ack = False

    def __init__(self, never: list[int]) -> None:
        self.never = set(never)

    def execute(self, tup: Tuple) -> None:
        if tup["n"] not in self.never:
            self.ack(tup)


class Swallow(Bolt):
    """Acks nothing: every tree through it times out."""

    auto_ack = False

    def execute(self, tup: Tuple) -> None:
        pass


class Keeper(Bolt):
    """Holds each input ``hold_secs`` (its own clock, looked at on ticks), then acks it; while holding, calls
    ``reset_timeout`` on every tick when ``reset``. ``held_for`` records (n, seconds held) per ack."""

    auto_ack = False

    def __init__(self, hold_secs: float, reset: bool) -> None:
        self.hold_secs, self.reset = hold_secs, reset
        self.held: list[tuple[Tuple, float]] = []
        self.held_for: list[tuple[int, float]] = []

    def execute(self, tup: Tuple) -> None:
        now = time.monotonic()
        if not tup.is_tick:
            self.held.append((tup, now))
            return
        for held, since in list(self.held):
            if now - since >= self.hold_secs:
                self.held.remove((held, since))
                self.ack(held)
                self.held_for.append((held["n"], now - since))
            elif self.reset:
                self.reset_timeout(held)


class Gate(Bolt):
    """Holds every input until the gate ``name`` opens (checked on each tick), then forwards and acks them."""

    outputs = ["key", "n"]
    auto_ack = False

    def __init__(self, name: str) -> None:
        self.gate = GATES.setdefault(name, threading.Event())
        self.held: list[Tuple] = []

    def execute(self, tup: Tuple) -> None:
        if not tup.is_tick:
            self.held.append(tup)
        if self.gate.is_set():
            for held in self.held:
                self.emit(held.values, anchors=held)
                self.ack(held)
            self.held.clear()


class Blocked(Bolt):
    """Blocks its task thread in ``execute`` until the gate ``name`` opens (run it with ``squall.own.thread``: its
    receive queue then fills while the rest of the worker runs); counts what it executed."""

    def __init__(self, name: str) -> None:
        self.gate = GATES.setdefault(name, threading.Event())
        self.executed = 0

    def execute(self, tup: Tuple) -> None:
        self.gate.wait()
        self.executed += 1


class Join(Bolt):
    """Waits for the same n from two sources, emits one tuple anchored to both inputs, acks both."""

    outputs = ["n"]
    auto_ack = False

    def prepare(self, conf: Any, context: Any) -> None:
        self.parts: dict[int, list[Tuple]] = {}
        self.joined: list[int] = []

    def execute(self, tup: Tuple) -> None:
        parts = self.parts.setdefault(tup["n"], [])
        parts.append(tup)
        if len(parts) == 2:
            del self.parts[tup["n"]]
            self.emit([tup["n"]], anchors=parts)
            for part in parts:
                self.ack(part)
            self.joined.append(tup["n"])


class Director(Bolt):
    """Sends every input on a direct stream to the ``index``-th task of ``target``."""

    outputs = {"direct": Stream(["key", "n"], direct=True)}

    def __init__(self, target: str, index: int) -> None:
        self.target, self.index = target, index

    def execute(self, tup: Tuple) -> None:
        self.emit(tup.values, "direct", direct_task=self.context.component_tasks[self.target][self.index])


class Boom(Bolt):
    """Raises on inputs whose n is a multiple of ``every``; passes the rest on."""

    outputs = ["key", "n"]

    def __init__(self, every: int) -> None:
        self.every = every

    def execute(self, tup: Tuple) -> None:
        if tup["n"] % self.every == 0:
            raise RuntimeError(f"boom on {tup['n']}")
        self.emit(tup.values)


class Mixed(Bolt):
    """An ``auto_ack`` bolt that re-emits each input anchored to it, and settles some itself on first sight:
    acks n % 3 == 0 by hand, fails n % 3 == 1 by hand (a replay is left to the automatic ack), and leaves the rest
    to the automatic ack."""

    outputs = ["key", "n"]

    def __init__(self) -> None:
        self.seen: set[int] = set()

    def execute(self, tup: Tuple) -> None:
        n, first = tup["n"], tup["n"] not in self.seen
        self.seen.add(n)
        self.emit(tup.values, anchors=[tup])
        if n % 3 == 0:
            self.ack(tup)
        elif first and n % 3 == 1:
            self.fail(tup)


class Picky(Bolt):
    """Fails some inputs once each, one way per kind, and acks the rest (and every replay): raises on n % 10 == 0,
    calls ``fail`` on n % 10 == 1, and holds n == 2 (its tree times out)."""

    auto_ack = False

    def __init__(self) -> None:
        self.seen: set[int] = set()

    def execute(self, tup: Tuple) -> None:
        n, first = tup["n"], tup["n"] not in self.seen
        self.seen.add(n)
        if first and n % 10 == 0:
            raise RuntimeError(f"picky about {n}")
        if first and n % 10 == 1:
            self.fail(tup)
        elif not (first and n == 2):
            self.ack(tup)


class Metered(Bolt):
    """Registers Storm-style user metrics in ``prepare``: a counter ``seen`` of its inputs, a gauge ``last.n``
    (the latest n), a histogram ``n.sizes`` of n; forwards each input."""

    outputs = ["key", "n"]

    def prepare(self, conf: Any, context: Any) -> None:
        self.seen = context.register_counter("seen")
        self.sizes = context.register_histogram("n.sizes")
        self.last = -1
        context.register_gauge("last.n", lambda: self.last)

    def execute(self, tup: Tuple) -> None:
        self.seen.inc()
        self.last = tup["n"]
        self.sizes.update(tup["n"])
        self.emit(tup.values)


class Reporter(Bolt):
    """Calls report_error once per input and acks it."""

    def execute(self, tup: Tuple) -> None:
        self.report_error(f"bad input {tup['n']}")


class BrokenPrepare(Bolt):
    """Fails in ``prepare`` (while the file ``fixed`` does not exist, when given), so no worker holding it
    can start."""

    def __init__(self, fixed: str | None = None) -> None:
        self.fixed = fixed

    def prepare(self, conf: Any, context: Any) -> None:
        if self.fixed is None or not Path(self.fixed).exists():
            raise ConnectionError("cannot reach the feature store (on purpose)")

    def execute(self, tup: Tuple) -> None:
        pass


class KeySums(SparkBolt):
    """Per key of the batch: how many tuples and the sum of ``n`` (in Spark); the first ``fail_batches``
    batches raise inside ``transform``; with a ``gate`` name, the first batch's ``transform`` waits until
    the test opens ``GATES[gate]``."""

    outputs = ["key", "count", "total"]

    def __init__(self, fail_batches: int = 0, gate: str | None = None) -> None:
        self.fail_batches = fail_batches
        self.batches = 0
        self.gate = None if gate is None else GATES.setdefault(gate, threading.Event())

    def transform(self, batch: Any) -> Any:
        self.batches += 1
        if self.gate is not None and self.batches == 1:
            self.gate.wait()
        if self.batches <= self.fail_batches:
            raise RuntimeError(f"injected failure in batch {self.batches}")
        return self.spark.sql("SELECT key, COUNT(*) AS count, SUM(n) AS total FROM {batch} GROUP BY key", batch=batch)


class BatchNumbers(Numbers):
    """``Numbers`` through the batch API: ``next_batch`` emits up to ``max_rows`` numbers (replays first) with
    one ``emit_many``; ``max_rows`` asked for are kept in ``asked``. With ``one_tree`` each batch is one tree
    (msg id: the tuple of its numbers, kept in ``trees_acked``/``trees_failed``); else each number its own."""

    def __init__(self, *args: Any, one_tree: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.one_tree = one_tree
        self.trees_acked: list[tuple[int, ...]] = []
        self.trees_failed: list[tuple[int, ...]] = []

    def open(self, conf: Any, context: Any) -> None:
        super().open(conf, context)
        self.asked: list[int] = []

    def next_batch(self, max_rows: int) -> None:
        self.asked.append(max_rows)
        ns = [self.replays.popleft() for _ in range(min(max_rows, len(self.replays)))]
        ns += [n for _, n in zip(range(max_rows - len(ns)), self.fresh)]
        if ns:
            rows = [(f"k{n % self.keys}", n) for n in ns]
            if self.one_tree and self.reliable:
                self.emit_many(rows, msg_id=tuple(ns))
            else:
                self.emit_many(rows, msg_ids=ns if self.reliable else None)

    def ack(self, msg_id: Any) -> None:
        if not self.one_tree:
            return super().ack(msg_id)
        self.trees_acked.append(msg_id)
        self.acked.extend(msg_id)

    def fail(self, msg_id: Any) -> None:
        if not self.one_tree:
            return super().fail(msg_id)
        self.trees_failed.append(msg_id)
        self.failed.extend(msg_id)
        self.replays.extend(msg_id)


class BatchForward(Bolt):
    """Re-emits each input through ``emit_each`` (each row anchored to its own input)."""

    outputs = ["key", "n"]

    def execute(self, tup: Tuple) -> None:
        raise AssertionError("execute_batch is defined: execute gets ticks only")

    def execute_batch(self, batch: TupleBatch) -> None:
        self.emit_each(batch.values, inputs=batch)


class BatchBoom(Bolt):
    """Raises on the first batch holding an n that is a multiple of ``every`` (each such n once); forwards the
    rest with ``emit_each``, keeping even n only (``index`` picks the inputs)."""

    outputs = ["key", "n"]

    def __init__(self, every: int) -> None:
        self.every = every
        self.boomed: set[int] = set()

    def execute(self, tup: Tuple) -> None:
        pass

    def execute_batch(self, batch: TupleBatch) -> None:
        fresh = [n for n in batch.column("n") if n % self.every == 0 and n not in self.boomed]
        if fresh:
            self.boomed.update(fresh)
            raise RuntimeError(f"boom on {fresh}")
        keep = [i for i, (_, n) in enumerate(batch.values) if n % 2 == 0]
        self.emit_each([batch.values[i] for i in keep], inputs=batch, index=keep)


class Interleave(Bolt):
    """For each input emits on ``first``, then ``second``, then ``first`` again: per-target order across streams."""

    outputs = {"first": ["key", "n"], "second": ["key", "n"]}

    def execute(self, tup: Tuple) -> None:
        key, n = tup.values
        self.emit([key, 3 * n], "first")
        self.emit([key, 3 * n + 1], "second")
        self.emit([key, 3 * n + 2], "first")


def recorded_numbers(name: str, records: Path, *, workers: int, sinks: int = 1,
                     conf: dict[str, Any] | None = None) -> Topology:
    """``numbers`` (reliable Numbers over 20 keys) → ``sink`` (Recorder, fields grouping on the key), both writing
    under ``records`` (made here): what the process-cluster fault tests count lost and replayed messages with."""
    records.mkdir(exist_ok=True)
    t = Topology(name, {"topology.workers": workers, **(conf or {})})
    numbers = t.spout("numbers", Numbers, args=[10_000_000, 20], kwargs={"record_dir": str(records)})
    t.bolt("sink", Recorder, args=[str(records)], parallelism=sinks).fields(numbers, "key")
    return t


class RowByRow(Bolt):
    """Settles each input on its own (``execute``, no ``execute_batch``), by its ``n``: the first time it sees an n
    in ``fail`` it fails it, in ``twice`` it acks it twice, in ``hold`` it holds it until the gate ``gate`` opens
    (checked on ticks; then it acks the held ones); every other input it acks once. Each settled n is recorded in
    ``acked``/``failed``, held ones in ``held``."""

    auto_ack = False

    def __init__(self, fail: list[int] = [], twice: list[int] = [], hold: list[int] = [],  # noqa: B006
                 gate: str | None = None) -> None:
        self.fail_once, self.twice, self.hold = set(fail), set(twice), set(hold)
        self.gate = None if gate is None else GATES.setdefault(gate, threading.Event())
        self.held: list[Tuple] = []
        self.acked: list[int] = []
        self.failed: list[int] = []

    def execute(self, tup: Tuple) -> None:
        if tup.is_tick:
            if self.gate is not None and self.gate.is_set():
                for held in self.held:
                    self.ack(held)
                    self.acked.append(held["n"])
                self.held.clear()
            return
        n = tup["n"]
        if n in self.fail_once:
            self.fail_once.discard(n)
            self.fail(tup)
            self.failed.append(n)
        elif n in self.hold:
            self.hold.discard(n)
            self.held.append(tup)
        else:
            self.ack(tup)
            if n in self.twice:
                self.twice.discard(n)
                self.ack(tup)
            self.acked.append(n)


class StatefulCount(StatefulBolt):
    """Counts each key in its state and emits ``(key, count)``, anchored; keeps the hooks it saw as ``hooks``
    (``(name, txid)``). Once it counted something, its first task's first ``fail_prepares`` pre_prepare calls
    raise, so those checkpoints roll back."""

    outputs = ["key", "count"]

    def __init__(self, fail_prepares: int = 0) -> None:
        self.fail_prepares = fail_prepares
        self.hooks: list[tuple[str, int | None]] = []
        self.executed = 0

    def init_state(self, state: Any) -> None:
        super().init_state(state)
        self.hooks.append(("init_state", None))

    def execute(self, tup: Tuple) -> None:
        self.executed += 1
        count = self.state.get(tup["key"], 0) + 1
        self.state.put(tup["key"], count)
        self.emit([tup["key"], count])

    def pre_prepare(self, txid: int) -> None:
        self.hooks.append(("pre_prepare", txid))
        if self.fail_prepares and self.executed and self.context.task_index == 0:
            self.fail_prepares -= 1
            raise RuntimeError(f"pre_prepare of txid {txid} failed on purpose")

    def pre_commit(self, txid: int) -> None:
        self.hooks.append(("pre_commit", txid))

    def pre_rollback(self) -> None:
        self.hooks.append(("pre_rollback", None))


class StatefulBatchCount(StatefulCount):
    """A StatefulCount taking its inputs a batch at a time (``execute_batch``, auto-acked when it returns)."""

    def execute_batch(self, batch: TupleBatch) -> None:
        rows = []
        for key, _ in batch.values:
            self.executed += 1
            count = self.state.get(key, 0) + 1
            self.state.put(key, count)
            rows.append((key, count))
        self.emit_each(rows, inputs=batch)


class UnanchoredCount(StatefulCount):
    """A StatefulCount that acks by hand and emits unanchored: what a stateful bolt may not do."""

    auto_ack = False

    def execute(self, tup: Tuple) -> None:
        self.emit([tup["key"], 1])
        self.ack(tup)


def stateful_count(name: str, count: int, *, keys: int = 10, counters: int = 2, fail_prepares: int = 0,
                   batches: bool = False, record_dir: str | None = None,
                   conf: dict[str, Any] | None = None) -> Topology:
    """``numbers`` (reliable Numbers, ``count`` over ``keys`` keys) → ``count`` (StatefulCount, or StatefulBatchCount
    with ``batches``; fields grouping on the key, ``counters`` tasks): a stateful word count whose every key ends at
    ``count // keys``."""
    t = Topology(name, conf or {})
    numbers = t.spout("numbers", Numbers, args=[count, keys], kwargs={"record_dir": record_dir})
    counter = StatefulBatchCount if batches else StatefulCount
    t.bolt("count", counter, args=[fail_prepares], parallelism=counters).fields(numbers, "key")
    return t
