"""The UI and the logviewer behind HTTPS with client certificates (issues 21, 22): real uvicorn servers over real
TLS sockets, certificates from deploy/make-certs.sh, a real nimbus with the simple authorizer. The HTTP user is
the client certificate's common name; the UI acts on nimbus with its own certificate ("squall-ui", listed in
nimbus.impersonation.users) only for users nimbus's ACLs allow."""

from __future__ import annotations

import json
import socket
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.responses import JSONResponse

from logviewer.server import LogviewerServer
from nimbus.daemon import Nimbus
from squall.core.config.validation import ConfigError
from squall.core.httpd import HttpServer
from squall.core.local_state import worker_log_name, write_log_acl
from squall.core.tls import https_context
from support import make_certs, tls_conf
from test_authorization import ADMIN, DAEMONS, as_, secured
from test_nimbus import Cluster, cluster, leader, word_count  # noqa: F401  (fixtures)
from test_ui import valid
from ui.server import UiServer

UI = "squall-ui"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_certs(tmp_path_factory.mktemp("certs"), "alice", "bob", "carol", "dave", "erin", ADMIN, DAEMONS, UI)


def https_conf(certs: Path, daemon: str, client_auth: str = "need") -> dict[str, Any]:
    """``daemon`` over HTTPS on a free port with the server certificate of make_certs (127.0.0.1)."""
    return {f"{daemon}.host": "127.0.0.1", f"{daemon}.https.port": 0,
            f"{daemon}.https.keystore.path": str(certs / "nimbus.pem"),
            f"{daemon}.https.truststore.path": str(certs / "ca.pem"), f"{daemon}.https.{client_auth}.client.auth": True}


def https_client(certs: Path, port: int, principal: str | None) -> httpx.Client:
    """An HTTPS client of 127.0.0.1:``port`` trusting the cluster's CA, presenting ``principal``'s certificate
    (none for None)."""
    context = ssl.create_default_context(cafile=certs / "ca.pem")
    if principal is not None:
        context.load_cert_chain(certs / f"{principal}.pem")
    return httpx.Client(base_url=f"https://127.0.0.1:{port}", verify=context, timeout=30)


@contextmanager
def secure_ui(cluster: Cluster, n: Nimbus, certs: Path, client_auth: str = "need") -> Iterator[int]:
    """The UI over HTTPS in front of ``n``'s TLS listener, asking nimbus as "squall-ui": its port."""
    server = UiServer({**cluster.conf, **tls_conf(certs, UI), **https_conf(certs, "ui", client_auth),
                       "nimbus.seeds": [f"127.0.0.1:{n.tls_server.port}"], "ui.nimbus.timeout.secs": 30}).start()
    try:
        yield server.port
    finally:
        server.stop()


def refused(response: httpx.Response, principal: str, operation: str) -> None:
    assert response.status_code == 403, response.text
    body = response.json()
    assert body["error"] == "403 Forbidden" and f"'{principal}'" in body["errorMessage"] \
        and operation in body["errorMessage"], body


