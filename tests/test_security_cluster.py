"""The security profile on a process cluster (``storm nimbus`` + ``storm supervisor`` processes, real
ZooKeeper): what user code in a worker can see of the daemons' credentials, and Thrift over mutual TLS only."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pwd
import secrets
import shutil
import socket
import subprocess
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import psutil
import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import READ_ACL_UNSAFE, make_digest_acl
from streamparse.thrift import storm_thrift as sp
from thriftpy2.protocol import TBinaryProtocolFactory
from thriftpy2.rpc import make_client
from thriftpy2.transport import TFramedTransportFactory, TTransportException

from processcluster import REPO, ProcessCluster
from logviewer.server import LogviewerServer
from squall.api.dsl import Topology
from squall.api.submitter import submit_topology
from squall.cli.logs import logs
from squall.core.local_state import CODE_FILES, code_dir, stormdist_dir
from squall.core.nimbus_client import nimbus_client
from squall.core.package import build_package
from squall.core.thrift import storm
from squall.core.zk import paths
from squall.core.zk.client import ZkClient, connect_string
from squall.core.zk.errors import record_task_error
from squall.core.zk.records import TaskError, TopologyTasks
from squall.dev.zookeeper import free_port
from supervisor.venvs import environments_dir
from scenarios import counted_word_count, final_counts
from support import (filed_errors, listening, make_certs, open_parent_of_root, python_for_other_users, readable,
                     remove_as_daemons, tls_conf, wait_until, znodes_under)
from test_ui_auth import https_client, https_conf
from topologies import Paced, Snoop, Spy, read_records
from wire_entries import batch
from worker.handshake import Greeting, hello
from worker.wire import encode


def test_user_code_in_a_worker_finds_no_daemon_credential(zk_conf: dict[str, Any], tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The daemons authenticate to ZooKeeper (digest) and their environment holds a cloud secret. A spout reads
    its conf, its environment and the conf file its worker was started with: none holds the ZooKeeper password
    or the secret, while the allow-listed variables (PATH) are there. The worker still files its task errors,
    with its topology's own credential; an anonymous ZooKeeper session can neither read nor add one; killing the
    topology removes everything the worker wrote."""
    password, cloud = secrets.token_hex(12), f"daemon-only-{secrets.token_hex(8)}"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", cloud)  # the daemons' environment (DevCluster passes its own on)
    records = tmp_path / "records"
    records.mkdir()
    topology = Topology("snoop")
    topology.spout("snoop", Snoop, args=[str(records)])
    daemons = {"storm.zookeeper.auth.scheme": "digest", "storm.zookeeper.auth.payload": f"squall:{password}"}
    with ExitStack() as stack:
        stack.callback(remove_as_daemons, {**zk_conf, **daemons})  # last: the nodes are the daemons' to delete
        open_parent_of_root(zk_conf)
        cluster = ProcessCluster(zk_conf, tmp_path / "cluster", stack, **daemons)
        cluster.start_nimbus()
        cluster.start_supervisor("sup")
        cluster.wait_supervisors(1)
        topology_id = cluster.submit(topology)
        seen = wait_until(lambda: read_records(records, "seen"), 60, "the spout's report")[0]

        everything = json.dumps(seen)
        assert password not in everything and cloud not in everything
        assert not [key for key in seen["conf"] if key.endswith("auth.payload")]
        assert seen["env"]["PATH"] and "PYTHONPATH" in seen["env"]

        root = paths.task_errors_root(topology_id)
        [(task, errors)] = wait_until(lambda: filed_errors(cluster.zk, topology_id), 30,
                                      "the spout's error in ZooKeeper").items()
        assert errors == ["snooped"]
        anonymous = stack.enter_context(ZkClient(zk_conf))
        with pytest.raises(NoAuthError):
            filed_errors(anonymous, topology_id)
        with pytest.raises(NoAuthError):
            record_task_error(anonymous, topology_id, int(task), TaskError("forged", 1_700_000_000))

        assert cluster.cli("kill", "snoop", "-w", "0") == 0
        wait_until(lambda: not anonymous.exists(root), 60, "the topology's errors removed by nimbus")


