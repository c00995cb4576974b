"""Batches between workers over real TCP on loopback: complete, ordered, batched, and robust to bad peers."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from typing import Any

import msgpack
import psutil
import pytest
from structlog.testing import capture_logs

from squall.api.dsl import Topology
from squall.api.tuple import ColumnBatch, Fields, Tuple, TupleBatch
from squall.dev.local import compile_topology
from squall.dev.zookeeper import free_port
from support import wait_until
from topologies import Numbers, Recorder
from worker.queues import Inbox, Pressure, Routes, Wake
from worker.layout import Origins, Placement, TopologyLayout
from worker.runtime import WorkerRuntime
from worker.transport import Receiver, Sender
from wire_entries import (
    Entry, batch, batches_of_tuples, decode, encode_entries, entries_of, send,
)
from worker.handshake import HELLO, Greeting, hello, proof_message, transfer_proof
from worker.wire import MAX_ROWS, MESSAGE_ROWS, REPEATED, Decoder, WireError, encode


class Sink:
    def __init__(self) -> None:
        self.entries: list[Entry] = []
        self.batches = 0
        self.lock = threading.Lock()

    def __call__(self, target: int, tuples: TupleBatch) -> None:
        with self.lock:
            self.entries.extend(entries_of(target, tuples))
            self.batches += 1


@pytest.fixture
def sink() -> Sink:
    return Sink()


@pytest.fixture
def receiver(sink: Sink) -> Iterator[Receiver]:
    r = Receiver(sink, TOPOLOGY, "127.0.0.1", 0).start()
    yield r
    r.stop()


#: The topology the plain receiver serves and its senders name in their handshake.
TOPOLOGY = "words-1-1700000000"


def entry(i: int) -> Entry:
    return Entry(7, 3, "default", (f"word-{i}", i, None, b"\x00"), i, ((11, 22),) if i % 2 else ())


def test_every_entry_arrives_in_order_and_in_batches(receiver: Receiver, sink: Sink) -> None:
    sender = Sender("127.0.0.1", receiver.port, TOPOLOGY, batch_size=100)
    for i in range(20_000):
        send(sender, [entry(i)])
    sender.close()
    wait_until(lambda: len(sink.entries) == 20_000, what="all entries")
    assert [e.tuple_id for e in sink.entries] == list(range(20_000))
    assert sink.entries[1] == Entry(7, 3, "default", ["word-1", 1, None, b"\x00"], 1, [[11, 22]]), \
        "msgpack has no tuple: sequences arrive as lists"
    assert sink.batches <= 20_000 // 50, "entries travel in batches, not one by one"


def test_a_lone_entry_is_flushed_without_waiting_for_a_full_batch(receiver: Receiver, sink: Sink) -> None:
    sender = Sender("127.0.0.1", receiver.port, TOPOLOGY, batch_size=100, flush_interval=0.001)
    send(sender, [entry(1)])
    wait_until(lambda: len(sink.entries) == 1, what="the flush interval to ship a partial batch")
    sender.close()


def test_a_backpressured_receiver_tells_its_senders_to_hold_their_spouts_until_it_is_relieved(sink: Sink) -> None:
    """The peer's spouts must hold as soon as this worker is backpressured: waiting for TCP flow control let
    the kernel's socket buffers (tens of megabytes) fill with tuples first, which then timed out. The sender hears
    it while its write waits on the full socket too (small socket buffers: far more is sent than they hold)."""
    fill = [1.0]
    pressure = Pressure(lambda: fill[0], enabled=True, high=0.8, low=0.2)
    pressure.update()
    receiver = Receiver(sink, TOPOLOGY, "127.0.0.1", 0, pressure=pressure, socket_buffer=4096).start()
    sender = Sender("127.0.0.1", receiver.port, TOPOLOGY, batch_size=100, socket_buffer=4096)
    try:
        send(sender, [entry(i) for i in range(5_000)])
        wait_until(lambda: sender.throttled, what="the receiver to tell the sender it holds its connections")
        assert sink.entries == [], "nothing is handed on while the receiving worker is backpressured"
        fill[0] = 0.1
        pressure.update()
        wait_until(lambda: len(sink.entries) == 5_000 and not sender.throttled, what="every entry, the hold let go")
        assert [e.tuple_id for e in sink.entries] == list(range(5_000))
    finally:
        sender.close()
        receiver.stop()


def test_spouts_hold_while_a_peer_holds_this_worker_but_its_receiver_keeps_reading() -> None:
    """A peer's hold stops only this worker's spouts: were its receiver to stop too, two workers sending each
    other tuples (acks, words) could hold each other for good."""
    held = [True]
    pressure = Pressure(lambda: 0.0, enabled=True, high=0.8, low=0.2, held=lambda: held[0])
    pressure.update()
    assert pressure.hold_spouts and not pressure.high and pressure.relieved.is_set()
    held[0] = False
    pressure.update()
    assert not pressure.hold_spouts


def test_a_backlog_travels_in_messages_of_many_rows_each(sink: Sink) -> None:
    """Tuples queued while the peer was away (or while the sender waited for the GIL) go in messages of
    MESSAGE_ROWS rows, not of batch_size: the receiver's costs per message spread over many rows."""
    port = free_port()
    sender = Sender("127.0.0.1", port, TOPOLOGY, batch_size=100)
    for i in range(0, 5 * MESSAGE_ROWS, 100):
        sender.queue.put(7, [batch(3, "default", [(f"word-{j}", j) for j in range(i, i + 100)])])
    receiver = Receiver(sink, TOPOLOGY, "127.0.0.1", port).start()
    try:
        wait_until(lambda: len(sink.entries) == 5 * MESSAGE_ROWS, what="the backlog")
        assert [e.values[1] for e in sink.entries] == list(range(5 * MESSAGE_ROWS))
        assert sink.batches == 5, f"{sink.batches} messages for 5 x MESSAGE_ROWS rows"
        sender.close()
    finally:
        receiver.stop()


