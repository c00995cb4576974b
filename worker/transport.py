"""TCP between workers: a receiving server and batching senders, one connection per remote worker.

Senders collect entries and ship them when ``batch_size`` are waiting or ``flush_interval`` has
passed since the first one (``topology.transfer.batch.size`` / ``topology.batch.flush.interval.millis``),
so the per-tuple cost of a syscall and an encode is spread over a batch. A broken or hostile peer
costs only its own connection.
"""

from __future__ import annotations

import contextlib
import hmac
import secrets
import select
import selectors
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable

import structlog

from squall.api.tuple import ColumnBatch, TupleBatch
from worker.handshake import NONCE_BYTES, Greeting, TransferRefused, answer, connect, transfer_proof
from worker.queues import Pressure, SendQueue
from worker.throttle import ErrorThrottle
from worker.wire import (
    MAX_MESSAGE_BYTES,
    MESSAGE_ROWS,
    THROTTLE_OFF,
    THROTTLE_ON,
    Decoder,
    WireError,
    encode_batches,
)

log = structlog.get_logger(__name__)

#: ``on_batch(target, batch)``: a batch another worker sent to its ``target`` task.
OnBatch = Callable[[int, ColumnBatch], None]


class Receiver:
    """Serves other workers' connections on one thread and hands every decoded batch to ``on_batch`` with its
    target task (see :class:`~worker.wire.Decoder`).

    One thread reads every connection (a selector), so a connection costs a socket and a small buffer,
    not a thread: 3,000 idle connections were 3,000 threads and ~220 MB on a thread per connection.
    Decoding and ``on_batch`` hold the GIL either way, so one thread loses no throughput.
    While ``pressure`` (its worker's) is high, no batch is handed on and every connection waits; each peer is told
    so at once (:data:`~worker.wire.THROTTLE_ON`, then :data:`~worker.wire.THROTTLE_OFF`), and holds its spouts
    meanwhile. Bounds, each closing the connection that hits it:

    * a connection must open with a handshake naming ``topology_id`` (:func:`worker.handshake.hello`)
      within ``handshake_timeout`` seconds; another topology's worker is told why and refused; with a
      ``secret`` (the topology's ``topology.transfer.secret``) the caller must also answer an HMAC challenge
      (see :mod:`worker.handshake`), and one that cannot is refused before any batch is read;
    * a connection with no data for ``idle_timeout`` seconds is closed (a sender finds out before its
      next write and reconnects);
    * at most ``max_connections`` are open; when full, a newcomer takes the slot of the oldest
      connection still owing its handshake, else of the longest idle one: a flood never locks a peer out;
    * bytes that are not valid batches (:class:`WireError`) drop their connection, never the worker.

    :attr:`counts` says how many connections ended each way.

        receiver = Receiver(on_batch, "words-1-1700000000", "0.0.0.0", 6700).start()
        receiver.stop()
    """

    def __init__(
        self,
        on_batch: OnBatch,
        topology_id: str,
        host: str = "0.0.0.0",
        port: int = 0,
        *,
        max_connections: int = 1024,
        handshake_timeout: float = 5.0,
        idle_timeout: float = 300.0,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
        secret: bytes | None = None,
        on_fatal: Callable[[BaseException], None] | None = None,
        pressure: Pressure | None = None,
        socket_buffer: int | None = None,
    ) -> None:
        self._on_batch = on_batch
        self._pressure = pressure
        self._secret = secret
        self._on_fatal = on_fatal
        self.topology_id = topology_id
        self._max = max_message_bytes
        self._max_connections = max_connections
        self._handshake_timeout = handshake_timeout
        self._idle_timeout = idle_timeout
        self._listener = socket.create_server((host, port), reuse_port=False)
        if socket_buffer is not None:  # accepted connections inherit it (and size their TCP window by it)
            self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, socket_buffer)
        self._listener.setblocking(False)
        self.port = self._listener.getsockname()[1]
        self._peers: dict[socket.socket, _Peer] = {}
        self._selector = selectors.DefaultSelector()
        self._wake_read, self._wake_write = socket.socketpair()
        self._buffer = memoryview(bytearray(RECEIVE_BYTES))  # every read lands here; the decoders copy what they keep
        self._closed = False
        #: Connections ended by cause: refused (bad, foreign or unauthenticated handshake), bad_data, timed_out,
        #: evicted.
        self.counts: Counter[str] = Counter()
        self._log_throttle = ErrorThrottle(1, LOG_INTERVAL_SECS)
        self._thread = threading.Thread(target=self._serve, name=f"transfer-recv-{self.port}", daemon=True)

    @property
    def connections(self) -> int:
        """Connections open right now (with and without their handshake)."""
        return len(self._peers)

    def start(self) -> Receiver:
        self._selector.register(self._listener, selectors.EVENT_READ, _ACCEPT)
        self._selector.register(self._wake_read, selectors.EVENT_READ, _WAKE)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop accepting, close every connection, end the thread."""
        self._closed = True
        with contextlib.suppress(OSError):  # the thread has already ended (and closed its end)
            self._wake_write.send(b"\0")
        self._thread.join(5)

    def _serve(self) -> None:
        sweep_every = min(self._handshake_timeout, self._idle_timeout, 4.0) / 4
        next_sweep = time.monotonic() + sweep_every
        try:
            while not self._closed:
                for key, _ in self._selector.select(sweep_every):
                    if key.data is _ACCEPT:
                        self._accept()
                    elif key.data is not _WAKE:
                        self._read(key.data)
                if (now := time.monotonic()) >= next_sweep:
                    self._sweep(now)
                    next_sweep = now + sweep_every
        except Exception as exc:  # a worker that cannot receive must not keep heartbeating: let it restart
            log.exception("the transfer receiver stopped", port=self.port)
            if self._on_fatal is not None:
                self._on_fatal(exc)
        finally:
            for peer in list(self._peers.values()):
                self._close(peer)
            self._selector.close()
            self._listener.close()
            self._wake_read.close()
            self._wake_write.close()

    def _accept(self) -> None:
        while True:
            try:
                conn, address = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # out of file descriptors, say: try again on the next event
                self._note("could not accept a worker connection", error=str(exc))
                return
            if len(self._peers) >= self._max_connections:
                self._make_room()
            conn.setblocking(False)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            peer = self._peers[conn] = _Peer(conn, address)
            self._selector.register(conn, selectors.EVENT_READ, peer)

    def _make_room(self) -> None:
        """Close the oldest connection still owing its handshake, else the longest idle one."""
        peers = self._peers.values()
        waiting = [p for p in peers if p.decoder is None] or list(peers)
        victim = min(waiting, key=lambda p: p.active)
        self.counts["evicted"] += 1
        self._note(
            "closed a worker connection to make room",
            peer=victim.name,
            limit=self._max_connections,
            greeted=victim.decoder is not None,
        )
        self._close(victim)

    def _read(self, peer: _Peer) -> None:
        try:
            size = peer.sock.recv_into(self._buffer)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            size = 0
        if not size:
            self._close(peer)
            return
        data = self._buffer[:size]
        peer.active = time.monotonic()
        try:
            if peer.decoder is None:
                self._greet(peer, data)
                return
            pressure = self._pressure
            for target, batch in peer.decoder.feed(data):
                if pressure is not None and pressure.high:
                    self._hold(pressure)
                self._on_batch(target, batch)
        except WireError as exc:
            self.counts["bad_data"] += 1
            self._note("dropping a worker connection: bad data", peer=peer.name, error=str(exc))
            self._close(peer)
        except Exception:
            log.exception("dropping a worker connection: its batch could not be handed on", peer=peer.name)
            self._close(peer)

    def _hold(self, pressure: Pressure) -> None:
        """Wait until the worker's backpressure is relieved (or this receiver stops), every peer told meanwhile."""
        self._tell_peers(THROTTLE_ON)
        while pressure.high and not self._closed:
            pressure.relieved.wait(HOLD_CHECK_SECS)
        self._tell_peers(THROTTLE_OFF)

    def _tell_peers(self, status: bytes) -> None:
        for peer in list(self._peers.values()):
            if peer.decoder is not None:
                self._send_or_close(peer, status)

    def _greet(self, peer: _Peer, data: bytes | memoryview) -> None:
        message = peer.greeting.feed(data)
        if message is None:
            return
        if peer.nonces is not None:  # the caller's answer to our challenge
            proof = message[2]
            # A challenge (the nonces) goes out only with a secret to check the answer by.
            expected = transfer_proof(self._secret, "caller", self.topology_id, *peer.nonces)  # type: ignore[arg-type]
            if not (type(proof) is bytes and hmac.compare_digest(proof, expected)):
                self._refuse(
                    peer,
                    "the topology's transfer secret was not proven",
                    "refused a worker connection that did not prove the topology's transfer secret",
                )
                return
            self._accept_peer(peer)
            return
        topology_id = message[2]
        if topology_id != self.topology_id:
            self._refuse(
                peer,
                f"this worker does not serve topology {topology_id!r}",
                "refused a connection from a worker of another topology",
                topology_id=topology_id,
            )
            return
        if self._secret is None:
            self._accept_peer(peer)
            return
        caller_nonce = message[3] if len(message) > 3 else None
        if type(caller_nonce) is not bytes or len(caller_nonce) < NONCE_BYTES:
            self._refuse(
                peer,
                "this topology's workers authenticate with its topology.transfer.secret and the "
                "caller offered no nonce",
                "refused a worker connection without authentication",
            )
            return
        peer.nonces = (caller_nonce, secrets.token_bytes(NONCE_BYTES))
        peer.greeting = Greeting()
        own = transfer_proof(self._secret, "receiver", self.topology_id, *peer.nonces)
        self._send_or_close(peer, answer(None, peer.nonces[1], own))

    def _accept_peer(self, peer: _Peer) -> None:
        if self._send_or_close(peer, answer(None)):
            peer.decoder = Decoder(self._max)

    def _refuse(self, peer: _Peer, reason: str, event: str, **details: object) -> None:
        self.counts["refused"] += 1
        self._note(event, peer=peer.name, **details)
        with contextlib.suppress(OSError):
            peer.sock.send(answer(reason))
        self._close(peer)

    def _send_or_close(self, peer: _Peer, message: bytes) -> bool:
        try:
            peer.sock.send(message)  # a few bytes into an empty send buffer: never blocks
            return True
        except OSError:
            self._close(peer)
            return False

    def _sweep(self, now: float) -> None:
        for peer in list(self._peers.values()):
            limit = self._idle_timeout if peer.decoder is not None else self._handshake_timeout
            if now - peer.active >= limit and not _has_data(peer.sock):
                self.counts["timed_out"] += 1
                self._note(
                    "closed an idle worker connection", peer=peer.name, greeted=peer.decoder is not None, secs=limit
                )
                self._close(peer)

    def _close(self, peer: _Peer) -> None:
        if self._peers.pop(peer.sock, None) is not None:
            self._selector.unregister(peer.sock)
        peer.sock.close()

    def _note(self, event: str, **details: object) -> None:
        """Log a connection event, at most once per interval: a flood makes thousands."""
        if self._log_throttle.allow(time.monotonic()):
            suppressed, self._log_throttle.suppressed = self._log_throttle.suppressed, 0
            log.warning(
                event, port=self.port, similar_events_not_logged=suppressed, counts=dict(self.counts), **details
            )


