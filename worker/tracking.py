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

import random
from collections import OrderedDict
from collections.abc import Callable
from operator import attrgetter, itemgetter
from typing import Any, NamedTuple

_MASK = (1 << 64) - 1
_RNG = random.Random()


def new_id(rng: random.Random | None = None) -> int:
    """A random non-zero 64-bit id for a root or an edge (0 would vanish in the XOR)."""
    return (rng or _RNG).getrandbits(64) or 1


class Completion(NamedTuple):
    """A tree is done: tell ``spout_task`` to ack (``ok``) or fail the message rooted at ``root``."""

    root: int
    spout_task: int
    ok: bool


class _Tree:
    __slots__ = ("value", "spout_task", "started", "failed")

    def __init__(self, started: float) -> None:
        self.value = 0
        self.spout_task: int | None = None
        self.started = started
        self.failed = False


_NOTHING: tuple[Completion, ...] = ()


class AckerState:
    """One acker task's trees, expired after ``timeout_secs`` (reported as failures)."""

    def __init__(self, timeout_secs: float) -> None:
        self.timeout_secs = timeout_secs
        self._trees: OrderedDict[int, _Tree] = OrderedDict()  # oldest first, for cheap expiry

    def __len__(self) -> int:
        return len(self._trees)

    def init(self, root: int, value: int, spout_task: int, now: float) -> tuple[Completion, ...]:
        tree = self._tree(root, now)
        tree.spout_task = spout_task
        return self._update(root, tree, value)

    def ack(self, root: int, value: int, now: float) -> tuple[Completion, ...]:
        """A bolt acked; acks may arrive before the spout's init (different workers)."""
        return self._update(root, self._tree(root, now), value)

    def ack_many(self, roots: list[int], values: list[int], now: float) -> list[Completion]:
        """:meth:`ack` for each root and its value (a bulk ack)."""
        return [done for root, value in zip(roots, values) for done in self._update(root, self._tree(root, now), value)]

    def fail(self, root: int, now: float) -> tuple[Completion, ...]:
        tree = self._tree(root, now)
        tree.failed = True
        return self._update(root, tree, 0)

    def reset_timeout(self, root: int, now: float) -> int | None:
        """A bolt holds a tuple of ``root``'s tree (Storm's resetTimeout): its timeout starts again at ``now``.
        Returns the spout task to forward the reset to, so the spout's own timer restarts too (None: no
        init seen yet, the spout emitted it moments ago; or the tree is gone)."""
        tree = self._trees.get(root)
        if tree is None:
            return None
        tree.started = now
        self._trees.move_to_end(root)  # keeps the oldest-first order expire relies on
        return tree.spout_task

    def expire(self, now: float) -> list[Completion]:
        """Trees older than the timeout fail (those whose spout is unknown are just dropped)."""
        return [Completion(root, tree.spout_task, ok=False)
                for root, tree in _pop_older(self._trees, now - self.timeout_secs, attrgetter("started"))
                if tree.spout_task is not None]

    def _tree(self, root: int, now: float) -> _Tree:
        tree = self._trees.get(root)
        if tree is None:
            tree = self._trees[root] = _Tree(now)
        return tree

    def _update(self, root: int, tree: _Tree, value: int) -> tuple[Completion, ...]:
        tree.value = (tree.value ^ value) & _MASK
        if tree.spout_task is None or (tree.value and not tree.failed):
            return _NOTHING
        del self._trees[root]
        return (Completion(root, tree.spout_task, not tree.failed),)


class SpoutPending:
    """A spout task's messages in flight: the ``max.spout.pending`` cap and the message timeout."""

    def __init__(self, max_pending: int | None, timeout_secs: float) -> None:
        self.max_pending = max_pending
        self.timeout_secs = timeout_secs
        # root → (msg id, emit time, stream, timer start): the timer starts at the emit and again at each reset
        self._pending: OrderedDict[int, tuple[Any, float, str, float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._pending)

    def can_emit(self) -> bool:
        """Whether ``next_tuple`` may be called: below the cap (None: no cap)."""
        return self.max_pending is None or len(self._pending) < self.max_pending

    def sent(self, root: int, msg_id: Any, now: float, stream: str = "default") -> None:
        self._pending[root] = (msg_id, now, stream, now)

    def complete(self, root: int) -> tuple[Any, float, str, float] | None:
        """(msg id, emit time, stream, timer start) of a finished tree, or None if unknown (already timed out:
        Storm ignores it)."""
        return self._pending.pop(root, None)

    def reset_timeout(self, root: int, now: float) -> None:
        """The tree of ``root`` is being held on purpose: its timeout starts again at ``now`` (if still pending);
        the emit time, which complete latency is measured from, stays."""
        entry = self._pending.pop(root, None)
        if entry is not None:
            self._pending[root] = (*entry[:3], now)

    def expire(self, now: float) -> list[tuple[Any, str]]:
        """(msg id, stream) of trees that did not finish within the timeout: the spout's ``fail`` gets them."""
        return [(msg_id, stream) for _, (msg_id, _, stream, _) in _pop_older(self._pending, now - self.timeout_secs,
                                                                              itemgetter(3))]


def _pop_older(entries: OrderedDict[int, Any], cutoff: float, started: Callable[[Any], float]) -> list[tuple[int, Any]]:
    """Remove and return the entries started before ``cutoff``; insertion order is start order."""
    expired = []
    while entries:
        key, entry = next(iter(entries.items()))
        if started(entry) >= cutoff:
            break
        del entries[key]
        expired.append((key, entry))
    return expired