def test_no_message_is_larger_than_a_worker_accepts_and_a_tuple_too_large_for_one_is_dropped_alone(
        sink: Sink) -> None:
    """A run bigger than the receiver's message cap goes as several messages; one tuple bigger than the cap
    cannot travel at all: it alone is dropped (and logged), the connection and the other tuples are served."""
    receiver = Receiver(sink, TOPOLOGY, "127.0.0.1", 0, max_message_bytes=4096).start()
    sender = Sender("127.0.0.1", receiver.port, TOPOLOGY, max_message_bytes=4096)
    try:
        rows = [("x" * 200, i) for i in range(60)]
        rows[30] = ("x" * 5000, 30)
        with capture_logs() as logs:
            sender.queue.put(7, [batch(3, "default", rows)])
            wait_until(lambda: len(sink.entries) == 59, what="every tuple but the big one")
        assert [e.values[1] for e in sink.entries] == [i for i in range(60) if i != 30]
        assert sink.batches >= 3 and receiver.counts["bad_data"] == 0 and sender.dropped == 1
        (error,) = [e["error"] for e in logs if e["event"] == "dropping a tuple that cannot travel between workers"]
        assert "larger than a worker accepts in one message (4,096 bytes)" in error
        with pytest.raises(WireError, match="larger than a worker accepts"):
            encode(7, batch(3, "default", [rows[30]]), max_bytes=4096)
    finally:
        sender.close()
        receiver.stop()


