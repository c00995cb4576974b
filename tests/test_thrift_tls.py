"""Mutual TLS on nimbus's Thrift server, over real sockets, with certificates from deploy/make-certs.sh:
a client with a certificate of the cluster's CA is served and named; every other client gets a refused
connection before any call is read, and the server says why."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs
from streamparse.thrift import storm_thrift as sp
from thriftpy2.protocol import TBinaryProtocolFactory
from thriftpy2.rpc import make_client
from thriftpy2.transport import TFramedTransportFactory, TTransportException

from squall.core.config.validation import ConfigError
from squall.core.thrift import storm
from squall.core.thrift.client import connect, find_leader
from squall.core.thrift.server import ThriftServer, client_principal, make_server
from squall.core.tls import client_context, server_context
from support import make_certs, tls_conf, wait_until


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    certs = make_certs(tmp_path_factory.mktemp("certs"), "alice")
    make_certs(certs / "elsewhere", "mallory")  # another CA's client
    return certs


class Recorder:
    """Answers getLeader and records who asked."""

    def __init__(self) -> None:
        self.callers: list[str] = []

    def getLeader(self) -> Any:
        self.callers.append(client_principal())
        return storm.NimbusSummary(host="127.0.0.1", port=6627, uptime_secs=1, isLeader=True, version="1.2.4",
                                   tlsPort=6067)


@pytest.fixture
def served(certs: Path) -> Iterator[tuple[ThriftServer, Recorder]]:
    handler = Recorder()
    server = make_server(handler, "127.0.0.1", 0, ssl_context=server_context(tls_conf(certs, "alice"))).start()
    try:
        yield server, handler
    finally:
        server.stop()


def test_a_client_with_a_certificate_of_the_cluster_ca_is_served_and_named(served: Any, certs: Path) -> None:
    server, handler = served
    with connect("127.0.0.1", server.port, tls=client_context(tls_conf(certs, "alice"))) as client:
        assert client.getLeader().isLeader and client.getLeader().tlsPort == 6067
    assert handler.callers == ["alice", "alice"]
    assert find_leader([f"127.0.0.1:{server.port}"], tls=client_context(tls_conf(certs, "alice"))) == \
        ("127.0.0.1", 6067), "through TLS, the leader's TLS port"


def test_every_other_client_is_refused_before_a_call_is_read(served: Any, certs: Path) -> None:
    """A Storm 1.x client (streamparse's plain framed Thrift), a TLS client without a certificate and one with
    another CA's certificate: each connection is closed, no call reaches the handler, and the server logs
    the reason for each."""
    server, handler = served
    with capture_logs() as logs:  # the log events themselves: another test may have sent printed logs elsewhere
        plain = make_client(sp.Nimbus, "127.0.0.1", server.port, proto_factory=TBinaryProtocolFactory(),
                            trans_factory=TFramedTransportFactory(), timeout=5000)
        with pytest.raises(TTransportException):
            plain.getLeader()
        plain.close()
        anonymous = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        anonymous.load_verify_locations(certs / "ca.pem")
        stranger = client_context(tls_conf(certs / "elsewhere", "mallory") | {
            "nimbus.thrift.tls.client.truststore.path": str(certs / "ca.pem")})  # trusts nimbus, nimbus not it
        for context in (anonymous, stranger):
            with pytest.raises(TTransportException):
                with connect("127.0.0.1", server.port, 5000, tls=context) as client:
                    client.getLeader()
        assert handler.callers == []

        def reasons() -> set[str]:  # a client may see its refusal a moment before the server has logged it
            return {e["reason"] for e in list(logs) if e["event"] == "thrift TLS handshake refused"}

        wait_until(lambda: len(reasons()) == 3, 10, "the server's three refusals logged")
    assert reasons() == {"WRONG_VERSION_NUMBER", "PEER_DID_NOT_RETURN_A_CERTIFICATE", "CERTIFICATE_VERIFY_FAILED"}


def test_a_client_refuses_a_server_whose_certificate_is_not_of_its_ca_or_not_for_that_host(certs: Path) -> None:
    """Clients authenticate nimbus too: a server certificate of another CA, or one that does not name the host
    connected to (nimbus's covers 127.0.0.1 and localhost, not 127.0.0.2), fails the handshake at the client."""
    impostor = make_server(Recorder(), "127.0.0.1", 0, ssl_context=server_context(
        tls_conf(certs / "elsewhere", "mallory")))  # another CA's nimbus certificate
    genuine = make_server(Recorder(), "127.0.0.2", 0, ssl_context=server_context(tls_conf(certs, "alice")))
    with impostor.start(), genuine.start():
        for server, reason in ((impostor, "self-signed certificate in certificate chain"),
                               (genuine, "IP address mismatch, certificate is not valid for '127.0.0.2'")):
            with pytest.raises(TTransportException) as refused:
                with connect(server.address[0], server.port, 5000, tls=client_context(tls_conf(certs, "alice"))):
                    pass
            said = refused.value.message  # what `storm list` prints: not thriftpy2's "Could not connect"
            assert said.startswith(f"TLS handshake with {server.address[0]}:{server.port} failed: {reason}"), said
            assert "must chain to nimbus.thrift.tls.client.truststore.path and name the host dialled" in said


def test_a_tls_client_dialling_a_plain_port_is_told_to_check_the_tls_port(certs: Path) -> None:
    with make_server(Recorder(), "127.0.0.1", 0).start() as plain:
        with pytest.raises(TTransportException) as refused:
            with connect("127.0.0.1", plain.port, 5000, tls=client_context(tls_conf(certs, "alice"))):
                pass
    said = refused.value.message
    assert said.startswith(f"TLS handshake with 127.0.0.1:{plain.port} failed: ") and \
        "is it nimbus's TLS port, nimbus.thrift.tls.port?" in said, said


def test_missing_or_unusable_files_name_the_key_to_fix(certs: Path, tmp_path: Path) -> None:
    conf = tls_conf(certs, "alice")
    (tmp_path / "garbage.pem").write_text("not a certificate\n")
    cases = [
        ({**conf, "nimbus.thrift.tls.server.keystore.path": None}, server_context,
         "nimbus.thrift.tls.server.keystore.path is not set"),
        ({**conf, "nimbus.thrift.tls.server.keystore.path": str(tmp_path / "nope.pem")}, server_context,
         "nimbus.thrift.tls.server.keystore.path: cannot load"),
        ({**conf, "nimbus.thrift.tls.client.truststore.path": str(tmp_path / "garbage.pem")}, client_context,
         "nimbus.thrift.tls.client.truststore.path: cannot load"),
    ]
    for broken, build, message in cases:
        with pytest.raises(ConfigError, match=message):
            build(broken)
    assert client_context({**conf, "nimbus.thrift.client.use.tls": False}) is None
