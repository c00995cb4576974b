"""Nimbus's Thrift server: one event loop reads and writes every connection, a pool of threads runs calls,
every connection and request bounded (:class:`ThriftServer`).

Two things thriftpy2 does not do by itself: a request's frame is size-capped before any memory is set aside
for it, and a handler bug reaches the caller as ``TApplicationException(INTERNAL_ERROR)`` instead of a
dropped socket. A call's handler learns who made it from :func:`client_host` and :func:`client_principal`.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import socket
import ssl
import struct
import threading
import time
import types
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import structlog
from thriftpy2.protocol import TBinaryProtocolFactory

# Requests are decoded in pure Python: it never reads past the bytes it was given, where the Cython protocol
# allocates whatever length a string declares (2 GB from a 100-byte frame).
from thriftpy2.protocol.binary import TBinaryProtocol as _SafeBinaryProtocol
from thriftpy2.protocol.exc import TProtocolException
from thriftpy2.thrift import TApplicationException, TMessageType, TProcessor
from thriftpy2.transport import TMemoryBuffer, TTransportException

from squall.core.thrift import DEFAULT_PORT, storm
from squall.core.thrift.transport import (
    DEFAULT_MAX_FRAME_BYTES,
    FrameSizeError,
    check_frame_cap,
    check_timeout,
    describe,
    frame_refusal,
)
from squall.core.tls import principal as tls_principal

__all__ = [
    "DEFAULT_REQUEST_TIMEOUT_MS",
    "ThriftServer",
    "client_host",
    "client_principal",
    "listening_socket",
    "make_server",
    "pick_eviction",
]

log = structlog.get_logger(__name__)

DEFAULT_REQUEST_TIMEOUT_MS = 30_000  # nimbus.thrift.request.timeout.ms: one whole call must arrive within it


class _GuardedProcessor(TProcessor):
    """A processor whose failures stay inside the reply.

    thriftpy2 re-raises any exception the IDL does not declare, which closes the connection and
    leaves the client with "TSocket read 0 bytes". Java Thrift servers answer
    ``TApplicationException(INTERNAL_ERROR)`` instead and keep the connection; so do we. Replies
    are encoded into memory first, so a handler returning a value of the wrong type also becomes
    INTERNAL_ERROR rather than a half-written frame.
    """

    def __init__(self, service: types.ModuleType, handler: object, proto_factory: Any) -> None:
        super().__init__(service, handler)
        self._proto_factory = proto_factory

    def process(self, iprot: Any, oprot: Any) -> None:
        api, seqid, result, call = self.process_in(iprot)
        if call is None:  # an unknown method name: the result is the TApplicationException to send
            return self.send_exception(oprot, api, result, seqid)
        if not callable(getattr(self._handler, api, None)):
            error = TApplicationException(
                TApplicationException.UNKNOWN_METHOD, f"{api} is not implemented by this server"
            )
            return self.send_exception(oprot, api, error, seqid)
        try:
            result.success = call()
        except TApplicationException as exc:
            return self.send_exception(oprot, api, exc, seqid)
        except Exception as exc:
            if not self.handle_exception(exc, result):  # not declared in the IDL
                log.exception("undeclared error in thrift call", call=api)
                return self.send_exception(oprot, api, _internal_error(api, exc), seqid)
        if result.oneway:
            return None
        try:
            reply = self._encode_reply(api, result, seqid)
        except Exception as exc:
            log.exception("cannot encode thrift reply", call=api)
            return self.send_exception(oprot, api, _internal_error(api, exc), seqid)
        oprot.trans.write(reply)
        oprot.trans.flush()
        return None

    def _encode_reply(self, api: str, result: Any, seqid: int) -> bytes:
        buf = TMemoryBuffer()
        proto = self._proto_factory.get_protocol(buf)
        proto.write_message_begin(api, TMessageType.REPLY, seqid)
        result.write(proto)
        proto.write_message_end()
        return buf.getvalue()


def _internal_error(api: str, exc: BaseException) -> TApplicationException:
    # Same opening words as a Java server, plus the cause: an operator can act on the latter.
    return TApplicationException(
        TApplicationException.INTERNAL_ERROR, f"Internal error processing {api}: {describe(exc)}"
    )


def listening_socket(host: str, port: int) -> socket.socket:
    """A bound, listening, non-blocking socket without SO_REUSEPORT, for a server's event loop.

    thriftpy2 sets SO_REUSEPORT, which lets a second nimbus on the same host bind the same port and
    silently share connections with the first. Binding here, when a server is built (nimbus's Thrift
    server, the UI's HTTP server), also reports port 0's pick and any bind error to the caller instead
    of to a background thread.
    """
    family = socket.AF_INET6 if ":" in (host or "") else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(_BACKLOG)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


_BACKLOG = 128


class _Connection:
    """One client connection as the server's accept policy sees it: what it is doing, and since when."""

    __slots__ = ("peer", "phase", "since", "task", "writer")

    IDLE, READING, PROCESSING = "idle", "reading", "processing"

    def __init__(self, peer: str, writer: asyncio.StreamWriter) -> None:
        self.peer = peer
        self.writer = writer
        self.phase = self.IDLE
        self.since = time.monotonic()
        self.task: asyncio.Task[None] | None = None

    def enter(self, phase: str) -> None:
        self.phase, self.since = phase, time.monotonic()


def pick_eviction(connections: Sequence[_Connection]) -> _Connection | None:
    """Whom to hang up on so a new client gets in when every connection slot is taken.

    The connection idle the longest, else the one that has spent the longest sending its request; never one
    whose request is being processed (its reply is owed). None: every slot is mid-call, refuse the newcomer.
    So idle and slow clients can never lock anyone out: they only ever cost each other their slots.
    """
    for phase in (_Connection.IDLE, _Connection.READING):
        waiting = [c for c in connections if c.phase == phase]
        if waiting:
            return min(waiting, key=lambda c: c.since)
    return None


class ThriftServer:
    """Nimbus's Thrift server: one event loop reads and writes every connection, a pool of threads runs calls.

    This is the half-sync/half-async design of Storm's nimbus (Thrift's ``THsHaServer``), chosen over
    thread-per-connection because there a client holds a thread for as long as it keeps its socket
    open: ``nimbus.thrift.threads`` idle or one-byte-a-second clients took every thread and locked
    ``storm list`` and supervisors out. Here a connection costs a socket and a buffer until a
    whole request has arrived; only then does a thread run it. Measured on this machine (2 shared cores,
    client in another process): 2,000 sequential ``getLeader`` calls took 0.16-0.25 ms each on
    thread-per-connection and 0.55-0.59 ms here (the hop to the pool and back; nimbus's calls are few
    and far slower than that); 1,000 idle connections cost 1,000 threads and +37 MiB there, no thread
    and +6 MiB here. thriftpy2's own asyncio server was not used: it wants ``async`` handlers (nimbus's are
    blocking ZooKeeper code) and its framed transport trusts the frame header just as the blocking one does.

    Bounds, each closing the connection when hit:

    * a request (frame header to last byte) must arrive within ``request_timeout_ms`` of its first
      byte, and its reply be taken within the same time: a slow client cannot stretch one call forever;
    * a connection idle for ``idle_timeout_ms`` between requests is closed (``storm.thrift.socket.timeout.ms``);
    * at most ``max_connections`` are open; when full, a newcomer takes the slot of the longest idle (or
      else longest-sending) connection (:func:`pick_eviction`), so a flood never locks out a new client;
    * a request is exactly one frame of at most ``max_frame_bytes`` (as in Java's framed servers), read
      whole into memory and decoded with a protocol that cannot read past it: a message declaring a
      2 GB string cannot make nimbus set aside more than one frame, however many frames follow.

    With ``ssl_context`` (:func:`squall.core.tls.server_context`) it serves mutual TLS: the handshake runs on the
    event loop, within the request timeout, and a client without a certificate the context trusts never
    gets a frame read; a call's handler learns who made it from :func:`client_principal`.

    Example::

        server = make_server(handler, "127.0.0.1", 0).start()
        with connect("127.0.0.1", server.port) as client:
            client.getLeader()
        server.stop()
    """

    def __init__(
        self,
        processor: _GuardedProcessor,
        listener: socket.socket,
        *,
        max_frame_bytes: int,
        idle_timeout_ms: int | None,
        request_timeout_ms: int,
        threads: int,
        max_connections: int,
        name: str = "thrift",
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.processor = processor
        self.ssl_context = ssl_context
        self.name = name
        self.max_frame_bytes = max_frame_bytes
        self.max_connections = max_connections
        self._idle_secs = idle_timeout_ms / 1000 if idle_timeout_ms else None
        self._request_secs = request_timeout_ms / 1000
        self._listener = listener
        self.address: tuple[str, int] = listener.getsockname()[:2]
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix=f"{name}-call")
        self._connections: set[_Connection] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._serve_thread: threading.Thread | None = None
        self._started = threading.Event()
        self._stopped = False

    @property
    def port(self) -> int:
        return self.address[1]

    @property
    def is_serving(self) -> bool:
        """True while the event loop runs (between start() and stop())."""
        return self._serve_thread is not None and self._serve_thread.is_alive()

    @property
    def connections(self) -> int:
        """Connections open right now."""
        return len(self._connections)

    def start(self) -> ThriftServer:
        """Serve on a background daemon thread; returns self once connections are accepted."""
        if self._serve_thread is not None:
            raise RuntimeError("server already started")
        # Threads start with empty contextvars; carry the caller's log context (daemon, ...).
        context = contextvars.copy_context()
        self._serve_thread = threading.Thread(
            target=context.run, args=(asyncio.run, self._serve()), name=f"{self.name}-io-{self.port}", daemon=True
        )
        self._serve_thread.start()
        self._started.wait(10)
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop accepting, close every connection, end the event loop; calls running keep their threads."""
        if self._stopped:
            return
        self._stopped = True
        loop, stopping = self._loop, self._stopping
        if loop is not None and stopping is not None:
            with contextlib.suppress(RuntimeError):  # the loop already ended
                loop.call_soon_threadsafe(stopping.set)
        if self._serve_thread is not None:
            self._serve_thread.join(timeout)
        self._listener.close()
        self._pool.shutdown(wait=False, cancel_futures=True)

    close = stop

    def __enter__(self) -> ThriftServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        server = await asyncio.start_server(self._accept, sock=self._listener, backlog=_BACKLOG)
        self._started.set()
        try:
            await self._stopping.wait()
        finally:
            server.close()
            for connection in list(self._connections):
                connection.writer.transport.abort()
                if connection.task is not None:
                    connection.task.cancel()
            tasks = [c.task for c in self._connections if c.task is not None]
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = _peer_name(writer)
        if len(self._connections) >= self.max_connections:
            victim = pick_eviction(list(self._connections))
            if victim is None:
                log.warning(
                    "thrift connection refused: every connection is mid-call",
                    server=self.name,
                    peer=peer,
                    limit=self.max_connections,
                )
                writer.transport.abort()
                return
            log.warning(
                "thrift connection closed to make room",
                server=self.name,
                peer=victim.peer,
                was=victim.phase,
                for_secs=round(time.monotonic() - victim.since, 1),
                limit=self.max_connections,
            )
            self._drop(victim)
        connection = _Connection(peer, writer)
        connection.task = asyncio.current_task()
        self._connections.add(connection)
        try:
            tls = self.ssl_context
            principal = await self._handshake(writer, connection, tls) if tls is not None else ""
            loop = asyncio.get_running_loop()
            while not self._stopped:
                request = await self._read_request(reader, connection)
                connection.enter(_Connection.PROCESSING)
                reply = await loop.run_in_executor(self._pool, self._call, request, peer, principal)
                if reply:
                    writer.write(len(reply).to_bytes(4, "big") + reply)
                    async with asyncio.timeout(self._request_secs):
                        await writer.drain()
                connection.enter(_Connection.IDLE)
        except FrameSizeError as exc:
            log.warning("thrift frame refused", server=self.name, peer=peer, reason=exc.message)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass  # the peer left, or we hung up on it
        except TimeoutError:
            log.info("thrift connection timed out", server=self.name, peer=peer, was=connection.phase)
        except _BadRequest as exc:
            log.warning("thrift request refused", server=self.name, peer=peer, reason=str(exc))
        except ssl.SSLError as exc:
            log.warning("thrift TLS handshake refused", server=self.name, peer=peer, reason=exc.reason or str(exc))
        finally:
            self._connections.discard(connection)
            writer.transport.abort()

    async def _handshake(self, writer: asyncio.StreamWriter, connection: _Connection, tls: ssl.SSLContext) -> str:
        """TLS on a new connection, within the request timeout (it counts as sending, for eviction); the
        principal of the client certificate it verified."""
        connection.enter(_Connection.READING)
        await writer.start_tls(tls, ssl_handshake_timeout=self._request_secs)
        connection.enter(_Connection.IDLE)
        return tls_principal(writer.get_extra_info("peercert"))

    def _drop(self, connection: _Connection) -> None:
        self._connections.discard(connection)
        connection.writer.transport.abort()
        if connection.task is not None:
            connection.task.cancel()

    async def _read_request(self, reader: asyncio.StreamReader, connection: _Connection) -> bytes:
        """One whole frame: its first byte within the idle timeout, the rest within the request deadline."""
        async with asyncio.timeout(self._idle_secs):
            first = await reader.readexactly(1)
        connection.enter(_Connection.READING)
        async with asyncio.timeout(self._request_secs):
            header = first + await reader.readexactly(3)
            size = int.from_bytes(header, "big", signed=True)
            if not 0 < size <= self.max_frame_bytes:
                raise FrameSizeError(
                    TTransportException.UNKNOWN,
                    frame_refusal(size, self.max_frame_bytes, "nimbus.thrift.max_buffer_size"),
                )
            return await reader.readexactly(size)

    def _call(self, request: bytes, peer: str, principal: str) -> bytes:
        """Run one call on a pool thread: decode from ``request`` alone, return the encoded reply (b"": oneway)."""
        out = TMemoryBuffer()
        tokens = _CLIENT_HOST.set(peer.rpartition(":")[0]), _CLIENT_PRINCIPAL.set(principal)
        try:
            self.processor.process(_SafeBinaryProtocol(TMemoryBuffer(request)), _SafeBinaryProtocol(out))
        except (TTransportException, TProtocolException, struct.error, EOFError, UnicodeDecodeError) as exc:
            raise _BadRequest(f"not a whole Thrift call in one frame: {describe(exc)}") from None
        finally:
            _CLIENT_HOST.reset(tokens[0])
            _CLIENT_PRINCIPAL.reset(tokens[1])
        return out.getvalue()


_CLIENT_HOST: contextvars.ContextVar[str] = contextvars.ContextVar("thrift_client_host", default="")
_CLIENT_PRINCIPAL: contextvars.ContextVar[str] = contextvars.ContextVar("thrift_client_principal", default="")


def client_host() -> str:
    """Inside a handler call: the host of the client that made it ("" outside a call), for per-client limits."""
    return _CLIENT_HOST.get()


def client_principal() -> str:
    """Inside a handler call: who made it, as its TLS certificate names it (:func:`squall.core.tls.principal`); ""
    on the plain listener (no authentication) and outside a call."""
    return _CLIENT_PRINCIPAL.get()


class _BadRequest(Exception):
    """A frame that does not hold one well-formed call; its connection is closed."""


def _peer_name(writer: asyncio.StreamWriter) -> str:
    peer = writer.get_extra_info("peername")
    return f"{peer[0]}:{peer[1]}" if peer else "?"


def make_server(
    handler: object,
    host: str = "0.0.0.0",
    port: int = DEFAULT_PORT,
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
    client_timeout_ms: int | None = 60_000,
    *,
    request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS,
    service: types.ModuleType | None = None,
    name: str = "nimbus-thrift",
    threads: int = 64,
    max_connections: int = 512,
    ssl_context: ssl.SSLContext | None = None,
) -> ThriftServer:
    """Build a framed + binary server for ``handler`` (bound now, serving after ``start()``).

    ``port=0`` picks a free port (see ``server.port``). ``client_timeout_ms`` closes connections idle
    that long between calls; ``request_timeout_ms`` bounds the arrival of one whole call; ``threads``
    calls run at once; ``max_connections`` are open at once; ``ssl_context`` serves mutual TLS
    (see :class:`ThriftServer`). Stop with ``server.stop()``.
    """
    check_timeout("client_timeout_ms", client_timeout_ms)
    check_timeout("request_timeout_ms", request_timeout_ms)
    check_frame_cap(max_frame_bytes)
    for label, value in (("threads", threads), ("max_connections", max_connections)):
        if value < 1:
            raise ValueError(f"{label} must be at least 1, got {value}")
    processor = _GuardedProcessor(service or storm.Nimbus, handler, TBinaryProtocolFactory())
    return ThriftServer(
        processor,
        listening_socket(host, port),
        max_frame_bytes=max_frame_bytes,
        idle_timeout_ms=client_timeout_ms,
        request_timeout_ms=request_timeout_ms,
        threads=threads,
        max_connections=max_connections,
        name=name,
        ssl_context=ssl_context,
    )
