"""What the UI asks nimbus, over Thrift with Squall's own client: each request on its own connection to the
leader (found through ``nimbus.seeds``), every wait bounded by ``ui.nimbus.timeout.secs``.

A nimbus that cannot be reached, has no leader or does not answer in time is :class:`NimbusUnreachable`,
which the UI answers with 503 and keeps serving; nimbus's own typed errors (``NotAliveException``, ...)
pass through for the UI to map.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from thriftpy2.thrift import TClient
from thriftpy2.transport import TTransportException

from squall.core.auth import Authorizer, TopologyAcl
from squall.core.config.keys import redact
from squall.core.nimbus_client import nimbus_client
from squall.core.thrift import storm
from squall.core.thrift.client import NimbusUnavailable


class NimbusUnreachable(Exception):
    """Nimbus is down, leaderless, or did not answer within ``ui.nimbus.timeout.secs``."""


@dataclass(frozen=True)
class TopologyParts:
    """What a topology's pages are made from: its ``TopologyInfo``, the running ``StormTopology`` (system
    components included) and its conf as nimbus applies it: the cluster's, overridden by the topology's own."""

    info: Any
    topology: Any
    conf: Mapping[str, Any]
    #: Nimbus's ACLs (from nimbus's own conf, never the topology's): who may read or operate it.
    access: Authorizer = field(default_factory=lambda: Authorizer({}))

    def check(self, principal: str, operation: str) -> None:
        """``AuthorizationException`` unless the HTTP user ``principal`` may do ``operation`` on this topology
        (its owner, ``topology.users``/``groups``, admins; anyone when nimbus has no authorizer)."""
        self.access.check(principal, operation, TopologyAcl(self.info.id, self.info.owner or "", self.conf))


class NimbusSource:
    """The UI's questions to nimbus and its actions on topologies::

    source = NimbusSource(conf)
    source.cluster().topologies          # nimbus's ClusterSummary
    source.operate("wc-1-1700000000", lambda nimbus, name: nimbus.deactivate(name))
    """

    def __init__(self, conf: Mapping[str, Any]) -> None:
        self.conf = conf
        self.timeout_ms = max(1, round(float(conf["ui.nimbus.timeout.secs"]) * 1000))

    @contextlib.contextmanager
    def _nimbus(self) -> Iterator[TClient]:
        try:
            with nimbus_client(self.conf, timeout_ms=self.timeout_ms) as nimbus:
                yield nimbus
        except (NimbusUnavailable, TTransportException, OSError) as exc:
            raise NimbusUnreachable(f"cannot reach nimbus: {exc}") from exc

    def cluster(self) -> Any:
        """Nimbus's ``ClusterSummary``: supervisors, topologies, nimbuses."""
        with self._nimbus() as nimbus:
            return nimbus.getClusterInfo()

    def cluster_and_blacklist(self) -> tuple[Any, list[str]]:
        """The ``ClusterSummary`` and the hosts nimbus keeps new workers off."""
        with self._nimbus() as nimbus:
            return nimbus.getClusterInfo(), nimbus.getBlacklist()

    def cluster_with_topologies(self) -> tuple[Any, list[str], list[Any]]:
        """The ``ClusterSummary``, the blacklist and every topology's ``TopologyInfo`` (one killed meanwhile
        is left out): where workers run, for a supervisor's page."""
        with self._nimbus() as nimbus:
            cluster, blacklist = nimbus.getClusterInfo(), nimbus.getBlacklist()
            infos = []
            for topology in cluster.topologies:
                with contextlib.suppress(storm.NotAliveException):
                    infos.append(nimbus.getTopologyInfo(topology.id))
            return cluster, blacklist, infos

    def nimbus_conf(self) -> dict[str, Any]:
        """The leader's conf, secrets masked."""
        with self._nimbus() as nimbus:
            return redact(json.loads(nimbus.getNimbusConf()))

    def topology(self, topology_id: str) -> TopologyParts:
        """``NotAliveException`` when nimbus has no topology of that id."""
        with self._nimbus() as nimbus:
            info, cluster_conf = nimbus.getTopologyInfo(topology_id), json.loads(nimbus.getNimbusConf())
            conf = {**cluster_conf, **json.loads(nimbus.getTopologyConf(topology_id))}
            return TopologyParts(info, nimbus.getTopology(topology_id), redact(conf), Authorizer(cluster_conf))

    def operate(
        self, topology_id: str, call: Callable[[TClient, str], None], principal: str = "", operation: str = ""
    ) -> None:
        """Run ``call(nimbus, name)`` on the topology of that id: nimbus's actions take names, Storm's REST API
        ids. ``NotAliveException`` when no topology has that id; ``AuthorizationException`` when nimbus has an
        authorizer and its ACLs do not let the HTTP user ``principal`` do ``operation`` on it (the UI's own
        principal, in ``nimbus.impersonation.users``, then acts for the user)."""
        with self._nimbus() as nimbus:
            topologies = {t.id: t for t in nimbus.getClusterInfo().topologies}
            if topology_id not in topologies:
                raise storm.NotAliveException(msg=topology_id)
            access = Authorizer(json.loads(nimbus.getNimbusConf()))
            if access.enabled:
                conf = json.loads(nimbus.getTopologyConf(topology_id))
                access.check(principal, operation, TopologyAcl(topology_id, topologies[topology_id].owner or "", conf))
            call(nimbus, topologies[topology_id].name)
