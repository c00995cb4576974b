"""Batch trees by piece: the rows of ``emit_many(rows, msg_id=...)`` that go to one task in one message
share one edge of the batch's tree (:class:`squall.api.tuple.Piece`), and Storm's acking still holds row by row: the
tree completes once every row is acked, never earlier (not even when a row is acked twice), fails once when a row fails,
and a piece cut in two on the wire completes only when both halves are acked."""

from __future__ import annotations

from typing import Any

from squall.api.component import Bolt
from squall.api.dsl import Topology
from squall.api.tuple import Fields, Piece, TupleBatch
from support import two_workers, wait_until
from topologies import GATES, BatchForward, BatchNumbers, Recorder, RowByRow
from squall.dev.local import LocalTopology, compile_topology
from worker.tracking import AckerState
from worker.wire import Decoder, encode

FAST = {"task.heartbeat.frequency.secs": 0.05, "topology.message.timeout.secs": 30}
TICKS = {"topology.tick.tuple.freq.secs": 0.05}


class HalfByHand(Bolt):
    """Forwards the even rows of each batch anchored to their own input (``batch[i]``) and acks those inputs by hand;
    ``auto_ack`` settles the odd ones when ``execute_batch`` returns."""

    outputs = ["key", "n"]

    def execute(self, tup: Any) -> None:
        pass

    def execute_batch(self, batch: TupleBatch) -> None:
        for i in range(0, len(batch), 2):
            self.emit(batch.values[i], anchors=batch[i])
            self.ack(batch[i])


def run(topology: Topology, **conf: Any) -> LocalTopology:
    return LocalTopology(topology, {**FAST, **conf})


def let_time_pass(local: LocalTopology, component: str, secs: float = 1) -> None:
    """A window of ``secs`` in which ``component``'s task demonstrably ran (its heartbeat uptime grew)."""
    task = local.layout.component_tasks[component][0]
    start = wait_until(lambda: local.beats.get(task), 10, f"a heartbeat from {component}").uptime_secs
    wait_until(lambda: local.beats[task].uptime_secs >= start + secs, 10 + secs, f"{secs}s of {component} uptime")


def test_a_piece_cut_in_two_messages_completes_its_tree_only_when_both_halves_are_acked() -> None:
    """At the acker's own state machine, fed as a spout and two bolts would feed it: the spout's init is the
    piece's one edge; the wire cuts the piece's six rows in two messages (by rows, and again by bytes), each
    with an edge of its own; acking one half leaves the tree pending, acking the other completes it."""
    root, edge = 1000, 0x1234_5678_9ABC_DEF0
    fields = Fields(["n"])
    sent = TupleBatch([(n,) for n in range(6)], fields, "numbers", "default", 3, piece=Piece(root, edge, 6))
    for data in (encode(9, sent, max_rows=3),                # cut by the row bound
                 encode(9, sent, max_bytes=33)):             # cut (in halves) by the byte bound
        halves = [half for _, half in Decoder().feed(data)]
        assert len(halves) >= 2 and sum(map(len, halves)) == 6
        assert [n for half in halves for (n,) in half.values] == list(range(6)), "every row once, in order"
        assert len({half.piece.edge for half in halves}) == len(halves), "each message has an edge of its own"
        acker = AckerState(timeout_secs=30)
        acker.init_many([root], [edge], spout_task=3, now=0.0)
        for i, half in enumerate(halves):
            value = half.piece.settle(0, len(half))  # what a bolt settling the half whole acks
            acker.ack_many([root], [value], now=0.1)  # type: ignore[list-item]
            news = acker.take_news()
            if i < len(halves) - 1:
                assert not news and len(acker) == 1, "part of the piece acked: the tree is still pending"
        assert news[3].acked == [root] and len(acker) == 0, "the last part acked: the tree is done"


def test_per_tuple_acks_of_a_batch_tree_complete_it_with_its_last_row_and_only_then() -> None:
    """A per-tuple bolt acks every row of the spout's batches but one, held until a gate opens: the batches without
    it are acked, the one holding it is not (however long it waits), and is acked once the held row is."""
    GATES.pop("last-row", None)
    t = Topology("last-row", conf={"topology.acker.executors": 1})
    numbers = t.spout("numbers", BatchNumbers, args=[300], kwargs={"one_tree": True})
    t.bolt("rows", RowByRow, kwargs={"hold": [150], "gate": "last-row"}, conf=TICKS).shuffle(numbers)
    with run(t) as local:
        spout, rows = local.component("numbers"), local.component("rows")
        wait_until(lambda: len(rows.acked) == 299, 10, "every row but the held one acked")
        wait_until(lambda: len(spout.trees_acked) == 2, 10, "the two batches without the held row acked")
        let_time_pass(local, "numbers")
        assert all(150 not in tree for tree in spout.trees_acked) and spout.trees_failed == []
        GATES["last-row"].set()
        wait_until(lambda: len(spout.trees_acked) == 3, 10, "the held row's batch acked once it was")
        assert sorted(spout.acked) == list(range(300)) and spout.trees_failed == []
        assert len(local.tasks("__acker")[0].state) == 0 and len(local.tasks("numbers")[0].pending) == 0


