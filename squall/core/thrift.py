"""Thrift plumbing for Squall: the Nimbus contract, bounded framing, clients and servers.

``storm`` is ``idl/storm.thrift`` loaded once with thriftpy2, so every daemon and tool shares the
same classes::

    from squall.core.thrift import storm, connect
    with connect("nimbus-1", 6627) as nimbus:
        print(nimbus.getClusterInfo().topologies)

The wire is what Storm uses (framed transport, binary protocol), with two things thriftpy2 does
not do by itself: frames are size-capped before any memory is set aside for them, and a handler
bug reaches the caller as ``TApplicationException(INTERNAL_ERROR)`` instead of a dropped socket.
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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterator, Sequence

import structlog
import thriftpy2
from thriftpy2.protocol import TBinaryProtocolFactory
# Requests are decoded in pure Python: it never reads past the bytes it was given, where the Cython protocol
# allocates whatever length a string declares (2 GB from a 100-byte frame).
from thriftpy2.protocol.binary import TBinaryProtocol as _SafeBinaryProtocol
from thriftpy2.protocol.exc import TProtocolException
from thriftpy2.thrift import TApplicationException, TClient, TMessageType, TProcessor
from thriftpy2.utils import deserialize, serialize
from thriftpy2.transport import (
    TFramedTransportFactory,
    TMemoryBuffer,
    TSocket,
    TSSLSocket,
    TTransportException,
)

from squall.core.tls import principal as tls_principal

__all__ = [
    "DEFAULT_MAX_FRAME_BYTES",
    "DEFAULT_MAX_REPLY_BYTES",
    "DEFAULT_PORT",
    "DEFAULT_REQUEST_TIMEOUT_MS",
    "DEFAULT_TIMEOUT_MS",
    "IDL_PATH",
    "BoundedFramedTransportFactory",
    "FrameSizeError",
    "NimbusUnavailable",
    "ThriftServer",
    "client_host",
    "client_principal",
    "pick_eviction",
    "connect",
    "find_leader",
    "from_bytes",
    "listening_socket",
    "make_server",
    "open_client",
    "storm",
    "to_bytes",
]

log = structlog.get_logger(__name__)

# idl/ ships beside squall/ both in a checkout and in an installed wheel.
IDL_PATH = Path(__file__).resolve().parents[2] / "idl" / "storm.thrift"

# A module name of its own: streamparse already registers "storm_thrift" in sys.modules.
storm = thriftpy2.load(str(IDL_PATH), module_name="squall_storm_thrift")

DEFAULT_PORT = 6627  # nimbus.thrift.port
DEFAULT_MAX_FRAME_BYTES = 1_048_576  # nimbus.thrift.max_buffer_size, Storm's default: what nimbus reads
#: nimbus.thrift.client.max_buffer_size: what a client reads. Replies may be far bigger than requests (the info
#: of a 10,000-task topology with stats is ~5 MB); the cap still stops a non-Thrift peer's garbage length.
DEFAULT_MAX_REPLY_BYTES = 64 * 1024 * 1024
DEFAULT_TIMEOUT_MS = 7_000  # what streamparse uses for Nimbus calls
DEFAULT_REQUEST_TIMEOUT_MS = 30_000  # nimbus.thrift.request.timeout.ms: one whole call must arrive within it

_MAX_I32 = 2**31 - 1


def to_bytes(struct: Any) -> bytes:
    """A Thrift struct in the binary protocol, as stored on disk (code store, a worker's topology)."""
    return serialize(struct, _BINARY)


def from_bytes(cls: type, data: bytes) -> Any:
    """The inverse of :func:`to_bytes`: ``cls`` (e.g. ``storm.StormTopology``) read from ``data``."""
    return deserialize(cls(), data, _BINARY)


_BINARY = TBinaryProtocolFactory()


# ------------------------------------------------------------------------------------------------
# Framing with a size cap
# ------------------------------------------------------------------------------------------------


class FrameSizeError(TTransportException):
    """A peer announced an empty, negative or over-the-cap frame; its connection is dropped."""


class _FrameGuard:
    """Sits between a framed transport and its socket and checks each frame header as it arrives.

    thriftpy2's framed transports trust the 4-byte length and allocate that much (the Cython one
    mallocs it outright), so one bogus header can pin gigabytes or park a thread forever. The
    guard follows the frame boundaries in the byte stream itself, which works with both the
    Cython and the pure-Python framed transport and keeps the fast binary protocol usable.
    """

    def __init__(self, trans: Any, max_frame_bytes: int) -> None:
        self._trans = trans
        self._max = max_frame_bytes
        self._header = bytearray()
        self._left = 0  # payload bytes still to come in the current frame
        self._refused: str | None = None  # set once a bad header is seen; the stream is dead

    def read(self, sz: int) -> bytes:
        if self._refused is None:
            data = self._trans.read(sz)
            keep = self._scan(data)
            if keep == len(data):
                return data
            if keep:  # hand over the frames before the bad header; refuse on the next read
                return data[:keep]
        raise FrameSizeError(TTransportException.UNKNOWN, self._refused)

    def _scan(self, data: bytes) -> int:
        """Follow frame boundaries through ``data``; return how many bytes may be passed on."""
        pos, end = 0, len(data)
        while pos < end:
            if self._left:
                step = min(self._left, end - pos)
                self._left -= step
                pos += step
                continue
            start = pos
            need = 4 - len(self._header)
            self._header += data[pos : pos + need]
            pos += need
            if len(self._header) < 4:
                break
            size = int.from_bytes(self._header, "big", signed=True)
            self._header.clear()
            if size <= 0 or size > self._max:
                self._refused = _frame_refusal(size, self._max, "nimbus.thrift.client.max_buffer_size")
                return start
            self._left = size
        return end

    def write(self, buf: bytes) -> None:
        self._trans.write(buf)

    def flush(self) -> None:
        self._trans.flush()

    def is_open(self) -> bool:
        return self._trans.is_open()

    def open(self) -> None:
        self._trans.open()

    def close(self) -> None:
        self._trans.close()


class BoundedFramedTransportFactory:
    """Framed transport that refuses frames declaring <= 0 or more than ``max_frame_bytes``.

    Storm's servers and clients cap frames at nimbus.thrift.max_buffer_size; thriftpy2 has no
    cap at all. Squall's clients use it in place of ``TFramedTransportFactory``, with their own
    cap on replies (nimbus.thrift.client.max_buffer_size); nimbus reads requests itself.
    """

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        if not 0 < max_frame_bytes <= _MAX_I32:
            raise ValueError(f"max_frame_bytes must be in 1..{_MAX_I32}, got {max_frame_bytes}")
        self.max_frame_bytes = max_frame_bytes
        self._framed = TFramedTransportFactory()

    def get_transport(self, trans: Any) -> Any:
        return self._framed.get_transport(_FrameGuard(trans, self.max_frame_bytes))


# ------------------------------------------------------------------------------------------------
# Clients
# ------------------------------------------------------------------------------------------------


def _describe(exc: BaseException) -> str:
    # thriftpy2 exceptions print as their repr; their `message` reads better.
    text = getattr(exc, "message", None) or getattr(exc, "msg", None) or str(exc)
    return f"{type(exc).__name__}: {text}"


def _check_timeout(name: str, value: int | None) -> None:
    # thriftpy2 reads 0 as "no timeout", which turns a typo into a client that can hang forever.
    if value is not None and value <= 0:
        raise ValueError(f"{name} must be positive milliseconds or None (no limit), got {value}")


def open_client(
    host: str,
    port: int = DEFAULT_PORT,
    timeout_ms: int | None = DEFAULT_TIMEOUT_MS,
    *,
    connect_timeout_ms: int | None = None,
    max_frame_bytes: int = DEFAULT_MAX_REPLY_BYTES,
    tls: ssl.SSLContext | None = None,
) -> TClient:
    """Open a Nimbus client (framed + binary) for long-lived use; the caller closes it.

    ``timeout_ms`` bounds each socket read or write; ``connect_timeout_ms`` (default: the same)
    bounds the TCP connect; ``max_frame_bytes`` bounds the replies it reads
    (``nimbus.thrift.client.max_buffer_size``); ``tls`` (:func:`squall.core.tls.client_context`) speaks TLS to
    nimbus's TLS listener. Raises ``TTransportException`` when the connection fails.
    """
    _check_timeout("timeout_ms", timeout_ms)
    _check_timeout("connect_timeout_ms", connect_timeout_ms)
    timeouts = {"socket_timeout": timeout_ms,
                "connect_timeout": connect_timeout_ms if connect_timeout_ms is not None else timeout_ms}
    sock = TSocket(host, port, **timeouts) if tls is None else TSSLSocket(host, port, ssl_context=tls, **timeouts)
    trans = BoundedFramedTransportFactory(max_frame_bytes).get_transport(sock)
    proto = TBinaryProtocolFactory().get_protocol(trans)
    try:
        trans.open()
    except TTransportException as exc:  # thriftpy2 says "Could not connect" for a refused TLS handshake too
        if isinstance(failed := exc.__context__, ssl.SSLError):
            raise TTransportException(TTransportException.NOT_OPEN, _tls_failure(host, port, failed)) from None
        raise
    return TClient(storm.Nimbus, proto)


def _tls_failure(host: str, port: int, exc: ssl.SSLError) -> str:
    """Why a TLS handshake with nimbus failed, as the operator can act on it."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return (f"TLS handshake with {host}:{port} failed: {exc.verify_message} (nimbus's certificate must chain to "
                f"nimbus.thrift.tls.client.truststore.path and name the host dialled, {host}: see nimbus.seeds)")
    return (f"TLS handshake with {host}:{port} failed: {exc.reason or exc} (is it nimbus's TLS port, "
            "nimbus.thrift.tls.port? does nimbus take the certificate of nimbus.thrift.tls.client.keystore.path?)")


@contextlib.contextmanager
def connect(
    host: str,
    port: int = DEFAULT_PORT,
    timeout_ms: int | None = DEFAULT_TIMEOUT_MS,
    *,
    connect_timeout_ms: int | None = None,
    max_frame_bytes: int = DEFAULT_MAX_REPLY_BYTES,
    tls: ssl.SSLContext | None = None,
) -> Iterator[TClient]:
    """Context manager around :func:`open_client` that always closes the socket.

    One client owns one socket and makes one call at a time: use one per thread.
    """
    client = open_client(
        host,
        port,
        timeout_ms,
        connect_timeout_ms=connect_timeout_ms,
        max_frame_bytes=max_frame_bytes,
        tls=tls,
    )
    try:
        yield client
    finally:
        client.close()


class NimbusUnavailable(Exception):
    """No nimbus seed answered ``getLeader``; ``errors`` maps each seed tried to its failure."""

    def __init__(self, seeds: Sequence[str], errors: dict[str, str]) -> None:
        self.seeds = list(seeds)
        self.errors = dict(errors)
        if not self.seeds:
            detail = "no seeds given (set nimbus.seeds)"
        else:
            detail = "; ".join(f"{s}: {self.errors.get(s, 'not tried')}" for s in self.seeds)
        super().__init__(f"could not find the nimbus leader from seeds {self.seeds}: {detail}")


def _split_seed(seed: str, default_port: int) -> tuple[str, int]:
    """``host``, ``host:port`` or ``[v6addr]:port`` -> (host, port)."""
    if seed.startswith("["):
        host, _, rest = seed[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") else default_port
    host, sep, port = seed.rpartition(":")
    if sep and port.isdigit() and ":" not in host:
        return host, int(port)
    return seed, default_port


def find_leader(
    seeds: Sequence[str], port: int = DEFAULT_PORT, timeout_ms: int = DEFAULT_TIMEOUT_MS, *,
    tls: ssl.SSLContext | None = None,
) -> tuple[str, int]:
    """Ask each seed in turn for ``getLeader()`` and return the leader's (host, port).

    Any nimbus, leader or not, knows who leads, so the first seed that answers is enough. Seeds
    are hosts (using ``port``) or ``host:port``. With ``tls``, seeds are asked through TLS and the
    port returned is the leader's TLS port. Raises :class:`NimbusUnavailable` naming every seed and
    why it failed when none answers with a leader.
    """
    errors: dict[str, str] = {}
    for seed in seeds:
        host, seed_port = _split_seed(seed, port)
        try:
            with connect(host, seed_port, timeout_ms, tls=tls) as client:
                leader = client.getLeader()
        except Exception as exc:  # any failure just means "try the next seed"
            errors[seed] = _describe(exc)
            log.debug("nimbus seed did not answer getLeader", seed=seed, error=errors[seed])
            continue
        leader_port = (leader.tlsPort if tls is not None else leader.port) if leader is not None else None
        if leader is None or not leader.host or not leader_port:
            errors[seed] = "answered without a leader" if leader is None or not leader.host or tls is None \
                else "the leader has no TLS listener (nimbus.thrift.tls.port)"
            continue
        return leader.host, leader_port
    raise NimbusUnavailable(seeds, errors)


# ------------------------------------------------------------------------------------------------
# Servers
# ------------------------------------------------------------------------------------------------


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
        if isinstance(result, TApplicationException):  # unknown method name
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
        TApplicationException.INTERNAL_ERROR, f"Internal error processing {api}: {_describe(exc)}"
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

    def __init__(self, processor: "_GuardedProcessor", listener: socket.socket, *, max_frame_bytes: int,
                 idle_timeout_ms: int | None, request_timeout_ms: int, threads: int, max_connections: int,
                 name: str = "thrift", ssl_context: ssl.SSLContext | None = None) -> None:
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

    def start(self) -> "ThriftServer":
        """Serve on a background daemon thread; returns self once connections are accepted."""
        if self._serve_thread is not None:
            raise RuntimeError("server already started")
        # Threads start with empty contextvars; carry the caller's log context (daemon, ...).
        context = contextvars.copy_context()
        self._serve_thread = threading.Thread(target=context.run, args=(asyncio.run, self._serve()),
                                              name=f"{self.name}-io-{self.port}", daemon=True)
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

    def __enter__(self) -> "ThriftServer":
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
                log.warning("thrift connection refused: every connection is mid-call", server=self.name, peer=peer,
                            limit=self.max_connections)
                writer.transport.abort()
                return
            log.warning("thrift connection closed to make room", server=self.name, peer=victim.peer,
                        was=victim.phase, for_secs=round(time.monotonic() - victim.since, 1),
                        limit=self.max_connections)
            self._drop(victim)
        connection = _Connection(peer, writer)
        connection.task = asyncio.current_task()
        self._connections.add(connection)
        try:
            principal = await self._handshake(writer, connection) if self.ssl_context is not None else ""
            while not self._stopped:
                request = await self._read_request(reader, connection)
                connection.enter(_Connection.PROCESSING)
                reply = await self._loop.run_in_executor(self._pool, self._call, request, peer, principal)
                if reply:
                    writer.write(len(reply).to_bytes(4, "big") + reply)
                    async with asyncio.timeout(self._request_secs):
                        await writer.drain()
                connection.enter(_Connection.IDLE)
        except FrameSizeError as exc:
            log.warning("thrift frame refused", server=self.name, peer=peer, reason=exc.message)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass  # the peer left, or we hung up on it
        except asyncio.TimeoutError:
            log.info("thrift connection timed out", server=self.name, peer=peer, was=connection.phase)
        except _BadRequest as exc:
            log.warning("thrift request refused", server=self.name, peer=peer, reason=str(exc))
        except ssl.SSLError as exc:
            log.warning("thrift TLS handshake refused", server=self.name, peer=peer, reason=exc.reason or str(exc))
        finally:
            self._connections.discard(connection)
            writer.transport.abort()

    async def _handshake(self, writer: asyncio.StreamWriter, connection: _Connection) -> str:
        """TLS on a new connection, within the request timeout (it counts as sending, for eviction); the
        principal of the client certificate it verified."""
        connection.enter(_Connection.READING)
        await writer.start_tls(self.ssl_context, ssl_handshake_timeout=self._request_secs)
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
                raise FrameSizeError(TTransportException.UNKNOWN,
                                     _frame_refusal(size, self.max_frame_bytes, "nimbus.thrift.max_buffer_size"))
            return await reader.readexactly(size)

    def _call(self, request: bytes, peer: str, principal: str) -> bytes:
        """Run one call on a pool thread: decode from ``request`` alone, return the encoded reply (b"": oneway)."""
        out = TMemoryBuffer()
        tokens = _CLIENT_HOST.set(peer.rpartition(":")[0]), _CLIENT_PRINCIPAL.set(principal)
        try:
            self.processor.process(_SafeBinaryProtocol(TMemoryBuffer(request)), _SafeBinaryProtocol(out))
        except (TTransportException, TProtocolException, struct.error, EOFError, UnicodeDecodeError) as exc:
            raise _BadRequest(f"not a whole Thrift call in one frame: {_describe(exc)}") from None
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


def _frame_refusal(size: int, cap: int, setting: str) -> str:
    return (f"refused a Thrift frame of {size} bytes: frames must hold 1 to {cap} bytes "
            f"({setting}); is the peer speaking framed transport?")


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
    _check_timeout("client_timeout_ms", client_timeout_ms)
    _check_timeout("request_timeout_ms", request_timeout_ms)
    if not 0 < max_frame_bytes <= _MAX_I32:
        raise ValueError(f"max_frame_bytes must be in 1..{_MAX_I32}, got {max_frame_bytes}")
    for label, value in (("threads", threads), ("max_connections", max_connections)):
        if value < 1:
            raise ValueError(f"{label} must be at least 1, got {value}")
    processor = _GuardedProcessor(service or storm.Nimbus, handler, _BINARY)
    return ThriftServer(processor, listening_socket(host, port), max_frame_bytes=max_frame_bytes,
                        idle_timeout_ms=client_timeout_ms, request_timeout_ms=request_timeout_ms, threads=threads,
                        max_connections=max_connections, name=name, ssl_context=ssl_context)
