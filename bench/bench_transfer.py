"""Worker-to-worker transfer throughput over loopback TCP: one sender, one receiver, msgpack batches.

Not a test: prints two tables. `python bench/bench_transfer.py [--tuples N]`. The first is the codec alone,
in process, per tuple from what a task thread hands over to what a bolt's executor receives: ``old`` is
the entry-list wire of earlier Squall, Tuples in and out (kept here only to compare), ``new`` the
columnar batches, from a :class:`~squall.api.tuple.TupleBatch` to the :class:`~squall.api.tuple.ColumnBatch` a bolt
receives (no Tuple per row), which keeps the wire's columns until something reads its rows: "+ rows" is what
building them costs a bolt that reads the values. The second is the loopback transfer; sender and receiver
are threads of this process, so its CPU time (cpu.py) is the whole transfer's: encode, send, receive, decode.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import msgpack

from cpu import Run, Sample
from squall.api.tuple import NO_ANCHORS, ColumnBatch, Fields, Tuple, TupleBatch
from worker.transport import Receiver, Sender
from worker.wire import MAX_MESSAGE_BYTES, Decoder, encode

FIELDS = Fields(["line", "n"])


def old_send(target: int, batch: list[Tuple]) -> bytes:
    """The entry-list wire: an Entry per tuple, one ``[1, entries]`` message."""
    return msgpack.packb(
        [
            1,
            [
                (target, t._task, t._stream, t._values, t._id, tuple(t._anchors.items()) if t._anchors else ())
                for t in batch
            ],
        ]
    )


def old_receive(data: bytes) -> list[Tuple]:
    unpacker = msgpack.Unpacker(raw=False, max_buffer_size=MAX_MESSAGE_BYTES, strict_map_key=False)
    unpacker.feed(data)
    out = []
    for _, entries in unpacker:
        for _target, source, stream, values, tuple_id, anchors in entries:
            out.append(
                Tuple(
                    tuple(values), FIELDS, "spout", stream, source, tuple_id, dict(anchors) if anchors else NO_ANCHORS
                )
            )
    return out


def new_send(target: int, batch: TupleBatch) -> bytes:
    return encode(target, batch)


def new_receive(data: bytes) -> list[ColumnBatch]:
    received = [batch for _, batch in Decoder().feed(data)]
    for batch in received:  # as the receiving worker does once it has checked the batch
        batch.component, batch.fields = "spout", FIELDS
    return received


def spout_batch(batch_size: int, tracked: bool) -> TupleBatch:
    """A spout task's batch of one stream, as its executor builds it (tracked: one root per row)."""
    rows = [("the quick brown fox", i) for i in range(batch_size)]
    if not tracked:
        return TupleBatch(rows, FIELDS, "spout", "default", 1)
    return TupleBatch(
        rows, FIELDS, "spout", "default", 1, [i + 1 for i in range(batch_size)], [i * 7 + 1 for i in range(batch_size)]
    )


def codec(send, receive, tracked: bool, batch_size: int, tuples: int) -> tuple[float, float, float, float]:
    """CPU µs per tuple to encode, to decode, and to build the rows a bolt reads (the new codec's batches keep
    the wire's columns until then); bytes per tuple."""
    columns = spout_batch(batch_size, tracked)
    batch = list(columns) if send is old_send else columns
    rounds = max(1, tuples // batch_size)
    start = time.process_time()
    for _ in range(rounds):
        data = send(2, batch)
    sent = time.process_time()
    for _ in range(rounds):
        got = receive(data)
    done = time.process_time()
    for _ in range(rounds if send is new_send else 0):
        for received in receive(data):
            _ = received.rows  # the property builds them: the time measured
    read = time.process_time()
    if send is new_send:
        got = [t for received in got for t in received]
    assert [(t._values, t._id, dict(t._anchors)) for t in got] == [
        (t._values, t._id, dict(t._anchors)) for t in columns
    ], "the codec must round-trip"
    per = 1e6 / (rounds * batch_size)
    return (
        (sent - start) * per,
        (done - sent) * per,
        max(0.0, (read - done) - (done - sent)) * per,
        len(data) / batch_size,
    )


def run(tuples: int, batch_size: int) -> Run:
    tuples -= tuples % batch_size  # whole batches
    received = 0
    done = threading.Event()

    def on_batch(target: int, batch: TupleBatch) -> None:
        nonlocal received
        received += len(batch)
        if received >= tuples:
            done.set()

    receiver = Receiver(on_batch, "bench-1-1", "127.0.0.1", 0).start()
    sender = Sender("127.0.0.1", receiver.port, "bench-1-1", batch_size=batch_size)
    if not sender.connected.wait(10):  # until then the sender queues a bounded backlog and drops the rest
        raise RuntimeError("the sender did not connect to the receiver within 10 s")
    batch = spout_batch(batch_size, tracked=True)
    assert batch.ids is not None and batch.roots is not None, "a tracked batch"
    start = Sample.take()
    for _ in range(tuples // batch_size):  # what a task thread hands a send queue (which may extend it: a fresh one)
        sender.queue.put(
            2, [TupleBatch(list(batch.rows), FIELDS, "spout", "default", 1, list(batch.ids), list(batch.roots))]
        )
    done.wait(120)
    end = Sample.take()
    sender.close()
    receiver.stop()
    if sender.dropped or received < tuples:
        raise RuntimeError(f"received {received:,} of {tuples:,} tuples ({sender.dropped:,} dropped by the sender)")
    return start.run_to(end, received)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tuples", type=int, default=500_000)
    args = parser.parse_args()
    print(
        f"machine: {platform.platform()} ({platform.machine()}), {os.cpu_count()} cpus, load average "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
        f"python {platform.python_implementation()} {platform.python_version()}"
    )
    print(
        f"{'codec':>6} {'kind':>9} {'batch':>6} {'send CPU µs':>12} {'receive CPU µs':>15} {'+ rows CPU µs':>14} "
        f"{'bytes/tuple':>12}"
    )
    for tracked in (False, True):
        for name, send, receive in (("old", old_send, old_receive), ("new", new_send, new_receive)):
            for size in (100, 1000) if name == "new" else (100,):
                enc, dec, rows, nbytes = codec(send, receive, tracked, size, args.tuples)
                kind = "acked" if tracked else "plain"
                print(f"{name:>6} {kind:>9} {size:>6} {enc:>12.2f} {dec:>15.2f} {rows:>14.2f} {nbytes:>12.1f}")
    print(f"{'batch size':>10} {'tuples':>9} {'tuples/s':>12} {'per CPU-s':>12} {'cores':>6}")
    for size in (10, 100, 1000):
        result = run(args.tuples, size)
        print(f"{size:>10} {args.tuples:>9} {result.per_sec:>12,.0f} {result.per_cpu_sec:>12,.0f} {result.cores:>6.2f}")


if __name__ == "__main__":
    main()
