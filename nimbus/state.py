"""What every part of a nimbus shares: one object holding its identity, its clients and stores, the leader's view
of the tasks' beats, and the reads and checks every part makes of them.

The parts (:mod:`nimbus.transitions`, :mod:`nimbus.submission`, :mod:`nimbus.upgrading`, :mod:`nimbus.watching`,
:mod:`nimbus.settings`, :mod:`nimbus.takeover`) are each given this one :class:`NimbusState`; none holds a copy
of what another part may change. Two locks guard it: :attr:`NimbusState.lock` lets one topology change happen at a
time, so a timer and an operator never interleave on the same ``StormBase``; :attr:`NimbusState.beats_lock` guards
the beats, windows and restarts, so heartbeats never wait on a topology change.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import structlog

from nimbus.assign import AssignEvent, AssignFailed, TopologyAssigner
from nimbus.codestore import CodeStore, Downloads, Inbox, MissingTopology
from nimbus.leader import LeaderElection
from nimbus.monitor import HeartbeatTracker, Restarts
from nimbus.queries import RECENT_RESTART_SECS
from nimbus.replication import CodeReplication
from nimbus.scheduler import Component
from nimbus.scheduler.model import scheduler_components
from nimbus.windows import StatsWindows
from squall.core import topology as topo
from squall.core.clock import Clock, Periodic, Timer
from squall.core.thrift import storm
from squall.core.zk import paths
from squall.core.zk.client import ZkClient
from squall.core.zk.errors import record_task_error
from squall.core.zk.records import Assignment, ErrorLevel, StormBase, TaskError, TopologyTasks

log = structlog.get_logger(__name__)


class NotLeader(RuntimeError):
    """A write reached a follower; Storm reports this as an internal error with the leader's address."""


