"""The hand-over points between a worker's threads: the event a task thread sleeps on (:class:`Wake`), an
executor's receive queue (:class:`Inbox`), what a task thread emitted in one round (:class:`Outbox`), where a
task's batches go (:class:`Routes`: its inbox, or the send queue to its worker), what waits for another worker's
sender thread (:class:`SendQueue`) and the worker-wide backpressure switch (:class:`Pressure`).

Every tuple crosses threads here, a batch at a time: an emit appends its row to the
:class:`~squall.api.tuple.TupleBatch` its target task gets at the end of the round, and the target's task thread
takes batches from its inbox; a batch from another worker is checked against the topology before any inbox
takes it. Nothing here runs user code or knows about acking.
"""

from __future__ import annotations

import _thread
import threading
from collections import defaultdict, deque
from collections.abc import Callable, Mapping

from squall.api.tuple import ColumnBatch, TupleBatch
from worker.layout import Origin, Refused

#: Longest a task thread sleeps with nothing to do, so control messages and stop are never late by more.
MAX_IDLE_SECS = 0.1


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


class Routes:
    """Where a batch for a task goes from this worker's threads, both ways: the task's :class:`Inbox` when it runs
    here, else the :class:`SendQueue` to its worker (:attr:`remote`, filled by ``unrouted(task, batches)`` the first
    time a task is sent to: it opens the worker's sender, or drops the batches); a batch another worker sent is checked
    against the topology (``origins``, a :class:`~worker.layout.Origins`) by :meth:`receive` before its task's inbox
    takes it. The runtime keeps the maps; :attr:`dropped` counts tuples sent to no task.
    """

    def __init__(
        self,
        origins: Mapping[tuple[int, str], Origin | Refused],
        unrouted: Callable[[int, list[TupleBatch]], None] = lambda task, batches: None,
        refuse: Callable[[Refused, int, TupleBatch], None] = lambda refusal, target, batch: None,
    ) -> None:
        self.inboxes: dict[int, Inbox] = {}
        #: Replaced whole (not cleared) when a refresh changes the routes: a flush reads it once.
        self.remote: dict[int, SendQueue] = {}
        self.origins = origins
        self.unrouted = unrouted
        self._refuse = refuse
        self.dropped = 0

    def receive(self, target: int, batch: ColumnBatch) -> None:
        """On the receiver thread: ``batch`` from another worker to its ``target`` task, once its source task and
        stream are the topology's and its rows as wide as the stream's fields; then it gets their component and
        fields. Anything else goes to ``refuse`` (a bolt reads the values it declared, whoever is on the other end
        of the socket)."""
        origin = self.origins[(batch.task, batch.stream)]
        if isinstance(origin, Refused):
            self._refuse(origin, target, batch)
            return
        width = batch.width
        if width is not None and width != len(origin.fields):
            self._refuse(
                Refused("wrong width", f"rows {width} wide, the stream declares {len(origin.fields)} fields"),
                target,
                batch,
            )
            return
        inbox = self.inboxes.get(target)
        if inbox is None:  # a task that left this worker (a stale route at the sender; replayed by spouts)
            self.dropped += len(batch)
            return
        batch.component, batch.fields = origin.component, origin.fields
        inbox.put([batch])


class Outbox:
    """Tuple batches emitted on one task thread this round, by target task; ``flush`` hands them over.

    An emit extends the batch its target got last this round when that batch has the emit's key (same
    task, stream and form: :attr:`StreamOut.keys`), else opens a new one, so each target receives rows in
    emit order. A target of this worker gets the batches in its inbox; another worker's, in that worker's send
    queue (see :class:`Routes`). ``wake`` is the owning thread's event: a task of that same thread is not woken by it
    (see :meth:`Inbox.put`).
    """

    def __init__(self, routes: Routes, wake: Wake) -> None:
        self.pending: defaultdict[int, list[TupleBatch]] = defaultdict(list)
        #: The batch each target got last this round.
        self.last: dict[int, TupleBatch] = {}
        self._routes = routes
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
        routes, wake, own = self._routes, self._wake, False
        inboxes, remote = routes.inboxes, routes.remote
        for task, batch in batches:
            inbox = inboxes.get(task)
            if inbox is not None:
                if inbox.wake is wake:
                    inbox.put(batch, wake=False)
                    own = True
                else:
                    inbox.put(batch)
            elif (queue := remote.get(task)) is not None:
                queue.put(task, batch)
            else:
                routes.unrouted(task, batch)
        return own


class Pressure:
    """Worker-wide backpressure with hysteresis: ``high`` from when any receive queue or send backlog
    (``fill()``, the fullest one's fill ratio) passes the high water mark until all are back under the
    low one. While it is high the receiver stops reading the network and tells every peer so
    (:data:`~worker.wire.THROTTLE_ON`); ``held()`` says whether some peer told this worker that. Spouts stop
    emitting while either holds (:attr:`hold_spouts`): a full queue downstream paces the spouts feeding it in
    every worker, as Storm 2's backpressure does. Only spouts wait on a peer; bolts never block and the receiver
    stops only for its own worker's queues, so a DAG cannot deadlock."""

    def __init__(
        self,
        fill: Callable[[], float],
        *,
        enabled: bool,
        high: float,
        low: float,
        held: Callable[[], bool] = lambda: False,
    ) -> None:
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


