"""TCP between workers: a receiving server and batching senders, one connection per remote worker.

Senders collect entries and ship them when ``batch_size`` are waiting or ``flush_interval`` has
passed since the first one (``topology.transfer.batch.size`` / ``topology.batch.flush.interval.millis``),
so the per-tuple cost of a syscall and an encode is spread over a batch. A broken or hostile peer
costs only its own connection.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Sequence

import structlog

from worker.wire import MAX_MESSAGE_BYTES, Decoder, Entry, WireError, encode

log = structlog.get_logger(__name__)

OnBatch = Callable[[list[Entry]], None]


class Receiver:
    """Accepts worker connections and hands every decoded batch to ``on_batch`` (on the connection's thread)."""

    def __init__(self, on_batch: OnBatch, host: str = "0.0.0.0", port: int = 0,
                 max_message_bytes: int = MAX_MESSAGE_BYTES) -> None:
        self._on_batch = on_batch
        self._max = max_message_bytes
        self._listener = socket.create_server((host, port), reuse_port=False)
        self.port = self._listener.getsockname()[1]
        self._closed = False
        self._connections: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._accept, name=f"transfer-accept-{self.port}", daemon=True)

    def start(self) -> "Receiver":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._closed = True
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=1).close()  # wake accept()
        except OSError:
            pass
        self._listener.close()
        with self._lock:
            for conn in list(self._connections):
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        self._thread.join(5)

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                if self._closed:
                    return
                continue
            if self._closed:
                conn.close()
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._connections.add(conn)
            threading.Thread(target=self._serve, args=(conn,), name="transfer-recv", daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        decoder = Decoder(self._max)
        try:
            while chunk := conn.recv(1 << 16):
                for batch in decoder.feed(chunk):
                    self._on_batch(batch)
        except WireError as exc:
            log.warning("dropping worker connection: bad data", error=str(exc))
        except OSError:
            pass
        finally:
            with self._lock:
                self._connections.discard(conn)
            conn.close()


class Sender:
    """Batches entries for one remote worker and writes them on one connection (reconnecting as needed)."""

    def __init__(self, host: str, port: int, *, batch_size: int = 100, flush_interval: float = 0.001,
                 connect_timeout: float = 5.0) -> None:
        self.address = (host, port)
        self._batch_size = batch_size
        self._flush_interval = flush_interval
        self._connect_timeout = connect_timeout
        self._pending: list[Entry] = []
        self._cond = threading.Condition()
        self._sock: socket.socket | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=f"transfer-send-{host}:{port}", daemon=True)
        self._thread.start()

    def send(self, entries: Sequence[Entry]) -> None:
        """Queue entries; the sender thread ships them in batches."""
        with self._cond:
            was_empty = not self._pending
            self._pending.extend(entries)
            if was_empty or len(self._pending) >= self._batch_size:  # start the flush clock, or ship now
                self._cond.notify()

    def close(self, timeout: float = 5.0) -> None:
        """Flush what is queued, then close."""
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                if not self._pending and not self._closed:
                    self._cond.wait()
                if self._pending and len(self._pending) < self._batch_size and not self._closed:
                    self._cond.wait(self._flush_interval)  # let a batch fill up, briefly
                batch, self._pending = self._pending, []
                closing = self._closed
            if batch:
                self._write(batch)
            if closing and not self._pending:
                if self._sock is not None:
                    self._sock.close()
                return

    def _write(self, batch: list[Entry]) -> None:
        try:
            data = b"".join(encode(batch[i:i + self._batch_size]) for i in range(0, len(batch), self._batch_size))
        except WireError as exc:  # executors check values at emit; this only guards the thread
            log.error("dropping a batch that cannot be encoded", address=self.address, error=str(exc))
            return
        for attempt in (1, 2):
            try:
                if self._sock is None:
                    self._sock = socket.create_connection(self.address, timeout=self._connect_timeout)
                    self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    self._sock.settimeout(None)
                self._sock.sendall(data)
                return
            except OSError as exc:
                if self._sock is not None:
                    self._sock.close()
                self._sock = None
                if attempt == 2:
                    # unacked tuples are replayed by their spouts after the message timeout
                    log.warning("dropping a batch: remote worker unreachable", address=self.address,
                                tuples=len(batch), error=str(exc))