class NimbusState:
    """One nimbus's shared state. Made by :class:`nimbus.daemon.Nimbus`, which sets :attr:`port`,
    :attr:`replication` and :attr:`election` once it serves (and clears :attr:`election` when it stops)."""

    def __init__(self, conf: Mapping[str, Any], clock: Clock, host: str | None = None) -> None:
        self.conf = dict(conf)
        self.clock = clock
        self.host: str = host or conf.get("storm.local.hostname") or socket.gethostname()
        self.port = 0
        local = Path(conf["storm.local.dir"]) / "nimbus"
        self.zk = ZkClient(conf, topology_conf=self._stored_conf)  # a topology's nodes grant its credential
        self.inbox = Inbox(
            local / "inbox",
            clock,
            max_upload_bytes=conf["nimbus.max.upload.bytes"],
            session_expiry_secs=conf["nimbus.file.copy.expiration.secs"],
            file_expiry_secs=conf["nimbus.inbox.jar.expiration.secs"],
            max_total_bytes=conf["nimbus.inbox.max.bytes"],
            idle_upload_secs=conf["nimbus.upload.idle.secs"],
            max_per_client=conf["nimbus.upload.max.per.client"],
        )
        self.code = CodeStore(local / "stormdist")
        self.downloads = Downloads(
            clock,
            chunk_bytes=conf["nimbus.thrift.max_buffer_size"] // 2,
            session_expiry_secs=conf["nimbus.file.copy.expiration.secs"],
        )
        self.assigner = TopologyAssigner(
            self.zk, clock, self.topology_source, code_dir=lambda tid: str(local / "stormdist" / tid)
        )
        self.election: LeaderElection | None = None
        self._replication: CodeReplication | None = None
        self.lock = threading.RLock()  # one topology change at a time
        self.submitting: dict[str, str] = {}  # name → id of each submission in flight, under lock
        self.ready = threading.Event()  # elected and done taking over
        self.leader_timers: list[Timer | Periodic] = []  # cancelled when this nimbus stops leading
        self.beats_lock = threading.Lock()
        self.tracker = HeartbeatTracker()
        self.windows = StatsWindows()  # the leader's: made from the beats it takes in
        self.restarts = Restarts(keep_secs=RECENT_RESTART_SECS)  # the leader's dead-worker moves

    @property
    def replication(self) -> CodeReplication:
        """The code replication: every part that stores code publishes it here, which only a serving nimbus can."""
        if self._replication is None:
            raise RuntimeError(f"nimbus {self.host} replicates no code before it serves (Nimbus.start)")
        return self._replication

    @replication.setter
    def replication(self, replication: CodeReplication) -> None:
        self._replication = replication

    # -- leadership -----------------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        """Elected *and* done taking over (heartbeats reloaded, delayed actions re-armed)."""
        return self.ready.is_set() and self.election is not None and self.election.is_leader

    @property
    def elected(self) -> bool:
        """Holds ``/nimbus_master``, whether or not done taking over."""
        election = self.election
        return election is not None and election.elected

    def require_leader(self) -> None:
        """Refuse a write on a follower, naming the leader the caller should ask instead."""
        if self.is_leader:
            return
        master = self.election.leader() if self.election else None
        where = f"the leader is {master.host_port}" if master else "no leader is elected right now; retry shortly"
        raise NotLeader(f"nimbus {self.host}:{self.port} is not the leader; {where}")

    # -- topologies -----------------------------------------------------------------------------

    def base(self, topology_id: str) -> StormBase:
        base = self.zk.read(paths.topology(topology_id), StormBase)
        if base is None:
            raise storm.NotAliveException(msg=topology_id)
        return base

    def find_id(self, name: str) -> str:
        """The id of the alive topology called ``name`` (ids are ``name-<n>-<secs>``)."""
        for topology_id in self.zk.children(paths.TOPOLOGIES):
            if topo.name_of(topology_id) == name:
                return topology_id
        raise storm.NotAliveException(msg=name)

    def alive_names(self) -> set[str]:
        return {topo.name_of(t) for t in self.zk.children(paths.TOPOLOGIES)}

    def ids_submitting(self) -> set[str]:
        return set(self.submitting.copy().values())  # dict.copy is atomic: no lock, so beats never wait on a change

    def merged_conf(self, topology_id: str) -> dict[str, Any]:
        return {**self.conf, **self.code.conf(topology_id)}

    def topology_conf_or_cluster(self, topology_id: str) -> dict[str, Any]:
        """The topology's merged conf; the cluster's when this nimbus lacks the code (not copied yet)."""
        try:
            return self.merged_conf(topology_id)
        except MissingTopology:
            return dict(self.conf)

    def _stored_conf(self, topology_id: str) -> dict[str, Any] | None:
        """The topology's own stored conf (with its ZooKeeper credential); None when this nimbus lacks its code."""
        try:
            return self.code.conf(topology_id)
        except MissingTopology:
            return None

    def no_code(self, topology_id: str) -> str:
        """Why this nimbus cannot act on a topology whose code it lacks."""
        return (
            f"nimbus {self.host}:{self.port} has no code for {topology_id}: no nimbus holding it could serve "
            "it yet (see /code_holders); it is copied again every nimbus.code.sync.freq.secs"
        )

    def topology_source(self, topology_id: str) -> tuple[tuple[Component, ...], Mapping[str, Any], int]:
        """What the assign thread needs: scheduler components, the merged conf and the current code version."""
        tasks = self.zk.read(paths.tasks(topology_id), TopologyTasks)
        if tasks is None:
            raise AssignFailed(f"{topology_id} has no tasks in ZooKeeper")
        try:
            return (
                scheduler_components(self.code.system_topology(topology_id), tasks),
                self.merged_conf(topology_id),
                self.code.current_version(topology_id),
            )
        except MissingTopology:
            raise AssignFailed(self.no_code(topology_id)) from None

    def assign(self, event: AssignEvent) -> Assignment | None:
        """Assign on the assign thread and wait for it (``nimbus.assign.timeout.secs``)."""
        try:
            return self.assigner.push(event).wait(self.clock, self.conf["nimbus.assign.timeout.secs"])
        except AssignFailed as exc:  # Storm clients only know InvalidTopologyException on submit/rebalance
            raise storm.InvalidTopologyException(msg=f"could not assign {event.topology_id}: {exc}") from None

    def record_error(self, topology_id: str, message: str) -> None:
        """An error of the topology itself, kept like a task error of its topology master (last few only)."""
        tasks = self.zk.read(paths.tasks(topology_id), TopologyTasks)
        task = (topo.topology_master_task(tasks) if tasks else None) or 0
        now = int(self.clock.time())
        record_task_error(
            self.zk, topology_id, task, TaskError(message, now, ErrorLevel.ERROR, host=self.host, port=self.port)
        )
        log.error("topology error", topology_id=topology_id, error=message)
