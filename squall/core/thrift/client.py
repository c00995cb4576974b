"""Squall's Nimbus clients: one connection (framed + binary, optionally TLS) with bounded replies and timeouts,
and the leader found by asking the seeds.

One client owns one socket and makes one call at a time: use one per thread. :mod:`squall.core.nimbus_client`
builds on these from a conf (seeds, ports, TLS).
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import Iterator, Sequence

import structlog
from thriftpy2.protocol import TBinaryProtocolFactory
from thriftpy2.thrift import TClient
from thriftpy2.transport import TSocket, TSSLSocket, TTransportException

from squall.core.thrift import DEFAULT_PORT, storm
from squall.core.thrift.transport import BoundedFramedTransportFactory, check_timeout, describe

__all__ = [
    "DEFAULT_MAX_REPLY_BYTES",
    "DEFAULT_TIMEOUT_MS",
    "NimbusUnavailable",
    "connect",
    "find_leader",
    "open_client",
]

log = structlog.get_logger(__name__)

#: nimbus.thrift.client.max_buffer_size: what a client reads. Replies may be far bigger than requests (the info
#: of a 10,000-task topology with stats is ~5 MB); the cap still stops a non-Thrift peer's garbage length.
DEFAULT_MAX_REPLY_BYTES = 64 * 1024 * 1024
DEFAULT_TIMEOUT_MS = 7_000  # what streamparse uses for Nimbus calls


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
    check_timeout("timeout_ms", timeout_ms)
    check_timeout("connect_timeout_ms", connect_timeout_ms)
    timeouts = {
        "socket_timeout": timeout_ms,
        "connect_timeout": connect_timeout_ms if connect_timeout_ms is not None else timeout_ms,
    }
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
        return (
            f"TLS handshake with {host}:{port} failed: {exc.verify_message} (nimbus's certificate must chain to "
            f"nimbus.thrift.tls.client.truststore.path and name the host dialled, {host}: see nimbus.seeds)"
        )
    return (
        f"TLS handshake with {host}:{port} failed: {exc.reason or exc} (is it nimbus's TLS port, "
        "nimbus.thrift.tls.port? does nimbus take the certificate of nimbus.thrift.tls.client.keystore.path?)"
    )


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
    seeds: Sequence[str],
    port: int = DEFAULT_PORT,
    timeout_ms: int = DEFAULT_TIMEOUT_MS,
    *,
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
            errors[seed] = describe(exc)
            log.debug("nimbus seed did not answer getLeader", seed=seed, error=errors[seed])
            continue
        leader_port = (leader.tlsPort if tls is not None else leader.port) if leader is not None else None
        if leader is None or not leader.host or not leader_port:
            errors[seed] = (
                "answered without a leader"
                if leader is None or not leader.host or tls is None
                else "the leader has no TLS listener (nimbus.thrift.tls.port)"
            )
            continue
        return leader.host, leader_port
    raise NimbusUnavailable(seeds, errors)
