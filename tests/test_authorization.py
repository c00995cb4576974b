"""Authorization on nimbus: Storm's simple ACLs decided on the TLS client certificate's principal, over
real mutual-TLS sockets, a real ZooKeeper and certificates from deploy/make-certs.sh."""

from __future__ import annotations

import grp
import json
import os
import pwd
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nimbus.daemon import Nimbus
from squall.core.auth import Authorizer, TopologyAcl
from squall.core.config.validation import ConfigError
from squall.core.thrift import storm
from squall.core.thrift.client import connect
from squall.core.tls import client_context
from support import make_certs, tls_conf, wait_until
from test_cli import run, storm_cli
from test_nimbus import Cluster, cluster, submit, word_count  # noqa: F401  (fixtures)

ADMIN, DAEMONS = "ops", "squall-daemons"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_certs(tmp_path_factory.mktemp("certs"), "alice", "bob", "carol", ADMIN, DAEMONS)


def secured(cluster: Cluster, certs: Path, **acl: Any) -> Nimbus:
    """A leading nimbus with the TLS listener beside the plain port and the simple authorizer."""
    cluster.conf.update(tls_conf(certs, DAEMONS), **{
        "nimbus.thrift.tls.port": 0, "nimbus.authorizer": "simple", "nimbus.admins": [ADMIN],
        "nimbus.supervisor.users": [DAEMONS], **acl})
    n = cluster.nimbus()
    wait_until(lambda: n.is_leader, what="nimbus to lead")
    cluster.supervisor(1)
    cluster.supervisor(2)
    return n


def as_(cluster: Cluster, n: Nimbus, certs: Path, principal: str) -> Any:
    """A client of ``n``'s TLS listener presenting ``principal``'s certificate."""
    return cluster.stack.enter_context(connect("127.0.0.1", n.tls_server.port, 30_000,
                                               tls=client_context(tls_conf(certs, principal))))


def refused(call: Callable[[], Any], principal: str, operation: str) -> None:
    with pytest.raises(storm.AuthorizationException) as caught:
        call()
    assert f"'{principal}'" in caught.value.msg and operation in caught.value.msg, caught.value.msg


def test_only_the_owner_its_topology_users_and_admins_operate_a_topology(cluster: Cluster, certs: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    n = secured(cluster, certs)
    alice = as_(cluster, n, certs, "alice")
    alice.submitTopology("wc", "", json.dumps({"topology.workers": 2, "topology.users": ["carol"]}), word_count())
    topology_id = alice.getTopologyId("wc")
    bob = as_(cluster, n, certs, "bob")
    (summary,) = bob.getClusterInfo().topologies  # the cluster's status is for everyone to read
    assert summary.owner == "alice" and bob.getTopologyInfo(topology_id).owner == "alice"

    for operation, call in {
        "killTopology": lambda: bob.killTopologyWithOpts("wc", storm.KillOptions(wait_secs=0)),
        "rebalance": lambda: bob.rebalance("wc", storm.RebalanceOptions(wait_secs=0, num_workers=1)),
        "deactivate": lambda: bob.deactivate("wc"),
        "activate": lambda: bob.activate("wc"),
        "getTopologyConf": lambda: bob.getTopologyConf(topology_id),
        "getUserTopology": lambda: bob.getUserTopology(topology_id),
        "getTopology": lambda: bob.getTopology(topology_id),
        "fileDownload": lambda: bob.beginCodeDownload(topology_id, "conf"),
        "graySubmit": lambda: bob.graySubmit("wc", "", "{}", word_count(), storm.GrayUpgradeOptions(worker_num=1)),
        "rollbackTopology": lambda: bob.rollbackTopology("wc"),
        "completeUpgrade": lambda: bob.completeUpgrade("wc"),
        "updateTopology": lambda: bob.updateTopology("wc", "", "{}"),
        "restart": lambda: bob.restart("wc", "{}"),
        "hotDeploy": lambda: bob.submitTopology("wc", "", json.dumps({"topology.hot.deploy.enable": True}),
                                                word_count()),
        "setHostInBlackList": lambda: bob.setHostInBlackList("host-1"),
    }.items():
        refused(call, "bob", operation)
    assert alice.getTopologyInfo(topology_id).status == "ACTIVE", "nothing bob tried took effect"

    carol = as_(cluster, n, certs, "carol")  # in the topology's topology.users
    carol.deactivate("wc")
    assert json.loads(carol.getTopologyConf(topology_id))["topology.users"] == ["carol"]
    daemons = as_(cluster, n, certs, DAEMONS)  # supervisors and other nimbuses fetch code, and nothing else
    assert json.loads(daemons.downloadChunk(daemons.beginCodeDownload(topology_id, "conf")))["topology.id"] == \
        topology_id
    refused(lambda: daemons.killTopology("wc"), DAEMONS, "killTopology")

    code, out, _ = run(capsys, storm_cli(cluster, n, "list"))  # on the plain port: no principal needed to read
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith(("Topology_name", "wc "))}
    assert code == 0 and rows["Topology_name"][-1] == "Owner" and rows["wc"][-1] == "alice"
    anonymous = cluster.client(n)
    with pytest.raises(storm.AuthorizationException, match="anonymous caller .* may not killTopology"):
        anonymous.killTopology("wc")
    with pytest.raises(storm.AuthorizationException, match="anonymous caller .* may not submitTopology"):
        anonymous.submitTopology("other", "", "{}", word_count())

    as_(cluster, n, certs, ADMIN).killTopologyWithOpts("wc", storm.KillOptions(wait_secs=0))
    assert bob.getClusterInfo().topologies[0].status == "KILLED"


