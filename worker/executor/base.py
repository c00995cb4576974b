"""What every executor shares (:class:`Executor`): its outputs and the batches it opens in the round's outbox,
heartbeats to the topology master, error reporting, the acker route; what every executor of a worker shares
(:class:`ExecutorEnv`); building the user's component from its spec.
"""

from __future__ import annotations

import importlib
import json
import time
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

import structlog

from squall.api.component import Collector, Component, TopologyContext, attach, emit_problem
from squall.api.metrics import TaskMetrics
from squall.api.tuple import Piece, TupleBatch
from squall.core.system_ids import ACKER, MASTER_HEARTBEAT_STREAM, RESERVED_PREFIX
from squall.core.zk.records import ComponentType, TaskBeat, TaskStats
from worker.executor.acking import AckOut
from worker.executor.routing import ANCHORS, PLAIN, ROOTS, StreamOut, build_outputs, random_bits
from worker.executor.stats import Stats, stats_to_wire, task_stats
from worker.layout import ComponentSpec, Placement, TopologyLayout
from worker.queues import Inbox, Outbox, Pressure
from worker.throttle import ErrorThrottle

log = structlog.get_logger(__name__)

C = TypeVar("C", bound=Component)


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


def component_context(layout: TopologyLayout, spec: ComponentSpec, task: int) -> TopologyContext:
    return TopologyContext(
        topology_id=layout.topology_id,
        topology_name=layout.name,
        component_id=spec.id,
        task_id=task,
        component_tasks=layout.component_tasks,
        conf=spec.conf,
    )


class Executor:
    """The part every task shares: outputs, heartbeats to the topology master, errors, the acker route."""

    _acks: AckOut  # set by refresh(), which flushes the previous one first

    def __init__(
        self, task: int, layout: TopologyLayout, placement: Placement, outbox: Outbox, inbox: Inbox, env: ExecutorEnv
    ) -> None:
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
        self._throttle = ErrorThrottle(
            int(conf["topology.max.error.report.per.interval"]), float(conf["topology.error.throttle.interval.secs"])
        )
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
        self._inputs = sorted(
            f"{source}:{stream}"
            for (source, stream), subs in layout.subscribers.items()
            if not stream.startswith(RESERVED_PREFIX) and any(s.component == self.component for s in subs)
        )
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
            raise ValueError(
                f"emit on direct stream {stream!r} to task {direct_task}, which does not subscribe "
                f"to it with direct grouping (subscribed tasks: {sorted(out.direct_targets)})"
            )

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
        batch = TupleBatch(
            [],
            out.fields,
            self.component,
            stream,
            self.task,
            None if form == PLAIN else [],
            [] if form == ROOTS else None,
            [] if form == ANCHORS else None,
            out.keys[form],
        )
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

    def _parts(
        self, rows: list[tuple[Any, ...]], out: StreamOut, direct_task: int | None
    ) -> Iterable[tuple[int, list[tuple[Any, ...]]]]:
        """``rows`` by target task, in order within each: whole when the targets do not depend on the values."""
        targets = out.constant if direct_task is None else (direct_task,)
        if targets is not None:
            return [(target, rows) for target in targets]
        if out.split is not None:  # shuffle: consecutive rows to each target, as many as per-row calls give it
            parts, start = [], 0
            for (target,), size in out.split(len(rows)):
                parts.append((target, rows[start : start + size]))
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

    def _emit_pieces(
        self, rows: list[tuple[Any, ...]], stream: str, out: StreamOut, direct_task: int | None, root: int
    ) -> int:
        """``rows`` in ``root``'s tree as one :class:`~squall.api.tuple.Piece` per target task (one batch, one random
        edge each, never extended by later emits); returns the XOR of the edges (0: sent nowhere)."""
        targets = out.constant if direct_task is None else (direct_task,)
        if targets is not None and len(targets) == 1 and rows:  # the usual case, without splitting: one piece
            edge = random_bits(64) or 1
            self._outbox.add(
                targets[0],
                TupleBatch(rows, out.fields, self.component, stream, self.task, piece=Piece(root, edge, len(rows))),
            )
            return edge
        parts, init = list(self._parts(rows, out, direct_task)), 0
        shared = len(parts) > 1 and parts[0][1] is parts[-1][1]  # every target gets ``rows`` itself: copies
        component, task, add, fields = self.component, self.task, self._outbox.add, out.fields
        for target, part in parts:
            if part:
                edge = random_bits(64) or 1
                init ^= edge
                add(
                    target,
                    TupleBatch(
                        list(part) if shared else part,
                        fields,
                        component,
                        stream,
                        task,
                        piece=Piece(root, edge, len(part)),
                    ),
                )
        return init

    # -- timers, heartbeats, errors --------------------------------------------------------------

    def _heartbeat(self, now: float) -> None:
        if now < self._next_beat:
            return
        self._next_beat = now + self._beat_every
        out = self._beat_out
        if out is not None:
            values = (self.task, int(now - self._started), stats_to_wire(self.task_stats()))
            for target in out.route(values):
                self._outbox.add(
                    target, TupleBatch([values], out.fields, self.component, MASTER_HEARTBEAT_STREAM, self.task)
                )

    def task_stats(self) -> TaskStats:
        """This task's counters as the topology master reports them (see :func:`~worker.executor.stats.task_stats`)."""
        counters, gauges = self._user_metrics()
        return task_stats(self.stats, self._outs, self._inputs, counters, gauges)

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
        log.error("task error", topology_id=self.env.topology_id, component=self.component, task=self.task, error=text)
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
        # Each executor implements the half of Collector its component calls (a spout's emits, a bolt's emits and acks).
        attach(component, cast(Collector, self), context)
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
        raise ValueError(
            f"component {spec.id!r} is not a Python component (a shell component runs on worker.multilang's executors)"
        )
    cls = getattr(importlib.import_module(py.module_name), py.class_name)
    args = json.loads(py.args_json) if py.args_json else []
    kwargs = json.loads(py.kwargs_json) if py.kwargs_json else {}
    return cls(*args, **kwargs)