def greeted(port: int, topology_id: str = TOPOLOGY) -> socket.socket:
    """A raw connection that has made its handshake for ``topology_id`` and been accepted."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.sendall(hello(topology_id))
    assert Greeting().feed(sock.recv(4096)) == [HELLO, 1, None], "the handshake is accepted"
    return sock


def test_garbage_and_oversized_peers_lose_only_their_connection(sink: Sink) -> None:
    receiver = Receiver(sink, TOPOLOGY, "127.0.0.1", 0, max_message_bytes=4096).start()
    try:
        unnamed = socket.create_connection(("127.0.0.1", receiver.port))
        unnamed.sendall(b"\xc1" * 64)  # 0xc1 is never valid msgpack
        garbage = greeted(receiver.port)
        garbage.sendall(b"\xc1" * 64)
        huge = greeted(receiver.port)
        huge.sendall(msgpack.packb([1, 7, 3, "s", 1, [["x" * 10_000]], None, None, None]))
        for s in (unnamed, garbage, huge):
            assert closed_by_peer(s), "the receiver hangs up on a bad peer"
            s.close()
        assert receiver.counts["bad_data"] == 3, receiver.counts
        sender = Sender("127.0.0.1", receiver.port, TOPOLOGY)
        send(sender, [entry(5)])
        sender.close()
        wait_until(lambda: [e.tuple_id for e in sink.entries] == [5], what="a good peer still served")
    finally:
        receiver.stop()


def test_a_receiver_that_dies_reports_it_and_still_stops_cleanly(sink: Sink) -> None:
    """A receiver whose loop fails cannot take more batches: the worker is told (it exits and its
    supervisor restarts it) rather than heartbeating deaf, and stopping it afterwards raises nothing."""
    fatal: list[BaseException] = []
    receiver = Receiver(sink, TOPOLOGY, "127.0.0.1", 0, handshake_timeout=0.2, on_fatal=fatal.append)

    def broken_sweep(now: float) -> None:
        raise RuntimeError("sweep failed")

    receiver._sweep = broken_sweep  # type: ignore[method-assign]
    receiver.start()
    wait_until(lambda: fatal, 10, "the receiver reporting its failure")
    assert [str(e) for e in fatal] == ["sweep failed"]
    receiver.stop()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", receiver.port), timeout=2)


def test_a_handshake_is_one_small_message_answered_before_anything_follows(receiver: Receiver) -> None:
    early = socket.create_connection(("127.0.0.1", receiver.port))
    early.sendall(hello(TOPOLOGY) + encode(7, batch(3, "default", [("a",)])))  # did not wait for the answer
    big = socket.create_connection(("127.0.0.1", receiver.port))
    big.sendall(msgpack.packb([HELLO, 1, "x" * 5000]))
    old = socket.create_connection(("127.0.0.1", receiver.port))
    old.sendall(msgpack.packb([HELLO, 2, TOPOLOGY]))
    for s in (early, big, old):
        assert closed_by_peer(s)
    with pytest.raises(WireError, match="one Squall release"):
        Greeting().feed(msgpack.packb([HELLO, 2, TOPOLOGY]))
    with pytest.raises(WireError, match="before the handshake was answered"):
        Greeting().feed(hello(TOPOLOGY) + b"\x90")


SECRET = b"the-topology-s-transfer-secret"


def test_with_a_transfer_secret_workers_holding_it_deliver_and_a_forged_connection_delivers_nothing(
        sink: Sink) -> None:
    """The receiver of a topology with a transfer secret: a sender holding the secret delivers; a connection
    without a nonce, one answering the challenge with a proof of another secret, and a sender of another secret
    or none are each refused at the handshake (counted as refused) and nothing they send reaches the sink."""
    receiver = Receiver(sink, TOPOLOGY, "127.0.0.1", 0, secret=SECRET).start()
    try:
        unauthenticated = socket.create_connection(("127.0.0.1", receiver.port), timeout=5)
        unauthenticated.sendall(hello(TOPOLOGY))  # names the topology, proves nothing
        assert "authenticate" in Greeting().feed(unauthenticated.recv(4096))[2]
        assert closed_by_peer(unauthenticated)

        forger = socket.create_connection(("127.0.0.1", receiver.port), timeout=5)
        nonce = b"n" * 16
        forger.sendall(hello(TOPOLOGY, nonce))
        _, _, refusal, challenge, proof = Greeting().feed(forger.recv(4096))
        assert refusal is None and proof == transfer_proof(SECRET, "receiver", TOPOLOGY, nonce, challenge), \
            "the receiver proves the secret first"
        forger.sendall(proof_message(transfer_proof(b"a guess", "caller", TOPOLOGY, nonce, challenge)))
        assert "not proven" in Greeting().feed(forger.recv(4096))[2]
        with contextlib.suppress(OSError):  # what a forger sends anyway goes nowhere
            forger.sendall(encode(7, batch(3, "default", [("forged", -1)])))
        assert closed_by_peer(forger)

        strangers = [Sender("127.0.0.1", receiver.port, TOPOLOGY, secret=b"another secret"),
                     Sender("127.0.0.1", receiver.port, TOPOLOGY)]
        for stranger in strangers:
            send(stranger, [entry(-1)])
        wait_until(lambda: all(s.refusal for s in strangers), 10, "both strangers refused")
        assert "did not prove" in strangers[0].refusal and "topology.transfer.secret" in strangers[1].refusal

        holder = Sender("127.0.0.1", receiver.port, TOPOLOGY, secret=SECRET)
        for i in range(100):
            send(holder, [entry(i)])
        wait_until(lambda: len(sink.entries) == 100, 10, "the holder's entries")
        for sender in (holder, *strangers):
            sender.discard()
        assert [e.tuple_id for e in sink.entries] == list(range(100)), "only the holder's entries arrived"
        assert receiver.counts["refused"] == 2 + 1, "no nonce, a wrong proof, the secretless sender"
    finally:
        receiver.stop()


def test_a_sender_with_the_secret_sends_nothing_to_a_receiver_that_cannot_prove_it(sink: Sink) -> None:
    """An impostor listening on a worker's port (no secret, or another): the sender refuses it, so the
    topology's tuples never reach it."""
    for impostor_secret in (None, b"another secret"):
        impostor = Receiver(sink, TOPOLOGY, "127.0.0.1", 0, secret=impostor_secret).start()
        sender = Sender("127.0.0.1", impostor.port, TOPOLOGY, secret=SECRET)
        try:
            send(sender, [entry(1)])
            wait_until(lambda: sender.refusal, 10, "the sender refusing the impostor")
            assert not sender.connected.is_set()
        finally:
            sender.discard()
            impostor.stop()
    assert sink.entries == []


