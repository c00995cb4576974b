"""squall.core.thrift's transport, server and client helpers over real loopback sockets.

The "Storm client" here is streamparse's own ``get_nimbus_client`` (Storm 1.x IDL, framed +
binary), so these tests show what an unmodified Storm tool sees when it talks to Squall.
"""

from __future__ import annotations

import select
import socket
import struct
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from streamparse.thrift import storm_thrift as sp
from streamparse.util import get_nimbus_client
from thriftpy2.thrift import TApplicationException
from thriftpy2.transport import TTransportException
from thriftpy2.utils import serialize

from squall.core.thrift import storm
from squall.core.thrift.client import NimbusUnavailable, connect, find_leader
from squall.core.thrift.server import make_server
from squall.core.thrift.transport import BoundedFramedTransportFactory, FrameSizeError
from support import wait_until

HOST = "127.0.0.1"
CAP = 1_048_576
DEADLINE_SECS = 5.0


def leader_summary(host="nimbus-2.example", port=6627):
    return storm.NimbusSummary(host=host, port=port, uptime_secs=120, isLeader=True,
                               version="2.6.0")


def cluster_summary(n_topologies=1):
    return storm.ClusterSummary(
        supervisors=[storm.SupervisorSummary(host="sup-1", uptime_secs=10, num_workers=4,
                                             num_used_workers=1, supervisor_id="s1")],
        topologies=[storm.TopologySummary(id=f"t{i}-1-1700000000", name=f"t{i}", num_tasks=3,
                                          num_executors=3, num_workers=1, uptime_secs=5,
                                          status="ACTIVE")
                    for i in range(n_topologies)],
        nimbuses=[leader_summary()],
    )


class Handler:
    """A tiny Nimbus: a few calls answer, a few fail in the ways a real handler can."""

    def __init__(self, leader=None, topologies=1):
        self.leader = leader or leader_summary()
        self.topologies = topologies

    def getLeader(self):
        return self.leader

    def getClusterInfo(self):
        return cluster_summary(self.topologies)

    def getTopologyInfo(self, id):
        raise storm.NotAliveException(msg=f"no topology with id {id}")

    def activate(self, name):
        raise RuntimeError(f"state store exploded while activating {name}")

    def getNimbusConf(self):
        return 12345  # wrong type: the IDL says string

    # isTopologyNameAllowed is deliberately missing


class FailingLeaderHandler(Handler):
    def getLeader(self):
        raise RuntimeError("no leader elected yet")


@pytest.fixture
def servers():
    """Start servers on free ports; all are stopped at teardown."""
    started = []

    def start(handler=None, **kwargs):
        kwargs.setdefault("max_frame_bytes", CAP)
        kwargs.setdefault("client_timeout_ms", 30_000)  # far beyond any wait below
        server = make_server(handler or Handler(), HOST, 0, **kwargs).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def server(servers):
    return servers()


@pytest.fixture
def storm_client():
    """streamparse's Nimbus client, exactly as `sparse` builds it."""
    opened = []

    def open_(port):
        client = get_nimbus_client(host=HOST, port=port, timeout=int(DEADLINE_SECS * 1000))
        opened.append(client)
        return client

    yield open_
    for client in opened:
        client.close()


@pytest.fixture
def dead_port():
    """A port that refuses connections: bound (so nobody else takes it) but not listening."""
    sock = socket.socket()
    sock.bind((HOST, 0))
    yield sock.getsockname()[1]
    sock.close()


def wait_closed_by_peer(sock: socket.socket) -> None:
    """Block until the peer closes `sock`; fail if that takes longer than the deadline."""
    sock.settimeout(DEADLINE_SECS)
    try:
        data = sock.recv(64)
    except ConnectionResetError:
        return
    except TimeoutError:
        pytest.fail(f"server did not close the connection within {DEADLINE_SECS}s")
    assert data == b"", f"expected the server to hang up, got {data!r}"


# ------------------------------------------------------------------------------------------------
# A Storm client against our server
# ------------------------------------------------------------------------------------------------