def test_only_the_owner_its_topology_users_and_admins_see_and_operate_a_topology_through_the_ui(
        cluster: Cluster, certs: Path) -> None:
    n = secured(cluster, certs, **{"nimbus.impersonation.users": [UI]})
    alice = as_(cluster, n, certs, "alice")
    for name in ("wc", "wc2"):
        alice.submitTopology(name, "", json.dumps({"topology.workers": 1, "topology.users": ["carol"]}), word_count())
    wc, wc2 = alice.getTopologyId("wc"), alice.getTopologyId("wc2")

    def status(topology_id: str) -> str:
        return str(alice.getTopologyInfo(topology_id).status)

    with secure_ui(cluster, n, certs) as port:
        with https_client(certs, port, "bob") as bob:
            assert {t["id"] for t in bob.get("/api/v1/topology/summary").json()["topologies"]} == {wc, wc2}, \
                "the cluster's status is for every authenticated user, as on nimbus"
            refused(bob.post(f"/api/v1/topology/{wc}/kill/0"), "bob", "killTopology")
            refused(bob.post(f"/api/v1/topology/{wc}/deactivate"), "bob", "deactivate")
            refused(bob.post(f"/api/v1/topology/{wc}/rebalance/0", json={"numWorkers": 2}), "bob", "rebalance")
            refused(bob.get(f"/api/v1/topology/{wc}"), "bob", "getTopology")
            valid(bob.get(f"/api/v1/topology/{wc}"), "/api/v1/topology/{id}")  # as the OpenAPI document says
            refused(bob.get(f"/api/v1/topology/{wc}/component/split"), "bob", "getTopology")
            page = bob.get(f"/topology/{wc}")
            assert page.status_code == 403 and "bob" in page.text, "the topology's HTML page is refused too"
        assert status(wc) == "ACTIVE", "nothing bob tried took effect"

        with https_client(certs, port, "carol") as carol:  # in topology.users
            assert carol.get(f"/api/v1/topology/{wc}").json()["owner"] == "alice"
            assert carol.post(f"/api/v1/topology/{wc}/deactivate").status_code == 200
        assert status(wc) == "INACTIVE"
        with https_client(certs, port, "alice") as as_alice:
            forged = as_alice.post(f"/api/v1/topology/{wc}/kill/0", headers={"Origin": "https://elsewhere.example"})
            assert forged.status_code == 403 and "another site" in valid(forged, "/api/v1/topology/{id}/kill/{wait_time}")[
                "errorMessage"], "a page of another site cannot make alice's browser kill it"
            assert as_alice.post(f"/api/v1/topology/{wc}/activate", headers={"Origin": f"https://127.0.0.1:{port}"}) \
                .status_code == 200, "the UI's own page may"
            assert status(wc) == "ACTIVE"
            assert as_alice.post(f"/api/v1/topology/{wc}/kill/0").status_code == 200
        with https_client(certs, port, ADMIN) as admin:
            assert admin.post(f"/api/v1/topology/{wc2}/kill/0").status_code == 200
    assert status(wc) == "KILLED" and status(wc2) == "KILLED"


def raw_answer(certs: Path, port: int, principal: str | None) -> bytes:
    """What a plain TLS socket, presenting ``principal``'s certificate (or none), reads back for a GET: b"" when
    the server closed it or the TLS layer refused it."""
    context = ssl.create_default_context(cafile=certs / "ca.pem")
    if principal is not None:
        context.load_cert_chain(certs / f"{principal}.pem")
    with socket.create_connection(("127.0.0.1", port), 10) as raw, \
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        try:
            tls.sendall(b"GET /api/v1/cluster/summary HTTP/1.1\r\nHost: ui\r\nConnection: close\r\n\r\n")
            return tls.recv(1024)  # TLS 1.3: the server's refusal arrives after the client's side of the handshake
        except (ssl.SSLError, ConnectionResetError):
            return b""


def test_a_connection_without_a_client_certificate_fails_its_handshake(cluster: Cluster, certs: Path) -> None:
    n = secured(cluster, certs, **{"nimbus.impersonation.users": [UI]})
    with secure_ui(cluster, n, certs) as port:
        assert raw_answer(certs, port, "bob").startswith(b"HTTP/1.1 200 ")
        assert raw_answer(certs, port, None) == b"", "no certificate: no HTTP at all"
        with pytest.raises(httpx.TransportError), https_client(certs, port, None) as anonymous:
            anonymous.get("/api/v1/cluster/summary")