#: Selector keys of the listening socket and of the socket :meth:`Receiver.stop` wakes the thread with.
_ACCEPT, _WAKE = object(), object()
#: Connection events (refusals, timeouts, bad data) are logged at most once per this many seconds.
LOG_INTERVAL_SECS = 10.0
#: Status bytes a sender reads at once.
STATUS_READ_BYTES = 64
#: How often a receiver holding its connections for backpressure checks it has not been stopped.
HOLD_CHECK_SECS = 0.1
#: Bytes the receiver reads at once. Each read gives up the GIL and may wait a switch interval (5 ms) to get it
#: back from a busy task thread, so a read takes whatever has come meanwhile.
RECEIVE_BYTES = 1 << 20


class _Peer:
    """One connection as the receiver sees it: its handshake (and the nonces of its challenge, once sent), then
    its decoder; when it last sent."""

    __slots__ = ("sock", "name", "greeting", "nonces", "decoder", "active")

    def __init__(self, sock: socket.socket, address: tuple[str, int]) -> None:
        self.sock = sock
        self.name = f"{address[0]}:{address[1]}"
        self.greeting = Greeting()
        self.nonces: tuple[bytes, bytes] | None = None
        self.decoder: Decoder | None = None
        self.active = time.monotonic()


def _has_data(sock: socket.socket) -> bool:
    """Bytes are waiting on ``sock`` (so it is not idle, whatever the clock says)."""
    try:
        return bool(sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT))
    except OSError:
        return False