def test_decoder_handles_split_messages_and_refuses_non_batches() -> None:
    data = encode_entries([entry(1), entry(2)]) + encode_entries([entry(3)])
    decoder = Decoder()
    got = [e.tuple_id for i in range(len(data)) for target, tuples in decoder.feed(data[i:i + 1])
           for e in entries_of(target, tuples)]
    assert got == [1, 2, 3]
    with pytest.raises(WireError, match="not a version-1 batch"):
        list(Decoder().feed(msgpack.packb({"evil": True})))
    with pytest.raises(WireError, match="msgpack-serialisable"):
        encode_entries([Entry(1, 1, "s", (object(),), 1, ())])
    with pytest.raises(WireError, match="numbers within 64 bits"):
        encode_entries([Entry(1, 1, "s", (2**64,), 1, ())])
    with pytest.raises(WireError, match="one width"):
        encode_entries([Entry(1, 1, "s", ("a", 1), 1, ()), Entry(1, 1, "s", ("b",), 2, ())])


def test_runs_travel_as_one_header_and_columns_and_arrive_as_the_tuples_sent() -> None:
    f = Fields(["word", "n"])
    sent = [Tuple(("a", 1), f, "split", "default", 3),                           # untracked
            Tuple(("b", 2), f, "split", "default", 3, 41, {9: 41}),              # one root: roots form
            Tuple(("c", 3), f, "split", "default", 3, 42, {9: 42, 10: 77}),      # several: anchors form
            Tuple(("d", 4), f, "split", "other", 3),
            Tuple(("e", 5), f, "split", "default", 4, 43, {11: 43})]
    batches = batches_of_tuples(sent)
    assert [(b.task, b.stream, len(b)) for b in batches] == [(3, "default", 3), (3, "other", 1), (4, "default", 1)]
    data = b"".join(encode(7, b) for b in batches)
    got = [t for _, b in Decoder().feed(data) for t in b.views()]
    assert [(t.values, t.stream, t.task, t.id, dict(t.anchors)) for t in got] == \
        [(t.values, t.stream, t.task, t.id, dict(t.anchors)) for t in sent]

    plain = encode(7, batch(3, "default", [(i,) for i in range(100)]))
    assert len(plain) < 100 * 3 + 20, "one header per run, values in a column: no per-row overhead"
    assert [e.values for e in entries_of(7, decode(encode(7, batch(3, "s", [(), ()]))))] == [[], []], \
        "a stream without fields keeps its row count"


