"""At-least-once tracking, as Storm does it: XOR of 64-bit edge ids per tuple tree. Pure state machines.

Every emitted tuple gets a random edge id; the spout reports the XOR of its tuple's edges
(``init``), each bolt reports ``input edge XOR edges it emitted anchored to that input`` when it acks
(``ack``). Every edge enters the XOR twice, so the tree is complete exactly when the value is 0, in
whatever order the reports arrive. The acker keeps one 64-bit value per tree, not the tree.

:class:`AckerState` runs in ``__acker`` tasks; :class:`SpoutPending` runs beside each spout task and
enforces ``topology.max.spout.pending`` and the message timeout. Time is passed in (``now``), so both
are tested on simulated time.
"""

from __future__ import annotations

import math
import random
from collections import deque
from itertools import islice, repeat, takewhile
from operator import itemgetter
from typing import Any, NamedTuple, cast

_RNG = random.Random()


def new_id(rng: random.Random | None = None) -> int:
    """A random non-zero 64-bit id for a root or an edge (0 would vanish in the XOR)."""
    return (rng or _RNG).getrandbits(64) or 1


class Completion(NamedTuple):
    """A tree is done: tell ``spout_task`` to ack (``ok``) or fail the message rooted at ``root``."""

    root: int
    spout_task: int
    ok: bool


class SpoutNews(NamedTuple):
    """What an acker tells one spout task after a round: the roots whose trees were acked, failed, and held
    (``reset_timeout``), one message per list."""

    acked: list[int]
    failed: list[int]
    reset: list[int]


