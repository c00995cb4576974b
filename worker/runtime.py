"""A worker's tasks at run time: executors on task threads, tuples handed between them and to other
workers, activation, assignment refresh and shutdown. ``python -m worker`` (cluster) and local mode
run this same runtime; only what surrounds it differs.

Threads: by default every executor of the worker shares one *task thread* that steps them in
turn. Under the GIL that is the fastest arrangement — handing tuples between threads costs more than
the work itself for small tuples — and it makes in-worker hand-off a list append. A component whose
code blocks (I/O, Spark) sets ``squall.own.thread: true`` in its conf and gets a thread per task.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import structlog

from squall.api.classcheck import Kind, resolve
from squall.api.tuple import TupleBatch
from squall.core.system_ids import ACKER, CHECKPOINT_SPOUT, CHECKPOINT_STREAM, TOPOLOGY_MASTER
from squall.core.zk.records import ComponentType
from worker.acker import Acker
from worker.executor.base import Executor, ExecutorEnv
from worker.executor.bolt import BoltExecutor
from worker.executor.spout import SpoutExecutor
from worker.executor.stateful import StatefulBoltExecutor
from worker.layout import Address, Origins, Placement, Refused, TopologyLayout
from worker.multilang.bolt import ShellBoltExecutor
from worker.multilang.spout import ShellSpoutExecutor
from worker.queues import MAX_IDLE_SECS, Inbox, Outbox, Pressure, Routes, Wake
from worker.throttle import ErrorThrottle
from worker.topology_master import TopologyMaster
from worker.transport import LOG_INTERVAL_SECS, Receiver, Sender

log = structlog.get_logger(__name__)


class WorkerFailed(RuntimeError):
    """A component could not start, or user code failed with ``topology.worker.exit.on.error``."""


class TaskThread(threading.Thread):
    """Steps its executors in rounds, flushes what they emitted, sleeps when none has work.

    A round steps only the executors with input or whose time has come (:attr:`Executor.due`: ticks,
    heartbeats, expiry, a spout's back-off), then sleeps until the earliest due time or until another
    thread wakes it. What a step emitted is flushed right after it, so the executors after it (in task id
    order) take it in the same round: a batch tree's spout step, its bolt's step, the acks and the acker's
    completions take one round, not three, and the acked const → null batch run keeps its whole pending cap
    moving (1,600 rows a round instead of ~670). Tuples it hands its own executors do not wake it: it steps
    them again at once.
    Everything that touches an executor after start runs here: other threads post it with :meth:`call`,
    and every executor is stepped in the round after a call (activation, a new assignment or conf).
    """

    def __init__(
        self, name: str, pressure: Pressure, routes: Routes, on_fatal: Callable[[BaseException], None]
    ) -> None:
        super().__init__(name=name, daemon=True)
        self.wake = Wake()
        self.outbox = Outbox(routes, self.wake)
        self.executors: list[Executor] = []
        self._pressure = pressure
        self._on_fatal = on_fatal
        self._calls: deque[Callable[[], None]] = deque()
        self._stopping = False

    def call(self, fn: Callable[[], None]) -> None:
        self._calls.append(fn)
        self.wake.set()

    def call_each(self, fn: Callable[[Executor], object]) -> None:
        """:meth:`call` ``fn`` on each executor this thread runs when the call comes."""

        def each() -> None:
            for executor in self.executors:
                fn(executor)

        self.call(each)

    def add(self, executor: Executor) -> None:
        """Start ``executor`` (open/prepare) on this thread, then step it with the others."""

        def start() -> None:
            try:
                _check_user_class(executor)
                executor.start()
            except BaseException as exc:
                executor.report_error(exc)
                self._on_fatal(WorkerFailed(f"{executor.component} task {executor.task} did not start: {exc!r}"))
                return
            self.executors.append(executor)

        self.call(start)

    def remove(self, task: int) -> None:
        def close() -> None:
            for executor in [e for e in self.executors if e.task == task]:
                self.executors.remove(executor)
                executor.close()

        self.call(close)

    def stop(self, timeout: float = 10.0) -> None:
        """Close every executor on this thread, flush, and end the thread."""

        def close_all() -> None:
            for executor in self.executors:
                executor.close()
            self.outbox.flush()
            self.executors = []
            self._stopping = True

        self.call(close_all)
        if self.is_alive():
            self.join(timeout)

    def run(self) -> None:
        """Rounds until stopped. A thread that dies leaves its tasks silent in a live process, which its
        supervisor keeps (the worker still beats locally): the worker fails instead, and is restarted."""
        try:
            self._rounds()
        except BaseException as exc:
            log.exception("task thread died", thread=self.name)
            self._on_fatal(WorkerFailed(f"task thread {self.name} died: {exc!r}"))

    def _rounds(self) -> None:
        wake, calls, pressure, flush = self.wake, self._calls, self._pressure, self.outbox.flush
        pending = self.outbox.pending
        monotonic = time.monotonic
        while True:
            wake.clear()
            if calls:
                while calls:
                    calls.popleft()()
                if self._stopping:
                    return
                for executor in self.executors:
                    executor.due = 0.0
            pressure.update()
            now = monotonic()
            wake_at = now + MAX_IDLE_SECS
            own = False
            for executor in self.executors:
                due = executor.due
                if due <= now or executor.inbox.size:
                    due = executor.due = now + executor.step(now)
                    if pending:  # what it emitted reaches the executors after it in this same round
                        own = flush() or own
                if due < wake_at:
                    wake_at = due
            if own and any(executor.inbox.size for executor in self.executors):
                continue  # an executor it already passed got tuples from a later one: step it before sleeping
            delay = wake_at - monotonic()
            if delay > 0:
                wake.wait(delay)


def _check_user_class(executor: Executor) -> None:
    """The class a user component names is a Spout or Bolt subclass before its executor builds it (calls it
    with the topology's arguments): what a worker runs comes from stored code and ZooKeeper, not only
    from what nimbus checked at submit."""
    if isinstance(executor, (SpoutExecutor, BoltExecutor)) and executor.spec.obj.python_object is not None:
        named = executor.spec.obj.python_object
        kind: Kind = "spout" if executor.spec.kind is ComponentType.SPOUT else "bolt"
        resolve(named.module_name, named.class_name, kind, f"{kind} {executor.component!r}")


class WorkerRuntime:
    """The executors of the tasks ``placement`` gives this worker, and the transfer between workers.

    ``listen`` is the port to receive other workers' tuples on (None in local mode); ``resources_dir`` is
    where shell components run (see :class:`~worker.executor.base.ExecutorEnv`).
    """

    def __init__(
        self,
        layout: TopologyLayout,
        placement: Placement,
        conf: Mapping[str, Any],
        *,
        report_error: Callable[[int, str], None],
        report_beats: Callable[[dict[int, Any]], None] = lambda beats: None,
        on_fatal: Callable[[BaseException], None] | None = None,
        listen: tuple[str, int] | None = None,
        transfer_secret: bytes | None = None,
        resources_dir: Path | None = None,
    ) -> None:
        self.layout = layout
        self._transfer_secret = transfer_secret  # the topology's; kept off self.conf, which tasks see
        self.placement = placement
        self.conf = conf
        self.failure: BaseException | None = None
        self.failed = threading.Event()
        self._on_fatal_cb = on_fatal
        self._capacity = int(conf["topology.executor.receive.buffer.size"])
        self._batch = int(conf["topology.transfer.batch.size"])
        self._flush_secs = float(conf["topology.batch.flush.interval.millis"]) / 1000
        self._send_capacity = int(conf["topology.transfer.buffer.size"]) * self._batch
        self._socket_buffer = int(conf["worker.transfer.socket.buffer.bytes"])
        self.pressure = Pressure(
            self._fill,
            enabled=bool(conf["topology.backpressure.enable"]),
            high=float(conf["topology.backpressure.water.mark.high"]),
            low=float(conf["topology.backpressure.water.mark.low"]),
            held=self._peers_hold,
        )
        self.env = ExecutorEnv(
            layout.topology_id, report_error, self.pressure, self._fatal, report_beats, resources_dir
        )
        #: Who sends each (task, stream) of the topology: what a batch from another worker is checked against.
        self._origins = Origins(layout)
        #: Where each task's batches go: its inbox here, or the sender to its worker.
        self.routes = Routes(self._origins, self._unrouted, self._refuse)
        #: The inboxes again, as a tuple replaced whole when tasks come or go: what :meth:`_fill` scans.
        self._queues: tuple[Inbox, ...] = ()
        self.executors: dict[int, Executor] = {}
        self._thread_of: dict[int, TaskThread] = {}
        self.shared = self._new_thread("tasks")
        self.threads: list[TaskThread] = [self.shared]
        self.senders: dict[Address, Sender] = {}
        #: The senders again, as a tuple replaced whole when they come or go: what :meth:`_fill` scans every round.
        self._sending: tuple[Sender, ...] = ()
        self._senders_lock = threading.Lock()
        #: Notified when a sender reaches its peer or a refresh changes the peers (see :meth:`wait_for_peers`).
        self._peers_changed = threading.Condition()
        self._active = False
        self._stopped = False
        #: Tuples from other workers refused before any task saw them, by reason (see :meth:`Routes.receive`).
        self.refused: Counter[str] = Counter()
        self._refusal_log = ErrorThrottle(1, LOG_INTERVAL_SECS)
        self._listen = listen
        self.receiver: Receiver | None = None

    # -- building ---------------------------------------------------------------------------------

    def _new_thread(self, name: str) -> TaskThread:
        return TaskThread(name, self.pressure, self.routes, self._fatal)

    def _executor_class(self, task: int) -> type[Executor]:
        component = self.layout.task_component[task]
        if component == ACKER:
            return Acker
        if component == TOPOLOGY_MASTER:
            return TopologyMaster
        spec = self.layout.components[component]
        if spec.obj.shell is not None:
            return ShellSpoutExecutor if spec.kind is ComponentType.SPOUT else ShellBoltExecutor
        if spec.kind is ComponentType.SPOUT:
            return SpoutExecutor
        checkpointed = self.layout.subscribers.get((CHECKPOINT_SPOUT, CHECKPOINT_STREAM), ())
        return StatefulBoltExecutor if any(s.component == component for s in checkpointed) else BoltExecutor

    def _add_tasks(self, tasks: Iterable[int]) -> list[TaskThread]:
        started = []
        for task in sorted(tasks):
            spec = self.layout.components[self.layout.task_component[task]]
            thread = self.shared
            if spec.conf.get("squall.own.thread"):
                thread = self._new_thread(f"task-{task}")
                self.threads.append(thread)
                started.append(thread)
            inbox = Inbox(self._capacity, thread.wake)
            executor = self._executor_class(task)(task, self.layout, self.placement, thread.outbox, inbox, self.env)
            self.routes.inboxes[task] = inbox
            self._queues = tuple(self.routes.inboxes.values())
            self.executors[task] = executor
            self._thread_of[task] = thread
            thread.add(executor)
        return started

    def start(self) -> WorkerRuntime:
        """Open every task (each on its thread) and return once all have; spouts stay paused until
        :meth:`set_active`. If a task cannot start, :attr:`failure` says why."""
        self._add_tasks(self.placement.local)
        ready = []
        for thread in self.threads:
            event = threading.Event()
            thread.call(event.set)
            ready.append(event)
            thread.start()
        for event in ready:
            while not event.wait(MAX_IDLE_SECS) and not self.failed.is_set():
                pass
        if self._listen and not self.failed.is_set():
            # Listen only now: peers activate their spouts once every worker listens, so no tuple
            # waits (and times out) in the queue of a task still preparing (a Spark session: ~15 s).
            conf = self.conf
            self.receiver = Receiver(
                self.routes.receive,
                self.layout.topology_id,
                *self._listen,
                max_connections=int(conf["worker.transfer.max.connections"]),
                handshake_timeout=float(conf["worker.transfer.handshake.timeout.secs"]),
                idle_timeout=float(conf["worker.transfer.idle.timeout.secs"]),
                secret=self._transfer_secret,
                on_fatal=self._fatal,
                pressure=self.pressure,
                socket_buffer=int(conf["worker.transfer.socket.buffer.bytes"]),
            ).start()
        log.info(
            "worker runtime started",
            topology_id=self.layout.topology_id,
            tasks=sorted(self.executors),
            threads=len(self.threads),
            port=self.receiver.port if self.receiver else None,
        )
        return self

    @property
    def port(self) -> int | None:
        return self.receiver.port if self.receiver else None

    def wait_for_peers(self, timeout: float, stop: threading.Event) -> frozenset[Address]:
        """Connect to every other worker of the current assignment and wait until all listen; return the
        ones that still do not at the deadline (empty once all do, or what was missing when ``stop`` is set).

        A worker activates its spouts only after this (JStorm's RefreshActive), so the first tuples are
        not sent to peers that are still starting. The wait follows :meth:`refresh`: a worker that leaves
        the assignment (dead, moved by nimbus) is no longer waited for, a new one is.

            unreachable = runtime.wait_for_peers(120, stop=worker_done)
        """
        deadline = time.monotonic() + timeout
        with self._peers_changed:
            while True:
                waiting = frozenset(address for address in self.placement.peers if not self._is_connected(address))
                remaining = deadline - time.monotonic()
                if not waiting or remaining <= 0 or stop.is_set():
                    return waiting
                self._peers_changed.wait(min(remaining, MAX_IDLE_SECS))  # the slice bounds how late ``stop`` is seen

    def _is_connected(self, address: Address) -> bool:
        sender = self.senders.get(address) or self._open_sender(address)
        return sender is not None and sender.connected.is_set()

    def _notify_peers_changed(self) -> None:
        with self._peers_changed:
            self._peers_changed.notify_all()

    # -- control ----------------------------------------------------------------------------------

    def set_active(self, active: bool) -> None:
        """Spouts run while the topology is active (active, upgrading, rollback) and pause otherwise."""
        self._active = active
        for thread in self.threads:
            thread.call_each(lambda e: e.set_active(active))

    def update_conf(self, conf: Mapping[str, Any]) -> None:
        """A new topology conf, given to every task on its own thread; the code stays what it is."""
        for thread in self.threads:
            thread.call_each(lambda e: e.update_conf(conf))
        log.info("worker conf updated", tasks=sorted(self.placement.local))

    def refresh(self, layout: TopologyLayout, placement: Placement) -> None:
        """A new assignment: route to tasks where they now run, start new local tasks, stop removed ones."""
        old = self.placement.local
        self.layout, self.placement = layout, placement
        self._origins.reset(layout)
        self.routes.remote = {}  # looked up again: a task may have moved
        for task in sorted(old - placement.local):
            self._thread_of.pop(task).remove(task)
            self.routes.inboxes.pop(task, None)
            self._queues = tuple(self.routes.inboxes.values())
            self.executors.pop(task, None)
        for thread in self.threads:
            thread.call_each(lambda e: e.refresh(layout, placement))
        for thread in self._add_tasks(placement.local - old):
            thread.start()
        if self._active:
            self.set_active(True)
        with self._senders_lock:
            gone = [self.senders.pop(a) for a in list(self.senders) if a not in placement.peers]
            self._sending = tuple(self.senders.values())
        for sender in gone:
            # Not sent: its tasks now run elsewhere or nowhere. Reliable spouts replay the dropped tuples.
            dropped = sender.discard()
            self.routes.dropped += dropped
            log.info(
                "stopped sending to a worker that left the assignment", address=sender.address, dropped_tuples=dropped
            )
        self._notify_peers_changed()
        log.info("worker refreshed", tasks=sorted(placement.local), remote_workers=len(placement.peers))

    def stop(self) -> None:
        """Pause spouts, close every task (deactivate/close, cleanup), flush to other workers, stop."""
        if self._stopped:
            return
        self._stopped = True
        self.set_active(False)
        for thread in self.threads:
            thread.stop()
        with self._senders_lock:
            senders, self.senders, self._sending = list(self.senders.values()), {}, ()
        for sender in senders:
            sender.close()
        if self.receiver is not None:
            self.pressure.relieved.set()
            self.receiver.stop()

    def _fatal(self, exc: BaseException) -> None:
        if self.failure is None:
            self.failure = exc
        self.failed.set()
        if self._on_fatal_cb is not None:
            self._on_fatal_cb(exc)

    # -- transfer ---------------------------------------------------------------------------------

    @property
    def dropped(self) -> int:
        """Tuples for tasks this worker cannot reach (stale routes; replayed by spouts)."""
        return self.routes.dropped

    def _unrouted(self, task: int, batches: list[TupleBatch]) -> None:
        """A task thread's first batches for ``task`` since the routes changed: sent to its worker (whose sender is
        its route from now on), or dropped if it has none (no route, or one a refresh just removed)."""
        address = self.placement.remote.get(task)
        sender = None if address is None else self.senders.get(address) or self._open_sender(address)
        if sender is None:
            self.routes.dropped += sum(map(len, batches))
            return
        self.routes.remote[task] = sender.queue
        sender.queue.put(task, batches)

    def _open_sender(self, address: Address) -> Sender | None:
        """The sender to ``address``, opened now if needed; None if it is not a peer of the current placement
        (a task thread may still hold a route a refresh removed: that sender must not come back)."""
        with self._senders_lock:
            sender = self.senders.get(address)
            if sender is None and address in self.placement.peers:
                sender = self.senders[address] = Sender(
                    address[0],
                    address[1],
                    self.layout.topology_id,
                    batch_size=self._batch,
                    flush_interval=self._flush_secs,
                    max_pending=self._send_capacity,
                    secret=self._transfer_secret,
                    on_connected=self._notify_peers_changed,
                    socket_buffer=self._socket_buffer,
                )
                self._sending = tuple(self.senders.values())
            return sender

    def _refuse(self, refusal: Refused, target: int, batch: TupleBatch) -> None:
        """Tuples from another worker that no task saw (:meth:`Routes.receive`): counted in :attr:`refused`, logged at
        most once per interval."""
        reason, detail = refusal
        self.refused[reason] += len(batch)
        if self._refusal_log.allow(time.monotonic()):
            suppressed, self._refusal_log.suppressed = self._refusal_log.suppressed, 0
            log.warning(
                "refused tuples from another worker",
                reason=reason,
                detail=detail,
                source_task=batch.task,
                stream=batch.stream,
                target_task=target,
                tuples=len(batch),
                refused_so_far=sum(self.refused.values()),
                other_refusals_not_logged=suppressed,
            )

    def _peers_hold(self) -> bool:
        """Whether some peer's receiver holds this worker's connection (its worker is backpressured): spouts wait."""
        return any(sender.throttled for sender in self._sending)

    def _fill(self) -> float:
        """The fill ratio of the fullest receive queue or send backlog. Every round of every task thread asks
        (:class:`Pressure`), so it is a plain loop: the queues share one capacity."""
        queued = 0
        for inbox in self._queues:
            if inbox.size > queued:
                queued = inbox.size
        backlog = 0
        for sender in self._sending:
            if sender.queue.backlog > backlog:
                backlog = sender.queue.backlog
        return max(queued / self._capacity, backlog / self._send_capacity)
