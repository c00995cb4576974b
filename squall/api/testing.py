"""Unit-test one spout or bolt with no cluster: feed it, then look at what it emitted, acked, failed, reported.

    run = run_bolt(SplitSentence, [("the cat",)], fields=["sentence"])
    assert run.values() == [("the",), ("cat",)]
    assert run.acked == run.inputs

    run = run_spout(Sentences, calls=2)
    run.fail(run.emitted[0].msg_id)
    run.next_tuple()                      # a reliable spout replays it

Components run through :func:`squall.api.component.deliver` and :func:`~squall.api.component.attach`, as in
a worker, so ``auto_ack`` anchoring, acking and failing behave as they will in production. Constructor
arguments go through JSON first, as they do on the way to a worker, and every emit is checked as a
worker must: declared stream, one value per field, ``direct_task`` exactly on direct streams, and
values that msgpack can carry between workers.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import msgpack

from squall.api.component import Bolt, Component, Spout, Stream, TopologyContext, attach, deliver, emit_problem
from squall.api.state.keyvalue import KeyValueState
from squall.api.state.memory import MemoryStore
from squall.api.stateful import StatefulBolt
from squall.api.tuple import Fields, Tuple, TupleBatch
from squall.api.windowing import WindowedBolt, wall_ms, with_late_stream
from squall.core.system_ids import DEFAULT_STREAM

__all__ = ["BoltRun", "Emit", "Recorder", "SpoutRun", "make_context", "make_tuple", "run_bolt", "run_spout"]

C = TypeVar("C", bound=Component)


@dataclass(frozen=True)
class Emit:
    """One ``emit`` call, as the component made it (``anchors`` for bolts, ``msg_id`` for spouts)::

    run = run_bolt(SplitSentence, [("the cat",)], fields=["sentence"])
    first = run.emitted[0]
    assert (first.stream, first.values, first.anchors) == ("default", ("the",), (run.inputs[0],))
    """

    stream: str
    values: tuple[Any, ...]
    anchors: tuple[Tuple, ...] = ()
    direct_task: int | None = None
    msg_id: Any = None


class Recorder:
    """A :class:`~squall.api.component.Collector` that records every call instead of sending anything; the
    base of :class:`BoltRun`, and :attr:`SpoutRun.collector`. To drive a component by hand::

        bolt = SplitSentence()
        recorder = Recorder(SplitSentence.streams)
        attach(bolt, recorder, make_context("split"))
        bolt.prepare({}, bolt.context)
        deliver(bolt, make_tuple(["a b"], ["sentence"]))
        assert recorder.values() == [("a",), ("b",)]
    """

    def __init__(self, streams: Mapping[str, Stream]) -> None:
        self.streams = streams
        self.emitted: list[Emit] = []
        self.acked: list[Tuple] = []
        self.failed: list[Tuple] = []
        #: Tuples passed to ``reset_timeout``, once per call.
        self.timeouts_reset: list[Tuple] = []
        self.errors: list[BaseException | str] = []

    def emit(
        self, values: tuple[Any, ...], stream: str, anchors: tuple[Tuple, ...], direct_task: int | None, msg_id: Any
    ) -> Sequence[int]:
        """Record the emit; the tuple goes nowhere, so only a direct emit names a task."""
        if problem := emit_problem(self.streams, stream, values, direct_task):
            raise ValueError(problem)
        try:
            msgpack.packb(values, use_bin_type=True)
        except (TypeError, ValueError, OverflowError) as exc:
            raise ValueError(
                f"values {values!r} on stream {stream!r} cannot travel between workers "
                f"(msgpack: {exc}); emit None, bool, int, float, str, bytes, lists and dicts"
            ) from None
        self.emitted.append(Emit(stream, values, anchors, direct_task, msg_id))
        return [] if direct_task is None else [direct_task]

    def emit_many(
        self,
        rows: list[tuple[Any, ...]],
        stream: str,
        direct_task: int | None,
        msg_ids: Sequence[Any] | None,
        msg_id: Any = None,
    ) -> None:
        """Record one emit per row, with its msg id (the batch's ``msg_id`` on every row)."""
        if msg_ids is not None and len(msg_ids) != len(rows):
            raise ValueError(f"emit_many of {len(rows)} rows with {len(msg_ids)} msg_ids: give one per row")
        if msg_id is not None and msg_ids is not None:
            raise TypeError("emit_many takes msg_ids (a tree per row) or msg_id (one tree for the batch), not both")
        for i, values in enumerate(rows):
            self.emit(values, stream, (), direct_task, msg_id if msg_ids is None else msg_ids[i])

    def emit_batch(self, rows: Sequence[tuple[Any, ...]], stream: str, anchors: tuple[Tuple, ...]) -> None:
        """Record one emit per row, each anchored to all of ``anchors``."""
        for values in rows:
            self.emit(values, stream, anchors, None, None)

    def emit_each(
        self, rows: Sequence[tuple[Any, ...]], stream: str, inputs: TupleBatch, index: Sequence[int] | None
    ) -> None:
        """Record one emit per row, row k anchored to ``inputs[index[k]]`` (``inputs[k]`` without ``index``)."""
        if index is None and len(rows) != len(inputs):
            raise ValueError(
                f"emit_each of {len(rows)} rows for {len(inputs)} inputs: pass index=[input "
                "position of each row] when the rows are not one per input"
            )
        if index is not None and len(index) != len(rows):
            raise ValueError(f"emit_each of {len(rows)} rows with {len(index)} index entries: give one per row")
        for k, values in enumerate(rows):
            self.emit(values, stream, (inputs[k if index is None else index[k]],), None, None)

    def ack(self, tup: Tuple) -> None:
        """Record the ack in ``acked``."""
        self.acked.append(tup)

    def fail(self, tup: Tuple) -> None:
        """Record the fail in ``failed``."""
        self.failed.append(tup)

    def reset_timeout(self, tup: Tuple) -> None:
        """Record the call in ``timeouts_reset``."""
        self.timeouts_reset.append(tup)

    def report_error(self, error: BaseException | str) -> None:
        """Record the error (the exception itself, or the text) in ``errors``."""
        self.errors.append(error)

    def values(self, stream: str = DEFAULT_STREAM) -> list[tuple[Any, ...]]:
        """The values emitted on ``stream``, in order."""
        return [e.values for e in self.emitted if e.stream == stream]


def make_tuple(
    values: Sequence[Any],
    fields: Sequence[str] = (),
    *,
    component: str = "source",
    stream: str = DEFAULT_STREAM,
    task: int = 0,
    id: int = 0,
) -> Tuple:
    """A tuple as a bolt would receive it; ``fields`` names each value."""
    names = Fields(fields)
    if len(values) != len(names):
        raise ValueError(
            f"{len(values)} values {list(values)!r} but {len(names)} fields {list(names)}: "
            "pass fields=[...] naming each value"
        )
    return Tuple(tuple(values), names, component, stream, task, id)


def make_context(
    component_id: str = "component",
    task_id: int = 1,
    conf: Mapping[str, Any] | None = None,
    component_tasks: Mapping[str, Sequence[int]] | None = None,
) -> TopologyContext:
    """A context for one task of a topology named ``test`` (pass ``component_tasks`` for more)."""
    tasks = {component_id: [task_id]} if component_tasks is None else component_tasks
    return TopologyContext(
        topology_id="test-1-0",
        topology_name="test",
        component_id=component_id,
        task_id=task_id,
        component_tasks={c: tuple(sorted(t)) for c, t in tasks.items()},
        conf=dict(conf or {}),
    )


class BoltRun(Recorder):
    """A prepared bolt and everything it did (what :func:`run_bolt` returns); :meth:`execute` feeds it more::

    run = run_bolt(WordCount, [("cat",), ("cat",)], fields=["word"])
    assert run.values() == [("cat", 1), ("cat", 2)] and run.acked == run.inputs
    run.execute([tick_tuple(5)])            # the bolt's tick branch
    assert run.bolt.counts["cat"] == 2      # the bolt object itself
    """

    def __init__(
        self,
        bolt: Bolt,
        fields: Sequence[str],
        component: str,
        stream: str,
        streams: Mapping[str, Stream] | None = None,
    ) -> None:
        super().__init__(type(bolt).streams if streams is None else streams)
        self.bolt = bolt
        self.inputs: list[Tuple] = []
        self._fields, self._component, self._stream = fields, component, stream

    def execute(self, inputs: Iterable[Tuple | Sequence[Any]]) -> BoltRun:
        """Deliver each input (a :class:`Tuple`, or values named by the run's ``fields``), as a worker does."""
        for item in inputs:
            tup = self._tuple(item)
            self.inputs.append(tup)
            try:
                deliver(self.bolt, tup)
            except Exception:
                pass  # deliver reported it and failed the tuple; the task goes on, as in a worker
        return self

    def execute_batch(self, inputs: Iterable[Tuple | Sequence[Any]]) -> BoltRun:
        """Deliver ``inputs`` as one batch to the bolt's ``execute_batch``, as a worker does: under ``auto_ack``
        the inputs it did not ack or fail are acked on return; an exception is reported and fails them."""
        tuples = [self._tuple(item) for item in inputs]
        self.inputs.extend(tuples)
        if not tuples:
            return self
        batch, acked, failed = TupleBatch.of(tuples), len(self.acked), len(self.failed)
        bolt = self.bolt
        settle: Callable[[Tuple], None] | None
        try:
            bolt.execute_batch(batch)
        except Exception as exc:
            bolt.report_error(exc)
            settle = self.fail
        else:
            settle = self.ack if bolt.auto_ack else None
        if settle is not None:
            settled = {id(t) for t in self.acked[acked:] + self.failed[failed:]}
            for tup in tuples:
                if id(tup) not in settled:
                    settle(tup)
        return self

    def _tuple(self, item: Tuple | Sequence[Any]) -> Tuple:
        return (
            item
            if isinstance(item, Tuple)
            else make_tuple(item, self._fields, component=self._component, stream=self._stream, id=len(self.inputs) + 1)
        )


def run_bolt(
    cls: type[Bolt],
    inputs: Iterable[Tuple | Sequence[Any]] = (),
    *,
    fields: Sequence[str] = (),
    component: str = "source",
    stream: str = DEFAULT_STREAM,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    conf: Mapping[str, Any] | None = None,
    context: TopologyContext | None = None,
) -> BoltRun:
    """Build ``cls(*args, **kwargs)``, prepare it, and execute ``inputs`` (tick tuples included); a bolt with
    an ``execute_batch`` of its own gets them as one batch.

    Plain value sequences become tuples with ``fields`` from ``component``/``stream`` and ids 1, 2, ...
    The default context's conf is ``cls.component_conf`` with ``conf`` over it, as a worker gives it (a given
    ``context`` brings its own). ``cleanup`` is not called (Storm does not promise it); call
    ``run.bolt.cleanup()`` to test it.

    A :class:`~squall.api.windowing.WindowedBolt` gets its window as in a worker (its late-tuple stream declared,
    its window opened on the wall clock): count windows are evaluated as inputs arrive, and
    ``run.bolt.advance()`` runs the timers that are due (duration slides, watermarks). A
    :class:`~squall.api.stateful.StatefulBolt` gets ``init_state`` with an empty in-memory state after ``prepare``,
    as its first checkpoint gives it; read it as ``run.bolt.state``.
    """
    bolt = _build(cls, args, kwargs)
    context = context or make_context(cls.__name__, conf={**cls.component_conf, **(conf or {})})
    run = BoltRun(bolt, fields, component, stream, with_late_stream(cls.streams, context.conf))
    attach(bolt, run, context)
    bolt.prepare(context.conf, context)
    if isinstance(bolt, WindowedBolt):  # as the worker opens it; its timers run on run.bolt.advance()
        bolt.open_window([f"{component}:{stream}"], wall_ms)
    if isinstance(bolt, StatefulBolt):
        bolt.init_state(KeyValueState(f"{context.component_id}-{context.task_id}", MemoryStore()))
    if cls.execute_batch is not Bolt.execute_batch:
        return run.execute_batch(inputs)
    return run.execute(inputs)


class SpoutRun:
    """An open, active spout and everything it emitted (what :func:`run_spout` returns); acks and fails go
    back with :meth:`ack`/:meth:`fail`, as the acker would send them::

        run = run_spout(SentenceSpout, calls=2, args=[1])
        run.fail(run.emitted[0].msg_id)         # the tree failed or timed out
        assert run.next_tuple()[0].msg_id == run.emitted[0].msg_id   # replayed

    Exceptions from the spout propagate: unlike a bolt's, they have no tuple to fail.
    """

    def __init__(self, spout: Spout) -> None:
        self.spout = spout
        self.collector = Recorder(type(spout).streams)
        #: Msg ids emitted and not yet acked or failed, in emit order.
        self.pending: list[Any] = []

    @property
    def emitted(self) -> list[Emit]:
        """Every emit so far, in order."""
        return self.collector.emitted

    @property
    def errors(self) -> list[BaseException | str]:
        """Everything the spout passed to ``report_error``."""
        return self.collector.errors

    def values(self, stream: str = DEFAULT_STREAM) -> list[tuple[Any, ...]]:
        """The values emitted on ``stream``, in order."""
        return self.collector.values(stream)

    def next_tuple(self, calls: int = 1) -> list[Emit]:
        """Call ``next_tuple`` ``calls`` times; returns what those calls emitted."""
        start = len(self.emitted)
        for _ in range(calls):
            self.spout.next_tuple()
        return self._new_since(start)

    def next_batch(self, max_rows: int) -> list[Emit]:
        """Call ``next_batch(max_rows)`` once, as a worker does per burst; returns what it emitted."""
        start = len(self.emitted)
        self.spout.next_batch(max_rows)
        return self._new_since(start)

    def _new_since(self, start: int) -> list[Emit]:
        new, last = self.emitted[start:], None
        for e in new:  # a batch's one msg_id (emit_many(..., msg_id=)) is on each of its rows: pending once
            if e.msg_id is not None and e.msg_id is not last:
                self.pending.append(e.msg_id)
            last = e.msg_id
        return new

    def ack(self, msg_id: Any) -> None:
        """As if the tree of ``msg_id`` completed."""
        self._settle(msg_id)
        self.spout.ack(msg_id)

    def fail(self, msg_id: Any) -> None:
        """As if the tree of ``msg_id`` failed or timed out."""
        self._settle(msg_id)
        self.spout.fail(msg_id)

    def _settle(self, msg_id: Any) -> None:
        if msg_id not in self.pending:
            raise ValueError(
                f"msg id {msg_id!r} is not pending (pending: {self.pending!r}): a worker only acks "
                "or fails ids the spout emitted, once each"
            )
        self.pending.remove(msg_id)


def run_spout(
    cls: type[Spout],
    calls: int = 1,
    *,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    conf: Mapping[str, Any] | None = None,
    context: TopologyContext | None = None,
) -> SpoutRun:
    """Build ``cls(*args, **kwargs)``, open and activate it, and call ``next_tuple`` ``calls`` times. The
    default context's conf is ``cls.component_conf`` with ``conf`` over it, as a worker gives it."""
    spout = _build(cls, args, kwargs)
    run = SpoutRun(spout)
    context = context or make_context(cls.__name__, conf={**cls.component_conf, **(conf or {})})
    attach(spout, run.collector, context)
    spout.open(context.conf, context)
    spout.activate()
    run.next_tuple(calls)
    return run


def _build(cls: type[C], args: Sequence[Any], kwargs: Mapping[str, Any] | None) -> C:
    """``cls(*args, **kwargs)`` after a JSON round trip, exactly what a worker will call."""
    args, kwargs = json.loads(json.dumps([list(args), dict(kwargs or {})]))
    return cls(*args, **kwargs)
