"""What users subclass: :class:`Spout` and :class:`Bolt`, plus the collector the runtime plugs in.

Components declare their output streams on the class (``outputs``) and call ``self.emit`` /
``self.ack`` / ``self.fail`` / ``self.report_error``; those go to a :class:`Collector` — the worker's
executor in a cluster, a recorder in :mod:`squall.testing`. Constructor arguments must be
JSON-serialisable: workers build components from the topology (module, class, args).

A bolt with ``auto_ack = True`` (the default, Storm's BasicBolt) anchors what it emits during
``execute`` to the input, acks the input when ``execute`` returns and fails it (reporting the
error) when ``execute`` raises. Set ``auto_ack = False`` to anchor and ack by hand.
"""

from __future__ import annotations

import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import structlog

from squall.tuple import Tuple

DEFAULT_STREAM = "default"


@dataclass(frozen=True)
class Stream:
    """An output stream declaration; ``direct`` streams are sent to a named task with ``direct_task``."""

    fields: tuple[str, ...]
    direct: bool = False

    def __init__(self, fields: Sequence[str], direct: bool = False) -> None:
        object.__setattr__(self, "fields", tuple(fields))
        object.__setattr__(self, "direct", direct)


@dataclass(frozen=True)
class TopologyContext:
    """Where a component instance runs."""

    topology_id: str
    topology_name: str
    component_id: str
    task_id: int
    component_tasks: Mapping[str, Sequence[int]] = field(default_factory=dict)
    conf: Mapping[str, Any] = field(default_factory=dict)


class Collector(Protocol):
    """Implemented by the worker's executors and by :mod:`squall.testing`."""

    def emit(self, values: Sequence[Any], stream: str, anchors: Sequence[Tuple], direct_task: int | None,
             msg_id: Any) -> list[int]: ...

    def ack(self, tup: Tuple) -> None: ...

    def fail(self, tup: Tuple) -> None: ...

    def report_error(self, message: str) -> None: ...


class Component:
    #: ``["f1", "f2"]`` for the default stream, or ``{"stream": ["f1"] | Stream([...], direct=True)}``.
    outputs: ClassVar[Sequence[str] | Mapping[str, Sequence[str] | Stream]] = ()

    _collector: Collector
    context: TopologyContext

    @classmethod
    def output_streams(cls) -> dict[str, Stream]:
        """The declared streams, normalised."""
        if isinstance(cls.outputs, Mapping):
            return {name: s if isinstance(s, Stream) else Stream(s) for name, s in cls.outputs.items()}
        return {DEFAULT_STREAM: Stream(cls.outputs)} if cls.outputs else {}

    def bind(self, collector: Collector, context: TopologyContext) -> None:
        """Called by the runtime (or the test helper) before open/prepare."""
        self._collector = collector
        self.context = context
        self.log = structlog.get_logger(type(self).__module__).bind(component=context.component_id,
                                                                    task=context.task_id)

    def report_error(self, error: BaseException | str) -> None:
        """Record an error for ``storm get-errors`` / the topology info, without stopping the task."""
        if isinstance(error, BaseException):
            error = "".join(traceback.format_exception(error)).rstrip()
        self._collector.report_error(error)


class Spout(Component):
    def open(self, conf: Mapping[str, Any], context: TopologyContext) -> None:
        """Called once before the first ``next_tuple``."""

    def next_tuple(self) -> None:
        """Emit zero or more tuples; called repeatedly while the topology is active."""

    def ack(self, msg_id: Any) -> None:
        """The tuple tree emitted with ``msg_id`` was fully processed."""

    def fail(self, msg_id: Any) -> None:
        """The tree failed or timed out (``topology.message.timeout.secs``): replay it if reliable."""

    def activate(self) -> None:
        """The topology was activated; ``next_tuple`` calls resume."""

    def deactivate(self) -> None:
        """The topology was deactivated; no ``next_tuple`` until activated again."""

    def close(self) -> None:
        """The task is shutting down."""

    def emit(self, values: Sequence[Any], stream: str = DEFAULT_STREAM, msg_id: Any = None,
             direct_task: int | None = None) -> list[int]:
        """Emit a tuple; with a ``msg_id`` it is tracked and ``ack``/``fail`` is called with that id."""
        return self._collector.emit(values, stream, (), direct_task, msg_id)


class Bolt(Component):
    #: Storm's BasicBolt behaviour: anchor to the input, ack on return, fail on exception.
    auto_ack: ClassVar[bool] = True

    _input: Tuple | None = None

    def prepare(self, conf: Mapping[str, Any], context: TopologyContext) -> None:
        """Called once before the first ``execute``."""

    def execute(self, tup: Tuple) -> None:
        """Process one input tuple (tick tuples too: check ``tup.is_tick``)."""

    def cleanup(self) -> None:
        """The task is shutting down."""

    def emit(self, values: Sequence[Any], stream: str = DEFAULT_STREAM, anchors: Sequence[Tuple] | None = None,
             direct_task: int | None = None) -> list[int]:
        """Emit a tuple anchored to ``anchors`` (default with ``auto_ack``: the input being executed)."""
        if anchors is None:
            anchors = (self._input,) if self.auto_ack and self._input is not None else ()
        return self._collector.emit(values, stream, anchors, direct_task, None)

    def ack(self, tup: Tuple) -> None:
        self._collector.ack(tup)

    def fail(self, tup: Tuple) -> None:
        self._collector.fail(tup)

    def process(self, tup: Tuple) -> None:
        """Run ``execute`` for one input, as executors do: an exception fails the input and is reported
        (the task keeps running); with ``auto_ack`` a normal return acks it and emits are anchored to it."""
        self._input = tup
        try:
            self.execute(tup)
        except Exception as exc:
            self.report_error(exc)
            if not tup.is_tick:
                self._collector.fail(tup)
        else:
            if self.auto_ack and not tup.is_tick:
                self._collector.ack(tup)
        finally:
            self._input = None
