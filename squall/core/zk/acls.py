"""Who may do what on each znode Squall creates: the one place that decides ZooKeeper ACLs.

A session authenticates with the daemons' ``storm.zookeeper.auth.*`` or, in a worker (which never gets those),
its topology's ``storm.zookeeper.topology.auth.*``. Without either, every node is open, as in Storm's default.
With one, as in Storm's secure mode (its ClusterUtils topology ACLs, enforced by AclEnforcement), the world gets
nothing it does not need:

====================================================================  ==========================================
nodes                                                                 ACL
====================================================================  ==========================================
``/topology/<id>``, ``/tasks/<id>``, ``/assignments/<id>``,           daemons all, the topology's digest read
``/logconfigs/<id>``                                                  (its workers read and watch them)
``/taskerrors/<id>`` and below                                        daemons all, the topology's digest all
                                                                      (its workers file and trim errors there)
``/nimbus_master``                                                    daemons all, everyone read (workers find
                                                                      the leader there; an address, no secret)
everything else: the root and its parents, ``/supervisors``,          daemons all
``/nimbus_slave``, ``/taskbeats``, ``/code``, ``/gray_upgrade``, ...
====================================================================  ==========================================

"Daemons" is the creating session's digest (Storm's CREATOR_ALL) and ``storm.zookeeper.superACL`` when set.
A node below ``/taskerrors/<id>`` copies that node's ACL, since a worker filing an error cannot name the
daemons' digest. A topology whose stored conf has no credential (submitted before the daemons authenticated)
gets daemons-only nodes; its workers, which have no credential either, cannot read them.

    policy = AclPolicy(nimbus_conf, topology_conf=lambda topology_id: stored_conf[topology_id])
    policy.acl("/assignments/wc-1-1700000000", inherited=lambda path: None)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kazoo.security import ACL, OPEN_ACL_UNSAFE, READ_ACL_UNSAFE, Id, Permissions, make_digest_acl

from squall.core.zk import paths

_DAEMONS, _TOPOLOGY = "storm.zookeeper.auth", "storm.zookeeper.topology.auth"
SUPER_ACL = "storm.zookeeper.superACL"

#: A topology's nodes its workers read (Storm's read-only topology children).
TOPOLOGY_READ = (paths.TOPOLOGIES, paths.TASKS, paths.ASSIGNMENTS, paths.LOG_CONFIGS)
#: A topology's subtrees its workers write (Storm's read-write topology children).
TOPOLOGY_WRITE = (paths.TASKERRORS,)
#: The nodes any session may read.
WORLD_READ = (paths.NIMBUS_MASTER,)

#: The conf (with its ZooKeeper credential) of a topology by id; None when unknown.
TopologyConfs = Callable[[str], "Mapping[str, Any] | None"]


def credential(conf: Mapping[str, Any], prefixes: tuple[str, ...] = (_DAEMONS, _TOPOLOGY)) -> tuple[str, str] | None:
    """(scheme, payload) a session authenticates with: the daemons' ``storm.zookeeper.auth.*``, else (a worker,
    which never gets those) its topology's ``storm.zookeeper.topology.auth.*``; None without either."""
    for prefix in prefixes:
        scheme, payload = conf.get(f"{prefix}.scheme"), conf.get(f"{prefix}.payload")
        if scheme and payload:
            if scheme != "digest" or ":" not in payload:
                raise ValueError(f"{prefix}.scheme must be 'digest' with payload 'user:password'")
            return scheme, payload
    return None


def _digest(payload: str, *, read_only: bool = False) -> ACL:
    user, password = payload.split(":", 1)
    return make_digest_acl(user, password, read=True) if read_only else make_digest_acl(user, password, all=True)


def _super_acl(conf: Mapping[str, Any]) -> list[ACL]:
    """``storm.zookeeper.superACL`` ('scheme:id', e.g. 'digest:ops:<base64 sha1>' or 'sasl:storm') with all
    rights; empty when unset."""
    value = conf.get(SUPER_ACL)
    if not value:
        return []
    scheme, _, identity = str(value).partition(":")
    if not scheme or not identity:
        raise ValueError(
            f"{SUPER_ACL} must be 'scheme:id' (e.g. 'digest:ops:<base64 sha1 of ops:password>'), not {value!r}"
        )
    return [ACL(Permissions.ALL, Id(scheme, identity))]


class AclPolicy:
    """The ACL of each node a session creates, by path family (see the module's table).

    >>> policy = AclPolicy({"storm.zookeeper.auth.scheme": "digest", "storm.zookeeper.auth.payload": "squall:pw"})
    >>> [(acl.id.scheme, acl.perms) for acl in policy.acl("/nimbus_master", inherited=lambda path: None)]
    [('digest', 31), ('world', 1)]
    """

    def __init__(self, conf: Mapping[str, Any], topology_conf: TopologyConfs | None = None) -> None:
        self.credential = credential(conf)
        self._topology_conf = topology_conf
        self._super = _super_acl(conf) if self.credential is not None else []

    @property
    def auth_data(self) -> list[tuple[str, str]]:
        return [self.credential] if self.credential is not None else []

    @property
    def own(self) -> list[ACL]:
        """This session's credential and the superACL with all rights; open without a credential."""
        if self.credential is None:
            return list(OPEN_ACL_UNSAFE)
        return [_digest(self.credential[1]), *self._super]

    def acl(self, path: str, inherited: Callable[[str], list[ACL] | None]) -> list[ACL]:
        """The ACL for a new node at ``path``; ``inherited(path)`` is the ACL of an existing node (None if
        absent), for the nodes below a topology's error root."""
        if self.credential is None:
            return list(OPEN_ACL_UNSAFE)
        if path in WORLD_READ:
            return [*self.own, *READ_ACL_UNSAFE]
        family, topology_id, below = _split(path)
        if family in TOPOLOGY_WRITE and below:
            return inherited(f"{family}/{topology_id}") or self.own
        if topology_id and family in TOPOLOGY_READ + TOPOLOGY_WRITE:
            digest = self._topology_credential(topology_id)
            if digest is not None:
                return [*self.own, _digest(digest, read_only=family in TOPOLOGY_READ)]
        return self.own

    def has_no_credential(self, path: str) -> bool:
        """A node of a topology whose stored conf has no ZooKeeper credential (submitted before the daemons
        authenticated): its workers have none either, so closing the node to everyone else would cut them off."""
        family, topology_id, _ = _split(path)
        return (
            bool(topology_id)
            and family in TOPOLOGY_READ + TOPOLOGY_WRITE
            and self._topology_credential(topology_id) is None
        )

    def _topology_credential(self, topology_id: str) -> str | None:
        conf = self._topology_conf(topology_id) if self._topology_conf is not None else None
        found = credential(conf or {}, (_TOPOLOGY,))
        return found[1] if found is not None else None


def _split(path: str) -> tuple[str, str, str]:
    """``/family/<id>/below...`` → ("/family", id, "below..."), parts missing as ""."""
    family, _, rest = path.strip("/").partition("/")
    topology_id, _, below = rest.partition("/")
    return f"/{family}", topology_id, below