class SendQueue:
    """Tuple batches for the tasks of one other worker, from the task threads that put them to the sender thread that
    takes them whole (:class:`worker.transport.Sender`). A batch put right after one for the same target, of the same
    source, stream and form of tracking, is appended to it, so a message carries many rows. Until ``connected`` is
    set it holds at most ``capacity`` tuples and drops the rest (a peer not reachable yet must not grow it without
    bound); once closed it takes nothing. :attr:`dropped` counts the tuples given up on here or by the sender: their
    spouts replay them after the message timeout, as in Storm.

        queue = SendQueue(capacity=100_000, batch_size=100, connected=threading.Event())
        queue.put(target_task, [batch])     # a task thread, at the end of its round (the queue owns the batch now)
        batches, closing = queue.take()     # the sender thread, when queue.wake is set or its flush interval passed
    """

    def __init__(self, capacity: int, batch_size: int, connected: threading.Event) -> None:
        #: Tuples queued and not yet taken.
        self.backlog = 0
        self.dropped = 0
        self.closed = False
        #: Set when the sender thread has something to do: a first batch, a full one, close.
        self.wake = Wake()
        self._connected = connected
        self._capacity = capacity
        self._batch_size = batch_size
        self._pending: list[tuple[int, TupleBatch]] = []
        self._lock = threading.Lock()  # a plain lock: taken once per task thread's flush

    def put(self, target: int, batches: list[TupleBatch]) -> None:
        """Queue ``batches`` for the peer's ``target`` task; the sender thread is woken by the first tuple and by the
        one that fills a batch."""
        rows = sum(map(len, batches))
        with self._lock:
            before = self.backlog
            if self.closed:
                self.dropped += rows
                return
            if before + rows > self._capacity and not self._connected.is_set():
                batches = _first_rows(batches, self._capacity - before)
                self.dropped += rows - (kept := sum(map(len, batches)))
                rows = kept
                if not rows:
                    return
            _append_merged(self._pending, target, batches)
            self.backlog = before + rows
            if not before or before < self._batch_size <= before + rows:  # start the flush clock, or ship now
                self.wake.set()

    def take(self) -> tuple[list[tuple[int, TupleBatch]], bool]:
        """Everything queued, as ``(target, batch)`` in order, and whether the queue is closed."""
        with self._lock:
            batches, self._pending, self.backlog = self._pending, [], 0
            return batches, self.closed

    def close(self) -> None:
        """Take nothing more; what is queued is still taken."""
        with self._lock:
            self.closed = True
            self.wake.set()

    def discard(self) -> int:
        """Close and drop what is queued; how many tuples that dropped."""
        with self._lock:
            dropped, self._pending, self.backlog = self.backlog, [], 0
            self.dropped += dropped
            self.closed = True
            self.wake.set()
        return dropped

    def count_dropped(self, tuples: int) -> None:
        """Tuples taken from the queue that the sender could not deliver."""
        with self._lock:
            self.dropped += tuples


def _append_merged(pending: list[tuple[int, TupleBatch]], target: int, batches: list[TupleBatch]) -> None:
    """Queue ``batches`` for ``target`` at the end of ``pending``, each appended to the batch before it when that one
    is for the same target and :func:`_mergeable`."""
    for batch in batches:
        if pending:
            last_target, last = pending[-1]
            if last_target == target and _mergeable(last, batch):
                _merge(last, batch)
                continue
        pending.append((target, batch))


def _mergeable(last: TupleBatch, batch: TupleBatch) -> bool:
    """Whether ``batch`` can be appended to ``last`` as it is: one source and stream, one form of tracking (untracked,
    one root per row, or root maps). A piece travels as it is: one edge for all its rows."""
    return (
        last.task == batch.task
        and last.stream == batch.stream
        and last.piece is None
        and batch.piece is None
        and (last.ids is None) == (batch.ids is None)
        and (last.roots is None) == (batch.roots is None)
    )


def _merge(last: TupleBatch, batch: TupleBatch) -> None:
    """Append ``batch`` to ``last``; :func:`_mergeable` checked that both have the same tracking columns."""
    last.rows.extend(batch.rows)
    if last.ids is not None:
        last.ids.extend(batch.ids)  # type: ignore[arg-type]
        if last.roots is not None:
            last.roots.extend(batch.roots)  # type: ignore[arg-type]
        else:
            last.anchors.extend(batch.anchors)  # type: ignore[arg-type,union-attr]


def _first_rows(batches: list[TupleBatch], n: int) -> list[TupleBatch]:
    """The first ``n`` rows of ``batches`` (whole batches, then the start of the one that does not fit: a piece cut
    short travels untracked, so its tree is replayed rather than completed without the rows left out)."""
    kept: list[TupleBatch] = []
    for batch in batches:
        if n <= 0:
            break
        if len(batch) > n:
            ids, roots, anchors = batch.ids, batch.roots, batch.anchors
            batch = TupleBatch(
                batch.rows[:n],
                batch.fields,
                batch.component,
                batch.stream,
                batch.task,
                None if ids is None else ids[:n],
                None if roots is None else roots[:n],
                None if anchors is None else anchors[:n],
            )
        kept.append(batch)
        n -= len(batch)
    return kept
