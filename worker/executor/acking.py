"""What a task tells the ackers in one step (:class:`AckOut`), and the fields of the acker's streams."""

from __future__ import annotations

from collections.abc import Sequence

from squall.api.tuple import Fields, TupleBatch
from squall.core.system_ids import ACK_ACK_STREAM, ACK_FAIL_STREAM, ACK_INIT_STREAM, ACK_RESET_TIMEOUT_STREAM
from worker.queues import Outbox

ACK_INIT_FIELDS = Fields(["id", "init-val", "spout-task"])
ACK_ACK_FIELDS = Fields(["id", "ack-val"])
ACK_FAIL_FIELDS = Fields(["id"])


class AckOut:
    """What a task tells the ackers in one step, gathered per acker and sent at the end of the step as one
    tuple per acker and kind carrying all of the step's roots as lists: a message per root cost more than
    the tuple it tracked. From a spout, ``__ack_init ([root...], [xor...], spout task)``; from a bolt,
    ``__ack_ack ([root...], [value...])``, ``__ack_fail ([root...],)`` and ``__ack_reset_timeout ([root...],)``.
    Position ``i`` of each list of lists is for ``ackers[i]``, the owner of every root with
    ``root % len(ackers) == i``; callers append in place (the per-tuple path)::

        out = AckOut(ackers=(7, 8), component="split", task=3, spout=False)
        out.roots[root % 2].append(root); out.values[root % 2].append(ack_value)
        out.fails[other % 2].append(other)
        out.flush(outbox)                 # acker tasks 7 and 8: one tuple per kind that has roots
    """

    __slots__ = ("ackers", "roots", "values", "fails", "resets", "_component", "_task", "_first")

    def __init__(self, ackers: Sequence[int], component: str, task: int, *, spout: bool) -> None:
        self.ackers = ackers
        self.roots: list[list[int]] = [[] for _ in ackers]
        self.values: list[list[int]] = [[] for _ in ackers]  # init XORs (spout) or ack values (bolt)
        self.fails: list[list[int]] = [[] for _ in ackers]
        self.resets: list[list[int]] = [[] for _ in ackers]
        self._component, self._task = component, task
        self._first = (ACK_INIT_STREAM, ACK_INIT_FIELDS, (task,)) if spout else (ACK_ACK_STREAM, ACK_ACK_FIELDS, ())

    def flush(self, outbox: Outbox) -> None:
        """Queue this step's messages in ``outbox`` and start empty."""
        component, task = self._component, self._task
        stream, fields, extra = self._first
        for i, acker in enumerate(self.ackers):
            if self.roots[i]:
                outbox.add(
                    acker, TupleBatch([(self.roots[i], self.values[i], *extra)], fields, component, stream, task)
                )
                self.roots[i], self.values[i] = [], []
            if self.fails[i]:
                outbox.add(acker, TupleBatch([(self.fails[i],)], ACK_FAIL_FIELDS, component, ACK_FAIL_STREAM, task))
                self.fails[i] = []
            if self.resets[i]:
                outbox.add(
                    acker, TupleBatch([(self.resets[i],)], ACK_FAIL_FIELDS, component, ACK_RESET_TIMEOUT_STREAM, task)
                )
                self.resets[i] = []