class Sender:
    """Writes the tuple batches of one :class:`~worker.queues.SendQueue` (for the tasks of one remote worker) on one
    connection, as messages of up to :data:`~worker.wire.MESSAGE_ROWS` rows and ``max_message_bytes`` bytes (see
    :mod:`worker.wire`): when ``batch_size`` tuples are queued, or ``flush_interval`` after the first.

    It connects as soon as it is created, retrying until the peer listens and accepts the handshake
    for ``topology_id`` (:attr:`connected` tells when it has, and ``on_connected`` is called; a peer of
    another topology leaves the reason in :attr:`refusal`), so a worker can hold its spouts until every
    peer is reachable; with a ``secret`` it proves the topology's transfer secret and wants the peer to prove it
    too (see :mod:`worker.handshake`). Until then its queue holds at most ``max_pending`` tuples; a broken
    connection is re-opened on the next batch, and a batch that cannot be delivered is dropped, as is a
    tuple msgpack cannot carry or too large for one message. A dropped tuple is replayed by its spout
    after the message timeout, as in Storm; :attr:`dropped` counts them.

        sender = Sender("10.0.0.7", 6701, "words-1-1700000000", batch_size=100)
        sender.queue.put(target_task, [batch])     # a TupleBatch for a task of the peer worker
        sender.close()      # flush what is queued, then close
        sender.discard()    # or: the peer left the assignment, drop what is queued and stop now
    """

    #: Pause between attempts to reach a peer that is not listening yet.
    RETRY_SECS = 0.1
    #: After this long without writing, check the peer has not hung up (an idle timeout) before writing.
    CHECK_AFTER_SECS = 0.05
    #: Longest the sender thread sleeps with nothing queued (a queued batch or close wakes it at once).
    IDLE_SECS = 1.0
    #: Longest it sleeps while the peer holds this worker's spouts: how late it sees the peer let go.
    THROTTLED_IDLE_SECS = 0.005

    def __init__(
        self,
        host: str,
        port: int,
        topology_id: str,
        *,
        batch_size: int = 100,
        flush_interval: float = 0.001,
        connect_timeout: float = 5.0,
        max_pending: int = 100_000,
        secret: bytes | None = None,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
        on_connected: Callable[[], None] = lambda: None,
        socket_buffer: int | None = None,
    ) -> None:
        self.address = (host, port)
        self._secret = secret
        self.topology_id = topology_id
        self.connected = threading.Event()
        #: What the worker's task threads put batches for the peer's tasks in.
        self.queue = SendQueue(max_pending, batch_size, self.connected)
        #: Why the peer last refused the handshake (it serves another topology, say); None if it never did.
        self.refusal: str | None = None
        #: The peer's receiver holds this connection (its worker is backpressured): this worker's spouts wait.
        self.throttled = False
        self._last_write = 0.0
        self._on_connected = on_connected
        self._batch_size = batch_size
        self._flush_interval = flush_interval
        self._connect_timeout = connect_timeout
        self._max_bytes = max_message_bytes
        self._socket_buffer = socket_buffer
        self._sock: socket.socket | None = None
        self._thread = threading.Thread(target=self._run, name=f"transfer-send-{host}:{port}", daemon=True)
        self._thread.start()

    @property
    def dropped(self) -> int:
        """Tuples given up on: queued while the peer was unreachable and over the bound, undeliverable, or too big."""
        return self.queue.dropped

    def close(self, timeout: float = 5.0) -> None:
        """Flush what is queued, then close."""
        self.queue.close()
        self._thread.join(timeout)

    def discard(self) -> int:
        """Stop now without sending what is queued (the peer left the assignment); how many tuples that dropped.

        It does not wait for the sender thread, which may still be trying to reach the peer: it ends on its own.
        """
        return self.queue.discard()

    def _run(self) -> None:
        self._reach_peer()
        queue = self.queue
        wake = queue.wake
        while True:
            wake.clear()  # before looking: a batch queued from now on sets it again
            self._read_status()
            backlog, closing = queue.backlog, queue.closed
            if not backlog and not closing:
                wake.wait(self.THROTTLED_IDLE_SECS if self.throttled else self.IDLE_SECS)
                continue
            if backlog < self._batch_size and not closing:
                wake.wait(self._flush_interval)  # let a batch fill up, briefly (a full one or close ends it)
            batches, closing = queue.take()
            if batches:
                self._write(batches)
            if closing and not queue.backlog:
                if self._sock is not None:
                    self._sock.close()
                return

    def _reach_peer(self) -> None:
        next_try = 0.0
        queue = self.queue
        while not queue.closed:
            try:
                self._connect()
                return
            except TransferRefused as exc:
                if str(exc) != self.refusal:
                    log.warning("a worker refused this worker's connection", address=self.address, reason=str(exc))
                    self.refusal = str(exc)
            except OSError:
                pass
            next_try = time.monotonic() + self.RETRY_SECS
            while not queue.closed and (wait := next_try - time.monotonic()) > 0:
                queue.wake.wait(wait)
                queue.wake.clear()

    def _connect(self) -> socket.socket:
        """Connect and handshake (within ``connect_timeout``); OSError, or :class:`TransferRefused`, if not."""
        sock = connect(self.address, self.topology_id, self._secret, self._connect_timeout, self._socket_buffer)
        self._sock = sock
        self.throttled = False  # a new connection: the peer says so again if it holds it
        self.connected.set()
        self._on_connected()
        return sock

    def _send_all(self, sock: socket.socket, data: bytes) -> None:
        """``sendall``, taking in the peer's status while its socket is full: a peer that stops reading because its
        worker is backpressured says so, and this worker's spouts must hold while the write waits."""
        view = memoryview(data)
        while view:
            try:
                view = view[sock.send(view, socket.MSG_DONTWAIT) :]
                continue
            except (BlockingIOError, InterruptedError):
                pass
            poller = select.poll()  # not select(): a worker's sockets may be numbered past FD_SETSIZE
            poller.register(sock, select.POLLIN | select.POLLOUT)
            if any(events & select.POLLIN for _, events in poller.poll()) and not self._read_status():
                raise ConnectionResetError("the peer closed the connection")

    def _read_status(self) -> bool:
        """Take in what the peer wrote back since the handshake: its backpressure status, the last byte counting.
        False if the peer has closed the connection (left to the next write, which reconnects)."""
        sock = self._sock
        while sock is not None:
            try:
                data = sock.recv(STATUS_READ_BYTES, socket.MSG_DONTWAIT)
            except OSError:  # nothing more now (or a broken connection, which the next write finds)
                return True
            if not data:
                return False
            self.throttled = data[-1:] == THROTTLE_ON
            if len(data) < STATUS_READ_BYTES:
                return True
        return True

    def _write(self, batch: list[tuple[int, TupleBatch]]) -> None:
        data = self._encode(batch)
        now = time.monotonic()
        if self._sock is not None and now - self._last_write > self.CHECK_AFTER_SECS and _hung_up(self._sock):
            self._sock.close()  # the peer closed an idle connection: a write would vanish, so reconnect first
            self._sock = None
        self._last_write = now
        for attempt in (1, 2):
            try:
                self._send_all(self._sock if self._sock is not None else self._connect(), data)
                return
            except OSError as exc:
                self.connected.clear()
                if self._sock is not None:
                    self._sock.close()
                self._sock = None
                if attempt == 2:
                    self.queue.count_dropped(sum(map(len, batch)))
                    log.warning(
                        "dropping a batch: remote worker unreachable",
                        address=self.address,
                        tuples=sum(map(len, batch)),
                        error=str(exc),
                    )

    def _encode(self, batches: list[tuple[int, TupleBatch]]) -> bytes:
        """The batches as wire messages of at most :data:`MESSAGE_ROWS` rows (``batch_size`` if larger); a row
        that cannot travel is dropped (and logged), not its batch."""
        data, refused = encode_batches(batches, max(self._batch_size, MESSAGE_ROWS), self._max_bytes)
        for batch, error in refused:
            self.queue.count_dropped(1)
            log.error(
                "dropping a tuple that cannot travel between workers",
                stream=batch.stream,
                source_task=batch.task,
                error=str(error),
            )
        return data


def _hung_up(sock: socket.socket) -> bool:
    """The peer has closed ``sock`` (after the handshake it sends only status bytes, which the sender reads before
    this check, so readable means closed)."""
    try:
        return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except (BlockingIOError, InterruptedError):
        return False
    except OSError:
        return True
