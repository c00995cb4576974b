"""The batch API (Spout.emit_many / next_batch, Bolt.execute_batch / emit_each / emit_batch) and the batch data
path under the per-tuple API: the same Storm semantics (anchoring, acking, failing, replay, order) as per tuple,
through squall.api.testing and through a worker's runtime in local mode."""

from __future__ import annotations

from typing import Any

import pytest

from squall.api.component import Bolt
from squall.api.dsl import Topology
from squall.api.testing import make_tuple, run_bolt, run_spout
from squall.api.tuple import Fields, Tuple, TupleBatch, stand_in
from support import wait_until
from topologies import BatchBoom, BatchForward, BatchNumbers, Interleave, Numbers, Recorder
from squall.dev.local import LocalTopology
from worker.tracking import AckerState
from wire_entries import decode
from worker.wire import Decoder, encode

FAST = {"task.heartbeat.frequency.secs": 0.05, "topology.message.timeout.secs": 30}


class HoldAndSum(Bolt):
    """Forwards each input on ``each`` (anchored to it; every other batch through a view, ``batch[i]``), holds it,
    and once ``size`` rows are held (or on a tick) emits their count and sum anchored to one ``stand_in`` for
    them all, then acks the stand-in, or fails it for the first ``fail_first`` times."""

    outputs = {"default": ["count", "total"], "each": ["key", "n"]}
    auto_ack = False
    component_conf = {"topology.tick.tuple.freq.secs": 0.1}

    def __init__(self, size: int, fail_first: int = 0) -> None:
        self.size, self.fail_first = size, fail_first
        self.held: list[TupleBatch] = []
        self.settled = self.failures = 0

    def execute(self, tup: Tuple) -> None:
        if tup.is_tick and self.held:
            self.settle()

    def execute_batch(self, batch: TupleBatch) -> None:
        if len(self.held) % 2:
            for i, values in enumerate(batch.values):
                self.emit(values, "each", anchors=batch[i])
        else:
            self.emit_each(batch.values, "each", inputs=batch)
        self.held.append(batch)
        if sum(map(len, self.held)) >= self.size:
            self.settle()

    def settle(self) -> None:
        held, ns = stand_in(self.held), [n for batch in self.held for _, n in batch.values]
        self.held = []
        self.emit_batch([(len(ns), sum(ns))], anchors=[held])
        if self.failures < self.fail_first:
            self.failures += 1
            self.fail(held)
        else:
            self.settled += 1
            self.ack(held)


class SettleSome(Bolt):
    """Acks row 0 and fails row 1 by hand, emits each row anchored to its input; auto_ack does the rest."""

    outputs = ["word"]

    def execute(self, tup: Any) -> None:
        raise AssertionError("not called for a batch")

    def execute_batch(self, batch: TupleBatch) -> None:
        self.emit_each([(w.upper(),) for w in batch.column("word")], inputs=batch)
        self.ack(batch[0])
        self.fail(batch[1])


class Explode(Bolt):
    outputs = ["word"]

    def execute(self, tup: Any) -> None:
        pass

    def execute_batch(self, batch: TupleBatch) -> None:
        self.ack(batch[0])
        raise ValueError("bad batch")


def test_run_bolt_gives_execute_batch_one_batch_and_auto_acks_only_what_the_bolt_did_not_settle() -> None:
    run = run_bolt(SettleSome, [("a",), ("b",), ("c",), ("d",)], fields=["word"])
    assert run.values() == [("A",), ("B",), ("C",), ("D",)]
    assert [e.anchors for e in run.emitted] == [(t,) for t in run.inputs]  # each row in its own input's tree
    assert run.failed == [run.inputs[1]]
    assert run.acked == [run.inputs[0], run.inputs[2], run.inputs[3]]  # each settled exactly once


def test_an_exception_in_execute_batch_is_reported_once_and_fails_every_input_not_yet_settled() -> None:
    run = run_bolt(Explode, [("a",), ("b",), ("c",)], fields=["word"])
    assert [str(e) for e in run.errors] == ["bad batch"]
    assert run.acked == [run.inputs[0]]
    assert run.failed == run.inputs[1:]


