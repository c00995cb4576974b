"""Who may do what on nimbus: Storm's simple ACL model (``nimbus.authorizer``), decided on the caller's principal.

The principal is the common name of the caller's TLS client certificate
(:func:`squall.core.thrift.server.client_principal`); a caller on the plain port is anonymous (""), and is allowed
only what needs no identity (reading the cluster's status). With ``nimbus.authorizer`` unset every caller may do
everything, as in Storm, so Storm 1.x clients keep working on an open cluster. With it set:

* ``nimbus.admins`` may do anything;
* ``nimbus.users`` (every authenticated principal when empty) may submit and upload;
* a topology's owner (who submitted it), its ``topology.users`` and members of its ``topology.groups`` may operate
  it: kill, rebalance, (de)activate, upgrade, roll back, restart, set log levels, read its conf and code;
* ``nimbus.supervisor.users`` (the daemons) may download any topology's code and conf (supervisors start its
  workers, other nimbuses keep copies) and send heartbeats;
* ``nimbus.impersonation.users`` (the UI's certificate) may read any topology and kill, rebalance, (de)activate
  it: the UI has checked its HTTP user against these same ACLs first (Storm's UI impersonates its user; Squall's
  Thrift carries no doAs user, so nimbus trusts the listed principals' own check);
* a worker's log (``readLogs``, the logviewer) is readable by whoever may operate its topology and by its
  ``logs.users`` and ``logs.groups``, and by the operators: the ``logs.users`` and ``logs.groups`` of the
  reading daemon's own conf (Storm's logviewer's whitelist);
* a daemon's own log (``readDaemonLogs``: ``nimbus.log``...) only by those operators and admins;
* everything else is refused with an ``AuthorizationException`` naming the principal and the operation.

Example::

    acl = Authorizer({"nimbus.authorizer": "simple", "nimbus.admins": ["ops"], "nimbus.users": [],
                      "nimbus.supervisor.users": ["squall-daemons"]})
    acl.check("alice", "submitTopology")                                   # allowed: nimbus.users is empty
    acl.check("bob", "killTopology", TopologyAcl("wc-1-1", "alice", {}))   # AuthorizationException
"""

from __future__ import annotations

import grp
import pwd
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from squall.core.thrift import storm

__all__ = ["Authorizer", "TopologyAcl", "USER", "TOPOLOGY", "DAEMON", "ADMIN", "IMPERSONATED", "LOGS", "DAEMON_LOGS"]

#: Operations any authenticated principal in nimbus.users may do (Storm's userCommands).
USER = frozenset({"submitTopology", "fileUpload"})
#: Operations on one topology: its owner, topology.users and topology.groups (Storm's topoCommands, plus the
#: JStorm/Squall calls that change a running topology).
TOPOLOGY = frozenset(
    {
        "killTopology",
        "rebalance",
        "activate",
        "deactivate",
        "getTopologyConf",
        "getTopology",
        "getUserTopology",
        "setLogConfig",
        "fileDownload",
        "graySubmit",
        "grayUpgrade",
        "completeUpgrade",
        "rollbackTopology",
        "updateTopology",
        "restart",
        "hotDeploy",
    }
)
#: Operations of the daemons, nimbus.supervisor.users (Storm's supervisorCommands, plus worker heartbeats).
DAEMON = frozenset({"fileDownload", "updateTaskHeartbeat"})
#: What nimbus.impersonation.users may do on any topology: what the UI reads and its REST API's actions.
IMPERSONATED = frozenset(
    {"getTopologyConf", "getTopology", "getUserTopology", "killTopology", "rebalance", "activate", "deactivate"}
)
#: Reading a topology's worker logs on the logviewer.
LOGS = "readLogs"
#: Reading a daemon's own log (``nimbus.log``) on the logviewer: the operators' (``logs.users``, ``logs.groups``).
DAEMON_LOGS = "readDaemonLogs"
#: Operations only admins may do: they concern every topology.
ADMIN = frozenset({"setHostInBlackList", "removeHostOutBlackList"})


@dataclass(frozen=True)
class TopologyAcl:
    """What decides who may operate one topology: its owner and its conf's ``topology.users``/``.groups``."""

    topology_id: str
    owner: str
    conf: Mapping[str, Any]