class AckerState:
    """One acker task's trees, expired after ``timeout_secs`` (reported as failures).

    No object per tree: each tree is one entry ``root → XOR`` in a time bucket (a plain dict per
    ``resolution_secs`` of first sight, newest last), plus ``root → spout task`` once the spout's init came.
    A tree expires with its bucket, at most ``resolution_secs`` after its timeout (exactly on time for
    whole-second times). The ``*_many`` calls take a round's messages as lists and put what the spout tasks
    must hear in :attr:`news`; :meth:`init`, :meth:`ack` and :meth:`fail` are the one-root forms::

        acker = AckerState(timeout_secs=30)
        acker.init_many([11, 12], [e1, e2], spout_task=4, now=0.0)
        acker.ack_many([11, 12], [e1, e2], now=0.5)
        acker.take_news()                 # {4: SpoutNews(acked=[11, 12], failed=[], reset=[])}
        acker.init(13, e3, 4, now=1.0)    # () until done, then (Completion(13, 4, ok=True),)
    """

    def __init__(self, timeout_secs: float, resolution_secs: float = 1.0) -> None:
        self.timeout_secs = timeout_secs
        self.resolution_secs = resolution_secs
        #: (time key, root → XOR): a tree lives in the bucket of its first sighting (or last reset) until done.
        self._buckets: deque[tuple[float, dict[int, int]]] = deque()
        self._spout: dict[int, int] = {}  # root → spout task, from the init
        self._early: set[int] = set()  # roots acked or failed before their init (no spout task yet)
        self._failed: set[int] = set()  # roots failed before their init
        self.news: dict[int, SpoutNews] = {}

    def __len__(self) -> int:
        return sum(len(bucket) for _, bucket in self._buckets)

    def take_news(self) -> dict[int, SpoutNews]:
        """What each spout task must hear since the last call (by spout task)."""
        news, self.news = self.news, {}
        return news

    def init_many(self, roots: list[int], values: list[int], spout_task: int, now: float) -> None:
        """The spout task emitted these roots' first tuples; ``values`` are the XORs of their edges."""
        newest, spout, early = self._newest(now), self._spout, self._early
        if not early and 0 not in values:  # the usual case: every tree new and sent somewhere
            newest.update(zip(roots, values))
            spout.update(dict.fromkeys(roots, spout_task))
            return
        for root, value in zip(roots, values):
            if early and root in early:  # acks or a fail came first (from another worker)
                self._init_seen(root, value, spout_task)
            elif value:
                newest[root] = value
                spout[root] = spout_task
            else:  # emitted to no task: done at once
                self._news(spout_task).acked.append(root)

    def ack_many(self, roots: list[int], values: list[int], now: float) -> None:
        """Bolts acked: each value is the input's edge XOR the edges emitted anchored to it."""
        newest, spout, news = self._newest(now), self._spout, self.news
        if values == list(map(newest.get, roots)) and len(set(roots)) == len(roots):
            found = list(map(spout.get, roots))  # the usual case: each ack ends its tree, all in C
            if None not in found:
                tasks = cast("list[int]", found)
                deque(map(newest.__delitem__, roots), maxlen=0)
                deque(map(spout.__delitem__, roots), maxlen=0)
                if len(set(tasks)) == 1:
                    self._news(tasks[0]).acked.extend(roots)
                else:
                    for root, owner in zip(roots, tasks):
                        self._news(owner).acked.append(root)
                return
        for root, value in zip(roots, values):
            bucket = newest if root in newest else self._find(root)
            if bucket is None:  # before the init, or after the tree was done (then it just expires)
                newest[root] = value
                self._early.add(root)
                continue
            value ^= bucket[root]
            if value:
                bucket[root] = value
                continue
            task = spout.pop(root, None)
            if task is None:
                bucket[root] = 0  # no init yet: wait for it
                continue
            del bucket[root]
            told = news.get(task)  # self._news(task), without a call per root
            if told is None:
                told = news[task] = SpoutNews([], [], [])
            told.acked.append(root)

    def fail_many(self, roots: list[int], now: float) -> None:
        """Bolts failed these roots' tuples: the trees fail now, or at their init if it has not come."""
        newest, spout = self._newest(now), self._spout
        for root in roots:
            bucket = self._find(root)
            task = spout.pop(root, None)
            if task is not None:
                del bucket[root]  # type: ignore[union-attr]
                self._news(task).failed.append(root)
                continue
            self._failed.add(root)
            if bucket is None:
                newest[root] = 0
                self._early.add(root)

    def reset_many(self, roots: list[int], now: float) -> None:
        """Bolts hold these roots' tuples (Storm's resetTimeout): their timers start again at ``now``, and the
        spout tasks hear of it so their own timers restart too."""
        newest = self._newest(now)
        for root in roots:
            task = self._reset(root, newest)
            if task is not None:
                self._news(task).reset.append(root)

    def init(self, root: int, value: int, spout_task: int, now: float) -> tuple[Completion, ...]:
        """:meth:`init_many` of one root; returns the completions (with any not taken before)."""
        self.init_many([root], [value], spout_task, now)
        return self._completions()

    def ack(self, root: int, value: int, now: float) -> tuple[Completion, ...]:
        """A bolt acked; acks may arrive before the spout's init (different workers)."""
        self.ack_many([root], [value], now)
        return self._completions()

    def fail(self, root: int, now: float) -> tuple[Completion, ...]:
        self.fail_many([root], now)
        return self._completions()

    def reset_timeout(self, root: int, now: float) -> int | None:
        """A bolt holds a tuple of ``root``'s tree (Storm's resetTimeout): its timeout starts again at ``now``.
        Returns the spout task to forward the reset to, so the spout's own timer restarts too (None: no
        init seen yet, the spout emitted it moments ago; or the tree is gone)."""
        return self._reset(root, self._newest(now))

    def expire(self, now: float) -> list[Completion]:
        """Trees older than the timeout fail (those whose spout is unknown are just dropped)."""
        cutoff, buckets, spout, expired = now - self.timeout_secs, self._buckets, self._spout, []
        while buckets and buckets[0][0] < cutoff:
            for root in buckets.popleft()[1]:
                task = spout.pop(root, None)
                if task is None:
                    self._early.discard(root)
                    self._failed.discard(root)
                else:
                    expired.append(Completion(root, task, ok=False))
        if any(not bucket for _, bucket in list(buckets)[:-1]):  # fewer buckets to search
            self._buckets = deque(entry for i, entry in enumerate(buckets) if entry[1] or i == len(buckets) - 1)
        return expired

    def _init_seen(self, root: int, value: int, spout_task: int) -> None:
        """The init of a tree whose acks or fail came first: it may be done at once."""
        self._early.discard(root)
        bucket = self._find(root)
        assert bucket is not None, "an early root stays in a bucket until its init or its expiry"
        value ^= bucket[root]
        failed = root in self._failed
        if value and not failed:
            bucket[root] = value
            self._spout[root] = spout_task
            return
        del bucket[root]
        self._failed.discard(root)
        told = self._news(spout_task)
        (told.failed if failed else told.acked).append(root)

    def _newest(self, now: float) -> dict[int, int]:
        key = math.ceil(now / self.resolution_secs) * self.resolution_secs
        buckets = self._buckets
        if not buckets or buckets[-1][0] < key:
            buckets.append((key, {}))
        return buckets[-1][1]

    def _find(self, root: int) -> dict[int, int] | None:
        for _, bucket in reversed(self._buckets):
            if root in bucket:
                return bucket
        return None

    def _reset(self, root: int, newest: dict[int, int]) -> int | None:
        bucket = self._find(root)
        if bucket is None:
            return None  # unknown or done: nothing to hold
        if bucket is not newest:
            newest[root] = bucket.pop(root)
        return self._spout.get(root)

    def _news(self, task: int) -> SpoutNews:
        told = self.news.get(task)
        if told is None:
            told = self.news[task] = SpoutNews([], [], [])
        return told

    def _completions(self) -> tuple[Completion, ...]:
        """Take the completions from :attr:`news` (resets stay for :meth:`take_news`)."""
        if not self.news:
            return _NOTHING
        done = tuple(
            Completion(root, task, ok)
            for task, told in self.news.items()
            for ok, roots in ((True, told.acked), (False, told.failed))
            for root in roots
        )
        self.news = {task: SpoutNews([], [], told.reset) for task, told in self.news.items() if told.reset}
        return done


