"""The spout executor: ``next_tuple``/``next_batch`` in bursts while the topology is active, the pending cap and
backpressure allow; the acker's completions and the message timeout fed back to ``ack``/``fail``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from itertools import count, islice
from typing import Any, cast

import structlog

from squall.api.component import Spout
from squall.api.tuple import Tuple
from squall.core.system_ids import ACK_ACK_STREAM, ACK_RESET_TIMEOUT_STREAM
from worker.executor.base import Executor
from worker.executor.routing import PLAIN, ROOTS, StreamOut, new_edges, random_bits
from worker.executor.stats import sample_period
from worker.layout import Placement, TopologyLayout
from worker.tracking import SpoutPending

log = structlog.get_logger(__name__)

#: A tree the acker fails this close to its timeout (or later) counts as timed out: a timeout reset reaches
#: the spout a moment after the acker, so the spout's timer may have started a little later than the acker's.
TIMEOUT_SLACK_SECS = 0.5


class SpoutExecutor(Executor):
    """Calls ``next_tuple`` in bursts while the topology is active, the pending cap allows and the
    worker is not backpressured; feeds ``ack``/``fail`` back from the acker and the message timeout.
    After a ``next_tuple`` that emits nothing, or a ``next_batch`` that emits fewer rows than it was asked for
    (all the spout had), it waits ``topology.sleep.spout.wait.strategy.time.ms`` (1) before the next call, even
    while acks arrive (Storm's sleep wait strategy), so a spout ahead of its rate or reading a trickle wakes once
    per millisecond. A spout that keeps emitting nothing at all waits twice as long after each such step, up to
    ``topology.sleep.spout.wait.strategy.max.time.ms`` (8), so an active spout with nothing to emit costs its
    worker little; a step that emits anything starts again from the shortest wait."""

    #: A step emits up to this many bursts of ``topology.transfer.batch.size`` tuples unless the spout runs dry
    #: first: each target then gets one batch per step (without ackers; a piece per burst with them), and a round's
    #: fixed cost (a flush, the bolt's step, a batch object: ~10 µs, as much as a ``next_batch`` of 100 rows; with
    #: ackers also the init and ack messages, the acker's step and the completions) is paid once. A remote target's
    #: round costs more (a run queued for its sender, a message encoded, read, decoded and stepped: ~30 µs), so 16
    #: bursts, each remote target's ~800 rows a message, took the batch API's shuffle across two workers from 0.80x
    #: to 0.83x of one worker per CPU-s. With ackers a ``next_tuple`` spout's step is one burst.
    BURSTS_PER_STEP = 16
    #: With ackers a ``next_batch`` step also ends once it has taken this long: a tree's complete latency holds its
    #: whole step and the acks of it (8 bursts unbounded took the batch API's p99 at half capacity from 5 to 11 ms).
    ACKED_STEP_SECS = 0.0005
    #: Most timed-out trees a step fails (a ``fail`` call each): tens of thousands at once held the task thread, and
    #: with it every task's heartbeat, past nimbus's task timeout. The rest are failed in the next rounds.
    EXPIRED_PER_STEP = 5_000

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        conf = self.spec.conf
        max_pending = conf.get("topology.max.spout.pending")
        timeout = float(conf["topology.message.timeout.secs"])
        self.pending = SpoutPending(max_pending, timeout if conf["topology.enable.message.timeouts"] else float("inf"))
        self._burst = int(conf["topology.transfer.batch.size"])
        self._idle_secs = int(conf["topology.sleep.spout.wait.strategy.time.ms"]) / 1000
        self._max_idle_secs = max(self._idle_secs, int(conf["topology.sleep.spout.wait.strategy.max.time.ms"]) / 1000)
        #: The wait after the next step that emits nothing at all: doubles with each such step, up to the max.
        self._backoff = self._idle_secs
        self._step_rows = self.BURSTS_PER_STEP * self._burst
        self._sample_every = sample_period(conf["topology.stats.sample.rate"])
        self._active = False
        self._activated = False
        self._acked_at_emit: list[Any] = []
        self._next_expiry = 0.0
        #: No ``next_tuple`` before this: set ``_idle_secs`` ahead when a call emitted nothing.
        self._next_emit = 0.0
        self.spout: Spout
        self._next_batch: Callable[[int], None] | None = None
        self._on_ack: Callable[[Any], None] | None = None
        self._on_fail: Callable[[Any], None] | None = None

    def start(self) -> None:
        self.spout, context = self._attach_user(Spout)  # type: ignore[type-abstract]  # isinstance against the base
        #: The spout's own ``next_batch`` if it has one (called once per burst), else None (``next_tuple`` in a loop).
        self._next_batch = self.spout.next_batch if type(self.spout).next_batch is not Spout.next_batch else None
        #: The spout's ``ack``/``fail``, or None where it keeps Spout's, which does nothing: no call per message.
        self._on_ack = self.spout.ack if type(self.spout).ack is not Spout.ack else None
        self._on_fail = self.spout.fail if type(self.spout).fail is not Spout.fail else None
        self.spout.open(context.conf, context)

    def set_active(self, active: bool) -> None:
        if active == self._active:
            return
        self._active = active
        try:
            if active:
                self._activated = True
                self.spout.activate()
            elif self._activated:
                self.spout.deactivate()
        except Exception as exc:
            self._user_code_failed(exc)

    # -- Collector -------------------------------------------------------------------------------

    def emit(
        self, values: tuple[Any, ...], stream: str, anchors: tuple[Tuple, ...], direct_task: int | None, msg_id: Any
    ) -> Sequence[int]:
        out = self._outs.get(stream)
        if out is None or len(values) != out.width or direct_task is not None or out.direct:
            out, targets = self._targets(values, stream, direct_task)
        else:
            targets = out.route(values) if out.constant is None else out.constant
        self.stats.emitted += 1
        out.emitted += 1
        last = self._last
        if msg_id is None or not self._n_ackers:
            key = out.keys[PLAIN]
            for target in targets:  # none for a stream nobody subscribes to
                batch = last.get(target)
                if batch is None or batch.key is not key:
                    batch = self._open(target, stream, out, PLAIN)
                batch.rows.append(values)
            if msg_id is not None:
                self._acked_at_emit.append(msg_id)  # no ackers: acked as soon as it is emitted (Storm)
                if self._keyed_outputs:
                    self.stats.acked_by[stream] += 1
            return targets
        root, xor, now, key = next(self._roots), 0, self._now, out.keys[ROOTS]
        for target in targets:
            edge = random_bits(64) or 1
            xor = xor ^ edge if xor else edge  # (0 ^ edge would make a new int)
            batch = last.get(target)
            if batch is None or batch.key is not key:
                batch = self._open(target, stream, out, ROOTS)
            batch.rows.append(values)
            batch.ids.append(edge)  # type: ignore[union-attr]
            batch.roots.append(root)  # type: ignore[union-attr]
        owner, acks = self._root_owner, self._acks
        acks.roots[owner].append(root)
        acks.values[owner].append(xor)
        self.pending.entries[root] = (msg_id, now, stream, now)  # SpoutPending.sent, without the call
        return targets

    def emit_many(
        self,
        rows: list[tuple[Any, ...]],
        stream: str,
        direct_task: int | None,
        msg_ids: Sequence[Any] | None,
        msg_id: Any = None,
    ) -> None:
        """``emit`` of every row, checked once and routed in bulk; ``msg_ids[i]`` (if given) is row i's, or
        ``msg_id`` is the whole batch's (one tree)."""
        out = self._check_rows(rows, stream, direct_task)
        if msg_ids is not None and len(msg_ids) != len(rows):
            raise ValueError(f"emit_many of {len(rows)} rows with {len(msg_ids)} msg_ids: give one per row")
        if msg_id is not None and msg_ids is not None:
            raise TypeError("emit_many takes msg_ids (a tree per row) or msg_id (one tree for the batch), not both")
        tracked = (msg_ids is not None or msg_id is not None) and self._n_ackers
        targets = (direct_task,) if direct_task is not None else out.constant
        if tracked and msg_id is None and (targets is None or len(targets) != 1):  # a tree per row, per row
            for values, row_id in zip(rows, msg_ids):  # type: ignore[arg-type]
                self.emit(values, stream, (), direct_task, row_id)
            return
        self.stats.emitted += len(rows)
        out.emitted += len(rows)
        if not tracked:
            self._emit_plain(rows, stream, out, direct_task)
            acked = msg_ids if msg_id is None else (msg_id,)
            if acked is not None:  # no ackers: acked as soon as emitted (Storm)
                self._acked_at_emit.extend(acked)
                if self._keyed_outputs:
                    self.stats.acked_by[stream] += len(acked)
            return
        if msg_id is not None:
            self._emit_tree(rows, stream, out, direct_task, msg_id)
            return
        # A tree per row with one target for every row (the per-row branch above took the rest): columns in C.
        now, owner, (target,) = self._now, self._root_owner, cast("tuple[int]", targets)
        roots = list(islice(self._roots, len(rows)))
        edges = new_edges(len(rows))
        batch = self._batch_for(target, stream, out, ROOTS)
        batch.rows.extend(rows)
        batch.ids.extend(edges)  # type: ignore[union-attr]
        batch.roots.extend(roots)  # type: ignore[union-attr]
        self._acks.roots[owner].extend(roots)
        self._acks.values[owner].extend(edges)  # one edge per root: the init XOR is the edge
        self.pending.entries.update(zip(roots, [(row_id, now, stream, now) for row_id in msg_ids]))  # type: ignore[union-attr]

    def _emit_tree(
        self, rows: list[tuple[Any, ...]], stream: str, out: StreamOut, direct_task: int | None, msg_id: Any
    ) -> None:
        """``rows`` as one tuple tree: one root and one pending entry for the batch, and one edge per target task:
        the rows each target gets are one :class:`~squall.api.tuple.Piece` (one batch, one edge), so the init is the
        XOR of a few edges, and a bolt that settles the piece whole acks it with one value (``_settle_rest``)."""
        root = next(self._roots)
        init = self._emit_pieces(rows, stream, out, direct_task, root)
        owner = self._root_owner
        self._acks.roots[owner].append(root)
        self._acks.values[owner].append(init)  # 0 (sent nowhere): the acker acks it at once
        self.pending.sent(root, msg_id, self._now, stream, len(rows))

    def refresh(self, layout: TopologyLayout, placement: Placement) -> None:
        """Routes as every executor, and where this task's root ids start (the ackers may have moved).

        Root ids count up by the number of ackers from a random 62-bit start: cheap, never repeated by a
        task, and not by two tasks unless their random starts lie closer than the ids they use; all owned
        (``root % ackers``) by one acker, in this worker when it has one, so the init and the completion
        of a tree never cross workers, and every worker agrees on the owner."""
        super().refresh(layout, placement)
        n, local = self._n_ackers, self._local_ackers
        self._root_owner = (local[self.task % len(local)] if local else self.task % n) if n else 0
        self._roots = count(n * (1 + random_bits(62) // n) + self._root_owner, n) if n else count()

    def ack(self, tup: Tuple) -> None:
        raise TypeError("spouts do not ack tuples: the acker calls the spout's ack(msg_id)")

    fail = ack

    # -- the loop --------------------------------------------------------------------------------

    def step(self, now: float) -> float:
        self._now = now
        self._heartbeat(now)
        self._drain(now)
        if now >= self._next_expiry:
            expired = self.pending.expire(now, self.EXPIRED_PER_STEP)
            # More due than a step takes (a rebalance timed out a backlog): the rest next round, after the inputs.
            self._next_expiry = now if len(expired) == self.EXPIRED_PER_STEP else now + 1.0
            for msg_id, stream in expired:
                self.stats.failed += 1
                self.stats.failed_timeout += 1
                if self._keyed_outputs:
                    self.stats.failed_by[stream] += 1
                self._call(self.spout.fail, msg_id)
        wait = self._next_tuples(now)
        self._acks.flush(self._outbox)  # the step's inits: one message for all its roots
        return wait

    def _next_tuples(self, now: float) -> float:
        """``next_tuple`` in a burst, when active and allowed; how long to wait before the next burst."""
        if not self._active:
            return self._wait(now)
        if now < self._next_emit:  # backing off: input (acks), not its turn, brought this step
            return self._next_emit - now
        if self.env.pressure.hold_spouts or not self.pending.can_emit():
            return self._idle_secs if self.env.pressure.hold_spouts else self._wait(now)
        stats, pending, idle, burst = self.stats, self.pending, False, self._burst
        cap, entries, emitted = pending.max_pending, pending.entries, stats.emitted
        # With ackers a batch step also ends after ACKED_STEP_SECS: a tree's complete latency holds its whole step.
        acking = bool(self._n_ackers)
        until = time.monotonic() + self.ACKED_STEP_SECS if acking else float("inf")
        try:
            if self._next_batch is not None:
                next_batch, left = self._next_batch, self._step_rows
                while left > 0:
                    rows = min(burst, left) if cap is None else min(burst, left, cap - len(pending))
                    if rows <= 0:
                        break  # at the pending cap
                    before = stats.emitted
                    next_batch(rows)
                    if stats.emitted - before < rows:  # a short batch: all it had (paced, or a trickle): back off
                        idle = True
                        break
                    left -= stats.emitted - before
                    if time.monotonic() >= until:
                        break
            else:  # per tuple, one burst with ackers: more raised the p99 at half capacity from 3.5 to 12 ms
                next_tuple = self.spout.next_tuple
                for _ in range(burst if acking else self._step_rows):
                    before = stats.emitted
                    next_tuple()
                    if stats.emitted == before:
                        idle = True
                        break
                    if cap is not None and len(entries) + pending.extra >= cap:
                        break
        except Exception as exc:
            self._user_code_failed(exc)
        if self._acked_at_emit:
            self._ack_emitted()
        if not idle:
            self._backoff = self._idle_secs
            return 0.0
        if stats.emitted == emitted:  # nothing at all: wait longer each time, up to the max
            wait = self._backoff
            self._backoff = min(wait * 2, self._max_idle_secs)
        else:  # all it had (a paced spout, a trickle): the shortest wait
            wait = self._backoff = self._idle_secs
        self._next_emit = now + wait
        return wait

    def _ack_emitted(self) -> None:
        """Ack what was emitted with a message id while the topology has no ackers (Storm acks it at once)."""
        acked, self._acked_at_emit = self._acked_at_emit, []
        self.stats.acked += len(acked)
        ack = self._on_ack
        if ack is None:
            return
        for msg_id in acked:
            try:
                ack(msg_id)
            except Exception as exc:
                self._user_code_failed(exc)

    def _wait(self, now: float) -> float:
        return max(0.0, min(self._next_beat, self._next_expiry) - now)

    def _drain(self, now: float) -> None:
        """From the acker: ``([root...],)`` completions (``__ack_ack``/``__ack_fail``) and timeout resets."""
        take, pending, stats, keyed = self.inbox.take, self.pending, self.stats, self._keyed_outputs
        while (batch := take()) is not None:
            stream = batch.stream
            for (roots,) in batch.rows:
                if stream == ACK_RESET_TIMEOUT_STREAM:
                    for root in roots:
                        pending.reset_timeout(root, now)
                    continue
                done = pending.complete_many(roots)  # the unknown ones timed out already: Storm ignores them
                if stream == ACK_ACK_STREAM:
                    every, before = self._sample_every, stats.acked
                    stats.acked += len(done)
                    for _, started, out, _ in done[(-before - 1) % every :: every]:  # every n-th ack's latency
                        stats.latencies.append(now - started)
                        stats.latency_by[out] += now - started
                        stats.timed_by[out] += 1
                    counts, method = stats.acked_by, self._on_ack
                else:
                    stats.failed += len(done)
                    # The acker fails the trees it timed out this way too: those whose timer ran out.
                    cutoff = now - pending.timeout_secs + TIMEOUT_SLACK_SECS
                    stats.failed_timeout += sum(1 for _, _, _, timer in done if timer <= cutoff)
                    counts, method = stats.failed_by, self._on_fail
                if keyed:
                    counts.update(out for _, _, out, _ in done)
                if method is None:
                    continue
                for msg_id, _, _, _ in done:
                    try:
                        method(msg_id)
                    except Exception as exc:
                        self._user_code_failed(exc)

    def _call(self, method: Callable[[Any], None], msg_id: Any) -> None:
        try:
            method(msg_id)
        except Exception as exc:
            self._user_code_failed(exc)

    def close(self) -> None:
        try:
            if self._active:
                self.spout.deactivate()
            self.spout.close()
        except Exception:
            log.exception("spout close failed", component=self.component, task=self.task)
        self._acks.flush(self._outbox)  # inits of what deactivate/close emitted leave with the thread's last flush