def test_nimbus_users_decide_who_submits_and_a_hot_deploy_keeps_the_owner(cluster: Cluster, certs: Path) -> None:
    n = secured(cluster, certs, **{"nimbus.users": ["alice", "carol"]})
    refused(lambda: as_(cluster, n, certs, "bob").submitTopology("wc", "", "{}", word_count()), "bob",
            "submitTopology")
    refused(lambda: as_(cluster, n, certs, "bob").beginFileUpload(), "bob", "fileUpload")
    alice = as_(cluster, n, certs, "alice")
    alice.submitTopology("wc", "", json.dumps({"topology.users": ["carol"]}), word_count())
    carol = as_(cluster, n, certs, "carol")
    carol.submitTopology("wc", "", json.dumps({"topology.hot.deploy.enable": True, "topology.users": ["carol"]}),
                         word_count())
    (summary,) = carol.getClusterInfo().topologies
    assert summary.owner == "alice", "a topology user replacing the code does not take the topology over"


def test_without_an_authorizer_every_caller_may_do_everything_and_the_owner_is_still_recorded(
        cluster: Cluster, certs: Path) -> None:
    cluster.conf.update(tls_conf(certs, DAEMONS), **{"nimbus.thrift.tls.port": 0})
    n = cluster.nimbus()
    wait_until(lambda: n.is_leader, what="nimbus to lead")
    cluster.supervisor(1)
    as_(cluster, n, certs, "alice").submitTopology("wc", "", "{}", word_count())
    topology_id = submit(cluster, n, "plain")  # a Storm 1.x client on the plain port: no owner
    owners = {t.name: t.owner for t in cluster.client(n).getClusterInfo().topologies}
    assert owners == {"wc": "alice", "plain": None}
    assert json.loads(as_(cluster, n, certs, "bob").getTopologyConf(topology_id))["topology.id"] == topology_id
    as_(cluster, n, certs, "bob").killTopologyWithOpts("wc", storm.KillOptions(wait_secs=0))


def test_an_authorizer_without_a_tls_listener_is_a_config_error(cluster: Cluster) -> None:
    cluster.conf["nimbus.authorizer"] = "simple"
    with pytest.raises(ConfigError, match="nimbus.authorizer is set but nimbus.thrift.tls.port is not"):
        cluster.nimbus()


def test_topology_groups_are_the_principals_local_groups() -> None:
    """A principal that names a local user is in that user's groups (as ``id -Gn``); one that names nobody is in
    none."""
    me, my_group = pwd.getpwuid(os.getuid()).pw_name, grp.getgrgid(os.getgid()).gr_name
    acl = Authorizer({"nimbus.authorizer": "simple"})
    topology = TopologyAcl("wc-1-1", "alice", {"topology.groups": [my_group]})
    assert acl.permits(me, "killTopology", topology)
    assert not acl.permits("no-such-user-here", "killTopology", topology)
    assert not acl.permits(me, "killTopology", TopologyAcl("wc-1-1", "alice", {"topology.groups": ["nobody-grp"]}))
