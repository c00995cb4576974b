"""Batches between workers over real TCP on loopback: complete, ordered, batched, and robust to bad peers."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import msgpack
import pytest

from support import wait_until
from worker.transport import Receiver, Sender
from worker.wire import Decoder, Entry, WireError, encode


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
