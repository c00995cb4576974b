"""The hand-over points between a worker's threads: the event a task thread sleeps on (:class:`Wake`), an
executor's receive queue (:class:`Inbox`), what a task thread emitted in one round (:class:`Outbox`) and the
worker-wide backpressure switch (:class:`Pressure`).

Every tuple crosses threads here, a batch at a time: an emit appends its row to the
:class:`~squall.api.tuple.TupleBatch` its target task gets at the end of the round, and the target's task thread
takes batches from its inbox. Nothing here knows about components or acking.
"""

from __future__ import annotations

import _thread
import threading
from collections import defaultdict, deque
from collections.abc import Callable

from squall.api.tuple import TupleBatch

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