def test_storm_client_reads_cluster_info_and_leader(server, storm_client):
    client = storm_client(server.port)
    info = client.getClusterInfo()
    assert isinstance(info, sp.ClusterSummary)
    assert serialize(info) == serialize(cluster_summary())
    assert [t.name for t in info.topologies] == ["t0"]
    leader = client.getLeader()
    assert (leader.host, leader.port, leader.isLeader, leader.version) == (
        "nimbus-2.example", 6627, True, "2.6.0")


def test_declared_exception_reaches_storm_client_typed(server, storm_client):
    client = storm_client(server.port)
    with pytest.raises(sp.NotAliveException) as excinfo:
        client.getTopologyInfo("wordcount-9-1")
    assert excinfo.value.msg == "no topology with id wordcount-9-1"
    assert client.getLeader().host == "nimbus-2.example"  # connection still usable


def test_undeclared_error_is_internal_error_and_connection_survives(servers, storm_client):
    server = servers()
    client = storm_client(server.port)
    with pytest.raises(TApplicationException) as excinfo:
        client.activate("wordcount")
    assert excinfo.value.type == TApplicationException.INTERNAL_ERROR
    assert "Internal error processing activate" in excinfo.value.message
    assert "state store exploded while activating wordcount" in excinfo.value.message
    # Same connection, then a second client: the server is still there.
    assert client.getLeader().host == "nimbus-2.example"
    assert storm_client(server.port).getClusterInfo().topologies[0].name == "t0"


def test_wrong_return_type_is_internal_error_not_a_broken_frame(server, storm_client):
    client = storm_client(server.port)
    with pytest.raises(TApplicationException) as excinfo:
        client.getNimbusConf()
    assert excinfo.value.type == TApplicationException.INTERNAL_ERROR
    assert "getNimbusConf" in excinfo.value.message
    assert client.getLeader().host == "nimbus-2.example"


def test_unimplemented_call_is_unknown_method(server, storm_client):
    client = storm_client(server.port)
    with pytest.raises(TApplicationException) as excinfo:
        client.isTopologyNameAllowed("wordcount")
    assert excinfo.value.type == TApplicationException.UNKNOWN_METHOD
    assert client.getLeader().host == "nimbus-2.example"


def test_our_client_talks_to_our_server(server):
    with connect(HOST, server.port, timeout_ms=int(DEADLINE_SECS * 1000)) as client:
        assert client.getClusterInfo() == cluster_summary()
        with pytest.raises(storm.NotAliveException):
            client.getTopologyInfo("x")


# ------------------------------------------------------------------------------------------------
# Frame cap
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("declared", [2_000_000_000, CAP + 1, 0, -1])
def test_bad_frame_header_is_refused_while_others_are_served(server, storm_client, declared):
    before = storm_client(server.port)
    assert before.getLeader().host == "nimbus-2.example"

    with socket.create_connection((HOST, server.port), timeout=DEADLINE_SECS) as raw:
        # Only the header: an uncapped server would wait for the payload until client_timeout.
        raw.sendall(struct.pack("!i", declared))
        wait_closed_by_peer(raw)

    assert before.getLeader().host == "nimbus-2.example"
    assert storm_client(server.port).getClusterInfo().topologies[0].name == "t0"


def test_client_refuses_reply_over_its_cap(servers):
    server = servers(Handler(topologies=50))
    with connect(HOST, server.port, max_frame_bytes=256) as client:
        with pytest.raises(FrameSizeError, match="256"):
            client.getClusterInfo()
    with connect(HOST, server.port) as client:  # the server is unaffected
        assert len(client.getClusterInfo().topologies) == 50


