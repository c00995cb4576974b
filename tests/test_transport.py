"""Batches between workers over real TCP on loopback: complete, ordered, batched, and robust to bad peers."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import msgpack
import pytest

from squall.devzk import free_port
from squall.dsl import Topology
from support import wait_until
from topologies import Numbers, Recorder
from worker.layout import Placement
from worker.local import compile_topology
from worker.runtime import WorkerRuntime
from worker.transport import Receiver, Sender
from squall.tuple import Fields, Tuple
from worker.wire import MAX_ROWS, Decoder, Entry, WireBatch, WireError, encode, runs_of_tuples


class Sink:
    def __init__(self) -> None:
        self.entries: list[Entry] = []
        self.batches = 0
        self.lock = threading.Lock()

    def __call__(self, batch: list[Entry]) -> None:
        with self.lock:
            self.entries.extend(batch)
            self.batches += 1


@pytest.fixture
def sink() -> Sink:
    return Sink()


@pytest.fixture
def receiver(sink: Sink) -> Iterator[Receiver]:
    r = Receiver(sink, "127.0.0.1", 0).start()
    yield r
    r.stop()


def entry(i: int) -> Entry:
    return Entry(7, 3, "default", (f"word-{i}", i, None, b"\x00"), i, ((11, 22),) if i % 2 else ())


def test_every_entry_arrives_in_order_and_in_batches(receiver: Receiver, sink: Sink) -> None:
    sender = Sender("127.0.0.1", receiver.port, batch_size=100)
    for i in range(20_000):
        sender.send([entry(i)])
    sender.close()
    wait_until(lambda: len(sink.entries) == 20_000, what="all entries")
    assert [e.tuple_id for e in sink.entries] == list(range(20_000))
    assert sink.entries[1] == Entry(7, 3, "default", ["word-1", 1, None, b"\x00"], 1, [[11, 22]]), \
        "msgpack has no tuple: sequences arrive as lists"
    assert sink.batches <= 20_000 // 50, "entries travel in batches, not one by one"


def test_a_lone_entry_is_flushed_without_waiting_for_a_full_batch(receiver: Receiver, sink: Sink) -> None:
    sender = Sender("127.0.0.1", receiver.port, batch_size=100, flush_interval=0.001)
    sender.send([entry(1)])
    wait_until(lambda: len(sink.entries) == 1, what="the flush interval to ship a partial batch")
    sender.close()


def test_garbage_and_oversized_peers_lose_only_their_connection(sink: Sink) -> None:
    receiver = Receiver(sink, "127.0.0.1", 0, max_message_bytes=4096).start()
    try:
        garbage = socket.create_connection(("127.0.0.1", receiver.port))
        garbage.sendall(b"\xc1" * 64)  # 0xc1 is never valid msgpack
        huge = socket.create_connection(("127.0.0.1", receiver.port))
        huge.sendall(msgpack.packb([1, [[1, 1, "s", ["x" * 10_000], 1, []]]]))
        for s in (garbage, huge):
            s.settimeout(5)
            assert s.recv(1) == b"", "the receiver hangs up on a bad peer"
            s.close()
        sender = Sender("127.0.0.1", receiver.port)
        sender.send([entry(5)])
        sender.close()
        wait_until(lambda: [e.tuple_id for e in sink.entries] == [5], what="a good peer still served")
    finally:
        receiver.stop()


def test_decoder_handles_split_messages_and_refuses_non_batches() -> None:
    data = encode([entry(1), entry(2)]) + encode([entry(3)])
    decoder = Decoder()
    got = [e.tuple_id for i in range(len(data)) for batch in decoder.feed(data[i:i + 1]) for e in batch]
    assert got == [1, 2, 3]
    with pytest.raises(WireError, match="not a version-1 batch"):
        list(Decoder().feed(msgpack.packb({"evil": True})))
    with pytest.raises(WireError, match="msgpack-serialisable"):
        encode([Entry(1, 1, "s", (object(),), 1, ())])


def test_runs_travel_as_one_header_and_columns_and_arrive_as_the_tuples_sent() -> None:
    f = Fields(["word", "n"])
    sent = [Tuple(("a", 1), f, "split", "default", 3),                           # untracked
            Tuple(("b", 2), f, "split", "default", 3, 41, {9: 41}),              # one root: roots form
            Tuple(("c", 3), f, "split", "default", 3, 42, {9: 42, 10: 77}),      # several: anchors form
            Tuple(("d", 4), f, "split", "other", 3),
            Tuple(("e", 5), f, "split", "default", 4, 43, {11: 43})]
    runs = runs_of_tuples(7, sent)
    assert [(r.source, r.stream, len(r)) for r in runs] == [(3, "default", 3), (3, "other", 1), (4, "default", 1)]
    data = b"".join(run.encode() for run in runs)
    got = [t for run in Decoder().feed(data) for t in run.tuples("split", f)]
    assert [(t.values, t.stream, t.task, t.id, dict(t.anchors)) for t in got] == \
        [(t.values, t.stream, t.task, t.id, dict(t.anchors)) for t in sent]

    plain = WireBatch(7, 3, "default", [(i,) for i in range(100)]).encode()
    assert len(plain) < 100 * 3 + 20, "one header per run, values in a column: no per-row overhead"
    assert [e.values for e in WireBatch.decode(WireBatch(7, 3, "s", [(), ()]).encode())] == [[], []], \
        "a stream without fields keeps its row count"


def test_a_sender_merges_runs_of_any_tracking_form_in_order(receiver: Receiver, sink: Sink) -> None:
    f = Fields(["n"])
    forms = [{}, {9: 41}, {9: 41, 10: 77}]
    sent = [Tuple((i,), f, "numbers", "default", 3, 41 if i % 3 else 0, forms[i % 3]) for i in range(300)]
    sender = Sender("127.0.0.1", receiver.port, batch_size=100)
    for tup in sent:
        sender.send_runs(runs_of_tuples(7, [tup]))
    sender.close()
    wait_until(lambda: len(sink.entries) == 300, what="all tuples")
    assert [(e.values, e.tuple_id, dict(map(tuple, e.anchors))) for e in sink.entries] == \
        [([t.values[0]], t.id, dict(t.anchors)) for t in sent]


@pytest.mark.parametrize("message, error", [
    ([1, [[7, 3, "s", ["x"], 0, []]]], "older Squall release"),        # the entry-list format
    ([1, 7, 3, "s", 2, [["x"]], None, None, None], "row count or columns"),
    ([1, 7, 3, "s", MAX_ROWS + 1, [], None, None, None], "row count or columns"),
    ([1, 7, 3, "s", 1, ["x"], None, None, None], "row count or columns"),
    ([1, 7, 3, "s", 1, [["x"]], [1, 2], [5], None], "ids, roots or anchors"),
    ([1, 7, 3, "s", 1, [["x"]], [1], None, [[5]]], "ids, roots or anchors"),
    ([1, 7, 3, "s", 1, [["x"]], None, [5], None], "ids, roots or anchors"),
    ([2, 7, 3, "s", 1, [["x"]], None, None, None], "not a version-1 batch"),
])
def test_a_malformed_run_is_refused_before_use(message: list, error: str) -> None:
    with pytest.raises(WireError, match=error):
        list(Decoder().feed(msgpack.packb(message)))


def test_a_sender_that_cannot_reach_its_peer_queues_a_bounded_backlog_and_discard_drops_it() -> None:
    sender = Sender("127.0.0.1", free_port(), max_pending=10)  # nobody listens there
    for i in range(25):
        sender.send([entry(i)])
    assert (sender.backlog, sender.dropped) == (10, 15), "at most max_pending wait for the peer, the rest drop"
    assert sender.discard() == 10 and sender.backlog == 0
    sender.send([entry(99)])
    assert sender.dropped == 26, "a discarded sender takes nothing more"


# -- a worker's peers follow its assignment -------------------------------------------------------


def test_the_peer_wait_and_the_routes_follow_a_reassignment_away_from_a_dead_worker(receiver: Receiver,
                                                                                    sink: Sink) -> None:
    """Issue 18, in one process: a worker whose sink task sits on a dead slot waits for that slot and queues
    for it; once the sink moves to a live worker it waits for that one instead, drops what it held for the
    dead slot (never sent: reliable spouts would replay it) and routes new tuples to the live worker."""
    t = Topology("peers")
    t.bolt("sink", Recorder).shuffle(t.spout("numbers", Numbers, args=[10**9], kwargs={"reliable": False}))
    layout, conf = compile_topology(t, {"topology.acker.executors": 0, "topology.transfer.buffer.size": 10})
    (sink_task,) = layout.component_tasks["sink"]
    others = frozenset(layout.task_component) - {sink_task}
    dead, live = ("127.0.0.1", free_port()), ("127.0.0.1", receiver.port)
    runtime = WorkerRuntime(layout, Placement(others, {sink_task: dead}), conf, report_error=lambda *_: None).start()
    stop, unreachable = threading.Event(), []
    waiter = threading.Thread(target=lambda: unreachable.append(runtime.wait_for_peers(60, stop)))
    try:
        waiter.start()
        held = wait_until(lambda: runtime.senders.get(dead), 10, "the wait to try the dead slot")
        runtime.set_active(True)
        capacity = 10 * int(conf["topology.transfer.batch.size"])
        wait_until(lambda: held.backlog >= capacity // 2, 10, "tuples queued for the dead slot")
        assert held.backlog <= capacity and waiter.is_alive(), "a bounded queue, and the wait goes on"

        runtime.refresh(layout, Placement(others, {sink_task: live}))
        waiter.join(5)
        assert unreachable == [frozenset()], "the wait ended once the current peer listened"
        assert dead not in runtime.senders and held.backlog == 0 and runtime.dropped >= capacity // 2
        wait_until(lambda: sink.entries, 5, "tuples routed to where the sink runs now")
        assert {e.target_task for e in sink.entries} == {sink_task}
    finally:
        stop.set()
        runtime.stop()