def test_the_word_count_runs_with_thrift_over_mutual_tls_only(zk_conf: dict[str, Any], tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """The secure profile's Thrift: nimbus listens only on its TLS port. Submitting, the supervisor's code
    download and the workers' heartbeats all go through it with the daemons' certificate; the word count
    reaches its exact counts and its stats reach nimbus. ``storm list`` with alice's certificate works; without a
    certificate, and from a Storm 1.x client (streamparse), nimbus cannot be reached."""
    certs = make_certs(tmp_path / "certs", "squall-daemons", "alice")
    secure = {**tls_conf(certs, "squall-daemons"), "nimbus.thrift.tls.port": 0, "nimbus.thrift.tls.server.only": True}
    records = tmp_path / "records"
    topology, expected = counted_word_count(records, rounds=10, workers=2)
    with ExitStack() as stack:
        cluster = ProcessCluster(zk_conf, tmp_path / "cluster", stack, **secure)
        cluster.start_nimbus()
        cluster.start_supervisor("sup")
        cluster.wait_supervisors(1)
        topology_id = cluster.submit(topology)
        wait_until(lambda: final_counts(records) == expected, 90, "exact counts")
        tls_port = cluster.tls_ports["nimbus"]
        assert {port for _, port in listening(cluster.daemons["nimbus"].pid)} == {tls_port}, "no plain listener"

        def executed_at_nimbus() -> bool:
            with cluster.client() as client:
                info = client.getTopologyInfo(topology_id)
            return any(e.stats is not None and e.component_id == "count" for e in info.executors)
        wait_until(executed_at_nimbus, 60, "the workers' stats at nimbus (heartbeats over TLS)")

        seeds = {"nimbus.seeds": [f"127.0.0.1:{tls_port}"]}
        capsys.readouterr()
        assert cluster.cli("list", conf={**seeds, **tls_conf(certs, "alice")}) == 0
        assert "wordcount" in capsys.readouterr().out
        assert cluster.cli("list", conf=seeds) == 1
        assert "cannot reach nimbus" in capsys.readouterr().err
        storm_1 = make_client(sp.Nimbus, "127.0.0.1", tls_port, proto_factory=TBinaryProtocolFactory(),
                              trans_factory=TFramedTransportFactory(), timeout=5000)
        with pytest.raises(TTransportException):
            storm_1.getClusterInfo()
        storm_1.close()


@pytest.mark.slow  # a process cluster, a word count and a gray upgrade: about a minute
def test_the_secure_profile_end_to_end(zk_conf: dict[str, Any], tmp_path: Path,
                                       capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    """Every part of the secure profile at once: Thrift over mutual TLS only, the simple authorizer, ZooKeeper
    digests. Alice's word count reaches its exact counts and her gray upgrade completes (old and new workers
    authenticating to each other with the topology's transfer secret); bob may neither kill nor upgrade it
    (AuthorizationException), the admin may kill it; an anonymous ZooKeeper session can write no Squall znode and
    read none but the leader's address (nor what an earlier Squall left readable: nimbus closed it on taking the
    lead), a session with the topology's credential (its workers') reads only what
    they read; ``storm zktool`` with the daemons' conf reads everything, without it says what it lacks;
    a forged connection to a worker's port is refused and delivers nothing; the supervisor host's logviewer over
    HTTPS serves alice's worker log to her and not to bob."""
    certs = make_certs(tmp_path / "certs", "squall-daemons", "alice", "bob", "ops")
    secure = _secure_profile(certs)
    records = tmp_path / "records"
    topology, expected = counted_word_count(records, rounds=10, workers=2)
    with ExitStack() as stack:
        stack.callback(remove_as_daemons, {**zk_conf, **secure})  # last: the nodes are the daemons' to delete
        open_parent_of_root(zk_conf)  # other tests' roots go beside this one
        earlier = _made_by_an_earlier_squall({**zk_conf, **secure}, paths.assignment_bak("earlier"))
        cluster = ProcessCluster(zk_conf, tmp_path / "cluster", stack, **secure)
        cluster.start_nimbus()  # first: the daemons create every other node
        cluster.start_supervisor("sup")
        cluster.wait_supervisors(1)
        anonymous = stack.enter_context(ZkClient(zk_conf))
        seeds = {"nimbus.seeds": [f"127.0.0.1:{cluster.tls_ports['nimbus']}"]}

        def as_(user: str) -> dict[str, Any]:
            return {**cluster.conf, **tls_conf(certs, user), **seeds}

        def package(release: str) -> Path:
            return build_package((REPO / "tests" / "topologies.py", REPO / "examples"), tmp_path / f"{release}.zip")

        topology_id = submit_topology(as_("alice"), topology, package=package("v1"), zk=cluster.zk)
        wait_until(lambda: final_counts(records) == expected, 90, "exact counts")
        first_run = len(read_records(records, "seen"))
        # The supervisor host's logviewer over HTTPS: alice's worker log is hers, not bob's.
        logviewer = LogviewerServer({**cluster.conf, "storm.local.dir": str(cluster.root / "sup"),
                                     **https_conf(certs, "logviewer")}).start()
        stack.callback(logviewer.stop)
        with https_client(certs, logviewer.port, "alice") as alice_reads, \
                https_client(certs, logviewer.port, "bob") as bob_reads:
            (log_name, *_) = alice_reads.get("/api/v1/listLogs", params={"topoId": topology_id}).json()
            assert "worker runtime started" in alice_reads.get("/api/v1/read", params={"file": log_name}).text
            assert bob_reads.get("/api/v1/read", params={"file": log_name}).status_code == 403
            assert bob_reads.get("/api/v1/listLogs").json() == []
        for reader, code in (("alice", 0), ("bob", 1)):  # storm logs over HTTPS, with the reader's certificate
            capsysbinary.readouterr()
            args = argparse.Namespace(name="wordcount", component=None, follow=False, bytes=4096, json=False)
            assert logs({**as_(reader), "logviewer.https.port": logviewer.port}, args) == code
            printed = capsysbinary.readouterr()
            assert (b"==> 127.0.0.1:" in printed.out) == (reader == "alice"), printed
            assert (b"answered 403" in printed.err) == (reader == "bob"), printed
        with nimbus_client(as_("bob")) as bob:
            assert [t.owner for t in bob.getClusterInfo().topologies] == ["alice"]
            with pytest.raises(storm.AuthorizationException, match="'bob' may not killTopology"):
                bob.killTopologyWithOpts("wordcount", storm.KillOptions(wait_secs=0))

        assert submit_topology(as_("alice"), topology, package=package("v2"), zk=cluster.zk, conf_overrides={
            "topology.upgrade": True, "topology.upgrade.worker.num": 1}) == topology_id
        with nimbus_client(as_("bob")) as bob, pytest.raises(storm.AuthorizationException, match="completeUpgrade"):
            bob.completeUpgrade("wordcount")
        with nimbus_client(as_("alice")) as alice:
            wait_until(lambda: alice.getTopologyInfo(topology_id).status == "UPGRADING", 30, "the upgrade started")
            wait_until(lambda: _complete(alice), 60, "the first batch upgraded, then the rest asked for")
            wait_until(lambda: alice.getTopologyInfo(topology_id).status == "ACTIVE", 90, "the upgrade complete")
        assert cluster.assignment(topology_id).code_version == 2
        # Each restarted spout task emits its share again: every word counted once more, across both workers.
        wait_until(lambda: len(read_records(records, "seen")) >= 2 * first_run, 60, "the upgraded workers' counts")

        tasks = cluster.zk.read(paths.tasks(topology_id), TopologyTasks).tasks
        sink = min(t for t, info in tasks.items() if info.component == "sink")
        count = min(t for t, info in tasks.items() if info.component == "count")
        for worker in cluster.assignment(topology_id).workers:
            forged = socket.create_connection((worker.host, worker.port), timeout=10)
            forged.sendall(hello(topology_id))  # the right topology id, no proof of its secret
            assert "authenticate" in Greeting().feed(forged.recv(4096))[2]
            with contextlib.suppress(OSError):
                forged.sendall(encode(sink, batch(count, "default", [("forged", 10**6)])))
            try:  # closed by the worker: an EOF, or a reset when the forged batch was still unread at the close
                closed = forged.recv(4096) == b""
            except ConnectionResetError:
                closed = True
            assert closed, "closed by the worker"
            forged.close()

        kazoo = anonymous.kazoo
        nodes = ["/", *znodes_under(cluster.zk.kazoo)]
        assert {paths.topology(topology_id), earlier} < set(nodes) and len(nodes) > 10
        assert readable(kazoo, nodes) == [paths.NIMBUS_MASTER]
        worker_conf = json.loads((code_dir(cluster.daemon_conf("sup"), topology_id, 2) / CODE_FILES["conf"]).read_text())
        with ZkClient({**zk_conf, **worker_conf}) as as_worker:  # the topology's credential, not the daemons'
            assert "storm.zookeeper.topology.auth.payload" in worker_conf
            errors = [node for node in nodes if node.startswith(paths.task_errors_root(topology_id))]
            assert sorted(readable(as_worker.kazoo, nodes)) == sorted([
                paths.NIMBUS_MASTER, paths.topology(topology_id), paths.tasks(topology_id),
                paths.assignment(topology_id), *errors])
        capsysbinary.readouterr()
        assert cluster.cli("zktool", "get", paths.assignment(topology_id), conf=secure) == 0
        assert json.loads(capsysbinary.readouterr().out)["code_version"] == 2
        assert cluster.cli("zktool", "ls", paths.TOPOLOGIES, conf=secure) == 0
        assert capsysbinary.readouterr().out.decode().split() == [topology_id]
        assert cluster.cli("zktool", "ls", paths.TOPOLOGIES) == 1
        assert b"storm.zookeeper.auth" in capsysbinary.readouterr().err
        writable = [node for node in nodes for write in (lambda: kazoo.set(node, b"forged"),
                                                         lambda: kazoo.create(f"{node}/forged"))
                    if _succeeds(write, NoAuthError)]
        assert writable == [], "an anonymous ZooKeeper session wrote these"

        with nimbus_client(as_("ops")) as admin:
            admin.killTopologyWithOpts("wordcount", storm.KillOptions(wait_secs=0))
        wait_until(lambda: not cluster.zk.exists(paths.topology(topology_id)), 60, "the admin's kill done")
        assert "forged" not in {word for word, _ in read_records(records, "seen")}


def _secure_profile(certs: Path) -> dict[str, Any]:
    """The secure profile's keys: Thrift over mutual TLS only, the simple authorizer (admin ``ops``), digests."""
    return {**tls_conf(certs, "squall-daemons"), "nimbus.thrift.tls.port": 0, "nimbus.thrift.tls.server.only": True,
            "nimbus.authorizer": "simple", "nimbus.admins": ["ops"], "nimbus.supervisor.users": ["squall-daemons"],
            "storm.zookeeper.auth.scheme": "digest", "storm.zookeeper.auth.payload": f"squall:{secrets.token_hex(12)}"}


def _local_users(stack: ExitStack, *names: str) -> dict[str, pwd.struct_passwd]:
    """Create OS users (no home, no login) for this test; removed when ``stack`` closes."""
    for name in names:
        subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name], check=True,
                       capture_output=True, timeout=30)
        stack.callback(subprocess.run, ["userdel", name], check=False, capture_output=True, timeout=30)
    return {name: pwd.getpwnam(name) for name in names}