class ScriptedTransport:
    """An in-memory transport that hands out at most `chunk` bytes per read."""

    def __init__(self, data: bytes, chunk: int) -> None:
        self.data, self.chunk, self.pos = data, chunk, 0

    def read(self, sz: int) -> bytes:
        if self.pos >= len(self.data):
            raise TTransportException(TTransportException.END_OF_FILE, "script exhausted")
        out = self.data[self.pos : self.pos + min(sz, self.chunk)]
        self.pos += len(out)
        return out

    def write(self, buf: bytes) -> None:
        pass

    def flush(self) -> None:
        pass

    def is_open(self) -> bool:
        return True

    def open(self) -> None:
        pass

    def close(self) -> None:
        pass


def frame(payload: bytes) -> bytes:
    return struct.pack("!i", len(payload)) + payload


@pytest.mark.parametrize("chunk", [1, 3, 4, 5, 4096])
def test_frames_up_to_the_cap_pass_however_reads_are_split(chunk):
    cap = 64
    payloads = [bytes(range(cap)), b"hello", b"x" * 63]
    scripted = ScriptedTransport(b"".join(frame(p) for p in payloads), chunk)
    trans = BoundedFramedTransportFactory(cap).get_transport(scripted)
    for payload in payloads:
        assert trans.read(len(payload)) == payload


@pytest.mark.parametrize("chunk", [1, 3, 4096])
def test_frame_over_the_cap_fails_on_its_header(chunk):
    cap = 64
    # A good frame, then a header one byte over the cap and no payload at all: the guard must
    # fail on the header itself (a plain framed transport would report end of file instead).
    scripted = ScriptedTransport(frame(b"ok") + struct.pack("!i", cap + 1), chunk)
    trans = BoundedFramedTransportFactory(cap).get_transport(scripted)
    assert trans.read(2) == b"ok"
    with pytest.raises(FrameSizeError, match=r"refused a Thrift frame of 65 bytes.*1 to 64"):
        trans.read(1)


def test_factory_rejects_nonsense_caps():
    for cap in (0, -1, 2**31):
        with pytest.raises(ValueError):
            BoundedFramedTransportFactory(cap)


# ------------------------------------------------------------------------------------------------
# Leader discovery
# ------------------------------------------------------------------------------------------------


def test_find_leader_skips_a_dead_first_seed(server, dead_port):
    seeds = [f"{HOST}:{dead_port}", HOST]
    assert find_leader(seeds, server.port, timeout_ms=2000) == ("nimbus-2.example", 6627)


def test_find_leader_skips_seeds_that_fail_or_hang(servers, dead_port):
    failing = servers(FailingLeaderHandler())
    good = servers(Handler(leader=leader_summary("nimbus-3.example", 7627)))
    hanging = socket.socket()  # listens but never accepts: connect works, the reply never comes
    hanging.bind((HOST, 0))
    hanging.listen(1)
    try:
        seeds = [f"{HOST}:{dead_port}", f"{HOST}:{failing.port}",
                 f"{HOST}:{hanging.getsockname()[1]}", f"{HOST}:{good.port}"]
        started = time.monotonic()
        assert find_leader(seeds, 1, timeout_ms=300) == ("nimbus-3.example", 7627)
        assert time.monotonic() - started < DEADLINE_SECS
    finally:
        hanging.close()


def test_find_leader_names_every_seed_when_none_answers(dead_port):
    other = socket.socket()
    other.bind((HOST, 0))
    try:
        seeds = [f"{HOST}:{dead_port}", f"{HOST}:{other.getsockname()[1]}"]
        with pytest.raises(NimbusUnavailable) as excinfo:
            find_leader(seeds, 6627, timeout_ms=1000)
    finally:
        other.close()
    assert excinfo.value.seeds == seeds
    assert set(excinfo.value.errors) == set(seeds)
    for seed in seeds:
        assert seed in str(excinfo.value)
    assert "Could not connect" in str(excinfo.value)


def test_find_leader_without_seeds():
    with pytest.raises(NimbusUnavailable, match="no seeds"):
        find_leader([], 6627, timeout_ms=1000)


# ------------------------------------------------------------------------------------------------
# Server lifecycle
# ------------------------------------------------------------------------------------------------