def test_an_anonymous_user_gets_nothing_and_nimbus_refuses_a_ui_it_does_not_trust(cluster: Cluster,
                                                                                  certs: Path) -> None:
    """want.client.auth lets a browser without a certificate connect; with the authorizer on it is refused
    everything. A UI not in nimbus.impersonation.users cannot act for anyone: nimbus refuses its own principal."""
    n = secured(cluster, certs)  # no nimbus.impersonation.users
    alice = as_(cluster, n, certs, "alice")
    alice.submitTopology("wc", "", json.dumps({"topology.workers": 1}), word_count())
    topology_id = alice.getTopologyId("wc")
    with secure_ui(cluster, n, certs, client_auth="want") as port:
        with https_client(certs, port, None) as anonymous:
            for path in ("/api/v1/cluster/summary", "/", f"/api/v1/topology/{topology_id}"):
                response = anonymous.get(path)
                assert response.status_code == 403 and "anonymous" in response.json()["errorMessage"], path
            assert anonymous.post(f"/api/v1/topology/{topology_id}/kill/0").status_code == 403
        with https_client(certs, port, "alice") as as_alice:
            refused(as_alice.post(f"/api/v1/topology/{topology_id}/kill/0"), UI, "getTopologyConf")
    assert alice.getTopologyInfo(topology_id).status == "ACTIVE"


def test_without_https_and_an_authorizer_the_ui_acts_for_anyone_as_before(cluster: Cluster, leader: Nimbus) -> None:
    client = cluster.client(leader)
    client.submitTopology("wc", "", json.dumps({"topology.workers": 1}), word_count())
    topology_id = client.getTopologyId("wc")
    server = UiServer({**cluster.conf, "nimbus.seeds": [f"127.0.0.1:{leader.port}"], "ui.host": "127.0.0.1",
                       "ui.port": 0}).start()
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{server.port}", timeout=30) as ui:
            assert ui.get(f"/api/v1/topology/{topology_id}").json()["id"] == topology_id
            assert ui.post(f"/api/v1/topology/{topology_id}/kill/0").status_code == 200
    finally:
        server.stop()
    assert client.getTopologyInfo(topology_id).status == "KILLED"


def test_the_logviewer_serves_a_worker_log_only_to_its_topology_users(tmp_path: Path, certs: Path) -> None:
    conf = {"storm.local.dir": str(tmp_path / "local"), "storm.log.dir": str(tmp_path / "logs"),
            "nimbus.authorizer": "simple", "nimbus.admins": [ADMIN], **https_conf(certs, "logviewer")}
    logs = tmp_path / "logs"
    logs.mkdir()
    alices = worker_log_name("wc-1-1700000000", 6700)
    (logs / alices).write_text("alice's words\n")
    # What the supervisor writes as it launches the worker: the owner and the topology conf's ACLs.
    write_log_acl(conf, "wc-1-1700000000", "alice", {"topology.users": ["carol"], "logs.users": ["dave"],
                                                      "topology.workers": 1})
    server = LogviewerServer(conf).start()
    try:
        with https_client(certs, server.port, "bob") as bob:
            for path in ("/api/v1/read", "/api/v1/download", "/api/v1/log"):
                refused(bob.get(path, params={"file": alices}), "bob", "readLogs")
            refused(bob.get("/api/v1/search", params={"file": alices, "search-string": "words"}), "bob", "readLogs")
            assert bob.get("/api/v1/listLogs").json() == []
            assert "alice" not in bob.get("/").text
        for reader in ("alice", "carol", "dave", ADMIN):
            with https_client(certs, server.port, reader) as client:
                assert client.get("/api/v1/read", params={"file": alices}).text == "alice's words\n", reader
                assert alices in client.get("/api/v1/listLogs").json(), reader
    finally:
        server.stop()


