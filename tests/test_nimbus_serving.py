"""A real nimbus process under a connection flood and an oversized streamed message.

What an operator sees: ``storm list`` still answers at once while idle and one-byte-a-second clients hold
as many connections as nimbus has handler threads, and a message declaring a 2 GB string streamed as 1 MB
frames is refused without nimbus's memory growing with it.
"""

from __future__ import annotations

import json
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from squall.cli.main import main
from support import listening_port, start_nimbus, wait_until

HOST = "127.0.0.1"


@pytest.fixture
def nimbus(zk_conf: dict[str, Any], tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """A leading nimbus process and its port."""
    process = start_nimbus(zk_conf, tmp_path / "nimbus")
    try:
        port = wait_until(lambda: listening_port(tmp_path / "nimbus.log"), 30, "nimbus to start")
        wait_until(lambda: _cli(zk_conf, port, "list") == 0, 30, "nimbus to lead")
        yield process, port
    finally:
        process.kill()
        process.wait(10)


def _cli(zk_conf: dict[str, Any], port: int, *argv: str) -> int:
    """``storm -c nimbus.seeds=[...] ARGV`` as a user types it, run in this process."""
    conf = {"nimbus.seeds": [f"{HOST}:{port}"], "squall.log.format": "json",
            **{k: zk_conf[k] for k in ("storm.zookeeper.servers", "storm.zookeeper.port", "storm.zookeeper.root")}}
    return main([arg for key, value in conf.items() for arg in ("-c", f"{key}={json.dumps(value)}")] + list(argv))


class SlowClients:
    """Clients that each send a well-formed frame header, then one byte of the frame every ``interval`` seconds."""

    def __init__(self, port: int, count: int, interval: float = 1.0) -> None:
        self.socks = [socket.create_connection((HOST, port), timeout=5) for _ in range(count)]
        self._stop = threading.Event()
        self._interval = interval
        for sock in self.socks:
            sock.sendall(struct.pack("!i", 100_000))  # a frame that would take a day to arrive
        self._thread = threading.Thread(target=self._drip, daemon=True)
        self._thread.start()

    def _drip(self) -> None:
        while not self._stop.wait(self._interval):
            for sock in self.socks:
                try:
                    sock.send(b"\x80")
                except OSError:
                    pass  # nimbus gave up on it, as it should

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for sock in self.socks:
            sock.close()


def test_storm_list_answers_within_a_second_through_a_flood(zk_conf: dict[str, Any], nimbus: Any,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    _, port = nimbus
    threads = zk_conf["nimbus.thrift.threads"]
    idle = [socket.create_connection((HOST, port), timeout=5) for _ in range(threads + 8)]
    slow = SlowClients(port, threads)
    try:
        for attempt in range(3):  # every try, not only the first, gets through
            capsys.readouterr()
            started = time.monotonic()
            assert _cli(zk_conf, port, "list") == 0, f"try {attempt}: {capsys.readouterr()}"
            elapsed = time.monotonic() - started
            assert elapsed < 1.0, f"try {attempt}: storm list took {elapsed:.2f} s through the flood"
            assert "No topologies running." in capsys.readouterr().out
    finally:
        slow.close()
        for sock in idle:
            sock.close()


def _message_declaring_a_huge_string(frame_bytes: int) -> bytes:
    """A ``getTopologyInfo`` call whose id argument declares 2**31-1 bytes, padded to one whole frame."""
    name = b"getTopologyInfo"
    head = (struct.pack("!iI", -2147418111, len(name)) + name  # strict binary: VERSION_1 | CALL
            + struct.pack("!i", 1)  # seqid
            + struct.pack("!bhi", 11, 1, 2**31 - 1))  # field 1, a string of 2 GB
    return head + b"x" * (frame_bytes - len(head))


def test_a_message_streamed_past_the_cap_is_refused_with_memory_bounded(zk_conf: dict[str, Any], nimbus: Any) -> None:
    process, port = nimbus
    frame = zk_conf["nimbus.thrift.max_buffer_size"]
    rss_before = psutil.Process(process.pid).memory_info().rss
    first = _message_declaring_a_huge_string(frame)
    filler = struct.pack("!i", frame) + b"y" * frame
    sent, refused = 0, False
    with socket.create_connection((HOST, port), timeout=10) as sock:
        try:
            sock.sendall(struct.pack("!i", frame) + first)
            for _ in range(400):  # nimbus should hang up long before 400 MB have gone through
                sock.sendall(filler)
                sent += len(filler)
            refused = sock.recv(1) == b""
        except (BrokenPipeError, ConnectionResetError):
            refused = True
        except TimeoutError:
            pass  # nimbus neither reads on nor hangs up: it is stuck on the message
    assert refused, f"nimbus read {sent >> 20} MiB of one message and kept the connection"
    growth = psutil.Process(process.pid).memory_info().rss - rss_before
    assert growth < 32 * 2**20, f"nimbus grew by {growth >> 20} MiB reading one refused message ({sent >> 20} MiB sent)"
    assert _cli(zk_conf, port, "list") == 0, "nimbus still serves"
