"""Thrift plumbing for Squall: the Nimbus contract, bounded framing, clients and servers.

``storm`` is ``idl/storm.thrift`` loaded once with thriftpy2, so every daemon and tool shares the
same classes::

    from squall.thrift import storm, connect
    with connect("nimbus-1", 6627) as nimbus:
        print(nimbus.getClusterInfo().topologies)

The wire is what Storm uses (framed transport, binary protocol), with two things thriftpy2 does
not do by itself: frames are size-capped before any memory is set aside for them, and a handler
bug reaches the caller as ``TApplicationException(INTERNAL_ERROR)`` instead of a dropped socket.
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import socket
import threading
import time
import types
from pathlib import Path
from typing import Any, Iterator, Sequence

import structlog
import thriftpy2
from thriftpy2.protocol import TBinaryProtocolFactory
from thriftpy2.server import TThreadedServer
from thriftpy2.thrift import TApplicationException, TClient, TMessageType, TProcessor
from thriftpy2.utils import deserialize, serialize
from thriftpy2.transport import (
    TFramedTransportFactory,
    TMemoryBuffer,
    TServerSocket,
    TSocket,
    TTransportException,
)

__all__ = [
    "DEFAULT_MAX_FRAME_BYTES",
    "DEFAULT_PORT",
    "DEFAULT_TIMEOUT_MS",
    "IDL_PATH",
    "BoundedFramedTransportFactory",
    "FrameSizeError",
    "NimbusUnavailable",
    "ThriftServer",
    "connect",
    "find_leader",
    "from_bytes",
    "make_server",
    "open_client",
    "storm",
    "to_bytes",
]

log = structlog.get_logger(__name__)

# idl/ ships beside squall/ both in a checkout and in an installed wheel.
IDL_PATH = Path(__file__).resolve().parent.parent / "idl" / "storm.thrift"

# A module name of its own: streamparse already registers "storm_thrift" in sys.modules.
storm = thriftpy2.load(str(IDL_PATH), module_name="squall_storm_thrift")

DEFAULT_PORT = 6627  # nimbus.thrift.port
DEFAULT_MAX_FRAME_BYTES = 1_048_576  # nimbus.thrift.max_buffer_size, Storm's default
DEFAULT_TIMEOUT_MS = 7_000  # what streamparse uses for Nimbus calls

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
                self._refused = (
                    f"refused a Thrift frame of {size} bytes: frames must hold 1 to "
                    f"{self._max} bytes (nimbus.thrift.max_buffer_size); "
                    "is the peer speaking framed transport?"
                )
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
    cap at all. Use this in place of ``TFramedTransportFactory`` on both sides.
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
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
) -> TClient:
    """Open a Nimbus client (framed + binary) for long-lived use; the caller closes it.

    ``timeout_ms`` bounds each socket read or write; ``connect_timeout_ms`` (default: the same)
    bounds the TCP connect. Raises ``TTransportException`` when the connection fails.
    """
    _check_timeout("timeout_ms", timeout_ms)
    _check_timeout("connect_timeout_ms", connect_timeout_ms)
    sock = TSocket(
        host,
        port,
        socket_timeout=timeout_ms,
        connect_timeout=connect_timeout_ms if connect_timeout_ms is not None else timeout_ms,
    )
    trans = BoundedFramedTransportFactory(max_frame_bytes).get_transport(sock)
    proto = TBinaryProtocolFactory().get_protocol(trans)
    trans.open()
    return TClient(storm.Nimbus, proto)


@contextlib.contextmanager
def connect(
    host: str,
    port: int = DEFAULT_PORT,
    timeout_ms: int | None = DEFAULT_TIMEOUT_MS,
    *,
    connect_timeout_ms: int | None = None,
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
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
    seeds: Sequence[str], port: int = DEFAULT_PORT, timeout_ms: int = DEFAULT_TIMEOUT_MS
) -> tuple[str, int]:
    """Ask each seed in turn for ``getLeader()`` and return the leader's (host, port).

    Any nimbus, leader or not, knows who leads, so the first seed that answers is enough. Seeds
    are hosts (using ``port``) or ``host:port``. Raises :class:`NimbusUnavailable` naming every
    seed and why it failed when none answers with a leader.
    """
    errors: dict[str, str] = {}
    for seed in seeds:
        host, seed_port = _split_seed(seed, port)
        try:
            with connect(host, seed_port, timeout_ms) as client:
                leader = client.getLeader()
        except Exception as exc:  # any failure just means "try the next seed"
            errors[seed] = _describe(exc)
            log.debug("nimbus seed did not answer getLeader", seed=seed, error=errors[seed])
            continue
        if leader is None or not leader.host or not leader.port:
            errors[seed] = "answered without a leader"
            continue
        return leader.host, leader.port
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


class _ListeningSocket(TServerSocket):
    """TServerSocket without SO_REUSEPORT, bound at construction.

    thriftpy2 sets SO_REUSEPORT, which lets a second nimbus on the same host bind the same port
    and silently share connections with the first. Binding early also reports port 0's pick and
    any bind error to the caller instead of to a background thread.
    """

    def __init__(self, host: str, port: int, client_timeout_ms: int | None) -> None:
        super().__init__(host=host, port=port, client_timeout=client_timeout_ms)
        family = socket.AF_INET6 if ":" in (host or "") else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            sock.listen(self.backlog)
        except OSError:
            sock.close()
            raise
        self.sock = sock
        self.address: tuple[str, int] = sock.getsockname()[:2]

    def listen(self) -> None:  # already listening
        pass

    def accept(self) -> TSocket:
        sock = self.sock  # stop() may clear it at any moment
        if sock is None:
            raise OSError(errno.EBADF, "listening socket is closed")
        client, _ = sock.accept()
        if self.client_timeout:
            client.settimeout(self.client_timeout)
        return TSocket(sock=client)


class ThriftServer(TThreadedServer):
    """Thread-per-connection server with a clean :meth:`stop`.

    thriftpy2's ``close()`` only sets a flag while ``serve()`` sits in ``accept()``; ``stop()``
    also wakes the acceptor, closes the listening socket and ends every open connection.
    """

    def __init__(
        self,
        processor: TProcessor,
        listener: _ListeningSocket,
        trans_factory: Any,
        proto_factory: Any,
        name: str = "thrift",
        max_connections: int = 64,
    ) -> None:
        super().__init__(
            processor,
            listener,
            itrans_factory=trans_factory,
            iprot_factory=proto_factory,
            daemon=True,
        )
        self.name = name
        self.max_connections = max_connections
        self._lock = threading.Lock()
        self._clients: set[TSocket] = set()
        self._threads: set[threading.Thread] = set()
        self._serve_thread: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int]:
        """The bound (host, port); useful when the server was asked for port 0."""
        return self.trans.address

    @property
    def port(self) -> int:
        return self.trans.address[1]

    @property
    def is_serving(self) -> bool:
        """True while the accept thread runs (between start() and stop())."""
        return self._serve_thread is not None and self._serve_thread.is_alive()

    def start(self) -> "ThriftServer":
        """Serve on a background daemon thread; returns self."""
        if self._serve_thread is not None:
            raise RuntimeError("server already started")
        # Threads start with empty contextvars; carry the caller's log context (daemon, ...).
        self._serve_thread = threading.Thread(
            target=contextvars.copy_context().run,
            args=(self.serve,),
            name=f"{self.name}-accept-{self.port}",
            daemon=True,
        )
        self._serve_thread.start()
        return self

    def serve(self) -> None:
        """Accept connections until :meth:`stop`; blocks the calling thread."""
        while not self.closed:
            try:
                client = self.trans.accept()
            except OSError as exc:
                if self.closed:
                    break
                # e.g. out of file descriptors: do not spin on the error
                log.warning("thrift accept failed", server=self.name, error=str(exc))
                time.sleep(0.1)
                continue
            if self.closed:
                client.close()
                break
            with self._lock:
                full = len(self._clients) >= self.max_connections
            if full:  # one thread per connection: bound them, refuse the surplus at once
                log.warning("thrift connection refused: too many connections", server=self.name,
                            peer=_peer_name(client), limit=self.max_connections)
                client.close()
                continue
            thread = threading.Thread(
                target=contextvars.copy_context().run,
                args=(self.handle, client),
                name=f"{self.name}-conn",
                daemon=True,
            )
            with self._lock:
                self._clients.add(client)
                self._threads.add(thread)
            thread.start()

    def handle(self, client: TSocket) -> None:
        """Serve one connection until the peer leaves, idles out, or breaks the protocol."""
        trans = self.itrans_factory.get_transport(client)
        proto = self.iprot_factory.get_protocol(trans)
        peer = _peer_name(client)
        try:
            while not self.closed:
                self.processor.process(proto, proto)
        except FrameSizeError as exc:
            log.warning("thrift frame refused", server=self.name, peer=peer, reason=exc.message)
        except TTransportException:
            pass  # peer closed the connection
        except OSError as exc:  # includes the idle timeout (client_timeout_ms)
            log.debug("thrift connection ended", server=self.name, peer=peer, error=str(exc))
        except Exception:
            log.exception("thrift connection dropped", server=self.name, peer=peer)
        finally:
            trans.close()
            with self._lock:
                self._clients.discard(client)
                self._threads.discard(threading.current_thread())

    def stop(self, timeout: float = 5.0) -> None:
        """Stop accepting, close the listening socket and every connection, join the threads."""
        if self.closed and self.trans.sock is None:
            return
        self.closed = True
        self._wake_acceptor()
        self.trans.close()
        with self._lock:
            clients = list(self._clients)
            threads = list(self._threads)
        for client in clients:
            sock = client.sock
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)  # wakes the handler's recv; it closes itself
        deadline = time.monotonic() + timeout
        for thread in [self._serve_thread, *threads]:
            if thread is not None and thread is not threading.current_thread():
                thread.join(max(0.0, deadline - time.monotonic()))

    close = stop

    def _wake_acceptor(self) -> None:
        # Closing a listening socket does not wake a thread blocked in accept() on every
        # platform; one connection to ourselves always does.
        if self._serve_thread is None or not self._serve_thread.is_alive():
            return
        host, port = self.address
        if host in ("0.0.0.0", ""):
            host = "127.0.0.1"
        elif host == "::":
            host = "::1"
        with contextlib.suppress(OSError):
            socket.create_connection((host, port), timeout=1.0).close()

    def __enter__(self) -> "ThriftServer":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def _peer_name(client: TSocket) -> str:
    try:
        host, port = client.sock.getpeername()[:2]
        return f"{host}:{port}"
    except (OSError, AttributeError):
        return "?"


def make_server(
    handler: object,
    host: str = "0.0.0.0",
    port: int = DEFAULT_PORT,
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
    client_timeout_ms: int | None = 60_000,
    *,
    service: types.ModuleType | None = None,
    name: str = "nimbus-thrift",
    max_connections: int = 64,
) -> ThriftServer:
    """Build a framed + binary server for ``handler`` (bound now, serving after ``start()``).

    ``port=0`` picks a free port (see ``server.port``). ``client_timeout_ms`` closes idle
    connections so a silent peer cannot hold a thread forever. Stop with ``server.stop()``.
    """
    _check_timeout("client_timeout_ms", client_timeout_ms)
    proto_factory = TBinaryProtocolFactory()
    processor = _GuardedProcessor(service or storm.Nimbus, handler, proto_factory)
    listener = _ListeningSocket(host, port, client_timeout_ms)
    return ThriftServer(
        processor,
        listener,
        BoundedFramedTransportFactory(max_frame_bytes),
        proto_factory,
        name=name,
        max_connections=max_connections,
    )
