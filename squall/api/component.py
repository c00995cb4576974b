"""Spouts and bolts: the classes users subclass, and the two hooks a runtime uses to run them.

    class Sentences(Spout):
        outputs = ["sentence"]                         # the default stream's fields

        def next_tuple(self):
            self.emit(["the cow jumped"], msg_id=1)    # reliable: ack(1) or fail(1) comes back

    class Split(Bolt):
        outputs = ["word"]

        def execute(self, tup):                        # auto_ack: anchored to tup, tup acked on return
            for word in tup["sentence"].split():
                self.emit([word])

The life cycle and the Storm names: a spout is ``open``-ed, ``activate``-d, asked for tuples with
``next_tuple`` and told ``ack``/``fail`` per message id; a bolt is ``prepare``-d and gets every input
(tick tuples included) in ``execute``; ``close``/``cleanup`` at shutdown. ``outputs`` is Storm's
``declareOutputFields`` and ``component_conf`` its ``getComponentConfiguration``.

A component declares its output streams on the class (``outputs``) and talks to the outside only
through an injected :class:`Collector`: the worker's executor in a cluster, a recorder in
:mod:`squall.api.testing`. Workers build components from their ``PythonComponent`` (module, class,
JSON constructor arguments), so constructors take JSON values only.

Runtimes call :func:`attach` before ``open``/``prepare`` and hand inputs to a bolt through
:func:`deliver_each` (or :func:`deliver` for one), which owns the ``auto_ack`` semantics, so a worker,
local mode and the test helper cannot disagree on them.

Batches: a spout may emit many rows in one call (:meth:`Spout.emit_many`, or a :meth:`Spout.next_batch`
of its own), and a bolt may take its inputs a batch at a time (:meth:`Bolt.execute_batch`, with
:meth:`Bolt.emit_each` and :meth:`Bolt.emit_batch` for its output): one Python call per batch instead of
one per tuple. Per-tuple components need no change: the worker runs ``execute`` in a tight loop itself.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar, Protocol

import structlog

from squall.api.metrics import Counter, Histogram, Meter, TaskMetrics
from squall.api.tuple import Fields, Tuple, TupleBatch
from squall.core.system_ids import DEFAULT_STREAM

__all__ = [
    "Bolt",
    "Collector",
    "Component",
    "Outputs",
    "Spout",
    "Stream",
    "TopologyContext",
    "attach",
    "deliver",
    "deliver_each",
    "emit_problem",
    "parse_outputs",
]


@dataclass(frozen=True)
class Stream:
    """An output stream: its field names (kept as a tuple), and whether it is direct (the emitter names
    the target task, Storm's ``emitDirect``). A plain list in ``outputs`` is a non-direct stream::

        outputs = {"default": ["word"], "alerts": Stream(["msg"], direct=True)}
        self.emit(["disk full"], "alerts", direct_task=self.context.tasks[0])
    """

    fields: Sequence[str]
    direct: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.fields, str):
            raise TypeError(f"stream fields must be a list of names, not the string {self.fields!r}")
        object.__setattr__(self, "fields", tuple(Fields(self.fields)))


#: What ``outputs`` may hold: field names of the default stream, or stream id → fields or Stream.
Outputs = Sequence[str] | Mapping[str, Sequence[str] | Stream]


def parse_outputs(outputs: Outputs) -> Mapping[str, Stream]:
    """An ``outputs`` declaration as stream id → :class:`Stream` (a list of names is the default stream)."""
    if isinstance(outputs, str):
        raise TypeError(f"outputs must be a list of field names or a dict of streams, not the string {outputs!r}")
    if not isinstance(outputs, Mapping):
        return MappingProxyType({DEFAULT_STREAM: Stream(outputs)} if outputs else {})
    streams = {}
    for stream, declared in outputs.items():
        if not isinstance(stream, str):
            raise TypeError(f"stream ids must be strings, got {stream!r}")
        streams[stream] = declared if isinstance(declared, Stream) else Stream(declared)
    return MappingProxyType(streams)


@dataclass(frozen=True)
class TopologyContext:
    """Where a task runs (Storm's TopologyContext): passed to ``open``/``prepare`` and kept as ``self.context``.

    def open(self, conf, context):
        # parallel spout tasks split the work: task i of n reads every n-th file
        self.files = all_files[context.task_index::len(context.tasks)]
    """

    topology_id: str
    topology_name: str
    component_id: str
    task_id: int
    #: Every component's task ids, ascending (targets for direct emits; system components included).
    component_tasks: Mapping[str, tuple[int, ...]]
    #: This component's effective conf: the topology conf overlaid with the component's own.
    conf: Mapping[str, Any] = field(default_factory=dict)
    #: The task's user metrics (:mod:`squall.api.metrics`), registered through the ``register_*`` methods.
    metrics: TaskMetrics = field(default_factory=TaskMetrics, compare=False, repr=False)

    @property
    def tasks(self) -> tuple[int, ...]:
        """This component's task ids."""
        return tuple(self.component_tasks[self.component_id])

    @property
    def task_index(self) -> int:
        """This task's position among its component's tasks, 0-based: how parallel spouts split work."""
        return self.tasks.index(self.task_id)

    def register_counter(self, name: str) -> Counter:
        """Storm's ``registerCounter``: a count sent with each heartbeat, shown by the UI and ``/metrics``::

        self.words = context.register_counter("words")   # in prepare; self.words.inc() in execute
        """
        return self.metrics.register_counter(name)

    def register_gauge(self, name: str, value: Callable[[], float]) -> None:
        """Storm's ``registerGauge``: ``value()`` is read at each heartbeat (quick, non-blocking)::

        context.register_gauge("cache.size", lambda: len(self.cache))
        """
        self.metrics.register_gauge(name, value)

    def register_meter(self, name: str) -> Meter:
        """Storm's ``registerMeter``: ``mark(n)`` events; sent as their count."""
        return self.metrics.register_meter(name)

    def register_histogram(self, name: str) -> Histogram:
        """Storm's ``registerHistogram``: ``update(value)``; sent as ``NAME.count``, ``.min``, ``.max``, ``.mean``,
        ``.p50``, ``.p95``, ``.p99``."""
        return self.metrics.register_histogram(name)


class Collector(Protocol):
    """What a component's calls go to (Storm's SpoutOutputCollector and OutputCollector in one): the
    worker's executor implements it, and so does :class:`squall.api.testing.Recorder`. Components never call
    it directly; :meth:`Spout.emit`, :meth:`Bolt.ack` and the rest do, after :func:`attach` set it::

        attach(bolt, Recorder(type(bolt).streams), make_context("split"))
    """

    def emit(
        self, values: tuple[Any, ...], stream: str, anchors: tuple[Tuple, ...], direct_task: int | None, msg_id: Any
    ) -> Sequence[int]:
        """Send one tuple; returns the task ids it went to. Spouts pass no anchors; bolts no msg_id."""

    def emit_many(
        self,
        rows: list[tuple[Any, ...]],
        stream: str,
        direct_task: int | None,
        msg_ids: Sequence[Any] | None,
        msg_id: Any = None,
    ) -> None:
        """A spout's rows, in one call: ``msg_ids[i]`` (when given) makes row i reliable, or ``msg_id`` the
        whole batch (one tree)."""

    def emit_batch(self, rows: Sequence[tuple[Any, ...]], stream: str, anchors: tuple[Tuple, ...]) -> None:
        """Send every row, each anchored to all of ``anchors`` (none: unanchored)."""

    def emit_each(
        self, rows: Sequence[tuple[Any, ...]], stream: str, inputs: TupleBatch, index: Sequence[int] | None
    ) -> None:
        """Send every row, row k anchored to ``inputs[index[k]]`` (``inputs[k]`` without ``index``)."""

    def ack(self, tup: Tuple) -> None:
        """A bolt's input is done: its edge leaves the tuple tree."""

    def fail(self, tup: Tuple) -> None:
        """A bolt's input failed: every tree it belongs to fails at once."""

    def reset_timeout(self, tup: Tuple) -> None:
        """Restart the message timeout of every tree ``tup`` belongs to."""

    def report_error(self, error: BaseException | str) -> None:
        """Record an error for ``storm get-errors`` and the log."""


class _Detached:
    """The collector of a component no runtime has attached yet: every collector call explains the problem.

    Private and dunder names stay plain AttributeErrors, so ``help()``, ``pydoc``, ``copy`` and
    ``hasattr`` probing the class attribute behave as for any object."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        raise RuntimeError(
            f"{name}() needs a running component: a worker or squall.api.testing attaches "
            "the collector after __init__, so call it from open/prepare onwards"
        )


class Component:
    """What spouts and bolts share: output declaration, per-component conf, context, logging, errors.

        class Enrich(Bolt):
            outputs = {"default": ["user", "country"], "unknown": ["user"]}   # two streams
            component_conf = {"squall.own.thread": True}                      # blocks on I/O

            def prepare(self, conf, context):
                self.log.info("ready", task=context.task_id)    # structlog, bound to component and task

    Constructors run where the topology is declared *and* in every worker (with the JSON arguments the
    DSL stored), so keep them cheap and put connections in ``open``/``prepare``.
    """

    #: ``["word"]`` declares the default stream; ``{"default": ["word"], "errors": Stream(["msg"],
    #: direct=True)}`` declares several. Checked when the class is defined.
    outputs: ClassVar[Outputs] = ()
    #: ``outputs`` parsed (set for every subclass).
    streams: ClassVar[Mapping[str, Stream]] = MappingProxyType({})
    #: Conf this component needs wherever it is declared (Storm's ``getComponentConfiguration``), e.g.
    #: ``{"squall.own.thread": True}`` for code that blocks; the declaration's ``conf=`` wins over it.
    component_conf: ClassVar[Mapping[str, Any]] = MappingProxyType({})
    #: The extra of the ``squall`` package whose stack this component runs on ("spark" for Spark bolts), or
    #: None: declaring the component checks that the stack is installed, so a missing one is told at submit
    #: rather than by every worker (see :mod:`squall.core.extras`).
    needs_extra: ClassVar[str | None] = None

    context: TopologyContext
    log: Any = structlog.get_logger("squall.api.component")
    _collector: Collector = _Detached()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        try:
            cls.streams = parse_outputs(cls.outputs)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{cls.__qualname__}.outputs: {exc}") from None

    def report_error(self, error: BaseException | str) -> None:
        """Record an error (``storm get-errors``, ``/taskerrors``, the log) without stopping the task, as
        Storm's ``reportError``; throttled per task (``topology.max.error.report.per.interval``)."""
        self._collector.report_error(error)

    def update(self, conf: Mapping[str, Any]) -> None:
        """``storm update_topology`` changed the topology's conf (JStorm's ``IDynamicComponent``); called on the
        task's thread between inputs. The default ignores it: components read conf in open/prepare."""


class Spout(Component, ABC):
    """A source of tuples. The worker calls ``open``, ``activate``, then ``next_tuple`` in a loop while
    the topology is active, ``ack``/``fail`` as tuple trees finish, ``deactivate`` when it is
    deactivated, and ``close`` at shutdown (best effort). All calls come from one thread, so no locks.

        class Queue(Spout):
            outputs = ["job"]

            def open(self, conf, context):
                self.todo, self.in_flight = deque(load_jobs()), {}

            def next_tuple(self):
                if self.todo:
                    job = self.todo.popleft()
                    self.in_flight[job.id] = job
                    self.emit([job.body], msg_id=job.id)     # reliable: tracked by the acker

            def ack(self, msg_id):
                del self.in_flight[msg_id]                   # the whole tree was processed

            def fail(self, msg_id):
                self.todo.append(self.in_flight.pop(msg_id)) # failed or timed out: replay it

    A tuple emitted without ``msg_id`` is not tracked: no ack, no fail, no replay (at-most-once).
    ``topology.max.spout.pending`` caps the messages in flight per task; ``topology.message.timeout.secs``
    fails trees that do not finish in time.
    """

    def open(self, conf: Mapping[str, Any], context: TopologyContext) -> None:
        """Called once before anything else, on the task's thread: set up state and connections here, not in
        ``__init__``. ``conf`` is the topology conf with this component's conf over it."""

    @abstractmethod
    def next_tuple(self) -> None:
        """Emit zero or more tuples and return promptly; with nothing to emit, just return (the worker
        backs off briefly). Never block here: acks, fails and heartbeats of the task wait meanwhile."""

    def ack(self, msg_id: Any) -> None:
        """The tree of the tuple emitted with ``msg_id`` was fully processed: forget or commit it."""

    def fail(self, msg_id: Any) -> None:
        """The tree of ``msg_id`` failed or timed out: re-emit it here for at-least-once processing."""

    def activate(self) -> None:
        """The topology became active; ``next_tuple`` calls start or resume."""

    def deactivate(self) -> None:
        """The topology was deactivated; no ``next_tuple`` until it is activated again."""

    def close(self) -> None:
        """The task is shutting down (kill, rebalance, worker stop): release resources. Best effort, as in
        Storm: a killed worker process never gets here."""

    def emit(
        self, values: Iterable[Any], stream: str = DEFAULT_STREAM, *, msg_id: Any = None, direct_task: int | None = None
    ) -> Sequence[int]:
        """Emit one tuple on ``stream``; returns the task ids it went to.

        A non-None ``msg_id`` makes it reliable: ``ack(msg_id)`` or ``fail(msg_id)`` comes back once its
        tree completes, fails or times out. ``direct_task`` names the target on a direct stream. Values
        must be msgpack-able (None, bool, numbers, str, bytes, lists, dicts)::

            self.emit([line], msg_id=offset)
        """
        return self._collector.emit(tuple(values), stream, (), direct_task, msg_id)

    def emit_many(
        self,
        rows: Iterable[Iterable[Any]],
        stream: str = DEFAULT_STREAM,
        *,
        msg_ids: Sequence[Any] | None = None,
        msg_id: Any = None,
        direct_task: int | None = None,
    ) -> None:
        """Emit every row on ``stream`` in one call: checked once and routed in bulk, far cheaper per tuple
        than ``emit`` in a loop. Reliable rows take one of two forms:

        * ``msg_ids`` (one per row): each row is its own tuple tree, acked or failed on its own (Storm's
          per-tuple reliability, at about a microsecond per row in the acker and the spout);
        * ``msg_id`` (one for all): the batch is one tree, as a Trident batch is. ``ack(msg_id)`` comes once
          every row's tree is done; if any row fails or times out, ``fail(msg_id)`` comes once and the whole
          batch is yours to replay. Acking then costs next to nothing per row. ``topology.max.spout.pending``
          counts the batch's rows either way::

            lines = self.reader.read_lines(max_rows)
            self.emit_many([(line,) for _, line in lines], msg_ids=[offset for offset, _ in lines])
            self.emit_many([(line,) for line in chunk], msg_id=("events.log", chunk_start))
        """
        self._collector.emit_many(
            [values if type(values) is tuple else tuple(values) for values in rows],
            stream,
            direct_task,
            msg_ids,
            msg_id,
        )

    def next_batch(self, max_rows: int) -> None:
        """Emit up to about ``max_rows`` tuples (``topology.transfer.batch.size``, less near
        ``topology.max.spout.pending``), usually with one :meth:`emit_many`; with nothing to emit, just
        return. A spout that defines it is called once per burst instead of ``next_tuple`` in a loop; fewer
        than ``max_rows`` says that was all it had: the next call comes after the spout wait, as after a
        ``next_tuple`` that emits nothing (``topology.sleep.spout.wait.strategy.time.ms``, 1), so emit all you
        have, up to ``max_rows``::

            def next_batch(self, max_rows):
                self.emit_many([(self.value,)] * max_rows)

        This default calls ``next_tuple`` ``max_rows`` times."""
        for _ in range(max_rows):
            self.next_tuple()


class Bolt(Component, ABC):
    """A processing step: ``prepare`` once, ``execute`` for every input (tick tuples included:
    ``tup.is_tick``), ``cleanup`` at shutdown (best effort). All calls come from one thread.

    With ``auto_ack = True`` (the default: Storm's BasicBolt) emits made during ``execute`` are
    anchored to the input, and the input is acked when ``execute`` returns; ack or fail it yourself
    and auto_ack stands aside for that input. With ``auto_ack = False``, anchor and ack by hand.
    Either way an exception in ``execute`` fails the input and is reported; the task keeps running.

        class Count(Bolt):
            outputs = ["word", "count"]
            component_conf = {"topology.tick.tuple.freq.secs": 10}   # a tick every 10 s

            def prepare(self, conf, context):
                self.counts = Counter()

            def execute(self, tup):
                if tup.is_tick:
                    self.log.info("top words", top=self.counts.most_common(3))
                    return
                self.counts[tup["word"]] += 1
                self.emit([tup["word"], self.counts[tup["word"]]])   # anchored to tup, tup acked after
    """

    auto_ack: ClassVar[bool] = True
    _input: Tuple | None = None  # the input execute is working on, until acked or failed

    def prepare(self, conf: Mapping[str, Any], context: TopologyContext) -> None:
        """Called once before the first ``execute``, on the task's thread: set up state here, not in
        ``__init__``. ``conf`` is the topology conf with this component's conf over it."""

    @abstractmethod
    def execute(self, tup: Tuple) -> None:
        """Process one input tuple (or a tick: ``tup.is_tick``). Return promptly: the task's other inputs,
        and under the default shared thread other tasks of the worker, wait meanwhile."""

    def execute_batch(self, batch: TupleBatch) -> None:
        """Process a batch of inputs in one call (define it to be called instead of ``execute``, which then
        gets only tick tuples). ``batch.values`` are the rows; ``batch[i]`` is row i as a Tuple. Emit with
        :meth:`emit_each` (each row anchored to its input) or :meth:`emit_batch`; a plain ``emit`` here is
        unanchored unless given ``anchors``. Under ``auto_ack`` every input not acked or failed by hand is
        acked on return; an exception is reported once and fails them all::

            def execute_batch(self, batch):
                self.emit_each([(line.upper(),) for (line,) in batch.values], inputs=batch)

        This default runs ``execute`` per tuple, as the worker does for a bolt without it."""
        deliver_each(self, iter(batch), lambda exc: None)

    def cleanup(self) -> None:
        """The task is shutting down (kill, rebalance, worker stop): release resources. Best effort, as in
        Storm: a killed worker process never gets here."""

    def emit(
        self,
        values: Iterable[Any],
        stream: str = DEFAULT_STREAM,
        *,
        anchors: Tuple | Iterable[Tuple] | None = None,
        direct_task: int | None = None,
    ) -> Sequence[int]:
        """Emit one tuple anchored to ``anchors``; by default (None) to the current input under auto_ack
        and to nothing otherwise. ``anchors=()`` always emits unanchored. Anchoring puts the new tuple in
        its anchors' trees, so the spout hears of a failure downstream; returns the task ids it went to::

            self.emit([word], anchors=tup)            # auto_ack = False: anchor by hand
            self.emit([a["n"] + b["n"]], anchors=[a, b])   # a join: in both trees
        """
        if anchors is None:
            anchors = (self._input,) if self.auto_ack and self._input is not None else ()
        elif isinstance(anchors, Tuple):
            anchors = (anchors,)
        else:
            anchors = tuple(anchors)
        return self._collector.emit(tuple(values), stream, anchors, direct_task, None)

    def emit_batch(
        self, rows: Iterable[Iterable[Any]], stream: str = DEFAULT_STREAM, *, anchors: Iterable[Tuple] = ()
    ) -> None:
        """Emit every row, each anchored to all of ``anchors`` (none: unanchored): results that depend on a
        whole batch of inputs. Same trees as ``emit`` per row, far cheaper when the anchors are many::

            self.emit_batch([(page, hits) for page, hits in totals.items()], anchors=self.batch)
        """
        self._collector.emit_batch(
            [values if type(values) is tuple else tuple(values) for values in rows], stream, tuple(anchors)
        )

    def emit_each(
        self,
        rows: Iterable[Iterable[Any]],
        stream: str = DEFAULT_STREAM,
        *,
        inputs: TupleBatch,
        index: Sequence[int] | None = None,
    ) -> None:
        """Emit every row, row ``k`` anchored to input ``inputs[index[k]]`` (to ``inputs[k]`` without
        ``index``): map, filter and flat-map over a batch with each output in its own input's tree::

            words, index = [], []
            for i, (line,) in enumerate(batch.values):
                for word in line.split():
                    words.append((word,))
                    index.append(i)
            self.emit_each(words, inputs=batch, index=index)
        """
        self._collector.emit_each(
            [values if type(values) is tuple else tuple(values) for values in rows], stream, inputs, index
        )

    def ack(self, tup: Tuple) -> None:
        """``tup`` is fully processed (its part of the tree is done). Ack every input exactly once, after
        emitting what is anchored to it; under ``auto_ack`` the return of ``execute`` does it for you."""
        if tup is self._input:
            self._input = None
        self._collector.ack(tup)

    def fail(self, tup: Tuple) -> None:
        """``tup`` failed: the spout's ``fail`` is called at once for every tree it belongs to (no waiting
        for the timeout), and a reliable spout replays them."""
        if tup is self._input:
            self._input = None
        self._collector.fail(tup)

    def reset_timeout(self, tup: Tuple) -> None:
        """Keep ``tup``'s tree alive (Storm's ``resetTimeout``): its ``topology.message.timeout.secs`` starts
        again, at its acker and at the spout, so a bolt holding a tuple on purpose (a batch, a join waiting
        for its other side) does not see it time out and replay. Call it more often than the timeout while
        you hold the tuple, e.g. on every tick::

            def execute(self, tup):
                if tup.is_tick:
                    for held in self.batch:
                        self.reset_timeout(held)
                    return
                self.batch.append(tup)

        Unanchored tuples and topologies without ackers have no timeout: then it does nothing.
        """
        self._collector.reset_timeout(tup)


def emit_problem(streams: Mapping[str, Any], stream: str, values: Sequence[Any], direct_task: int | None) -> str | None:
    """Why an emit is wrong, or None: stream undeclared, wrong number of values, ``direct_task`` where
    the stream is not direct or missing where it is. ``streams`` values have ``fields`` and ``direct``.
    Shared by workers and :mod:`squall.api.testing`, so both refuse the same emits with the same words."""
    declared = streams.get(stream)
    if declared is None:
        known = ", ".join(repr(s) for s in streams if not s.startswith("__")) or "none"
        return f"emit on stream {stream!r}, which is not declared (declared: {known})"
    if len(values) != len(declared.fields):
        return (
            f"emit of {len(values)} values on stream {stream!r}, which declares "
            f"{len(declared.fields)} fields {list(declared.fields)}"
        )
    if declared.direct and direct_task is None:
        return f"stream {stream!r} is direct: emit(..., direct_task=<task id>)"
    if direct_task is not None and not declared.direct:
        return f"direct_task given but stream {stream!r} is not declared direct"
    return None


def attach(component: Component, collector: Collector, context: TopologyContext) -> None:
    """Connect a freshly built component to its runtime (collector, ``context``, a bound ``log``); runtimes
    call it before ``open``/``prepare``, so component code never does."""
    component._collector = collector
    component.context = context
    component.log = structlog.get_logger(type(component).__module__).bind(
        component=context.component_id, task=context.task_id
    )


def deliver_each(
    bolt: Bolt,
    tuples: Iterable[Tuple],
    on_error: Callable[[Exception], None],
    *,
    auto_acked: list[Tuple] | None = None,
    count_acks: bool = False,
) -> int:
    """Run ``bolt.execute`` on each tuple with the semantics every runtime must share, in one loop.

    Under ``auto_ack`` a normal return acks the input unless execute acked or failed it. An exception
    is reported and fails the input (if execute had not settled it); then ``on_error(exc)`` runs and the
    loop goes on with the next tuple. A worker makes those automatic acks itself, without a call per tuple:
    given ``auto_acked`` the inputs are appended to it, to be acked all at once; with ``count_acks`` (untracked
    inputs, whose ack only counts them) they are only counted. Returns how many were counted.
    """
    execute, collector, auto_ack, acked = bolt.execute, bolt._collector, bolt.auto_ack, 0
    ack = None if count_acks else collector.ack if auto_acked is None else auto_acked.append
    try:
        for tup in tuples:
            bolt._input = tup
            try:
                execute(tup)
            except Exception as exc:
                bolt.report_error(exc)
                if bolt._input is tup:
                    collector.fail(tup)
                bolt._input = None
                on_error(exc)
            else:
                if auto_ack and bolt._input is tup:
                    if ack is None:
                        acked += 1
                    else:
                        ack(tup)
    finally:
        bolt._input = None
    return acked


def deliver(bolt: Bolt, tup: Tuple) -> None:
    """:func:`deliver_each` for one tuple, re-raising an exception from ``execute`` (after it was reported
    and the input failed) for the caller to log, or to stop on if so configured."""
    errors: list[Exception] = []
    deliver_each(bolt, (tup,), errors.append)
    if errors:
        raise errors[0]
