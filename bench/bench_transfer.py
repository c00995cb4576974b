"""Worker-to-worker transfer throughput over loopback TCP: one sender, one receiver, msgpack batches.

Not a test: prints a table. `python bench/bench_transfer.py [--tuples N]`.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from worker.transport import Receiver, Sender  # noqa: E402
from worker.wire import Entry  # noqa: E402


def run(tuples: int, batch_size: int) -> float:
    received = 0
    done = threading.Event()

    def on_batch(batch: list[Entry]) -> None:
        nonlocal received
        received += len(batch)
        if received >= tuples:
            done.set()

    receiver = Receiver(on_batch, "127.0.0.1", 0).start()
    sender = Sender("127.0.0.1", receiver.port, batch_size=batch_size)
    entries = [Entry(2, 1, "default", ("the quick brown fox", i), i, ((i, i + 1),)) for i in range(batch_size)]
    start = time.perf_counter()
    for _ in range(tuples // batch_size):
        sender.send(entries)
    done.wait(120)
    elapsed = time.perf_counter() - start
    sender.close()
    receiver.stop()
    return tuples / elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tuples", type=int, default=500_000)
    args = parser.parse_args()
    print(f"machine: {platform.platform()} ({platform.machine()}), {os.cpu_count()} cpus; "
          f"python {platform.python_implementation()} {platform.python_version()}")
    print(f"{'batch size':>10} {'tuples':>9} {'tuples/s':>12}")
    for batch in (10, 100, 1000):
        print(f"{batch:>10} {args.tuples:>9} {run(args.tuples, batch):>12,.0f}")


if __name__ == "__main__":
    main()