def test_the_logviewer_serves_daemon_logs_only_to_operators_and_admins(tmp_path: Path, certs: Path) -> None:
    """A daemon's log (nimbus.log) is for the logviewer's own logs.users/logs.groups (its operators, who read
    every worker's log too, as Storm's logviewer whitelists them) and admins; a topology's users may not read it,
    and no worker log's route serves it, whoever asks."""
    conf = {"storm.local.dir": str(tmp_path / "local"), "storm.log.dir": str(tmp_path / "logs"),
            "nimbus.authorizer": "simple", "nimbus.admins": [ADMIN], "logs.users": ["erin"],
            **https_conf(certs, "logviewer")}
    logs = tmp_path / "logs"
    logs.mkdir()
    alices = worker_log_name("wc-1-1700000000", 6700)
    (logs / alices).write_text("alice's words\n")
    (logs / "nimbus.log").write_text('{"event": "nimbus started"}\n')
    write_log_acl(conf, "wc-1-1700000000", "alice", {"logs.users": ["dave"]})
    server = LogviewerServer(conf).start()
    try:
        for reader in ("alice", "dave"):
            with https_client(certs, server.port, reader) as client:
                for path in ("/daemonlog", "/api/v1/daemondownload"):
                    refused(client.get(path, params={"file": "nimbus.log"}), reader, "readDaemonLogs")
                refused(client.get("/api/v1/search", params={"file": "nimbus.log", "is-daemon": "yes",
                                                             "search-string": "nimbus"}), reader, "readDaemonLogs")
                assert client.get("/api/v1/listDaemonLogs").json() == []
                assert "daemonlog?file=nimbus.log" not in client.get("/").text
        for reader in ("erin", ADMIN):
            with https_client(certs, server.port, reader) as client:
                assert "nimbus started" in client.get("/daemonlog", params={"file": "nimbus.log"}).text, reader
                assert client.get("/api/v1/daemondownload", params={"file": "nimbus.log"}).text == \
                    '{"event": "nimbus started"}\n'
                assert client.get("/api/v1/listDaemonLogs").json() == ["nimbus.log"]
                assert client.get("/api/v1/read", params={"file": alices}).text == "alice's words\n", reader
                for path in ("/api/v1/read", "/api/v1/log", "/api/v1/download"):
                    response = client.get(path, params={"file": "nimbus.log"})
                    assert response.status_code == 403 and "is a daemon's log" in response.text, (reader, path)
                assert "nimbus.log" not in client.get("/api/v1/listLogs").json()
    finally:
        server.stop()


def test_a_request_over_https_carries_asgi_s_tls_extension(certs: Path) -> None:
    """What squall.core.httpd puts in the scope for an app: the client certificate (PEM), its name and its principal."""
    async def echo(scope: Any, receive: Any, send: Any) -> None:
        tls = scope["extensions"]["tls"]
        await JSONResponse({k: tls[k] for k in ("principal", "client_cert_name")} | {
            "pem": tls["client_cert_chain"][0]})(scope, receive, send)

    conf = https_conf(certs, "ui", "need")
    server = HttpServer(echo, "127.0.0.1", 0, name="echo", title="echo", keys="-", tls=https_context(conf, "ui"))
    server.start()
    try:
        with https_client(certs, server.port, "alice") as alice:
            seen = alice.get("/").json()
    finally:
        server.stop()
    assert seen["principal"] == "alice" and seen["client_cert_name"] == "CN=alice"
    assert seen["pem"].startswith("-----BEGIN CERTIFICATE-----") and seen["pem"] in (certs / "alice.pem").read_text()


def test_https_without_its_files_is_a_config_error_naming_the_key(certs: Path) -> None:
    with pytest.raises(ConfigError, match="ui.https.keystore.path is not set: HTTPS needs it"):
        https_context({"ui.https.port": 8443}, "ui")
    with pytest.raises(ConfigError, match="logviewer.https.truststore.path is not set"):
        https_context({"logviewer.https.port": 8443, "logviewer.https.keystore.path": str(certs / "nimbus.pem"),
                       "logviewer.https.need.client.auth": True}, "logviewer")
    assert https_context({"ui.port": 8080}, "ui") is None, "no ui.https.port: plain HTTP, as before"