def test_a_batch_bolt_acking_some_rows_by_hand_and_auto_acking_the_rest_completes_each_batch_once_downstream() -> None:
    """Rows acked one by one (with outputs anchored to them) and the rest settled whole by ``auto_ack``: each batch
    tree completes once, and only after the sink acked the forwarded rows."""
    GATES.pop("sink-rows", None)
    t = Topology("by-hand", conf={"topology.acker.executors": 1})
    numbers = t.spout("numbers", BatchNumbers, args=[600], kwargs={"one_tree": True})
    half = t.bolt("half", HalfByHand).shuffle(numbers)
    t.bolt("rows", RowByRow, kwargs={"hold": [0], "gate": "sink-rows"}, conf=TICKS).shuffle(half)
    with run(t) as local:
        spout, rows = local.component("numbers"), local.component("rows")
        wait_until(lambda: len(rows.acked) == 299, 10, "every even row but 0 acked at the sink")
        wait_until(lambda: len(spout.trees_acked) == 5, 10, "the batches without row 0 acked")
        let_time_pass(local, "numbers")
        assert all(0 not in tree for tree in spout.trees_acked), "row 0's batch waits for the sink"
        GATES["sink-rows"].set()
        wait_until(lambda: sorted(spout.acked) == list(range(600)), 10, "every batch acked")
        assert len(spout.trees_acked) == 6 and spout.trees_failed == []


def test_a_row_acked_twice_never_completes_its_batch_early_the_tree_times_out_and_its_replay_completes() -> None:
    """Row 150 is acked twice and row 151 (same batch) is held for good: counting acks, the double one would
    stand in for the held one and complete the batch with a row unprocessed. The batch times out instead (a
    double ack in Storm does as much), is replayed, and the replay completes."""
    GATES.pop("never", None)
    t = Topology("double-ack", conf={"topology.acker.executors": 1, "topology.message.timeout.secs": 2})
    numbers = t.spout("numbers", BatchNumbers, args=[300], kwargs={"one_tree": True})
    t.bolt("rows", RowByRow, kwargs={"twice": [150], "hold": [151], "gate": "never"}, conf=TICKS).shuffle(numbers)
    with run(t, **{"topology.message.timeout.secs": 2}) as local:
        spout = local.component("numbers")
        wait_until(lambda: sorted(spout.acked) == list(range(300)), 20, "every batch acked, one after a replay")
        (failed,) = spout.trees_failed  # had it completed early, it would have been acked, and never failed
        assert 150 in failed and 151 in failed
        assert [150 in tree for tree in spout.trees_acked].count(True) == 1, "acked once: its replay"


def test_a_row_acked_twice_makes_its_batch_time_out_as_in_storm_even_with_every_other_row_acked() -> None:
    t = Topology("double-only", conf={"topology.acker.executors": 1})
    numbers = t.spout("numbers", BatchNumbers, args=[300], kwargs={"one_tree": True})
    t.bolt("rows", RowByRow, kwargs={"twice": [42]}).shuffle(numbers)
    with run(t, **{"topology.message.timeout.secs": 2}) as local:
        spout = local.component("numbers")
        wait_until(lambda: sorted(spout.acked) == list(range(300)), 20, "every number acked, after a replay")
        assert [42 in tree for tree in spout.trees_failed] == [True], "only the double-acked batch timed out, once"


def test_a_failed_row_fails_its_batch_once_and_the_replayed_batch_completes() -> None:
    """Two rows of one batch fail (per tuple); the spout hears fail once for the batch, replays it, and the replay
    (whose rows the bolt now acks) completes."""
    t = Topology("row-fails", conf={"topology.acker.executors": 1})
    numbers = t.spout("numbers", BatchNumbers, args=[300], kwargs={"one_tree": True})
    t.bolt("rows", RowByRow, kwargs={"fail": [120, 130]}).shuffle(numbers)
    with run(t) as local:
        spout, rows = local.component("numbers"), local.component("rows")
        wait_until(lambda: sorted(spout.acked) == list(range(300)), 15, "every number acked")
        (failed,) = spout.trees_failed
        assert 120 in failed and 130 in failed, "the batch holding the failed rows failed, once"
        assert sorted(rows.failed) == [120, 130] and sorted(spout.failed) == sorted(failed)


def test_batch_trees_cross_workers_as_pieces_cut_by_the_message_bound_and_each_completes_once() -> None:
    """Two workers in this process over TCP. The spout's batches (1,500 rows: more than a wire message holds)
    go whole to one forwarding task in the other worker, whose ``emit_each`` sends them on as pieces of the same
    trees to a sink in each worker; every batch is acked exactly once and every row reaches a sink once."""
    count = 6000
    conf = {"topology.acker.executors": 2, "topology.transfer.batch.size": 1500,
            "topology.max.spout.pending": 6000}
    t = Topology("pieces", conf=conf)
    numbers = t.spout("numbers", BatchNumbers, args=[count], kwargs={"one_tree": True})
    forward = t.bolt("forward", BatchForward).global_(numbers)
    t.bolt("sink", Recorder, parallelism=2).shuffle(forward)
    layout, conf = compile_topology(t, FAST)
    (spout_task,), (forward_task,) = layout.component_tasks["numbers"], layout.component_tasks["forward"]
    sinks, ackers = layout.component_tasks["sink"], layout.component_tasks["__acker"]
    halves = [{spout_task, sinks[0], ackers[0], *layout.component_tasks["__topology_master"]},
              {forward_task, sinks[1], ackers[1]}]
    with two_workers(layout, conf, halves) as runtimes:
        spout = runtimes[0].executors[spout_task].spout
        wait_until(lambda: sorted(spout.acked) == list(range(count)), 30, "every batch acked")
        assert spout.trees_failed == [] and len(spout.trees_acked) == count // 1500
        seen = sorted(values[1] for i, task in enumerate(sinks) for _, _, values in runtimes[i].executors[task].bolt.seen)
        assert seen == list(range(count)), "every row reached a sink once"
        forwarded = runtimes[1].executors[forward_task].stats.executed
        assert forwarded == count