def test_a_sender_keeps_batches_of_any_tracking_form_in_order(receiver: Receiver, sink: Sink) -> None:
    f = Fields(["n"])
    forms = [{}, {9: 41}, {9: 41, 10: 77}]
    sent = [Tuple((i,), f, "numbers", "default", 3, 41 if i % 3 else 0, forms[i % 3]) for i in range(300)]
    sender = Sender("127.0.0.1", receiver.port, TOPOLOGY, batch_size=100)
    for tup in sent:
        sender.queue.put(7, batches_of_tuples([tup]))
    sender.close()
    wait_until(lambda: len(sink.entries) == 300, what="all tuples")
    assert [(e.values, e.tuple_id, dict(map(tuple, e.anchors))) for e in sink.entries] == \
        [([t.values[0]], t.id, dict(t.anchors)) for t in sent]


def test_a_column_of_one_str_or_bytes_value_travels_once_and_arrives_as_every_row_sent() -> None:
    tag = "eu-west-" + "1"  # built at run time: equal rows, not one interned object
    rows = [(tag, i, b"k") for i in range(500)]
    run = decode(encode(7, batch(3, "s", rows)))
    assert run.rows == rows
    assert len(encode(7, batch(3, "s", rows))) < 500 * len(tag), "the tag column went once"
    same = [("some data",)] * 300  # one row object, as a constant spout emits
    assert len(encode(7, batch(3, "s", same))) < 40
    assert decode(encode(7, batch(3, "s", same))).rows == same
    # Equal is not the same: 1, 1.0 and True compare equal and must arrive as sent, and so must a lone row.
    mixed = [(1,), (1.0,), (True,), (1,)]
    assert decode(encode(7, batch(3, "s", mixed))).rows == mixed
    assert [type(v) for (v,) in decode(encode(7, batch(3, "s", mixed))).rows] == [int, float, bool, int]
    assert decode(encode(7, batch(3, "s", [("x",)]))).rows == [("x",)]
    lists = [(["a"],)] * 3  # a mutable value is never shared by the receiver's rows
    got = decode(encode(7, batch(3, "s", lists))).rows
    assert got == [(["a"],)] * 3 and len({id(v) for (v,) in got}) == 3


def test_a_repeated_column_from_a_peer_is_refused_unless_it_is_one_str_or_bytes_within_bounds() -> None:
    def message(n: int, column: Any) -> bytes:
        return msgpack.packb([1, 7, 3, "s", n, [column], None, None, None])

    assert decode(message(3, msgpack.ExtType(REPEATED, msgpack.packb("x")))).rows == [("x",)] * 3
    with pytest.raises(WireError, match="no repeated str or bytes"):
        decode(message(3, msgpack.ExtType(REPEATED, msgpack.packb([1, 2]))))
    with pytest.raises(WireError, match="no repeated str or bytes"):
        decode(message(3, msgpack.ExtType(REPEATED + 1, msgpack.packb("x"))))
    many = msgpack.packb([1, 7, 3, "s", MAX_ROWS, [msgpack.ExtType(REPEATED, msgpack.packb("x"))] * 2, None, None, None])
    with pytest.raises(WireError, match="more repeated cells"):
        decode(many)


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
    sender = Sender("127.0.0.1", free_port(), TOPOLOGY, max_pending=10)  # nobody listens there
    for i in range(25):
        send(sender, [entry(i)])
    assert (sender.queue.backlog, sender.dropped) == (10, 15), "at most max_pending wait for the peer, the rest drop"
    assert sender.discard() == 10 and sender.queue.backlog == 0
    send(sender, [entry(99)])
    assert sender.dropped == 26, "a discarded sender takes nothing more"
    whole = Sender("127.0.0.1", free_port(), TOPOLOGY, max_pending=10)
    try:
        whole.queue.put(1, [batch(1, "s", [(i,) for i in range(4)])])
        whole.queue.put(2, [batch(1, "s", [(i,) for i in range(21)])])
        assert (whole.queue.backlog, whole.dropped) == (10, 15), "a run larger than the room left is cut"
    finally:
        whole.discard()