def test_stop_closes_listener_and_open_connections(storm_client):
    server = make_server(Handler(), HOST, 0, CAP, 30_000).start()
    client = storm_client(server.port)
    assert client.getLeader().host == "nimbus-2.example"
    port = server.port

    assert server.is_serving

    server.stop()

    assert not server.is_serving
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((HOST, port), timeout=DEADLINE_SECS).close()
    with pytest.raises((TTransportException, OSError)):  # EOF or reset: either way, gone
        client.getLeader()
    server.stop()  # a second stop is harmless


def test_stop_before_start():
    server = make_server(Handler(), HOST, 0, CAP, 30_000)
    port = server.port
    server.stop()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((HOST, port), timeout=DEADLINE_SECS).close()


def test_port_in_use_is_an_error(server):
    # thriftpy2's own server socket sets SO_REUSEPORT and would silently share the port.
    with pytest.raises(OSError):
        make_server(Handler(), HOST, server.port, CAP, 30_000)


def test_idle_connection_is_closed_after_client_timeout(servers):
    server = servers(client_timeout_ms=200)
    with socket.create_connection((HOST, server.port), timeout=DEADLINE_SECS) as raw:
        wait_closed_by_peer(raw)
    with connect(HOST, server.port) as client:
        assert client.getLeader().host == "nimbus-2.example"


def test_a_new_client_takes_the_slot_of_the_longest_idle_connection(servers):
    server = servers(max_connections=2)
    with socket.create_connection((HOST, server.port)) as oldest, socket.create_connection((HOST, server.port)) as b:
        wait_until(lambda: server.connections == 2, DEADLINE_SECS, "both idle connections accepted")
        with connect(HOST, server.port) as client:  # a third: served at once, not locked out by the idle two
            assert client.getLeader().host == "nimbus-2.example"
        wait_closed_by_peer(oldest)
        b.settimeout(0.2)
        with pytest.raises(TimeoutError):  # the younger idle one keeps its slot
            b.recv(1)


class BlockingHandler(Handler):
    """getClusterInfo waits until the test lets it go: a call that holds its connection mid-call."""

    def __init__(self):
        super().__init__()
        self.entered = threading.Semaphore(0)
        self.release = threading.Event()

    def getClusterInfo(self):
        self.entered.release()
        self.release.wait(DEADLINE_SECS)
        return super().getClusterInfo()


def test_connections_mid_call_are_never_evicted_and_a_newcomer_is_refused(servers):
    handler = BlockingHandler()
    server = servers(handler, max_connections=2)
    with ThreadPoolExecutor(2) as pool:
        def call():
            with connect(HOST, server.port) as client:
                return len(client.getClusterInfo().topologies)

        calls = [pool.submit(call) for _ in range(2)]
        for _ in calls:
            assert handler.entered.acquire(timeout=DEADLINE_SECS)
        with connect(HOST, server.port) as client:  # every slot owes a reply: hung up on
            with pytest.raises((TTransportException, ConnectionError)):
                client.getLeader()
        handler.release.set()
        assert [c.result(DEADLINE_SECS) for c in calls] == [1, 1]


def test_a_request_trickling_in_is_cut_off_at_the_request_deadline(servers):
    server = servers(request_timeout_ms=300)
    with socket.create_connection((HOST, server.port), timeout=DEADLINE_SECS) as slow:
        slow.sendall(struct.pack("!i", 1000))
        started = time.monotonic()
        while time.monotonic() - started < DEADLINE_SECS:  # a byte every 50 ms: no single read ever waits long
            try:
                slow.sendall(b"\x80")
            except (BrokenPipeError, ConnectionResetError):
                break
            if select.select([slow], [], [], 0.05)[0]:
                wait_closed_by_peer(slow)
                break
        elapsed = time.monotonic() - started
    assert elapsed < 2.0, f"a trickling request held its connection for {elapsed:.1f} s past a 0.3 s deadline"
    with connect(HOST, server.port) as client:
        assert client.getLeader().host == "nimbus-2.example"