def test_emit_each_needs_one_row_per_input_or_an_index_and_emit_many_one_msg_id_per_row() -> None:
    class Short(Bolt):
        outputs = ["word"]

        def execute(self, tup: Any) -> None:
            pass

        def execute_batch(self, batch: TupleBatch) -> None:
            self.emit_each([("x",)], inputs=batch)

    run = run_bolt(Short, [("a",), ("b",)], fields=["word"])
    assert "pass index=" in str(run.errors[0]) and run.failed == run.inputs

    spout = run_spout(BatchNumbers, calls=0, args=[10])
    with pytest.raises(ValueError, match="give one per row"):
        spout.spout.emit_many([("k", 1), ("k", 2)], msg_ids=[1])
    with pytest.raises(ValueError, match="declares 2 fields"):
        spout.spout.emit_many([("k", 1), ("k",)])


def test_run_spout_next_batch_emits_rows_with_their_msg_ids_and_replays_failures_first() -> None:
    run = run_spout(BatchNumbers, calls=0, args=[10])
    first = run.next_batch(4)
    assert [e.values for e in first] == [("k0", 0), ("k1", 1), ("k2", 2), ("k3", 3)]
    assert [e.msg_id for e in first] == [0, 1, 2, 3] and run.pending == [0, 1, 2, 3]
    run.fail(2)
    assert [e.msg_id for e in run.next_batch(2)] == [2, 4]


def test_a_tuple_batch_views_rows_as_tuples_and_keeps_each_view() -> None:
    fields = Fields(["word", "n"])
    batch = TupleBatch([("a", 1), ("b", 2)], fields, "split", "default", 3, [0, 99], [0, 7])
    assert batch.column("n") == [1, 2] and batch.values == [("a", 1), ("b", 2)]
    assert batch[1] is batch[1] and batch[1]["word"] == "b"
    assert (batch[0].id, dict(batch[0].anchors)) == (0, {})       # untracked row
    assert (batch[1].id, dict(batch[1].anchors)) == (99, {7: 99})  # its one root, its edge is its id
    with pytest.raises(KeyError, match="fields: \\['word', 'n'\\]"):
        batch.column("count")
    tuples = [make_tuple(["x"], ["w"]), make_tuple(["y"], ["w"])]
    assert list(TupleBatch.of(tuples)) == tuples


@pytest.mark.parametrize("ids, roots, anchors", [
    (None, None, None),
    ([5, 0, 6], [50, 0, 60], None),
    ([5, 0, 6], None, [{50: 5, 51: 9}, {}, {60: 6}]),
])
def test_a_tuple_batch_crosses_the_wire_column_for_column(ids: Any, roots: Any, anchors: Any) -> None:
    fields = Fields(["w", "n"])
    sent = TupleBatch([("a", 1), ("b", 2), ("c", 3)], fields, "split", "default", 4, ids, roots, anchors)
    ((target, got),) = Decoder().feed(encode(9, sent))
    got.component, got.fields = "split", fields  # as the receiving worker sets them, once checked
    assert (len(got), got.column("n"), got.column("w")) == (3, [1, 2, 3], ["a", "b", "c"])
    assert (target, got.task, got.stream, got.values) == (9, 4, "default", sent.values)
    assert [(t.id, dict(t.anchors)) for t in got] == [(t.id, dict(t.anchors)) for t in sent]


def test_a_batch_from_another_worker_reads_like_a_local_one_columns_first_or_rows_first() -> None:
    """A received batch keeps the wire's columns until its rows are read: the same values either way,
    and a bolt that changes its rows in place sees its change in ``column`` too."""
    fields = Fields(["w", "n"])
    sent = TupleBatch([("a", 1), ("b", [2, 3]), ("c", None)], fields, "split", "default", 4)
    data = encode(9, sent)
    columns_first = decode(data, "split", fields)
    assert columns_first.column("n") == [1, [2, 3], None] and len(columns_first) == 3
    assert columns_first.values == [("a", 1), ("b", [2, 3]), ("c", None)] and columns_first[1]["n"] == [2, 3]
    rows_first = decode(data, "split", fields)
    assert [t.values for t in rows_first] == columns_first.values
    rows_first.values.sort(reverse=True)
    assert rows_first.column("w") == ["c", "b", "a"]
    assert decode(encode(9, decode(data))).rows == columns_first.values, "a decoded batch re-encodes"


def _run(topology: Topology) -> LocalTopology:
    return LocalTopology(topology, FAST)


