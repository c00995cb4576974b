"""The bolt executor: the bolt over its receive queue a few batches a round, in its delivery forms
(``execute_batch`` per batch; ``execute`` per row, counted, auto-acked in bulk or per tuple), acks and fails to the
ackers, anchored emits, tick tuples and window timers, and process latency sampled at next to no cost.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from functools import reduce
from itertools import chain
from operator import xor
from typing import Any

import structlog

from squall.api.component import Bolt, deliver, deliver_each
from squall.api.stateful import StatefulBolt
from squall.api.tuple import Piece, Tuple, TupleBatch, tick_tuple
from squall.api.windowing import WindowedBolt, wall_ms
from squall.core.system_ids import SYSTEM_COMPONENT, TICK_STREAM
from worker.executor.base import Executor
from worker.executor.routing import ANCHORS, PLAIN, ROOTS, new_edges, random_bits
from worker.executor.stats import sample_period
from worker.layout import Placement, TopologyLayout

log = structlog.get_logger(__name__)

#: The input stats key of tick tuples.
TICK_INPUT = f"{SYSTEM_COMPONENT}:{TICK_STREAM}"


class BoltExecutor(Executor):
    """Runs the bolt over its receive queue, a few batches per round: ``execute_batch`` once per batch when
    the bolt defines one, else ``execute`` per tuple in one loop (:func:`squall.api.component.deliver_each`);
    sends tick tuples when ``topology.tick.tuple.freq.secs`` is set for the component, or runs a windowed bolt's
    window timers (:class:`squall.api.windowing.WindowedBolt`) instead.

    Process latency (Storm's: from the start of an input's execute to its ack, sampled at
    ``topology.stats.sample.rate``) costs the hot path next to nothing: every n-th batch is sampled, a local
    countdown per batch. Per tuple, its first row is timed to its ack, whenever that comes, so held inputs
    count as well as auto-acked ones; ``ack`` looks it up only while some are timed. A batch bolt's rows acked
    by the end of its ``execute_batch`` call each take the call's time (see :meth:`_run_batch`)."""

    #: Batches taken per round before other tasks of the thread get a turn: as many as a spout step's bursts
    #: (``SpoutExecutor.BURSTS_PER_STEP``), so a batch tree spout's step (a piece per burst) is taken in one round.
    BATCHES_PER_ROUND = 16
    #: Most inputs timed to their ack at once: none is sampled while this many wait (a bolt that never acks
    #: some inputs cannot grow it).
    MAX_TIMED = 64
    #: The class the component must be an instance of.
    BOLT_CLASS: type[Bolt] = Bolt  # type: ignore[type-abstract]  # isinstance against the base

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        freq = self.spec.conf.get("topology.tick.tuple.freq.secs")
        self._tick_every = float(freq) if freq else None
        self._next_tick = float("inf")
        self.bolt: Bolt
        self._execute_batch: Callable[[TupleBatch], None] | None = None
        #: The input batch ``execute_batch`` is working on, and the ids of its rows the bolt acked or failed.
        self._batch: TupleBatch | None = None
        self._settled: set[int] = set()
        #: Per-tuple delivery: the sampled inputs not yet acked or failed, ``id(view) -> (view, execute start)``.
        self._timed: dict[int, tuple[Tuple, float]] = {}
        self._sample_every = sample_period(self.spec.conf["topology.stats.sample.rate"])
        self._batches_to_sample = 1
        #: A windowed bolt's timers (its slide or its watermark): when the next is due, on the step's clock.
        self._next_window = float("inf")

    def refresh(self, layout: TopologyLayout, placement: Placement) -> None:
        """Routes as every executor; ticks, when the bolt has them, are an input stream of their own (Storm
        counts them executed and acked under ``__system:__tick``, which its UI leaves out of the totals)."""
        super().refresh(layout, placement)
        if self.spec.conf.get("topology.tick.tuple.freq.secs"):
            self._inputs = sorted({*self._inputs, TICK_INPUT})
            self._keyed_inputs = True

    def start(self) -> None:
        self.bolt, context = self._attach_user(self.BOLT_CLASS)
        if isinstance(self.bolt, StatefulBolt) and self.BOLT_CLASS is Bolt:
            raise TypeError(
                f"bolt {self.component!r} is a StatefulBolt, but its component is not marked stateful "
                "(squall.stateful): declare it with Topology.bolt, which marks it"
            )
        if type(self.bolt).execute_batch is not Bolt.execute_batch:
            self._execute_batch = self.bolt.execute_batch
        self.bolt.prepare(context.conf, context)
        if isinstance(self.bolt, WindowedBolt):  # its window's timers replace ticks
            self.bolt.open_window([key for key in self._inputs if key != TICK_INPUT], wall_ms)
            self._advance_window(time.monotonic())
        elif self._tick_every:
            self._next_tick = time.monotonic() + self._tick_every

    # -- Collector -------------------------------------------------------------------------------

    def emit(
        self, values: tuple[Any, ...], stream: str, anchors: tuple[Tuple, ...], direct_task: int | None, msg_id: Any
    ) -> Sequence[int]:
        out = self._outs.get(stream)
        if out is None or len(values) != out.width or direct_task is not None or out.direct:
            out, targets = self._targets(values, stream, direct_task)
        else:
            targets = out.route(values) if out.constant is None else out.constant
        out.emitted += 1
        last = self._last
        if not anchors or not self._n_ackers or (len(anchors) == 1 and not anchors[0]._anchors):
            key = out.keys[PLAIN]
            for target in targets:  # none for a stream nobody subscribes to: no edges either
                batch = last.get(target)
                if batch is None or batch.key is not key:
                    batch = self._open(target, stream, out, PLAIN)
                batch.rows.append(values)
            return targets
        if len(anchors) == 1 and len(anchors[0]._anchors) == 1:  # one root: its edge is the row's id
            (anchor,) = anchors
            (root,) = anchor._anchors
            key = out.keys[ROOTS]
            for target in targets:
                edge = random_bits(64) or 1
                anchor._ack_val ^= edge
                batch = last.get(target)
                if batch is None or batch.key is not key:
                    batch = self._open(target, stream, out, ROOTS)
                batch.rows.append(values)
                batch.ids.append(edge)  # type: ignore[union-attr]
                batch.roots.append(root)  # type: ignore[union-attr]
            return targets
        key = out.keys[ANCHORS]
        for target in targets:
            ids: dict[int, int] = {}
            first = 0
            for anchor in anchors:
                roots = anchor._anchors
                if roots:
                    edge = random_bits(64) or 1
                    anchor._ack_val ^= edge
                    first = first or edge
                    for root in roots:
                        ids[root] = ids.get(root, 0) ^ edge
            batch = last.get(target)
            if batch is None or batch.key is not key:
                batch = self._open(target, stream, out, ANCHORS)
            batch.rows.append(values)
            batch.ids.append(first)  # type: ignore[union-attr]
            batch.anchors.append(ids)  # type: ignore[union-attr]
        return targets

    def emit_batch(self, rows: Sequence[tuple[Any, ...]], stream: str, anchors: tuple[Tuple, ...]) -> None:
        """``emit`` of every row anchored to all of ``anchors`` (a batch bolt's output), with the per-root
        work in C. An anchor whose roots no other anchor has takes one edge per emitted copy shared with
        all such anchors (each root's tree still sees every copy's edge exactly once), XORed into its
        ``ackVal`` once at the end; anchors sharing a root get an edge each, as ``emit`` gives them."""
        rows = rows if isinstance(rows, list) else list(rows)
        out = self._check_rows(rows, stream, None)
        out.emitted += len(rows)
        seen = Counter(root for anchor in anchors for root in anchor._anchors) if self._n_ackers else Counter()
        if not seen:
            self._emit_plain(rows, stream, out, None)
            return
        lone = [a for a in anchors if a._anchors and all(seen[root] == 1 for root in a._anchors)]
        shared = [a for a in anchors if a._anchors and any(seen[root] > 1 for root in a._anchors)]
        lone_roots = [root for anchor in lone for root in anchor._anchors]
        last, key, route, lone_edges = self._last, out.keys[ANCHORS], out.route, 0
        for values in rows:
            for target in route(values) if out.constant is None else out.constant:
                edge = random_bits(64) or 1
                lone_edges ^= edge
                ids = dict.fromkeys(lone_roots, edge)
                for anchor in shared:
                    own = random_bits(64) or 1
                    anchor._ack_val ^= own
                    for root in anchor._anchors:
                        ids[root] = ids.get(root, 0) ^ own
                batch = last.get(target)
                if batch is None or batch.key is not key:
                    batch = self._open(target, stream, out, ANCHORS)
                batch.rows.append(values)
                batch.ids.append(edge)  # type: ignore[union-attr]
                batch.anchors.append(ids)  # type: ignore[union-attr]
        for anchor in lone:
            anchor._ack_val ^= lone_edges

    def emit_each(
        self, rows: Sequence[tuple[Any, ...]], stream: str, inputs: TupleBatch, index: Sequence[int] | None
    ) -> None:
        """Row ``k`` anchored to ``inputs[index[k]]`` (``inputs[k]`` without ``index``), routed in bulk; no Tuple
        is made unless the inputs are tracked."""
        rows = rows if isinstance(rows, list) else list(rows)
        if index is None and len(rows) != len(inputs):
            raise ValueError(
                f"emit_each of {len(rows)} rows for {len(inputs)} inputs: pass index=[input "
                "position of each row] when the rows are not one per input"
            )
        if index is not None and len(index) != len(rows):
            raise ValueError(f"emit_each of {len(rows)} rows with {len(index)} index entries: give one per row")
        out = self._check_rows(rows, stream, None)
        if not inputs.tracked or not self._n_ackers or out.constant == ():  # untracked, or subscribed by none
            out.emitted += len(rows)
            self._emit_plain(rows, stream, out, None)
            return
        piece = inputs.piece
        if piece is not None and piece.left > 0 and not inputs._views:  # inputs of one piece, none settled yet
            out.emitted += len(rows)  # the outputs are pieces of its tree, acked with the input piece
            piece.fold ^= self._emit_pieces(rows, stream, out, None, piece.root)
            return
        positions = range(len(rows)) if index is None else index
        if inputs.roots is None or inputs._views:  # several roots per input, or views made: per row
            for values, i in zip(rows, positions):
                self.emit(values, stream, (inputs[i],), None, None)
            return
        out.emitted += len(rows)
        xor = inputs._xor
        if xor is None:
            xor = inputs._xor = [0] * len(inputs)
        last, route, constant = self._last, out.route, out.constant
        plain, tracked = out.keys[PLAIN], out.keys[ROOTS]
        roots = [inputs.roots[i] for i in positions]
        batch: TupleBatch | None
        if constant is not None and len(constant) == 1 and 0 not in roots:  # one target, every input tracked
            edges = new_edges(len(rows))
            for i, edge in zip(positions, edges):
                xor[i] ^= edge
            batch = self._batch_for(constant[0], stream, out, ROOTS)
            batch.rows.extend(rows)
            batch.ids.extend(edges)  # type: ignore[union-attr]
            batch.roots.extend(roots)  # type: ignore[union-attr]
            return
        for values, i, root in zip(rows, positions, roots):
            for target in route(values) if constant is None else constant:
                batch = last.get(target)
                if not root:  # an untracked input
                    if batch is None or batch.key is not plain:
                        batch = self._open(target, stream, out, PLAIN)
                    batch.rows.append(values)
                    continue
                edge = random_bits(64) or 1
                xor[i] ^= edge
                if batch is None or batch.key is not tracked:
                    batch = self._open(target, stream, out, ROOTS)
                batch.rows.append(values)
                batch.ids.append(edge)  # type: ignore[union-attr]
                batch.roots.append(root)  # type: ignore[union-attr]

    def ack(self, tup: Tuple) -> None:
        self.stats.acked += 1
        if self._keyed_inputs:
            self.stats.acked_by[f"{tup._component}:{tup._stream}"] += 1
        if self._timed:
            timed = self._timed.pop(id(tup), None)  # the view is held there, so its id is no other tuple's
            if timed is not None:
                self._time_process(tup._component, tup._stream, time.perf_counter() - timed[1], 1)
        if self._batch is not None:
            self._settled.add(id(tup))
        roots = tup._anchors
        if roots and self._n_ackers:
            ack_val, n, acks = tup._ack_val, self._n_ackers, self._acks
            if roots.__class__ is not dict and isinstance(roots, Piece):  # a row of a piece: it acks with its last row
                value = roots.ack_row(tup)
                if value is not None:
                    for root in roots:
                        acks.roots[root % n].append(root)
                        acks.values[root % n].append(value)
                return
            for root, edge in roots.items():
                acks.roots[root % n].append(root)
                acks.values[root % n].append(edge ^ ack_val)

    def fail(self, tup: Tuple) -> None:
        self.stats.failed += 1
        if self._raised_on(tup):
            self.stats.failed_exception += 1
        if self._keyed_inputs:
            self.stats.failed_by[f"{tup._component}:{tup._stream}"] += 1
        if self._timed:
            self._timed.pop(id(tup), None)  # a failed input has no process latency
        if self._batch is not None:
            self._settled.add(id(tup))
        if tup._anchors and self._n_ackers:
            n, fails, piece = self._n_ackers, self._acks.fails, tup._anchors
            if piece.__class__ is not dict and isinstance(piece, Piece) and not piece.fail_row(tup):  # failed already
                return
            for root in tup._anchors:
                fails[root % n].append(root)

    def reset_timeout(self, tup: Tuple) -> None:
        """Storm's resetTimeout: each root's acker restarts the tree's timer and forwards the reset to the spout."""
        if self._n_ackers:
            n, resets = self._n_ackers, self._acks.resets
            for root in tup._anchors:
                resets[root % n].append(root)

    # -- the loop --------------------------------------------------------------------------------

    def step(self, now: float) -> float:
        self._now = now
        self._heartbeat(now)
        bolt = self.bolt
        if now >= self._next_tick:  # never without a tick interval (then it is inf)
            self._next_tick = now + self._tick_every  # type: ignore[operator]
            started = time.perf_counter()
            self._execute(bolt, tick_tuple(self._tick_every))  # type: ignore[arg-type]
            self._count_executed(TICK_INPUT, 1, time.perf_counter() - started)  # Storm's: an input of its own
        if now >= self._next_window:
            self._advance_window(now)
        clock, execute_batch = time.perf_counter, self._execute_batch
        to_sample = self._batches_to_sample  # a local: the batches not sampled cost a decrement each
        batches = self.inbox.take_some(self.BATCHES_PER_ROUND)
        for batch in batches:
            started = clock()
            to_sample -= 1
            if to_sample:
                if execute_batch is not None:
                    self._run_batch(execute_batch, batch)
                elif not batch.tracked or not self._n_ackers:  # acking only counts them: no call per tuple
                    self._count_acks(batch, deliver_each(bolt, batch.views(), self._failed_input, count_acks=True))
                elif batch.roots is not None:  # one root per row: acked all at once, not a call per tuple
                    acked: list[Tuple] = []
                    deliver_each(bolt, batch.views(), self._failed_input, auto_acked=acked)
                    self._ack_views(batch, acked)
                else:  # root maps, or a piece
                    deliver_each(bolt, batch.views(), self._failed_input)
            else:
                to_sample = self._sample_every
                self._run_sampled(execute_batch, batch, started)
            rows = len(batch.rows) if batch.__class__ is TupleBatch else len(batch)  # as Inbox.take counts
            self._count_executed(
                f"{batch.component}:{batch.stream}" if self._keyed_inputs else None, rows, clock() - started
            )
        self._batches_to_sample = to_sample
        self._acks.flush(self._outbox)  # the step's acks: one message per acker and kind for all its roots
        if len(batches) < self.BATCHES_PER_ROUND:  # the inbox is empty: wait for input or the next timer
            return max(0.0, min(self._next_beat, self._next_tick, self._next_window) - now)
        return 0.0

    def _advance_window(self, now: float) -> None:
        """A windowed bolt's due timers, and when (on the step's monotonic clock) its next one is."""
        due = self.bolt.advance()  # type: ignore[attr-defined]  # only windowed bolts get here
        self._next_window = float("inf") if due is None else now + max(0, due - wall_ms()) / 1000

    def _count_executed(self, key: str | None, rows: int, elapsed: float) -> None:
        """``rows`` inputs executed in ``elapsed`` seconds, also under their input ``key`` (``component:stream``)
        unless None; one stream per batch, so each tuple takes the batch's mean time."""
        stats = self.stats
        stats.executed += rows
        stats.execute_secs += elapsed
        if key is not None:
            stats.executed_by[key] += rows
            stats.latency_by[key] += elapsed
            stats.timed_by[key] += rows

    def _count_acks(self, batch: TupleBatch, acked: int) -> None:
        """``acked`` inputs of ``batch`` were acked (counted, nothing to tell an acker)."""
        self.stats.acked += acked
        if self._keyed_inputs:
            self.stats.acked_by[f"{batch.component}:{batch.stream}"] += acked

    def _ack_views(self, batch: TupleBatch, views: list[Tuple]) -> None:
        """:meth:`ack` of each of ``views``, rows of a batch of one root per row (each view's anchors ``{root:
        id}``, or none: an untracked row) that no sampled timing holds, in a loop of its own: no call per tuple."""
        self._count_acks(batch, len(views))
        n, acks = self._n_ackers, self._acks
        if n == 1:  # a tracked view has its edge as id, an untracked one 0 and no anchors
            acks.roots[0].extend([root for tup in views for root in tup._anchors])
            acks.values[0].extend([tup._id ^ tup._ack_val for tup in views if tup._id])
            return
        for tup in views:
            for root in tup._anchors:
                acks.roots[root % n].append(root)
                acks.values[root % n].append(tup._id ^ tup._ack_val)

    def _run_sampled(
        self, execute_batch: Callable[[TupleBatch], None] | None, batch: TupleBatch, started: float
    ) -> None:
        """A batch whose process latency is sampled, from ``started``. Per tuple, its first row is timed to its
        ack, whenever that comes; a batch bolt's acks made by the end of the call each take the call's time (see
        :meth:`_run_batch`)."""
        if execute_batch is not None:
            acked = self.stats.acked
            self._run_batch(execute_batch, batch)
            acked = self.stats.acked - acked
            if acked:
                self._time_process(batch.component, batch.stream, (time.perf_counter() - started) * acked, acked)
            return
        views = batch.views()
        first = next(views, None)
        if first is None:
            return
        if len(self._timed) < self.MAX_TIMED:
            self._timed[id(first)] = (first, started)
        deliver_each(self.bolt, chain((first,), views), self._failed_input)

    def _time_process(self, component: str, stream: str, secs: float, count: int) -> None:
        stats = self.stats
        stats.process_secs += secs
        stats.processed += count
        if self._keyed_inputs:
            key = f"{component}:{stream}"
            stats.process_by[key] += secs
            stats.processed_by[key] += count

    def _raised_on(self, tup: Tuple) -> bool:
        """Whether ``tup`` fails because user code raised on it: deliver_each fails the input execute raised on
        while it is still the bolt's current input (Bolt.fail clears that first)."""
        return self.bolt._input is tup

    def _failed_input(self, exc: Exception) -> None:
        self._user_code_failed(exc, already_reported=True)

    def _run_batch(self, execute_batch: Callable[[TupleBatch], None], batch: TupleBatch) -> None:
        """``execute_batch`` with ``deliver``'s semantics per row: under ``auto_ack`` the rows the bolt did not
        ack or fail are acked when it returns; an exception is reported once and fails every such row.

        Process latency, in a sampled batch (:meth:`_run_sampled`): each ack made by the call's end (auto-acked
        rows and rows acked inside) takes the call's time, as all its rows began together. Rows held past the
        call are not timed (that would cost every ack a lookup on the hot path); an earlier call's row acked in
        this one counts this call's time."""
        self._batch = batch
        try:
            execute_batch(batch)
        except Exception as exc:
            self.bolt.report_error(exc)
            failed_before = self.stats.failed
            self._settle_rest(batch, failed=True)
            self.stats.failed_exception += self.stats.failed - failed_before
            self._user_code_failed(exc, already_reported=True)
        else:
            if self.bolt.auto_ack:
                self._settle_rest(batch, failed=False)
        finally:
            self._batch = None
            self._settled.clear()

    def _settle_rest(self, batch: TupleBatch, *, failed: bool) -> None:
        views, settled = batch._views or {}, self._settled
        if batch.piece is not None and self._n_ackers:
            self._settle_piece(batch, batch.piece, views, failed)
            return
        if self._n_ackers and not views and batch.ids is not None and batch.roots is not None:
            self._settle_columns(batch, batch.ids, batch.roots, failed)
            return
        if batch.tracked and self._n_ackers:
            self._settle_each(batch, views, failed)
            return
        # Untracked rows: settling them only counts them.
        rest = (len(batch.rows) if batch.__class__ is TupleBatch else len(batch)) - sum(
            1 for tup in views.values() if id(tup) in settled
        )
        stats = self.stats
        if failed:
            stats.failed += rest
        else:
            stats.acked += rest
        if self._keyed_inputs:
            (stats.failed_by if failed else stats.acked_by)[f"{batch.component}:{batch.stream}"] += rest

    def _settle_each(self, batch: TupleBatch, views: dict[int, Tuple], failed: bool) -> None:
        """:meth:`ack` (or :meth:`fail`) of each row of ``batch`` the bolt did not settle, a call per row."""
        settle, settled = self.fail if failed else self.ack, self._settled
        for i in range(len(batch)):
            tup = views.get(i)
            if tup is None:
                settle(batch[i])
            elif id(tup) not in settled:
                settle(tup)

    def _settle_piece(self, batch: TupleBatch, piece: Piece, views: dict[int, Tuple], failed: bool) -> None:
        """Ack or fail the rows of a piece batch the bolt did not settle, in O(1) plus its views: one ack (the
        piece's edge XOR what was anchored to its rows) once no row is left, or one fail for the root. The rows
        left are the piece's count, not the batch's minus its settled views: a row may have been acked through a
        view the batch does not keep (``batch.view(i)``)."""
        ack_val, done = 0, 0
        for view in views.values():
            if view._anchors is piece:
                ack_val ^= view._ack_val
                view._anchors = piece.settled or piece._settled()
            else:
                done += 1  # settled by the bolt (stats counted there)
        rows = (len(batch.rows) if batch.__class__ is TupleBatch else len(batch)) - done
        stats, n, root = self.stats, self._n_ackers, piece.root
        if failed:
            stats.failed += rows
            if piece.fail():
                self._acks.fails[root % n].append(root)
        else:
            stats.acked += rows
            if piece.left > 0:  # every row not yet acked: piece.settle(ack_val, piece.left), without the call
                piece.fold ^= ack_val
                piece.left = 0
                self._acks.roots[root % n].append(root)
                self._acks.values[root % n].append(piece.edge ^ piece.fold)
        if self._keyed_inputs:
            (stats.failed_by if failed else stats.acked_by)[f"{batch.component}:{batch.stream}"] += rows

    def _settle_columns(self, batch: TupleBatch, ids: list[int], roots: list[int], failed: bool) -> None:
        """Ack or fail every row of a batch no view was made of, from its columns (``batch.ids``, ``batch.roots``):
        each tracked row has one root, whose edge is its id, and what was anchored to it is in ``batch._xor``, so
        no Tuple is needed."""
        rows, stats, n, acks = len(batch), self.stats, self._n_ackers, self._acks
        one = roots[0] if roots and roots[0] and roots[0] == roots[-1] and roots.count(roots[0]) == rows else None
        if failed:
            stats.failed += rows
            for root in (one,) if one else roots:
                if root:
                    acks.fails[root % n].append(root)
        else:
            stats.acked += rows
            anchored = batch._xor  # what was emitted anchored to each row (emit_each)
            values = ids if anchored is None else list(map(xor, ids, anchored))
            if one:  # one tree (a spout batch's): its rows' acks XOR into one
                acks.roots[one % n].append(one)
                acks.values[one % n].append(reduce(xor, values, 0))
            elif n == 1 and 0 not in ids:
                acks.roots[0].extend(roots)
                acks.values[0].extend(values)
            else:
                for root, value in zip(roots, values):
                    if root:
                        acks.roots[root % n].append(root)
                        acks.values[root % n].append(value)
        if self._keyed_inputs:
            (stats.failed_by if failed else stats.acked_by)[f"{batch.component}:{batch.stream}"] += rows

    def _execute(self, bolt: Bolt, tup: Tuple) -> None:
        try:
            deliver(bolt, tup)
        except Exception as exc:
            self._user_code_failed(exc, already_reported=True)

    def close(self) -> None:
        try:
            self.bolt.cleanup()
        except Exception:
            log.exception("bolt cleanup failed", component=self.component, task=self.task)
        self._acks.flush(self._outbox)  # acks made in cleanup leave with the thread's last flush
