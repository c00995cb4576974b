"""TCP between workers: a receiving server and batching senders, one connection per remote worker.

Senders collect entries and ship them when ``batch_size`` are waiting or ``flush_interval`` has
passed since the first one (``topology.transfer.batch.size`` / ``topology.batch.flush.interval.millis``),
so the per-tuple cost of a syscall and an encode is spread over a batch. A broken or hostile peer
costs only its own connection.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Sequence

import structlog

from worker.wire import MAX_MESSAGE_BYTES, Decoder, Entry, WireBatch, WireError, runs_of_entries

log = structlog.get_logger(__name__)

OnBatch = Callable[[WireBatch], None]


class Receiver:
    """Accepts worker connections and hands every decoded run to ``on_batch`` (on the connection's thread):
    a :class:`WireBatch`, whose iteration gives :class:`Entry` rows and whose columns the runtime reads."""

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
    """Batches tuples for one remote worker and writes them on one connection, one message per run of
    tuples with equal (target, source, stream) (see :mod:`worker.wire`).

    It connects as soon as it is created, retrying until the peer listens (:attr:`connected` tells
    when it has, and ``on_connected`` is called), so a worker can hold its spouts until every peer is
    reachable. Until then it queues at most ``max_pending`` entries and drops the rest; a broken
    connection is re-opened on the next batch, and a batch that cannot be delivered is dropped. A
    dropped tuple is replayed by its spout after the message timeout, as in Storm; :attr:`dropped`
    counts them.

        sender = Sender("10.0.0.7", 6701, batch_size=100)
        sender.send([Entry(target_task, source_task, "default", values, tuple_id, anchors)])
        sender.send_runs([WireBatch(target_task, source_task, "default", rows)])   # the same, by columns
        sender.close()      # flush what is queued, then close
        sender.discard()    # or: the peer left the assignment, drop what is queued and stop now
    """

    #: Pause between attempts to reach a peer that is not listening yet.
    RETRY_SECS = 0.1

    def __init__(self, host: str, port: int, *, batch_size: int = 100, flush_interval: float = 0.001,
                 connect_timeout: float = 5.0, max_pending: int = 100_000,
                 on_connected: Callable[[], None] = lambda: None) -> None:
        self.address = (host, port)
        self.connected = threading.Event()
        self.dropped = 0
        self._on_connected = on_connected
        self._batch_size = batch_size
        self._flush_interval = flush_interval
        self._connect_timeout = connect_timeout
        self._max_pending = max_pending
        self._pending: list[WireBatch] = []
        self._backlog = 0
        self._cond = threading.Condition()
        self._sock: socket.socket | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=f"transfer-send-{host}:{port}", daemon=True)
        self._thread.start()

    @property
    def backlog(self) -> int:
        """Tuples queued and not yet written."""
        return self._backlog

    def send(self, entries: Sequence[Entry]) -> None:
        """Queue entries; the sender thread ships them in batches."""
        self.send_runs(runs_of_entries(entries))

    def send_runs(self, runs: Sequence[WireBatch]) -> None:
        """Queue runs (the sender owns them from now on: it may extend them); shipped in batches."""
        rows = sum(map(len, runs))
        with self._cond:
            if self._closed or (self._backlog >= self._max_pending and not self.connected.is_set()):
                self.dropped += rows  # closed, or a peer not reachable yet: do not grow without bound
                return
            was_empty = not self._backlog
            pending = self._pending
            for run in runs:
                last = pending[-1] if pending else None
                if (last is not None and last.target == run.target and last.source == run.source
                        and last.stream == run.stream):
                    last.extend(run)
                else:
                    pending.append(run)
            self._backlog += rows
            if was_empty or self._backlog >= self._batch_size:  # start the flush clock, or ship now
                self._cond.notify()

    def close(self, timeout: float = 5.0) -> None:
        """Flush what is queued, then close."""
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join(timeout)

    def discard(self) -> int:
        """Stop now without sending what is queued (the peer left the assignment); how many entries that dropped.

        It does not wait for the sender thread, which may still be trying to reach the peer: it ends on its own.
        """
        with self._cond:
            dropped, self._pending, self._backlog = self._backlog, [], 0
            self.dropped += dropped
            self._closed = True
            self._cond.notify()
        return dropped

    def _run(self) -> None:
        self._reach_peer()
        while True:
            with self._cond:
                if not self._pending and not self._closed:
                    self._cond.wait()
                if self._pending and self._backlog < self._batch_size and not self._closed:
                    self._cond.wait(self._flush_interval)  # let a batch fill up, briefly
                batch, self._pending, self._backlog = self._pending, [], 0
                closing = self._closed
            if batch:
                self._write(batch)
            if closing and not self._pending:
                if self._sock is not None:
                    self._sock.close()
                return

    def _reach_peer(self) -> None:
        next_try = 0.0
        while not self._closed:
            try:
                self._connect()
                return
            except OSError:
                next_try = time.monotonic() + self.RETRY_SECS
            with self._cond:
                while not self._closed and (wait := next_try - time.monotonic()) > 0:
                    self._cond.wait(wait)

    def _connect(self) -> None:
        sock = socket.create_connection(self.address, timeout=self._connect_timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(None)
        self._sock = sock
        self.connected.set()
        self._on_connected()

    def _write(self, batch: list[WireBatch]) -> None:
        data = self._encode(batch)
        for attempt in (1, 2):
            try:
                if self._sock is None:
                    self._connect()
                self._sock.sendall(data)  # type: ignore[union-attr]
                return
            except OSError as exc:
                self.connected.clear()
                if self._sock is not None:
                    self._sock.close()
                self._sock = None
                if attempt == 2:
                    with self._cond:
                        self.dropped += sum(map(len, batch))
                    log.warning("dropping a batch: remote worker unreachable", address=self.address,
                                tuples=sum(map(len, batch)), error=str(exc))

    def _encode(self, batch: list[WireBatch]) -> bytes:
        """The runs in wire messages of at most ``batch_size`` rows; a row whose values msgpack cannot
        carry is dropped, not its batch."""
        size = self._batch_size
        try:
            return b"".join(run.encode(size) for run in batch)
        except WireError:
            pass
        good = []
        for run in batch:
            try:
                good.append(run.encode(size))
                continue
            except WireError:
                pass
            for i in range(len(run)):
                row = run[i]
                try:
                    good.append(row.encode())
                except WireError as exc:
                    log.error("dropping a tuple that cannot travel between workers", stream=run.stream,
                              source_task=run.source, error=str(exc))
        return b"".join(good)