def test_a_batch_from_another_worker_reaches_its_task_as_sent_bound_to_its_source_component_and_fields() -> None:
    """What the wire delivers is the batch type a bolt receives: checked against the topology, given its source
    component and fields, put in the target task's inbox as it came (its columns); a batch for a task that is not
    in this worker (a stale route at the sender) is counted as dropped."""
    t = Topology("bound")
    t.bolt("sink", Recorder).shuffle(t.spout("numbers", Numbers, args=[10]))
    layout, _ = compile_topology(t, {})
    (spout_task,), (sink_task,) = layout.component_tasks["numbers"], layout.component_tasks["sink"]
    routes, wake = Routes(Origins(layout)), Wake()
    routes.inboxes[sink_task] = inbox = Inbox(100, wake)
    sent = TupleBatch([("k1", 1), ("k2", 2)], layout.fields("numbers", "default"), "numbers", "default", spout_task,
                      [5, 6], [50, 60])
    for target, got in Decoder().feed(encode(sink_task, sent) + encode(sink_task + 100, sent)):
        routes.receive(target, got)
    received = inbox.take()
    assert isinstance(received, ColumnBatch) and inbox.take() is None
    assert (received.component, received.fields, received.task, received.stream) == \
        ("numbers", Fields(["key", "n"]), spout_task, "default")
    assert (received.values, received.ids, received.roots) == (sent.values, sent.ids, sent.roots)
    assert routes.dropped == 2, "the batch for a task this worker does not run"


# -- a worker's peers follow its assignment -------------------------------------------------------