@pytest.mark.slow  # two local users, a process cluster, a word count: about a minute
@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("useradd") is None,
                    reason="supervisor.run.worker.as.user needs root (and useradd to create the test's users)")
def test_workers_run_as_their_topologys_owner(zk_conf: dict[str, Any], open_dir: Path) -> None:
    """supervisor.run.worker.as.user in the secure profile: alice's and bob's topologies run as their OS users.
    A spout of alice's word count cannot read the supervisor's storm.yaml (its ZooKeeper password), the daemons'
    private key, nor bob's code directory or conf; the word count still reaches its exact counts and its stats
    still reach nimbus (relayed by the supervisor, since the workers hold no credential nimbus takes beats
    from); every worker process has its owner's uid. A topology whose owner has no OS user here gets no worker
    and a task error saying so."""
    python, missing = python_for_other_users()
    if python is None:
        pytest.skip(f"no Python other users can run Squall's workers on: {missing}")
    tag = secrets.token_hex(3)
    alice, bob, nobody = f"sqa{tag}", f"sqb{tag}", f"sqn{tag}"  # TLS principals; the first two get OS users
    base = open_dir  # not tmp_path: workers run as other users, who cannot enter it
    with ExitStack() as stack:
        users = _local_users(stack, alice, bob)
        certs = make_certs(base / "certs", "squall-daemons", alice, bob, nobody, "ops")
        secure = {**_secure_profile(certs), "supervisor.run.worker.as.user": True, "supervisor.worker.python": python}
        records = base / "records"
        topology, expected = counted_word_count(records, rounds=10, workers=2)
        records.chmod(0o1777)  # alice's sink and spy record here
        stack.callback(remove_as_daemons, {**zk_conf, **secure})
        open_parent_of_root(zk_conf)
        cluster = ProcessCluster(zk_conf, base / "cluster", stack, **secure)
        cluster.start_nimbus()
        cluster.start_supervisor("sup", [free_port() for _ in range(4)])
        cluster.wait_supervisors(1)
        seeds = {"nimbus.seeds": [f"127.0.0.1:{cluster.tls_ports['nimbus']}"]}
        package = build_package((REPO / "tests" / "topologies.py", REPO / "examples"), base / "code.zip")

        idle = Topology("bobs", conf={"topology.workers": 1})
        idle.spout("paced", Paced, args=[1.0])
        bobs = submit_topology({**cluster.conf, **tls_conf(certs, bob), **seeds}, idle, package=package, zk=cluster.zk)
        wait_until(lambda: [r.topology_id for r in cluster.workers("sup")] == [bobs], 60, "bob's worker")
        bobs_code = stormdist_dir(cluster.daemon_conf("sup")) / bobs
        secrets_of_others = [str(cluster.root / "sup.yaml"), str(certs / "squall-daemons.pem"), str(bobs_code),
                             str(bobs_code / "1" / "conf.json"), str(environments_dir(cluster.daemon_conf("sup")))]
        topology.spout("spy", Spy, args=[str(records), secrets_of_others])
        alices = submit_topology({**cluster.conf, **tls_conf(certs, alice), **seeds}, topology, package=package,
                                 zk=cluster.zk)
        wait_until(lambda: final_counts(records) == expected, 90, "exact counts")
        [spied] = wait_until(lambda: read_records(records, "spied"), 30, "the spy's report")
        assert spied == {path: "PermissionError" for path in secrets_of_others}

        owners = {alices: users[alice].pw_uid, bobs: users[bob].pw_uid}
        workers = cluster.workers("sup")
        assert sorted(r.topology_id for r in workers) == sorted([alices, alices, bobs])
        assert {r.worker_id: psutil.Process(r.pid).uids().real for r in workers} == \
            {r.worker_id: owners[r.topology_id] for r in workers}

        def executed_at_nimbus() -> bool:
            with nimbus_client({**cluster.conf, **tls_conf(certs, alice), **seeds}) as client:
                info = client.getTopologyInfo(alices)
            return any(e.stats is not None and e.component_id == "count" for e in info.executors)
        wait_until(executed_at_nimbus, 60, "the workers' stats at nimbus (relayed by the supervisor)")

        unowned = Topology("orphan", conf={"topology.workers": 1})
        unowned.spout("paced", Paced, args=[1.0])
        orphan = submit_topology({**cluster.conf, **tls_conf(certs, nobody), **seeds}, unowned, package=package,
                                 zk=cluster.zk)
        errors = wait_until(lambda: filed_errors(cluster.zk, orphan), 30, "the orphan's error")
        [error] = errors[min(errors)]
        assert "not started" in error and f"has no local user {nobody!r}" in error and f"useradd {nobody}" in error
        assert orphan not in {r.topology_id for r in cluster.workers("sup")}


def _made_by_an_earlier_squall(daemon_conf: dict[str, Any], path: str) -> str:
    """Create ``path`` (and the root) as Squall did before it closed its nodes: the daemons all, everyone read."""
    user, password = daemon_conf["storm.zookeeper.auth.payload"].split(":", 1)
    earlier = KazooClient(hosts=connect_string(daemon_conf, with_root=False), auth_data=[("digest", f"{user}:{password}")])
    earlier.start(timeout=10)
    try:
        earlier.create(daemon_conf["storm.zookeeper.root"] + path, makepath=True,
                       acl=[make_digest_acl(user, password, all=True), *READ_ACL_UNSAFE])
    finally:
        earlier.stop()
        earlier.close()
    return path


def _succeeds(call: Any, refusal: type[Exception]) -> bool:
    try:
        call()
        return True
    except refusal:
        return False


def _complete(client: Any) -> bool:
    """Ask for the rest of the upgrade; False while the first batch is still being upgraded."""
    try:
        client.completeUpgrade("wordcount")
        return True
    except storm.InvalidTopologyException:
        return False