class Authorizer:
    """Decides each call from the conf's ACLs (see the module docstring); :meth:`check` raises when refused.

    acl = Authorizer(conf)                      # nimbus.authorizer unset: acl.enabled is False, all allowed
    acl.check(client_principal(), "rebalance", TopologyAcl(topology_id, base.owner, topology_conf))
    """

    def __init__(self, conf: Mapping[str, Any]) -> None:
        self.enabled = conf.get("nimbus.authorizer") is not None
        self.admins = frozenset(conf.get("nimbus.admins") or ())
        self.users = frozenset(conf.get("nimbus.users") or ())
        self.daemons = frozenset(conf.get("nimbus.supervisor.users") or ())
        self.impersonators = frozenset(conf.get("nimbus.impersonation.users") or ())
        self.operators = {
            "logs.users": list(conf.get("logs.users") or ()),
            "logs.groups": list(conf.get("logs.groups") or ()),
        }

    def check(self, principal: str, operation: str, topology: TopologyAcl | None = None) -> None:
        """Return if ``principal`` may do ``operation`` (on ``topology`` for a topology's operations), else raise
        ``AuthorizationException`` naming both."""
        if self.permits(principal, operation, topology):
            return
        who = f"principal {principal!r}" if principal else "an anonymous caller (no client certificate)"
        what = f"{operation} on {topology.topology_id}" if topology is not None else operation
        raise storm.AuthorizationException(msg=f"{who} may not {what}: {self._who_may(operation, topology)}")

    def permits(self, principal: str, operation: str, topology: TopologyAcl | None = None) -> bool:
        """Whether ``principal`` ("" for anonymous) may do ``operation``; :meth:`check` says why not."""
        if not self.enabled:
            return True
        if not principal:
            return False
        if principal in self.admins:
            return True
        if operation in DAEMON and principal in self.daemons:
            return True
        if operation in USER:
            return not self.users or principal in self.users
        if operation in IMPERSONATED and principal in self.impersonators:
            return True
        if operation in (LOGS, DAEMON_LOGS) and _listed(principal, self.operators, ("logs",)):
            return True
        if (operation in TOPOLOGY or operation == LOGS) and topology is not None:
            acls = ("topology", "logs") if operation == LOGS else ("topology",)
            return principal == topology.owner or _listed(principal, topology.conf, acls)
        return False

    def _who_may(self, operation: str, topology: TopologyAcl | None) -> str:
        if operation in USER:
            return "only nimbus.users and nimbus.admins may"
        if (operation in TOPOLOGY or operation == LOGS) and topology is not None:
            owner = f"its owner {topology.owner!r}" if topology.owner else "its owner (none recorded)"
            daemons = ", nimbus.supervisor.users" if operation in DAEMON else ""
            logs = ", logs.users, logs.groups" if operation == LOGS else ""
            return f"only {owner}, its topology.users and topology.groups{logs}{daemons} and nimbus.admins may"
        if operation in DAEMON:
            return "only nimbus.supervisor.users and nimbus.admins may"
        if operation == DAEMON_LOGS:
            return "only the logviewer's logs.users, logs.groups and nimbus.admins may"
        return "only nimbus.admins may"


def _listed(principal: str, conf: Mapping[str, Any], acls: tuple[str, ...]) -> bool:
    """Whether ``principal`` is in one of ``conf``'s ``<acl>.users`` or, by a group, ``<acl>.groups``."""
    return any(principal in (conf.get(f"{acl}.users") or ()) for acl in acls) or any(
        not groups_of(principal).isdisjoint(conf.get(f"{acl}.groups") or ()) for acl in acls
    )


def groups_of(user: str) -> frozenset[str]:
    """The groups of the local user ``user`` (primary and supplementary), as ``id -Gn`` lists them; none for a
    principal that is no local user."""
    try:
        primary = pwd.getpwnam(user).pw_gid
    except KeyError:
        return frozenset()
    return frozenset(g.gr_name for g in grp.getgrall() if g.gr_gid == primary or user in g.gr_mem)
