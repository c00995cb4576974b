"""Unit-test a spout or bolt with no cluster: feed it tuples, see what it emitted, acked, failed, reported.

    result = run_bolt(SplitSentence, [("the cat",)], fields=["sentence"])
    assert result.values() == [("the",), ("cat",)]
    assert result.acked == result.inputs

The component runs through the same :meth:`Bolt.process` a worker uses, so ``auto_ack`` anchoring,
acking and failing behave as they will in production.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from squall.component import DEFAULT_STREAM, Bolt, Spout, TopologyContext
from squall.tuple import SYSTEM_COMPONENT, TICK_STREAM, Fields, Tuple

_TICK_FIELDS = Fields(["rate_secs"])


@dataclass(frozen=True)
class Emitted:
    values: tuple[Any, ...]
    stream: str = DEFAULT_STREAM
    anchors: tuple[Tuple, ...] = ()
    direct_task: int | None = None
    msg_id: Any = None


@dataclass
class Recorder:
    """A collector that remembers everything instead of sending it anywhere."""

    streams: Mapping[str, Any]
    emitted: list[Emitted] = field(default_factory=list)
    acked: list[Tuple] = field(default_factory=list)
    failed: list[Tuple] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def emit(self, values: Sequence[Any], stream: str, anchors: Sequence[Tuple], direct_task: int | None,
             msg_id: Any) -> list[int]:
        declared = self.streams.get(stream)
        if declared is None:
            raise ValueError(f"emit on undeclared stream {stream!r} (declared: {sorted(self.streams)})")
        if len(values) != len(declared.fields):
            raise ValueError(f"emit of {len(values)} values on stream {stream!r} declaring {list(declared.fields)}")
        if declared.direct != (direct_task is not None):
            raise ValueError(f"stream {stream!r} is {'' if declared.direct else 'not '}direct: "
                             f"{'pass' if declared.direct else 'do not pass'} direct_task")
        self.emitted.append(Emitted(tuple(values), stream, tuple(anchors), direct_task, msg_id))
        return [direct_task] if direct_task is not None else []

    def ack(self, tup: Tuple) -> None:
        self.acked.append(tup)

    def fail(self, tup: Tuple) -> None:
        self.failed.append(tup)

    def report_error(self, message: str) -> None:
        self.errors.append(message)

    def values(self, stream: str = DEFAULT_STREAM) -> list[tuple[Any, ...]]:
        return [e.values for e in self.emitted if e.stream == stream]


_ids = itertools.count(1)


def make_tuple(values: Sequence[Any], fields: Iterable[str] | None = None, *, component: str = "source",
               stream: str = DEFAULT_STREAM, task: int = 1) -> Tuple:
    """An input tuple; field names default to ``f0, f1, …``."""
    names = list(fields) if fields is not None else [f"f{i}" for i in range(len(values))]
    return Tuple(values, Fields(names), component, stream, task, id=next(_ids))


def tick_tuple(rate_secs: int = 1) -> Tuple:
    return Tuple((rate_secs,), _TICK_FIELDS, SYSTEM_COMPONENT, TICK_STREAM, -1, id=next(_ids))


def _context(cls: type, conf: Mapping[str, Any] | None) -> TopologyContext:
    return TopologyContext("test-1-1", "test", cls.__name__, 1, {cls.__name__: [1]}, dict(conf or {}))


@dataclass
class BoltRun(Recorder):
    inputs: list[Tuple] = field(default_factory=list)
    bolt: Bolt | None = None


def run_bolt(cls: type[Bolt], tuples: Iterable[Sequence[Any] | Tuple], *, fields: Iterable[str] | None = None,
             conf: Mapping[str, Any] | None = None, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None,
             ticks_after: bool = False) -> BoltRun:
    """Prepare a ``cls(*args, **kwargs)``, execute every tuple (plain value sequences become tuples with
    ``fields``), optionally one tick tuple at the end, then ``cleanup``."""
    bolt = cls(*args, **dict(kwargs or {}))
    run = BoltRun(cls.output_streams(), bolt=bolt)
    bolt.bind(run, _context(cls, conf))
    bolt.prepare(dict(conf or {}), bolt.context)
    for item in tuples:
        tup = item if isinstance(item, Tuple) else make_tuple(item, fields)
        run.inputs.append(tup)
        bolt.process(tup)
    if ticks_after:
        bolt.process(tick_tuple())
    bolt.cleanup()
    return run


@dataclass
class SpoutRun(Recorder):
    spout: Spout | None = None

    def next(self, calls: int = 1) -> "SpoutRun":
        """Call ``next_tuple`` ``calls`` times."""
        for _ in range(calls):
            self.spout.next_tuple()
        return self

    def ack_message(self, msg_id: Any) -> None:
        """As if the tree of ``msg_id`` completed."""
        self.spout.ack(msg_id)

    def fail_message(self, msg_id: Any) -> None:
        """As if the tree of ``msg_id`` failed or timed out."""
        self.spout.fail(msg_id)


def run_spout(cls: type[Spout], calls: int = 1, *, conf: Mapping[str, Any] | None = None, args: Sequence[Any] = (),
              kwargs: Mapping[str, Any] | None = None) -> SpoutRun:
    """Open a ``cls(*args, **kwargs)`` and call ``next_tuple`` ``calls`` times; then drive it with
    ``run.ack_message(id)`` / ``run.fail_message(id)`` / ``run.next()``."""
    spout = cls(*args, **dict(kwargs or {}))
    run = SpoutRun(cls.output_streams(), spout=spout)
    spout.bind(run, _context(cls, conf))
    spout.open(dict(conf or {}), spout.context)
    spout.activate()
    return run.next(calls)
