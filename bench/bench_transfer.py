"""Worker-to-worker transfer throughput over loopback TCP: one sender, one receiver, msgpack batches.

Sender and receiver are threads of this process, so its CPU time (cpu.py) is the whole transfer's: encode, send,
receive, decode. Bytes per tuple are one full wire message's size over its tuples.

Not a test: prints a table. `python bench/bench_transfer.py [--tuples N]`.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from cpu import Run, Sample  # noqa: E402
from worker.transport import Receiver, Sender  # noqa: E402
from worker.wire import Entry, encode  # noqa: E402


def batch(size: int) -> list[Entry]:
    """Tracked tuples of a two-field string + int row, as a word count's split bolt sends them."""
    return [Entry(2, 1, "default", ("the quick brown fox", i), i, ((i, i + 1),)) for i in range(size)]


def run(tuples: int, batch_size: int) -> Run:
    tuples -= tuples % batch_size  # whole batches
    received = 0
    done = threading.Event()

    def on_batch(batch: list[Entry]) -> None:
        nonlocal received
        received += len(batch)
        if received >= tuples:
            done.set()

    receiver = Receiver(on_batch, "127.0.0.1", 0).start()
    sender = Sender("127.0.0.1", receiver.port, batch_size=batch_size)
    entries = batch(batch_size)
    if not sender.connected.wait(10):  # until then the sender queues a bounded backlog and drops the rest
        raise RuntimeError("the sender did not connect to the receiver within 10 s")
    start = Sample.take()
    for _ in range(tuples // batch_size):
        sender.send(entries)
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
    print(f"machine: {platform.platform()} ({platform.machine()}), {os.cpu_count()} cpus, load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
          f"python {platform.python_implementation()} {platform.python_version()}")
    print(f"{'batch size':>10} {'tuples':>9} {'tuples/s':>12} {'per CPU-s':>12} {'cores':>6} {'bytes/tuple':>12}")
    for size in (10, 100, 1000):
        result = run(args.tuples, size)
        print(f"{size:>10} {args.tuples:>9} {result.per_sec:>12,.0f} {result.per_cpu_sec:>12,.0f} {result.cores:>6.2f} "
              f"{len(encode(batch(size))) / size:>12.1f}")


if __name__ == "__main__":
    main()