def test_a_batch_topology_delivers_every_number_once_and_every_tree_completes() -> None:
    count = 5000
    t = Topology("batches", conf={"topology.acker.executors": 2, "topology.max.spout.pending": 700})
    numbers = t.spout("numbers", BatchNumbers, args=[count], parallelism=2)
    forward = t.bolt("forward", BatchForward, parallelism=2).shuffle(numbers)
    t.bolt("sink", Recorder, parallelism=2).fields(forward, "key")
    with _run(t) as local:
        spouts = [e.spout for e in local.tasks("numbers")]
        wait_until(lambda: sum(len(s.acked) for s in spouts) == count, 30, "every number acked")
        seen = sorted(values[1] for e in local.tasks("sink") for _, _, values in e.bolt.seen)
        assert seen == list(range(count)) and not any(s.failed for s in spouts)
        assert max(max(s.asked) for s in spouts) <= 700  # next_batch never asked past max.spout.pending
        by_task = {e.task: {values[0] for _, _, values in e.bolt.seen} for e in local.tasks("sink")}
        assert not set.intersection(*by_task.values())  # fields grouping held for rows emitted in bulk


def test_a_failing_execute_batch_fails_its_inputs_and_their_replays_complete() -> None:
    count = 2000
    t = Topology("booms", conf={"topology.acker.executors": 1})
    numbers = t.spout("numbers", BatchNumbers, args=[count])
    boom = t.bolt("boom", BatchBoom, args=[100]).shuffle(numbers)
    t.bolt("sink", Recorder).global_(boom)
    with _run(t) as local:
        spout = local.component("numbers")
        wait_until(lambda: sorted(set(spout.acked)) == list(range(count)), 30, "every number acked after replays")
        assert set(spout.failed) >= set(range(0, count, 100))  # each boom failed its whole batch
        seen = {values[1] for _, _, values in local.component("sink").seen}
        assert seen == set(range(0, count, 2))  # the even ones, each at least once


def test_a_batch_emitted_as_one_tree_is_acked_once_when_every_row_is_done() -> None:
    """``emit_many(rows, msg_id=...)``: one tree per batch, through a batch bolt and a per-tuple one, across
    two acker tasks; the spout hears ack(msg_id) once per batch, counts its rows as emitted and the batch
    once as acked, and max.spout.pending still counts rows."""
    count = 6000
    t = Topology("trees", conf={"topology.acker.executors": 2, "topology.max.spout.pending": 700})
    numbers = t.spout("numbers", BatchNumbers, args=[count], kwargs={"one_tree": True}, parallelism=2)
    forward = t.bolt("forward", BatchForward, parallelism=2).shuffle(numbers)
    t.bolt("sink", Recorder, parallelism=2).fields(forward, "key")
    with _run(t) as local:
        spouts = [e.spout for e in local.tasks("numbers")]
        wait_until(lambda: sorted(n for s in spouts for n in s.acked) == list(range(count)), 30,
                   "every batch acked")
        trees = [tree for s in spouts for tree in s.trees_acked]
        assert len(trees) < count / 10, "batches, not rows, were the trees"
        assert sorted(n for tree in trees for n in tree) == list(range(count)), "each batch acked exactly once"
        assert not any(s.trees_failed for s in spouts)
        assert max(max(s.asked) for s in spouts) <= 700, "next_batch never asked past max.spout.pending rows"
        stats = [e.stats for e in local.tasks("numbers")]
        assert (sum(s.emitted for s in stats), sum(s.acked for s in stats)) == (count, len(trees))
        seen = sorted(values[1] for e in local.tasks("sink") for _, _, values in e.bolt.seen)
        assert seen == list(range(count))


def test_one_failed_row_fails_its_whole_batch_once_and_the_replayed_batch_completes() -> None:
    count = 2000
    t = Topology("tree-booms", conf={"topology.acker.executors": 1})
    numbers = t.spout("numbers", BatchNumbers, args=[count], kwargs={"one_tree": True})
    boom = t.bolt("boom", BatchBoom, args=[100]).shuffle(numbers)
    t.bolt("sink", Recorder).global_(boom)
    with _run(t) as local:
        spout = local.component("numbers")
        wait_until(lambda: sorted(spout.acked) == list(range(count)), 30, "every number acked, once")
        assert spout.trees_failed, "a boom failed its batch"
        for tree in spout.trees_failed:
            assert any(n % 100 == 0 for n in tree), f"only batches holding a boom failed, got {tree}"
        assert len(set(spout.trees_failed)) == len(spout.trees_failed), "each failed batch heard fail once"