_NOTHING: tuple[Completion, ...] = ()


#: Fields of a :attr:`SpoutPending.entries` value.
_MSG_ID, _STREAM, _TIMER = itemgetter(0), itemgetter(2), itemgetter(3)


class SpoutPending:
    """A spout task's messages in flight: the ``max.spout.pending`` cap and the message timeout.

    One entry per message id (tree). The cap counts tuples, as Storm's does: a tree of one emit is one,
    and a batch's tree (``emit_many(rows, msg_id=...)``) counts its rows, so a batch spout cannot put
    ``max.spout.pending`` batches in flight::

        pending = SpoutPending(max_pending=1000, timeout_secs=30)
        pending.sent(root, "offset-17", now)              # one tuple
        pending.sent(other, "file-3", now, rows=500)      # one tree of 500 tuples
        len(pending)                                      # 501
    """

    def __init__(self, max_pending: int | None, timeout_secs: float) -> None:
        self.max_pending = max_pending
        self.timeout_secs = timeout_secs
        #: root → (msg id, emit time, stream, timer start): the timer starts at the emit and again at each reset;
        #: insertion order (a reset re-inserts) is timer order, which expire relies on. The spout executor's
        #: emit adds to it directly (it is :meth:`sent` without a call, on the per-tuple path).
        self.entries: dict[int, tuple[Any, float, str, float]] = {}
        #: Tuples in flight beyond one per entry: the batch trees' rows - 1, kept in :attr:`_rows` by root.
        self.extra = 0
        self._rows: dict[int, int] = {}

    def __len__(self) -> int:
        """Tuples in flight (what the cap counts)."""
        return len(self.entries) + self.extra

    def can_emit(self) -> bool:
        """Whether ``next_tuple`` may be called: below the cap (None: no cap)."""
        return self.max_pending is None or len(self.entries) + self.extra < self.max_pending

    def sent(self, root: int, msg_id: Any, now: float, stream: str = "default", rows: int = 1) -> None:
        """``root``'s tree is in flight: one message id for ``rows`` tuples."""
        self.entries[root] = (msg_id, now, stream, now)
        if rows > 1:
            self._rows[root] = rows
            self.extra += rows - 1

    def complete(self, root: int) -> tuple[Any, float, str, float] | None:
        """(msg id, emit time, stream, timer start) of a finished tree, or None if unknown (already timed out:
        Storm ignores it)."""
        entry = self.entries.pop(root, None)
        if self._rows and entry is not None:
            self._forget_rows(root)
        return entry

    def complete_many(self, roots: list[int]) -> list[tuple[Any, float, str, float]]:
        """:meth:`complete` of each root, leaving out the unknown ones."""
        pop, rows = self.entries.pop, self._rows
        done = [entry for entry in map(pop, roots, repeat(None)) if entry is not None]
        if rows:  # batch trees: their rows beyond one leave the count (a root not pending has no rows kept)
            self.extra -= sum(map(rows.pop, roots, repeat(1))) - len(roots)
        return done

    def reset_timeout(self, root: int, now: float) -> None:
        """The tree of ``root`` is being held on purpose: its timeout starts again at ``now`` (if still pending);
        the emit time, which complete latency is measured from, stays."""
        entry = self.entries.pop(root, None)
        if entry is not None:
            self.entries[root] = (*entry[:3], now)

    def expire(self, now: float, most: int | None = None) -> list[tuple[Any, str]]:
        """(msg id, stream) of trees that did not finish within the timeout, oldest first and at most ``most`` of
        them (None: all): the spout's ``fail`` gets them.

        One pass over the oldest entries, then one delete each: time linear in what expires. (Deleting the first
        entry and looking up the new first one per tree was quadratic: a dict's iteration skips the deleted
        slots before its first live entry again each time, and 80,000 trees timing out at once held the task
        thread for seconds.)"""
        pending = self.entries
        timers = islice(map(_TIMER, pending.values()), most)  # never looks past ``most``
        roots = list(islice(pending, len(list(takewhile((now - self.timeout_secs).__gt__, timers)))))  # all in C
        if not roots:
            return []
        done = list(map(pending.pop, roots))
        if self._rows:
            self.extra -= sum(map(self._rows.pop, roots, repeat(1))) - len(roots)
        return list(zip(map(_MSG_ID, done), map(_STREAM, done)))

    def forget(self) -> int:
        """Drop every tree in flight (neither acked nor failed: the spout that emitted them is gone, a shell
        spout's subprocess); how many there were. Their acker's late answers are then ignored."""
        lost = len(self.entries)
        self.entries.clear()
        self._rows.clear()
        self.extra = 0
        return lost

    def _forget_rows(self, root: int) -> None:
        self.extra -= self._rows.pop(root, 1) - 1