def test_the_peer_wait_and_the_routes_follow_a_reassignment_away_from_a_dead_worker(sink: Sink) -> None:
    """In one process: a worker whose sink task sits on a dead slot waits for that slot and queues
    for it; once the sink moves to a live worker it waits for that one instead, drops what it held for the
    dead slot (never sent: reliable spouts would replay it) and routes new tuples to the live worker."""
    t = Topology("peers")
    t.bolt("sink", Recorder).shuffle(t.spout("numbers", Numbers, args=[10**9], kwargs={"reliable": False}))
    layout, conf = compile_topology(t, {"topology.acker.executors": 0, "topology.transfer.buffer.size": 10})
    (sink_task,) = layout.component_tasks["sink"]
    others = frozenset(layout.task_component) - {sink_task}
    receiver = Receiver(sink, layout.topology_id, "127.0.0.1", 0).start()
    dead, live = ("127.0.0.1", free_port()), ("127.0.0.1", receiver.port)
    runtime = WorkerRuntime(layout, Placement(others, {sink_task: dead}), conf, report_error=lambda *_: None).start()
    stop, unreachable = threading.Event(), []
    waiter = threading.Thread(target=lambda: unreachable.append(runtime.wait_for_peers(60, stop)))
    try:
        waiter.start()
        held = wait_until(lambda: runtime.senders.get(dead), 10, "the wait to try the dead slot")
        runtime.set_active(True)
        capacity = 10 * int(conf["topology.transfer.batch.size"])
        wait_until(lambda: held.queue.backlog >= capacity // 2, 10, "tuples queued for the dead slot")
        assert held.queue.backlog <= capacity and waiter.is_alive(), "a bounded queue, and the wait goes on"

        runtime.refresh(layout, Placement(others, {sink_task: live}))
        waiter.join(30)  # ends in milliseconds; room for a loaded machine
        assert unreachable == [frozenset()], "the wait ended once the current peer listened"
        assert dead not in runtime.senders and held.queue.backlog == 0 and runtime.dropped >= capacity // 2
        wait_until(lambda: sink.entries, 30, "tuples routed to where the sink runs now")
        assert {e.target_task for e in sink.entries} == {sink_task}
    finally:
        stop.set()
        runtime.stop()
        receiver.stop()


# -- a worker's receiver under hostile traffic -----------------------------------------

#: Short receiver timeouts, so the tests watch them act within seconds.
HOSTILE = {"topology.acker.executors": 0, "worker.transfer.handshake.timeout.secs": 1.0,
           "worker.transfer.idle.timeout.secs": 2.0, "worker.transfer.max.connections": 256}


class Pair:
    """Two real WorkerRuntimes over loopback: ``source`` runs the spout (unreliable, endless), ``sink`` runs the
    Recorder and the topology master and listens on ``port``: the worker under attack."""

    def __init__(self, name: str = "hostile", **conf: object) -> None:
        t = Topology(name)
        t.bolt("sink", Recorder).shuffle(t.spout("numbers", Numbers, args=[10**9], kwargs={"reliable": False}))
        self.layout, self.conf = compile_topology(t, {**HOSTILE, **conf})
        (self.sink_task,) = self.layout.component_tasks["sink"]
        (self.spout_task,) = self.layout.component_tasks["numbers"]
        mine = frozenset({self.sink_task, *self.layout.component_tasks["__topology_master"]})
        self.port = free_port()
        self.sink = WorkerRuntime(self.layout, Placement(mine, {self.spout_task: ("127.0.0.1", free_port())}),
                                  self.conf, report_error=lambda *_: None, listen=("127.0.0.1", self.port)).start()
        self.source: WorkerRuntime | None = None

    def start_source(self, layout: TopologyLayout | None = None) -> WorkerRuntime:
        """A worker holding the spout whose routes point at the sink's port (of ``layout``'s topology if given)."""
        layout = layout or self.layout
        tasks = frozenset(layout.task_component)
        mine = frozenset({self.spout_task})
        self.source = WorkerRuntime(layout, Placement(mine, {t: ("127.0.0.1", self.port) for t in tasks - mine}),
                                    self.conf, report_error=lambda *_: None).start()
        self.source.set_active(True)
        return self.source

    def delivered(self) -> list[tuple[Any, ...]]:
        return [values for _, stream, values in self.sink.executors[self.sink_task].bolt.seen if stream == "default"]

    def stop(self) -> None:
        for runtime in (self.source, self.sink):
            if runtime is not None:
                runtime.stop()


@pytest.fixture
def pair() -> Iterator[Pair]:
    p = Pair()
    yield p
    p.stop()


def closed_by_peer(sock: socket.socket, timeout: float = 10) -> bool:
    """True once the other end has closed ``sock`` (reading whatever it sent first); False at the deadline."""
    sock.settimeout(timeout)
    try:
        while sock.recv(4096):
            pass
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False
    return True


def test_three_thousand_idle_connections_cost_no_thread_each_and_the_topology_keeps_flowing(pair: Pair) -> None:
    """3,000 connections that never say a word: the worker's threads stay flat and its memory grows by little
    (a thread per connection was +3,000 threads and ~+220 MB); its real peer keeps delivering, and the idle
    ones are hung up on once the handshake deadline passes."""
    me = psutil.Process()
    source = pair.start_source()
    wait_until(lambda: len(pair.delivered()) > 100, 10, "the topology flowing before the flood")
    source.set_active(False)  # the sink keeps every tuple: measure the flood alone
    threads, rss = me.num_threads(), me.memory_info().rss
    flood = []
    try:
        for _ in range(3000):
            flood.append(socket.create_connection(("127.0.0.1", pair.port)))
        assert me.num_threads() - threads < 20, f"{me.num_threads() - threads} threads for 3,000 idle connections"
        grew = (me.memory_info().rss - rss) / 2**20
        assert grew < 40, f"3,000 idle connections grew the worker by {grew:.0f} MiB"
        source.set_active(True)
        flowing = len(pair.delivered())
        wait_until(lambda: len(pair.delivered()) > flowing + 1000, 10, "the real peer delivering through the flood")
        assert all(closed_by_peer(s) for s in flood[-50:]), "idle connections are hung up on"
        wait_until(lambda: pair.sink.receiver.connections <= 2, 10, "only the real peer's connection left")
    finally:
        for s in flood:
            s.close()


def test_a_worker_of_another_topology_on_a_reused_port_delivers_nothing(pair: Pair) -> None:
    """A stale worker whose routes name this port (its topology's worker used to run here) speaks the same
    wire, with the same task ids and streams: it is refused at the handshake and nothing of it is delivered."""
    t = Topology("other-topology")
    t.bolt("sink", Recorder).shuffle(t.spout("numbers", Numbers, args=[10**9], kwargs={"reliable": False}))
    other, _ = compile_topology(t, HOSTILE)
    assert other.task_component == pair.layout.task_component and other.topology_id != pair.layout.topology_id
    stranger = pair.start_source(other)
    assert stranger.wait_for_peers(2, threading.Event()) == {("127.0.0.1", pair.port)}, \
        "a worker of another topology is not a peer that listens"
    sender = stranger.senders[("127.0.0.1", pair.port)]
    wait_until(lambda: sender.refusal, 10, "the refusal reaching the stranger")
    assert other.topology_id in sender.refusal
    assert pair.delivered() == [], "nothing of another topology reaches user code"


def test_bytes_without_a_handshake_reach_no_user_code(pair: Pair) -> None:
    """A valid batch sent straight away, with no handshake naming the topology: refused, connection dropped."""
    raw = socket.create_connection(("127.0.0.1", pair.port))
    raw.sendall(encode(pair.sink_task, batch(pair.spout_task, "default", [("forged", -1)])))
    assert closed_by_peer(raw), "the connection is dropped"
    pair.start_source()
    wait_until(lambda: pair.delivered(), 10, "the real peer's tuples")
    assert ("forged", -1) not in pair.delivered()


def test_forged_runs_are_counted_and_never_reach_user_code(pair: Pair) -> None:
    """Runs that pass the wire format but not the topology: an unknown source task, a stream its component
    does not declare, rows wider than the stream's fields. Refused per run, counted by reason and logged
    once per interval; the connection and the runs after them are served."""
    peer = greeted(pair.port, pair.layout.topology_id)
    forged = [encode(pair.sink_task, batch(999, "default", [("a", 1)])),
              encode(pair.sink_task, batch(pair.spout_task, "nope", [("b", 2), ("b", 3)])),
              encode(pair.sink_task, batch(pair.spout_task, "default", [("c", 4, "extra")] * 3)),
              encode(pair.sink_task, batch(pair.spout_task, "default", [("d",)]))]
    with capture_logs() as logs:
        peer.sendall(b"".join(forged))
        peer.sendall(encode(pair.sink_task, batch(pair.spout_task, "default", [("valid", -1)])))
        wait_until(lambda: pair.delivered(), 10, "the valid run after the forged ones")
    assert pair.delivered() == [("valid", -1)], "only the valid run reaches the bolt"
    assert pair.sink.refused == {"unknown source task": 1, "undeclared stream": 2, "wrong width": 4}
    assert [e["reason"] for e in logs if e["event"] == "refused tuples from another worker"] == \
        ["unknown source task"], "logged once per interval, with how many were not"
    peer.close()


def test_an_idle_connection_is_closed_and_its_sender_reconnects_for_the_next_batch(sink: Sink) -> None:
    receiver = Receiver(sink, TOPOLOGY, "127.0.0.1", 0, idle_timeout=0.3).start()
    try:
        sender = Sender("127.0.0.1", receiver.port, TOPOLOGY)
        send(sender, [entry(1)])
        wait_until(lambda: len(sink.entries) == 1, what="the first batch")
        # counted before it is closed: wait for the close itself
        wait_until(lambda: receiver.counts["timed_out"] == 1 and receiver.connections == 0, 10,
                   "the idle connection closed by the receiver")
        send(sender, [entry(2)])
        wait_until(lambda: len(sink.entries) == 2, what="the batch after the idle timeout")
        assert [e.tuple_id for e in sink.entries] == [1, 2] and sender.dropped == 0
        sender.close()
    finally:
        receiver.stop()
