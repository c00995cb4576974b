"""The nimbus daemon: wires the pure parts (validation, scheduler, lifecycle, monitor) to ZooKeeper,
the code store, the clock and the Thrift server.

Every nimbus serves reads; only the leader (see :mod:`nimbus.leader`) changes anything. Writes to
a topology go through :meth:`Nimbus.transition` under one lock, so a timer and an operator can never
interleave on the same ``StormBase``.
"""

from __future__ import annotations

import itertools
import json
import secrets
import socket
import threading
import time
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

import structlog

from nimbus import lifecycle, upgrade
from nimbus.assign import AssignEvent, AssignFailed, TopologyAssigner
from nimbus.codestore import CodeStore, Downloads, Inbox, MissingTopology
from nimbus.leader import LeaderElection, TimerChoice, delayed_action_choice
from nimbus.monitor import HeartbeatTracker, Restarts
from nimbus.namedclasses import check_named_classes
from nimbus.queries import RECENT_RESTART_SECS
from nimbus.replication import CodeReplication
from nimbus.scheduler import AssignType, Component
from nimbus.scheduler.model import scheduler_components
from nimbus.windows import WINDOW_BUCKETS, StatsWindows
from squall.core import topology as topo
from squall.core.clock import Clock, Periodic, RealClock, Timer
from squall.core.config.validation import ConfigError
from squall.core.thrift import storm
from squall.core.thrift.server import ThriftServer, make_server
from squall.core.tls import server_context
from squall.core.zk import paths
from squall.core.zk.client import ZkClient
from squall.core.zk.errors import record_task_error
from squall.core.zk.records import (
    Assignment, AssignmentType, Blacklist, ErrorLevel, GrayUpgradeConf, LoggerLevel, LoggerLevels, StormBase,
    SupervisorInfo, TaskBeat, TaskError, TaskHeartbeats, TaskStats, TopologyStatus, TopologyTasks, WorkerAssignment,
    WorkerMark,
)

log = structlog.get_logger(__name__)


#: Conf keys that decide tasks and workers: changed by a rebalance, never by an update.
LAYOUT_KEYS = frozenset({"topology.workers", "topology.acker.executors", "topology.spout.parallelism",
                         "topology.bolt.parallelism", "topology.max.task.parallelism"})


def without_submit_flags(conf: Mapping[str, Any]) -> dict[str, Any]:
    """A submitted conf minus what only instructs this submission (gray upgrade, hot deploy), never stored."""
    return {k: v for k, v in conf.items() if not k.startswith("topology.upgrade") and k != "topology.hot.deploy.enable"}


#: How long a nimbus waits before taking over again after its takeover failed.
TAKEOVER_RETRY_SECS = 1.0


class NotLeader(RuntimeError):
    """A write reached a follower; Storm reports this as an internal error with the leader's address."""