def test_run_spout_keeps_a_batch_msg_id_pending_once_and_replays_the_batch_on_fail() -> None:
    run = run_spout(BatchNumbers, calls=0, args=[10], kwargs={"one_tree": True})
    first = run.next_batch(3)
    assert [e.msg_id for e in first] == [(0, 1, 2)] * 3 and run.pending == [(0, 1, 2)]
    run.fail((0, 1, 2))
    assert [e.values[1] for e in run.next_batch(4)] == [0, 1, 2, 3]
    with pytest.raises(TypeError, match="not both"):
        run.spout.emit_many([("k", 1)], msg_ids=[1], msg_id=1)


def test_a_per_tuple_bolt_emitting_on_two_streams_keeps_their_order_at_a_common_target() -> None:
    t = Topology("order", conf={"topology.acker.executors": 0})
    numbers = t.spout("numbers", Numbers, args=[300], kwargs={"reliable": False})
    mix = t.bolt("mix", Interleave).shuffle(numbers)
    t.bolt("sink", Recorder).global_(mix, stream="first").global_(mix, stream="second")
    with _run(t) as local:
        sink = local.component("sink")
        wait_until(lambda: len(sink.seen) == 900, 20, "every emit")
        assert [values[1] for _, _, values in sink.seen] == list(range(900))
        assert [stream for _, stream, _ in sink.seen[:3]] == ["first", "second", "first"]


def test_a_stand_in_acks_each_root_as_acking_each_input_would_and_fails_each_root_once() -> None:
    """On the acker's own state machine: three trees, their tuples held as a batch of one root per row, a batch of
    several roots per row and a lone tuple; the stand-in's one value per root completes every tree."""
    e = [11, 12, 13, 14, 15, 16]
    fields = Fields(["n"])
    one_root = TupleBatch([(1,), (2,), (3,)], fields, "a", "default", 1, [e[0], e[1], 0], [100, 200, 0])
    several = TupleBatch([(4,)], fields, "b", "default", 2, [e[2]], None, [{100: e[2], 300: e[3]}])
    lone = Tuple((5,), fields, "c", "default", 3, e[4], {300: e[4] ^ e[5]})
    held = stand_in([one_root, several, lone])
    assert sorted(held.anchors) == [100, 200, 300] and held.id and held.values == ()
    acker = AckerState(timeout_secs=30)
    acker.init_many([100, 200, 300], [e[0] ^ e[2], e[1], e[3] ^ e[4] ^ e[5]], spout_task=7, now=0.0)
    acker.ack_many(list(held.anchors), list(held.anchors.values()), now=0.1)
    assert sorted(acker.take_news()[7].acked) == [100, 200, 300] and len(acker) == 0
    untracked = stand_in([TupleBatch([(1,)], fields, "a", "default", 1)])
    assert (untracked.id, dict(untracked.anchors), untracked.component) == (0, {}, "a")
    with pytest.raises(ValueError, match="at least one input"):
        stand_in([])


@pytest.mark.parametrize("one_tree, fail_first", [(True, 0), (False, 0), (True, 2), (False, 2)])
def test_a_bolt_settling_held_batches_through_a_stand_in_completes_every_tree_and_a_failed_one_is_replayed(
        one_tree: bool, fail_first: int) -> None:
    count = 3000
    t = Topology("held", conf={"topology.acker.executors": 2, "topology.max.spout.pending": 900})
    numbers = t.spout("numbers", BatchNumbers, args=[count], kwargs={"one_tree": one_tree})
    hold = t.bolt("hold", HoldAndSum, args=[400, fail_first]).shuffle(numbers)
    t.bolt("sums", Recorder).global_(hold)
    t.bolt("each", Recorder).global_(hold, stream="each")
    with _run(t) as local:
        spout, sums = local.component("numbers"), local.component("sums")
        wait_until(lambda: set(spout.acked) == set(range(count)), 30, "every number acked")
        assert len(spout.acked) == count, "each number acked once"
        counted = sum(c for _, _, (c, _) in sums.seen), sum(n for _, _, (_, n) in sums.seen)
        assert sorted({n for _, _, (_, n) in local.component("each").seen}) == list(range(count))
        if fail_first:
            assert spout.failed and set(spout.failed) <= set(spout.acked), "failed stand-ins' trees were replayed"
            assert counted[0] >= count and counted[1] >= sum(range(count))
            return
        assert spout.failed == [] and counted == (count, sum(range(count)))
        ackers = local.tasks("__acker")
        wait_until(lambda: sum(len(acker.state) for acker in ackers) == 0, 10, "no tree left at the ackers")