class Nimbus:
    def __init__(self, conf: Mapping[str, Any], clock: Clock | None = None, *, host: str | None = None) -> None:
        self.conf = dict(conf)
        self.clock = clock or RealClock()
        self.host = host or conf.get("storm.local.hostname") or socket.gethostname()
        local = Path(conf["storm.local.dir"]) / "nimbus"
        self.zk = ZkClient(conf, topology_conf=self._stored_conf)  # a topology's nodes grant its credential
        self.inbox = Inbox(local / "inbox", self.clock, max_upload_bytes=conf["nimbus.max.upload.bytes"],
                           session_expiry_secs=conf["nimbus.file.copy.expiration.secs"],
                           file_expiry_secs=conf["nimbus.inbox.jar.expiration.secs"],
                           max_total_bytes=conf["nimbus.inbox.max.bytes"], idle_upload_secs=conf["nimbus.upload.idle.secs"],
                           max_per_client=conf["nimbus.upload.max.per.client"])
        self.code = CodeStore(local / "stormdist")
        self.downloads = Downloads(self.clock, chunk_bytes=conf["nimbus.thrift.max_buffer_size"] // 2,
                                   session_expiry_secs=conf["nimbus.file.copy.expiration.secs"])
        self.tracker = HeartbeatTracker()
        self.windows = StatsWindows()  # the leader's: made from the beats it takes in, under _beats_lock
        self.restarts = Restarts(keep_secs=RECENT_RESTART_SECS)  # the leader's dead-worker moves, under _beats_lock
        # Bumped whenever this nimbus may have stopped watching (leadership changed with a takeover or a lost
        # session, a monitor read that failed through its retries): a monitor cycle judges only within one
        # watch, and the first cycle of a new watch pardons every task. A SUSPENDED connection alone does not
        # bump it: known topologies' beats arrive without ZooKeeper, and pardoning on every blip of a flapping
        # connection would keep dead tasks from ever being judged.
        self._watch = 0
        self._pardoned_watch = -1
        self._beats_lock = threading.Lock()
        self.assigner = TopologyAssigner(self.zk, self.clock, self.topology_source,
                                         code_dir=lambda tid: str(local / "stormdist" / tid))
        self.server: ThriftServer | None = None
        self.tls_server: ThriftServer | None = None
        self.election: LeaderElection | None = None
        self.replication: CodeReplication | None = None
        self._lock = threading.RLock()  # one topology change at a time
        self._submitting: dict[str, str] = {}  # name → id of each submission in flight
        self._counter = itertools.count(1)
        self._leader_timers: list[Timer | Periodic] = []
        self._port = 0
        self._ready = threading.Event()

    # -- lifecycle of the daemon ----------------------------------------------------------------

    def start(self, handler_factory: Callable[["Nimbus"], object]) -> "Nimbus":
        """Serve ``handler_factory(self)`` (the Thrift handler, :class:`nimbus.service.NimbusService`) and join
        the cluster: code replication and leader election."""
        self.zk.start()
        self.assigner.start()
        try:
            self.server, self.tls_server = self._serve(handler_factory(self))
        except BaseException:  # a port taken: nothing may keep the process alive behind the error
            self.assigner.stop()
            self.zk.stop()
            raise
        self._port = (self.server or self.tls_server).port  # the plain one's, else (TLS only) the TLS one's
        tls_port = self.tls_server.port if self.tls_server is not None else 0
        self.replication = CodeReplication(self.zk, self.code, self.conf, self.clock, self.host, self._port,
                                           is_elected=self._elected,
                                           tls_port=tls_port).start()
        self.election = LeaderElection(self.zk, self.host, self._port, self.clock,
                                       on_elected=self._lead, on_demoted=self._follow, tls_port=tls_port)
        self.election.start()  # may elect at once: the takeover reads self.election
        log.info("nimbus started", host=self.host, port=self._port, tls_port=tls_port or None)
        return self

    def _serve(self, service: object) -> tuple[ThriftServer | None, ThriftServer | None]:
        """The plain Thrift listener (``nimbus.thrift.port``, unless ``nimbus.thrift.tls.server.only``) and the
        mutual-TLS one (``nimbus.thrift.tls.port``, when set), serving the same calls."""
        conf = self.conf
        tls_port, tls_only = conf["nimbus.thrift.tls.port"], conf["nimbus.thrift.tls.server.only"]
        if tls_only and tls_port is None:
            raise ConfigError("nimbus.thrift.tls.server.only is true but nimbus.thrift.tls.port is not set: "
                              "nimbus would serve nothing")
        if conf["nimbus.authorizer"] is not None and tls_port is None:
            raise ConfigError("nimbus.authorizer is set but nimbus.thrift.tls.port is not: without client "
                              "certificates every caller is anonymous and may do nothing but read; set "
                              "nimbus.thrift.tls.port (see the README's Security section)")
        serving = dict(max_frame_bytes=conf["nimbus.thrift.max_buffer_size"],
                       client_timeout_ms=conf["storm.thrift.socket.timeout.ms"],
                       request_timeout_ms=conf["nimbus.thrift.request.timeout.ms"],
                       threads=conf["nimbus.thrift.threads"], max_connections=conf["nimbus.thrift.max.connections"])
        bind = conf["nimbus.thrift.bind.address"]

        def listen(port: int, key: str, **options: Any) -> ThriftServer:
            try:
                return make_server(service, bind, port, **serving, **options).start()
            except OSError as exc:
                raise OSError(exc.errno, f"nimbus cannot listen on {bind}:{port} (nimbus.thrift.bind.address, "
                                         f"{key}): {exc.strerror}; is another nimbus running?") from None

        tls = (listen(tls_port, "nimbus.thrift.tls.port", name="nimbus-thrift-tls", ssl_context=server_context(conf))
               if tls_port is not None else None)
        try:
            plain = None if tls_only else listen(conf["nimbus.thrift.port"], "nimbus.thrift.port")
        except OSError:
            if tls is not None:
                tls.stop()
            raise
        return plain, tls

    def stop(self) -> None:
        """Step down, stop serving, disconnect; calling it twice is harmless."""
        election, servers = self.election, (self.server, self.tls_server)
        self.election, self.server, self.tls_server = None, None, None
        if election is None:
            return
        self._follow()
        election.stop()
        for server in servers:
            if server is not None:
                server.stop()
        if self.replication is not None:
            self.replication.stop()
        self.assigner.stop()
        self.zk.stop()

    @property
    def port(self) -> int:
        return self._port

    @property
    def is_leader(self) -> bool:
        """Elected *and* done taking over (heartbeats reloaded, delayed actions re-armed)."""
        return self._ready.is_set() and self.election is not None and self.election.is_leader

    def require_leader(self) -> None:
        if self.is_leader:
            return
        master = self.election.leader() if self.election else None
        where = f"the leader is {master.host_port}" if master else "no leader is elected right now; retry shortly"
        raise NotLeader(f"nimbus {self.host}:{self.port} is not the leader; {where}")

    def _lead(self) -> None:
        """Became leader: take over (:meth:`_take_over`), again after a failure (ZooKeeper away half-way, a read
        out of retries) for as long as this nimbus stays elected: a leader that is never ready holds
        ``/nimbus_master`` and serves nothing, and no other nimbus takes over."""
        while True:
            try:
                self._take_over()
                return
            except Exception:
                if not self._elected():
                    return  # stopped (its ZooKeeper client closed) or demoted meanwhile: the next takeover starts afresh
                log.exception("nimbus takeover failed; trying again", retry_in_secs=TAKEOVER_RETRY_SECS)
            time.sleep(TAKEOVER_RETRY_SECS)  # on the takeover's own thread; ZooKeeper's reconnection is what it waits
            if not self._elected():
                return

    def _elected(self) -> bool:
        election = self.election
        return election is not None and election.elected

    def _take_over(self) -> None:
        """Copy the code it lacks, reload heartbeats, re-arm delayed actions, start the periodic work; done again
        after a failure (re-arming an armed action is harmless: the older timer finds its action stale)."""
        self._stop_watching()
        self._take_over_code()
        self._enforce_acls()
        now = int(self.clock.time())
        topology_ids = self.zk.children(paths.TOPOLOGIES)
        for topology_id in topology_ids:
            beats = self.zk.read(paths.taskbeats(topology_id), TaskHeartbeats)
            if beats is not None:
                with self._beats_lock:
                    self.tracker.restore(topology_id, beats, now)
            try:
                self.transition(topology_id, lifecycle.Startup())
            except Exception:
                log.exception("could not re-arm topology on takeover", topology_id=topology_id)
        self._leader_timers += [
            self.clock.call_every(self.conf["nimbus.monitor.freq.secs"], self.monitor),
            self.clock.call_every(self.conf["nimbus.cleanup.inbox.freq.secs"], self._cleanup_files),
        ]
        self._ready.set()
        log.info("nimbus leading", topologies=len(topology_ids))

    def _take_over_code(self) -> None:
        """Copy every published code version this nimbus lacks (the old leader's host may be gone for good), and
        publish alive topologies that no leader published yet (stored before code was replicated)."""
        try:
            missing = self.replication.sync(leading=True)
            for topology_id in self.zk.children(paths.TOPOLOGIES):
                if self.code.has(topology_id) and not self.zk.exists(paths.code(topology_id)):
                    self.replication.publish(topology_id)
        except Exception:  # leading without some code beats not leading: what lacks code says so when used
            log.exception("could not take over the topologies' code")
            return
        if missing:
            log.error("leading without the code of some topologies: no nimbus could serve it", topologies=missing)

    def _enforce_acls(self) -> None:
        """Close what an earlier Squall (or a cluster before ZooKeeper auth) left readable: every node gets the
        ACL a new one would (:meth:`ZkClient.enforce_acls`). Once the code is taken over, so that each topology's
        credential is known."""
        try:
            changed = self.zk.enforce_acls()
        except Exception:  # leading with some old ACLs beats not leading
            log.exception("could not enforce the ZooKeeper ACLs")
            return
        if changed:
            log.info("zookeeper ACLs enforced", nodes_changed=changed)

    def _follow(self) -> None:
        self._stop_watching()
        self._ready.clear()
        for timer in self._leader_timers:
            timer.cancel()
        self._leader_timers.clear()

    def _cleanup_files(self) -> None:
        self.inbox.cleanup()
        self.downloads.cleanup()

    # -- topologies -----------------------------------------------------------------------------

    def topology_source(self, topology_id: str) -> tuple[tuple[Component, ...], Mapping[str, Any], int]:
        """What the assign thread needs: scheduler components, the merged conf and the current code version."""
        tasks = self.zk.read(paths.tasks(topology_id), TopologyTasks)
        if tasks is None:
            raise AssignFailed(f"{topology_id} has no tasks in ZooKeeper")
        try:
            return (scheduler_components(self.code.system_topology(topology_id), tasks),
                    self.merged_conf(topology_id), self.code.current_version(topology_id))
        except MissingTopology:
            raise AssignFailed(self._no_code(topology_id)) from None

    def _no_code(self, topology_id: str) -> str:
        return (f"nimbus {self.host}:{self.port} has no code for {topology_id}: no nimbus holding it could serve "
                "it yet (see /code_holders); it is copied again every nimbus.code.sync.freq.secs")

    def merged_conf(self, topology_id: str) -> dict[str, Any]:
        return {**self.conf, **self.code.conf(topology_id)}

    def _stored_conf(self, topology_id: str) -> dict[str, Any] | None:
        """The topology's own stored conf (with its ZooKeeper credential); None when this nimbus lacks its code."""
        try:
            return self.code.conf(topology_id)
        except MissingTopology:
            return None

    def _message_timeout(self, topology_id: str) -> int:
        return int(self.topology_conf_or_cluster(topology_id)["topology.message.timeout.secs"])

    def topology_conf_or_cluster(self, topology_id: str) -> dict[str, Any]:
        """The topology's merged conf; the cluster's when this nimbus lacks the code (not copied yet)."""
        try:
            return self.merged_conf(topology_id)
        except MissingTopology:
            return dict(self.conf)

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

    def _name_taken(self, name: str) -> str:
        """Why ``name`` cannot be submitted now: alive, or killed and not yet removed (the kill's wait)."""
        try:
            killed = self.base(self.find_id(name)).status is TopologyStatus.KILLED
        except storm.NotAliveException:  # still being submitted by another call
            killed = False
        if killed:
            return (f"topology {name!r} is being killed: submit it again once storm list no longer shows it (after "
                    "the kill's wait, storm kill -w), or now under another --name")
        return f"topology {name!r} is already alive"

    def alive_names(self) -> set[str]:
        return {topo.name_of(t) for t in self.zk.children(paths.TOPOLOGIES)}

    def submit(self, name: str, location: str | None, json_conf: str, user_topology: Any,
               initial_status: TopologyStatus = TopologyStatus.ACTIVE, *, replace: bool = False,
               owner: str = "") -> str:
        """Validate, store, number the tasks, assign, and write ``/topology/<id>`` last.

        ``replace`` is JStorm's hot deploy: the running topology of that name is removed (no kill wait)
        once the new one is known to be valid, and the new one starts once the old workers stopped; the new one
        keeps the old one's owner. ``owner`` is the submitter's principal (none without authentication).
        """
        self.require_leader()
        topo.validate_name(name)
        submitted_conf = self._submitted_conf(json_conf)
        merged = {**self.conf, **submitted_conf} if isinstance(submitted_conf, dict) else submitted_conf
        topo.validate_topology(name, user_topology, merged)  # also refuses a conf that is not an object
        replaced = self.find_id(name) if replace else None
        if replaced is not None:
            owner = self.base(replaced).owner
        package = self.inbox.claim(location) if location else None
        try:
            check_named_classes(package, user_topology)  # before the topology it replaces is removed
            if replaced is not None:
                self._remove_for_replacement(replaced)
            with self._lock:
                if name in self.alive_names() or name in self._submitting:
                    raise storm.AlreadyAliveException(msg=self._name_taken(name))
                topology_id = topo.topology_id(name, next(self._counter), self.clock.time())
                self._submitting[name] = topology_id
            try:
                self._store_and_start(topology_id, name, package, user_topology, submitted_conf, initial_status,
                                      owner)
            except Exception:
                self._remove_state(topology_id)
                raise
            finally:
                with self._lock:
                    self._submitting.pop(name, None)
        finally:
            if package is not None:
                package.unlink(missing_ok=True)  # the code store has its own copy
        return topology_id

    def _store_and_start(self, topology_id: str, name: str, package: Path | None, user_topology: Any,
                         submitted_conf: Mapping[str, Any], initial_status: TopologyStatus, owner: str) -> None:
        """Submit's steps once the topology is checked: code, ``/tasks``, replicas, assignment, ``/topology`` last."""
        normalized, topology_conf = topo.normalize(user_topology, without_submit_flags(submitted_conf), name=name)
        topology_conf["topology.id"] = topology_id
        topology_conf.update(self._topology_secrets(topology_id, topology_conf))
        system = topo.system_topology(normalized, {**self.conf, **topology_conf})
        tasks = topo.make_tasks(system)
        self.code.put(topology_id, package=package, conf=topology_conf, topology=normalized, system=system)
        self.zk.write(paths.tasks(topology_id), tasks)
        self.zk.write(paths.taskbeats(topology_id), TaskHeartbeats(topo.topology_master_task(tasks) or 0))
        self.zk.create(paths.task_errors_root(topology_id))
        self.zk.create(paths.upgrading_workers(topology_id))
        self.zk.create(paths.upgraded_workers(topology_id))
        self._await_replicas(topology_id, topology_conf)
        self._assign(AssignEvent(topology_id, name))
        self.require_leader()  # demoted while waiting: the new leader will clean up, not us
        now = int(self.clock.time())
        workers = int(self.merged_conf(topology_id)["topology.workers"])
        self.zk.write(paths.topology(topology_id), StormBase(name, initial_status, now, workers, owner))
        log.info("topology submitted", topology_id=topology_id, tasks=len(tasks.tasks))

    def restart(self, name: str, json_conf: str) -> str:
        """Resubmit the running topology's current code under a new id, ``json_conf`` merged into its conf."""
        self.require_leader()
        topology_id = self.find_id(name)
        overrides = self._submitted_conf(json_conf)
        if not isinstance(overrides, dict):
            raise storm.InvalidTopologyException(msg="the restart conf must be a JSON object")
        try:
            stored = self.code.conf(topology_id)
            user_topology, package = self.code.topology(topology_id), self.code.package(topology_id)
        except MissingTopology:
            raise storm.InvalidTopologyException(msg=self._no_code(topology_id)) from None
        conf = without_submit_flags({**stored, **overrides})
        conf.pop("topology.id", None)
        location = self.inbox.add(package) if package is not None else None
        status = self.base(topology_id).status
        return self.submit(name, location, json.dumps(conf), user_topology, replace=True,
                           initial_status=TopologyStatus.INACTIVE if status is TopologyStatus.INACTIVE
                           else TopologyStatus.ACTIVE)

    def _remove_for_replacement(self, topology_id: str) -> None:
        """Remove the topology now, then wait (up to ``task.cleanup.timeout.sec``) for its workers to stop,
        as their supervisors report by freeing the ports."""
        assignment = self.zk.read(paths.assignment(topology_id), Assignment)
        timeout = float(self.topology_conf_or_cluster(topology_id)["task.cleanup.timeout.sec"])
        with self._lock:
            self.transition(topology_id, lifecycle.Kill(0))
            self.transition(topology_id, lifecycle.Remove(self.base(topology_id).pending.due_secs))
        started = time.monotonic()
        slots = {(w.supervisor_id, w.port) for w in assignment.workers} if assignment else set()
        while slots and time.monotonic() - started < timeout:
            slots = {(sid, port) for sid, port in slots
                     if (info := self.zk.read(paths.supervisor(sid), SupervisorInfo)) is not None
                     and port in info.used_ports}
            if slots:
                time.sleep(0.05)  # other processes' doings, seen in ZooKeeper: nothing to wait on
        log.info("topology removed for its replacement", topology_id=topology_id,
                 workers_stopped=not slots, waited_secs=round(time.monotonic() - started, 3))

    def _topology_secrets(self, topology_id: str, topology_conf: Mapping[str, Any]) -> dict[str, str]:
        """The topology's own secrets, each the one it came with or kept from its earlier version (a gray upgrade's
        old and new workers must share them), else a new one: its transfer secret (``topology.transfer.secret``,
        which authenticates its workers to each other) and, when the daemons authenticate to ZooKeeper, its own
        ZooKeeper credential (Storm's ``storm.zookeeper.topology.auth.*``), used by its workers instead of the
        daemons' credential, which they never get."""
        try:
            earlier = self.code.conf(topology_id)
        except MissingTopology:
            earlier = {}

        def kept(keys: tuple[str, ...], new: dict[str, str]) -> dict[str, str]:
            for source in (topology_conf, earlier):
                if source.get(keys[-1]):
                    return {key: source[key] for key in keys}
            return new

        found = kept(("topology.transfer.secret",), {"topology.transfer.secret": secrets.token_urlsafe(32)})
        if self.conf.get("storm.zookeeper.auth.payload"):
            found |= kept(("storm.zookeeper.topology.auth.scheme", "storm.zookeeper.topology.auth.payload"),
                          {"storm.zookeeper.topology.auth.scheme": "digest",
                           "storm.zookeeper.topology.auth.payload": f"{topology_id}:{secrets.token_urlsafe(24)}"})
        return found

    def _await_replicas(self, topology_id: str, topology_conf: Mapping[str, Any]) -> None:
        """Publish the new code, then wait for ``topology.min.replication.count`` nimbuses to hold it, at most
        ``topology.max.replication.wait.time.sec`` (Storm's submit): a topology is scheduled only once losing
        this host would not lose its code, or once the operator's patience ran out."""
        self.replication.publish(topology_id)
        conf = {**self.conf, **topology_conf}
        wanted, max_wait = int(conf["topology.min.replication.count"]), float(conf["topology.max.replication.wait.time.sec"])
        if wanted <= 1:
            return
        started = self.clock.monotonic()
        held = self.replication.wait_for_replicas(topology_id, self.code.current_version(topology_id),
                                                  wanted=wanted, max_wait_secs=max_wait)
        (log.info if held >= wanted else log.warning)(
            "code replicated" if held >= wanted else "scheduling with fewer code replicas than wanted",
            topology_id=topology_id, replicas=held, wanted=wanted,
            waited_secs=round(self.clock.monotonic() - started, 3))

    @staticmethod
    def _submitted_conf(json_conf: str) -> Any:
        try:
            return json.loads(json_conf or "{}")
        except json.JSONDecodeError as exc:
            raise storm.InvalidTopologyException(msg=f"topology conf is not valid JSON: {exc}") from None

    def _assign(self, event: AssignEvent) -> Assignment | None:
        try:
            return self.assigner.push(event).wait(self.clock, self.conf["nimbus.assign.timeout.secs"])
        except AssignFailed as exc:  # Storm clients only know InvalidTopologyException on submit/rebalance
            raise storm.InvalidTopologyException(msg=f"could not assign {event.topology_id}: {exc}") from None

    def transition(self, topology_id: str, action: lifecycle.Action) -> None:
        """Apply one lifecycle action: effects first, then the new base, then timers (see lifecycle)."""
        with self._lock:
            base = self.base(topology_id)
            outcome = lifecycle.transition(base, action, now_secs=int(self.clock.time()),
                                           message_timeout_secs=self._message_timeout(topology_id))
            for effect in outcome.effects:
                if isinstance(effect, lifecycle.Reassign):
                    try:
                        self._rebalance(topology_id, base.name, effect)
                    except storm.InvalidTopologyException as exc:  # keep the old placement, say why
                        self.record_error(topology_id, f"rebalance failed: {exc.msg}")
                    except MissingTopology:
                        self.record_error(topology_id, f"rebalance failed: {self._no_code(topology_id)}")
                elif isinstance(effect, lifecycle.RemoveTopology):
                    self._remove_state(topology_id)
            if outcome.base is not None and outcome.base is not base:
                self.zk.write(paths.topology(topology_id), outcome.base)
            for effect in outcome.effects:
                if isinstance(effect, lifecycle.ScheduleAt):
                    self._arm(topology_id, effect)
        log.info("topology transition", topology_id=topology_id, action=action.verb,
                 status=outcome.base.status.value if outcome.base else "removed")

    def record_error(self, topology_id: str, message: str) -> None:
        """An error of the topology itself, kept like a task error of its topology master (last few only)."""
        tasks = self.zk.read(paths.tasks(topology_id), TopologyTasks)
        task = (topo.topology_master_task(tasks) if tasks else None) or 0
        now = int(self.clock.time())
        record_task_error(self.zk, topology_id, task, TaskError(message, now, ErrorLevel.ERROR, host=self.host,
                                                                port=self.port))
        log.error("topology error", topology_id=topology_id, error=message)

    def _arm(self, topology_id: str, effect: lifecycle.ScheduleAt) -> None:
        def fire() -> None:
            while (choice := self._delayed_action_choice()) is TimerChoice.WAIT:
                (self.zk.connected if self._ready.is_set() else self._ready).wait(1.0)
            if choice is TimerChoice.DROP:
                return
            try:
                self.transition(topology_id, effect.action)
            except lifecycle.StaleTimer:
                log.debug("stale timer dropped", topology_id=topology_id, action=effect.action.verb)
            except storm.NotAliveException:
                pass
            except Exception:  # e.g. ZooKeeper away: the action is still pending, so try again until it is done
                retry_secs = self.conf["nimbus.monitor.freq.secs"]
                log.exception("delayed action failed; retrying", topology_id=topology_id, action=effect.action.verb,
                              retry_in_secs=retry_secs)
                self._arm(topology_id, lifecycle.ScheduleAt(int(self.clock.time() + retry_secs), effect.action))

        # timers run on the clock thread; the action may wait for an assignment, so run it off that thread
        timer = self.clock.call_later(
            max(0.0, effect.due_secs - self.clock.time()),
            lambda: threading.Thread(target=fire, name="nimbus-delayed-action", daemon=True).start())
        now = self.clock.monotonic()  # keep only what can still fire, so the list does not grow forever
        self._leader_timers = [t for t in self._leader_timers if not (isinstance(t, Timer) and t.due < now)]
        self._leader_timers.append(timer)

    def _delayed_action_choice(self) -> TimerChoice:
        """Due during a ZooKeeper blip, an action waits for the connection: dropped, nothing would re-arm it while
        the session survives (only a takeover re-arms from ``StormBase.pending``), and a kill would never end."""
        return delayed_action_choice(self._elected(), self._ready.is_set() and self.zk.connected.is_set())

    def _rebalance(self, topology_id: str, name: str, effect: lifecycle.Reassign) -> None:
        """Apply a new worker count or parallelism to the stored topology, then reschedule."""
        scale = bool(effect.num_executors or effect.num_workers or effect.conf_json)
        if scale:
            conf = self.code.conf(topology_id)
            if effect.conf_json:
                conf.update(json.loads(effect.conf_json))
            if effect.num_workers:
                conf["topology.workers"] = effect.num_workers
            user = self.code.topology(topology_id)
            if effect.num_executors:
                spouts = {c: n for c, n in effect.num_executors.items() if c in user.spouts}
                bolts = {c: n for c, n in effect.num_executors.items() if c in user.bolts}
                conf["topology.spout.parallelism"] = {**conf.get("topology.spout.parallelism", {}), **spouts}
                conf["topology.bolt.parallelism"] = {**conf.get("topology.bolt.parallelism", {}), **bolts}
            normalized, conf = topo.normalize(user, conf, name=name)
            system = topo.system_topology(normalized, {**self.conf, **conf})
            self.code.put(topology_id, package=self.code.package(topology_id), conf=conf, topology=normalized,
                          system=system, version=self.code.current_version(topology_id), replace=True)
            self.replication.publish(topology_id)
            old_tasks = self.zk.read(paths.tasks(topology_id), TopologyTasks) or TopologyTasks(tasks={})
            self.zk.write(paths.tasks(topology_id), topo.rescale_tasks(old_tasks, system))
        self._assign(AssignEvent(topology_id, name, AssignType.REBALANCE, reassign=effect.reassign,
                                 writes=AssignmentType.SCALE if scale else AssignmentType.ASSIGN))

    def _remove_state(self, topology_id: str) -> None:
        """Assignment first (supervisors stop the workers), the rest, ``/topology/<id>`` last, then code."""
        self.zk.delete(paths.assignment(topology_id))
        for parent in paths.TOPOLOGY_SUBTREES:
            self.zk.delete(f"{parent}/{topology_id}")
        self.zk.delete(paths.topology(topology_id))
        self.code.remove(topology_id)
        self.replication.announce()
        with self._beats_lock:
            self.tracker.forget(topology_id)
            self.windows.forget(topology_id)
            self.restarts.forget(topology_id)

    # -- gray upgrade (decisions in nimbus.upgrade) ------------------------------------------------

    def gray_submit(self, name: str, location: str | None, json_conf: str, user_topology: Any,
                    request: upgrade.BatchRequest, ttl_ms: int | None = None) -> str:
        """Store new code as the next version of the running topology ``name`` and start upgrading to it."""
        self.require_leader()
        topology_id = self.find_id(name)
        submitted = self._submitted_conf(json_conf)
        topo.validate_topology(name, user_topology, {**self.conf, **submitted} if isinstance(submitted, dict)
                               else submitted)
        with self._lock:
            status = self.base(topology_id).status
            existing = self.zk.read(paths.gray_upgrade_conf(topology_id), GrayUpgradeConf)
            now_ms = int(self.clock.time() * 1000)
            version = self._next_version(topology_id)
            conf = upgrade.start(existing, name, request, version=version, now_ms=now_ms,
                                 ttl_ms=ttl_ms or int({**self.conf, **submitted}["topology.upgrade.ttl"]))
            if status is not TopologyStatus.ACTIVE:
                raise upgrade.UpgradeRefused(f"only an active topology can start a gray upgrade; {name!r} is "
                                             f"{status.value}")
            old_conf = self.code.conf(topology_id)
            normalized, topology_conf = topo.normalize(user_topology, {
                **without_submit_flags(submitted), "topology.workers": old_conf["topology.workers"]}, name=name)
            topology_conf["topology.id"] = topology_id
            topology_conf.update(self._topology_secrets(topology_id, topology_conf))
            system = topo.system_topology(normalized, {**self.conf, **topology_conf})
            self._check_workers_known(topology_id, request)
            changed = upgrade.shape_differences(upgrade.shape(self.code.system_topology(topology_id)),
                                                upgrade.shape(system))
            if changed:
                raise upgrade.UpgradeRefused(
                    "a gray upgrade runs old and new code side by side, so the topology's shape must stay the same: "
                    + "; ".join(changed) + ". Change it with storm rebalance, or replace the topology "
                    "(topology.hot.deploy.enable=true)")
            self._put_version(topology_id, location, conf=topology_conf, topology=normalized, system=system,
                              version=version, make_current=False)
            self._clear_marks(topology_id)
            self.zk.write(paths.gray_upgrade_conf(topology_id), conf)
            self.transition(topology_id, lifecycle.StartUpgrade())
            log.info("gray upgrade started", topology_id=topology_id, version=version, batch=request.describe())
            self.coordinate_upgrade(topology_id)
        return topology_id

    def _put_version(self, topology_id: str, location: str | None, **put: Any) -> None:
        """Store a code version from the upload at ``location`` (without one: the current version's package)."""
        package = self.inbox.claim(location) if location else None
        try:
            stored = package or self.code.package(topology_id)
            check_named_classes(stored, put["topology"])
            self.code.put(topology_id, package=stored, **put)
            self.replication.publish(topology_id)
        finally:
            if package is not None:
                package.unlink(missing_ok=True)  # the code store has its own copy

    def _clear_marks(self, topology_id: str) -> None:
        """The marks of an earlier upgrade go; their parents stay, as the supervisors watch them (a children watch
        ends with its node: a parent deleted and made again left the supervisors to their periodic sync)."""
        for marks in (paths.upgrading_workers(topology_id), paths.upgraded_workers(topology_id)):
            for mark in self.zk.children(marks):
                self.zk.delete(f"{marks}/{mark}")

    def _next_version(self, topology_id: str) -> int:
        """Above every version stored or last upgraded to, so a supervisor never mistakes old code for new."""
        last = self.zk.read(paths.gray_upgrade_conf(topology_id), GrayUpgradeConf)
        return max([*self.code.versions(topology_id), last.version if last else 0]) + 1

    def update_topology(self, name: str, location: str | None, json_conf: str) -> None:
        """New code and/or conf as the next code version (JStorm's ``update_topology``). Workers reload the conf
        in place (``Component.update``); the code is taken by each worker at its next start."""
        self.require_leader()
        topology_id = self.find_id(name)
        overrides = self._submitted_conf(json_conf)
        if not isinstance(overrides, dict):
            raise storm.InvalidTopologyException(msg="the update conf must be a JSON object")
        layout = sorted(set(overrides) & LAYOUT_KEYS)
        if layout:
            raise storm.InvalidTopologyException(msg=f"{layout} change how the topology is laid out; use storm "
                                                     "rebalance for those")
        with self._lock:
            status = self.base(topology_id).status
            if status not in (TopologyStatus.ACTIVE, TopologyStatus.INACTIVE):
                raise upgrade.UpgradeRefused(f"cannot update {name!r} while it is {status.value}")
            current = self.code.current_version(topology_id)
            conf = {**self.code.conf(topology_id), **overrides, "topology.id": topology_id}
            user_topology = self.code.topology(topology_id)
            topo.validate_topology(name, user_topology, {**self.conf, **conf})
            self._put_version(topology_id, location, conf=conf, topology=user_topology,
                              system=self.code.system_topology(topology_id), version=self._next_version(topology_id))
            self._assign(AssignEvent(topology_id, name, AssignType.MONITOR, writes=AssignmentType.UPDATE))
            self.code.drop(topology_id, current)
            self.replication.publish(topology_id)
        log.info("topology updated", topology_id=topology_id, new_code=bool(location), conf=sorted(overrides))

    def gray_continue(self, name: str, request: upgrade.BatchRequest) -> None:
        """The operator asks for the next batch (or, with ``all_remaining``, the last one)."""
        self.require_leader()
        topology_id = self.find_id(name)
        with self._lock:
            existing = self.zk.read(paths.gray_upgrade_conf(topology_id), GrayUpgradeConf)
            conf = upgrade.next_batch(existing, name, request, now_ms=int(self.clock.time() * 1000))
            self._check_workers_known(topology_id, request)
            self.zk.write(paths.gray_upgrade_conf(topology_id), conf)
            log.info("gray upgrade continues", topology_id=topology_id, batch=request.describe())
            self.coordinate_upgrade(topology_id)

    def _check_workers_known(self, topology_id: str, request: upgrade.BatchRequest) -> None:
        assignment = self.zk.read(paths.assignment(topology_id), Assignment)
        system = self.code.system_topology(topology_id)
        upgrade.check_request(request, [w.host_port for w in assignment.workers] if assignment else [],
                              [*(system.bolts or {}), *(system.spouts or {})])

    def rollback_upgrade(self, topology_id: str, reason: str) -> None:
        """Put every worker back on the assignment's code version: upgraded ports become pending again."""
        with self._lock:
            conf = self.zk.read(paths.gray_upgrade_conf(topology_id), GrayUpgradeConf)
            if not upgrade.in_progress(conf):
                raise upgrade.UpgradeRefused(f"{topology_id} has no gray upgrade in progress to roll back")
            if conf.rollback:
                return
            self.zk.write(paths.gray_upgrade_conf(topology_id), upgrade.start_rollback(conf, reason))
            self.transition(topology_id, lifecycle.Rollback())
            self.record_error(topology_id, f"gray upgrade to code version {conf.version} rolled back: {reason}")
            self.coordinate_upgrade(topology_id)

    def coordinate_upgrade(self, topology_id: str) -> None:
        """One coordinator round (leader timer, and right after each operator call)."""
        with self._lock:
            conf = self.zk.read(paths.gray_upgrade_conf(topology_id), GrayUpgradeConf)
            assignment = self.zk.read(paths.assignment(topology_id), Assignment)
            tasks = self.zk.read(paths.tasks(topology_id), TopologyTasks)
            if conf is None or assignment is None or tasks is None:
                return
            master = topo.topology_master_task(tasks)
            workers = tuple(w.host_port for w in sorted(assignment.workers,
                                                        key=lambda w: (master in w.tasks, w.host_port)))
            hosting: dict[str, set[str]] = {}
            for w in assignment.workers:
                for task in w.tasks:
                    if task in tasks.tasks:
                        hosting.setdefault(tasks.tasks[task].component, set()).add(w.host_port)
            view = upgrade.UpgradeView(
                conf, workers, {c: frozenset(hp) for c, hp in hosting.items()},
                frozenset(self.zk.children(paths.upgrading_workers(topology_id))),
                frozenset(self.zk.children(paths.upgraded_workers(topology_id))))
            now_ms = int(self.clock.time() * 1000)
            step = upgrade.next_step(view, now_ms)
            if step.rollback:
                self.rollback_upgrade(topology_id, step.rollback)
            elif step.complete:
                self._finish_upgrade(topology_id, conf, now_ms, keep=conf.version, drop=assignment.code_version)
            elif step.rolled_back:
                self._finish_upgrade(topology_id, conf, now_ms, keep=assignment.code_version, drop=conf.version)
            elif step.back:
                for host_port in step.back:
                    self.zk.write(paths.upgrading_worker(topology_id, host_port), WorkerMark(now_ms // 1000))
                    self.zk.delete(paths.upgraded_worker(topology_id, host_port))
            elif step.conf is not None:
                for host_port in step.batch:
                    self.zk.write(paths.upgrading_worker(topology_id, host_port), WorkerMark(now_ms // 1000))
                self.zk.write(paths.gray_upgrade_conf(topology_id), step.conf)
                log.info("gray upgrade batch", topology_id=topology_id, workers=list(step.batch))

    def _finish_upgrade(self, topology_id: str, conf: GrayUpgradeConf, now_ms: int, *, keep: int, drop: int) -> None:
        """Make ``keep`` the version every worker runs (assignment first, so no worker switches), drop the other."""
        self.code.set_current(topology_id, keep)
        self._assign(AssignEvent(topology_id, topo.name_of(topology_id), AssignType.MONITOR))
        self.code.drop(topology_id, drop)
        self.replication.publish(topology_id)
        self._clear_marks(topology_id)
        self.zk.write(paths.gray_upgrade_conf(topology_id), upgrade.ended(conf, now_ms))
        self.transition(topology_id, lifecycle.CompleteUpgrade())
        log.info("gray upgrade rolled back" if conf.rollback else "gray upgrade complete", topology_id=topology_id,
                 version=keep)

    # -- hosts ----------------------------------------------------------------------------------

    def set_blacklisted(self, host: str, blacklisted: bool) -> None:
        """Add ``host`` to ``/blacklist`` or remove it; the leader is its one writer. The assigner reads it at
        every assignment, so the host gets no new workers from then on; workers already there keep running."""
        self.require_leader()
        with self._lock:
            hosts = set(self.blacklist())
            wanted = hosts | {host} if blacklisted else hosts - {host}
            if wanted != hosts:
                self.zk.write(paths.BLACKLIST, Blacklist(sorted(wanted)))
        log.info("host blacklisted" if blacklisted else "host off the blacklist", host=host)

    def blacklist(self) -> list[str]:
        return sorted((self.zk.read(paths.BLACKLIST, Blacklist) or Blacklist()).hosts)

    # -- dynamic log levels ---------------------------------------------------------------------

    def set_log_levels(self, topology_id: str, changes: Mapping[str, LoggerLevel | None]) -> LoggerLevels:
        """Merge ``changes`` (logger → new setting, None: remove it) into ``/logconfigs/<id>``, whose one writer
        is the leader; settings already expired are dropped. The topology's workers watch the node."""
        self.require_leader()
        with self._lock:
            self.base(topology_id)
            now_ms = int(self.clock.time() * 1000)
            current = self.zk.read(paths.log_config(topology_id), LoggerLevels) or LoggerLevels()
            merged = {name: s for name, s in {**current.loggers, **changes}.items()
                      if s is not None and (not s.expires_ms or s.expires_ms > now_ms)}
            self.zk.write(paths.log_config(topology_id), LoggerLevels(merged))
        log.info("log levels set", topology_id=topology_id, loggers={n: s.level for n, s in merged.items()})
        return LoggerLevels(merged)

    def log_levels(self, topology_id: str) -> LoggerLevels:
        self.base(topology_id)
        return self.zk.read(paths.log_config(topology_id), LoggerLevels) or LoggerLevels()

    # -- heartbeats and the monitor -------------------------------------------------------------

    def heartbeat(self, topology_id: str, beats: Mapping[int, TaskBeat]) -> None:
        """Take in a topology master's beats. A topology already beating is known without a ZooKeeper read, so
        beats keep arriving through a ZooKeeper outage and nobody is judged dead on the time it was away.
        Only the elected leader takes them (SUSPENDED too): beats kept by a follower, or by a leader deposed while
        its workers stayed connected, never reach the leader, which then judges every task dead."""
        if not self._elected():
            self.require_leader()  # not leading: NotLeader names the leader, and the worker looks it up again
        if (not self.tracker.knows(topology_id) and not self.zk.exists(paths.topology(topology_id))
                and topology_id not in self._ids_submitting()):
            raise storm.NotAliveException(msg=topology_id)
        with self._beats_lock:
            self.tracker.record(topology_id, beats, int(self.clock.time()))
            self.windows.record(topology_id, beats)

    def latest_beats(self, topology_id: str) -> dict[int, TaskBeat]:
        """The leader's live view of task beats; a follower reads the leader's last ``/taskbeats`` snapshot."""
        if self.is_leader:
            with self._beats_lock:
                return dict(self.tracker.snapshot(topology_id, 0).beats)
        stored = self.zk.read(paths.taskbeats(topology_id), TaskHeartbeats)
        return dict(stored.beats) if stored else {}

    def stats_windows(self, topology_id: str, keys: Collection[str] = tuple(WINDOW_BUCKETS)
                     ) -> dict[int, dict[str, TaskStats]]:
        """Task → Storm's window key (of ``keys``) → its counts in the window, from the beats this nimbus took in as
        leader (a follower has none: the leader serves the windows, as the UI asks it)."""
        with self._beats_lock:
            return self.windows.windows(topology_id, keys)

    def restart_times(self, topology_id: str) -> list[int]:
        """When this nimbus, leading, moved dead workers of ``topology_id`` lately (:class:`Restarts`)."""
        with self._beats_lock:
            return self.restarts.times(topology_id, int(self.clock.time()))

    def _ids_submitting(self) -> set[str]:
        return set(self._submitting.copy().values())  # dict.copy is atomic: no lock, so beats never wait on a change

    def _stop_watching(self) -> None:
        """What happens from now until the next monitor cycle's look is not held against any task."""
        self._watch += 1

    def _watching(self, watch: int) -> bool:
        """Still leading, connected and in the same watch as a cycle that started in ``watch``."""
        return self._watch == watch and self.is_leader

    def monitor(self) -> None:
        """One monitor cycle: persist beats, reassign dead workers, clean up orphans. Leader only.

        Storm's rule: a leader judges no task on time it was not watching. The first cycle after a takeover,
        a lost session or a read that failed through an outage gives every task a full
        ``nimbus.task.timeout.secs`` from its look; a cycle that straddles such a change (its ZooKeeper calls
        waited out a re-election) judges nothing, and one that waited out a shorter outage judges on a ``now``
        taken after its calls, against the beats that kept arriving meanwhile."""
        if not self.is_leader:
            return
        watch = self._watch
        try:
            alive = set(self.zk.children(paths.TOPOLOGIES))
        except Exception:
            self._stop_watching()
            raise
        with self._beats_lock:
            if not self._watching(watch):
                return
            if self._pardoned_watch != watch:
                self._pardoned_watch = watch
                self.tracker.pardon(int(self.clock.time()))
                log.info("monitor watching from now: every task has a full timeout from now")
        for topology_id in sorted(alive):
            try:
                self._check_topology(topology_id, watch)
            except Exception:
                log.exception("monitor failed for topology", topology_id=topology_id)
        self._cleanup_orphans()

    def _check_topology(self, topology_id: str, watch: int) -> None:
        base = self.zk.read(paths.topology(topology_id), StormBase)
        assignment = self.zk.read(paths.assignment(topology_id), Assignment)
        tasks = self.zk.read(paths.tasks(topology_id), TopologyTasks)
        if base is None or assignment is None or tasks is None:
            return
        conf = self.merged_conf(topology_id)
        with self._beats_lock:
            snapshot = self.tracker.snapshot(topology_id, topo.topology_master_task(tasks) or 0)
        if not self._watching(watch):
            return
        self.zk.write(paths.taskbeats(topology_id), snapshot)  # beats are not held up while ZooKeeper is slow
        with self._beats_lock:
            if not self._watching(watch):  # leadership changed while the write waited: judge nothing
                return
            dead = self.tracker.dead_workers(topology_id, assignment, int(self.clock.time()),
                                             task_timeout_secs=int(conf["nimbus.task.timeout.secs"]),
                                             launch_grace_secs=int(conf["nimbus.task.launch.secs"]))
        if base.status in (TopologyStatus.UPGRADING, TopologyStatus.ROLLBACK):
            if dead and base.status is TopologyStatus.UPGRADING:
                self.rollback_upgrade(topology_id, f"tasks died during the upgrade, on {[w.host_port for w in dead]}")
                return  # reassigned on a later cycle if still dead: the rollback may be all they need
            self.coordinate_upgrade(topology_id)
        if dead and base.status in (TopologyStatus.ACTIVE, TopologyStatus.INACTIVE, TopologyStatus.ROLLBACK):
            dead_tasks = frozenset(t for w in dead for t in w.tasks)
            log.warning("reassigning dead workers", topology_id=topology_id,
                        workers=[w.host_port for w in dead], tasks=sorted(dead_tasks))
            self.assigner.push(AssignEvent(topology_id, base.name, AssignType.MONITOR, dead_tasks=dead_tasks,
                                           based_on_ms=assignment.timestamp_ms))
            self._report_restarts(topology_id, dead, assignment, int(conf["nimbus.task.timeout.secs"]))
        elif base.status in (TopologyStatus.ACTIVE, TopologyStatus.INACTIVE) and (
                len(assignment.workers) < assignment.wanted_workers):  # short of slots: take those freed since
            self.assigner.push(AssignEvent(topology_id, base.name, AssignType.REBALANCE, grow=True,
                                           based_on_ms=assignment.timestamp_ms))

    def _report_restarts(self, topology_id: str, dead: tuple[WorkerAssignment, ...], assignment: Assignment,
                         timeout_secs: int) -> None:
        """File each worker moved for the first time under ``assignment`` as an error of the topology, so
        ``storm get-errors`` and the UI say why its tasks started over; Health counts them (:class:`Restarts`)."""
        with self._beats_lock:
            new = set(self.restarts.record(topology_id, [w.host_port for w in dead],
                                           assignment_ms=assignment.timestamp_ms, now=int(self.clock.time())))
        for worker in (w for w in dead if w.host_port in new):
            self.record_error(topology_id, f"worker {worker.host_port} restarted by nimbus: no heartbeat from its "
                                           f"tasks {sorted(worker.tasks)} for over {timeout_secs} s "
                                           "(nimbus.task.timeout.secs)")

    def _cleanup_orphans(self) -> None:
        """State left by a nimbus that died mid-submit or mid-removal: no ``/topology`` node, no submit running.

        Read in this order — state, then submissions in flight, then ``/topology`` — so a submission that
        finishes meanwhile is seen either as in flight or as alive, never as an orphan.
        """
        leftovers = {t for parent in paths.TOPOLOGY_SUBTREES for t in self.zk.children(parent)} | set(self.code.ids())
        submitting = self._ids_submitting()
        alive = set(self.zk.children(paths.TOPOLOGIES))
        for topology_id in sorted(leftovers - alive - submitting):
            log.warning("removing orphaned topology state", topology_id=topology_id)
            self._remove_state(topology_id)
