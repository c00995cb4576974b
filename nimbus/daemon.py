"""The nimbus daemon: wires the pure parts (validation, scheduler, lifecycle, monitor) to ZooKeeper,
the code store, the clock and the Thrift server.

Every nimbus serves reads; only the leader (see :mod:`nimbus.leader`) changes anything. Writes to
a topology go through :meth:`Nimbus.transition` under one lock, so a timer and an operator can never
interleave on the same ``StormBase``.
"""

from __future__ import annotations

import itertools
import json
import socket
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import structlog

from nimbus import lifecycle
from nimbus.assign import AssignEvent, AssignFailed, TopologyAssigner
from nimbus.codestore import CodeStore, Downloads, Inbox, MissingTopology
from nimbus.leader import LeaderElection
from nimbus.monitor import HeartbeatTracker
from nimbus.scheduler import AssignType, Component
from nimbus.scheduler.model import scheduler_components
from squall import topology as topo
from squall.clock import Clock, Periodic, RealClock, Timer
from squall.thrift import ThriftServer, make_server, storm
from squall.zk import paths
from squall.zk.client import ZkClient
from squall.zk.errors import record_task_error
from squall.zk.records import (
    Assignment, ErrorLevel, StormBase, TaskBeat, TaskError, TaskHeartbeats, TopologyStatus, TopologyTasks,
)

log = structlog.get_logger(__name__)


class NotLeader(RuntimeError):
    """A write reached a follower; Storm reports this as an internal error with the leader's address."""


class Nimbus:
    def __init__(self, conf: Mapping[str, Any], clock: Clock | None = None, *, host: str | None = None) -> None:
        self.conf = dict(conf)
        self.clock = clock or RealClock()
        self.host = host or conf.get("storm.local.hostname") or socket.gethostname()
        local = Path(conf["storm.local.dir"]) / "nimbus"
        self.zk = ZkClient(conf)
        self.inbox = Inbox(local / "inbox", self.clock, max_upload_bytes=conf["nimbus.max.upload.bytes"],
                           session_expiry_secs=conf["nimbus.file.copy.expiration.secs"],
                           file_expiry_secs=conf["nimbus.inbox.jar.expiration.secs"])
        self.code = CodeStore(local / "stormdist")
        self.downloads = Downloads(self.clock, chunk_bytes=conf["nimbus.thrift.max_buffer_size"] // 2,
                                   session_expiry_secs=conf["nimbus.file.copy.expiration.secs"])
        self.tracker = HeartbeatTracker()
        self._beats_lock = threading.Lock()
        self.assigner = TopologyAssigner(self.zk, self.clock, self.topology_source,
                                         code_dir=lambda tid: str(local / "stormdist" / tid))
        self.server: ThriftServer | None = None
        self.election: LeaderElection | None = None
        self._lock = threading.RLock()  # one topology change at a time
        self._submitting: dict[str, str] = {}  # name → id of each submission in flight
        self._counter = itertools.count(1)
        self._leader_timers: list[Timer | Periodic] = []
        self._port = 0
        self._ready = threading.Event()

    # -- lifecycle of the daemon ----------------------------------------------------------------

    def start(self, handler_factory: Callable[["Nimbus"], object] | None = None) -> "Nimbus":
        from nimbus.service import NimbusService

        self.zk.start()
        self.assigner.start()
        self.server = make_server((handler_factory or NimbusService)(self), "0.0.0.0", self.conf["nimbus.thrift.port"],
                                  max_frame_bytes=self.conf["nimbus.thrift.max_buffer_size"],
                                  client_timeout_ms=self.conf["storm.thrift.socket.timeout.ms"],
                                  max_connections=self.conf["nimbus.thrift.threads"]).start()
        self._port = self.server.port
        self.election = LeaderElection(self.zk, self.host, self._port, self.clock,
                                       on_elected=self._lead, on_demoted=self._follow).start()
        log.info("nimbus started", host=self.host, port=self.server.port)
        return self

    def stop(self) -> None:
        """Step down, stop serving, disconnect; calling it twice is harmless."""
        election, server, self.election, self.server = self.election, self.server, None, None
        if election is None:
            return
        self._follow()
        election.stop()
        if server is not None:
            server.stop()
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
        """Became leader: reload heartbeats, re-arm delayed actions, start the periodic work."""
        now = int(self.clock.time())
        for topology_id in self.zk.children(paths.TOPOLOGIES):
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
        log.info("nimbus leading", topologies=len(self.zk.children(paths.TOPOLOGIES)))

    def _follow(self) -> None:
        self._ready.clear()
        for timer in self._leader_timers:
            timer.cancel()
        self._leader_timers.clear()

    def _cleanup_files(self) -> None:
        self.inbox.cleanup()
        self.downloads.cleanup()

    # -- topologies -----------------------------------------------------------------------------

    def topology_source(self, topology_id: str) -> tuple[tuple[Component, ...], Mapping[str, Any]]:
        """What the assign thread needs: scheduler components and the merged conf."""
        tasks = self.zk.read(paths.tasks(topology_id), TopologyTasks)
        if tasks is None:
            raise AssignFailed(f"{topology_id} has no tasks in ZooKeeper")
        try:
            return (scheduler_components(self.code.system_topology(topology_id), tasks),
                    self.merged_conf(topology_id))
        except MissingTopology:
            raise AssignFailed(self._no_code(topology_id)) from None

    def _no_code(self, topology_id: str) -> str:
        return (f"nimbus {self.host}:{self.port} has no code for {topology_id}: code is not yet replicated "
                "between nimbuses, so only the nimbus that accepted it can schedule it")

    def merged_conf(self, topology_id: str) -> dict[str, Any]:
        return {**self.conf, **self.code.conf(topology_id)}

    def _message_timeout(self, topology_id: str) -> int:
        """The topology's own timeout; the cluster's when this nimbus lacks the code (no replication yet)."""
        try:
            return int(self.merged_conf(topology_id)["topology.message.timeout.secs"])
        except MissingTopology:
            return int(self.conf["topology.message.timeout.secs"])

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

    def submit(self, name: str, location: str | None, json_conf: str, user_topology: Any,
               initial_status: TopologyStatus = TopologyStatus.ACTIVE) -> str:
        """Validate, store, number the tasks, assign, and write ``/topology/<id>`` last."""
        self.require_leader()
        topo.validate_name(name)
        try:
            submitted_conf = json.loads(json_conf or "{}")
        except json.JSONDecodeError as exc:
            raise storm.InvalidTopologyException(msg=f"topology conf is not valid JSON: {exc}") from None
        merged = {**self.conf, **submitted_conf} if isinstance(submitted_conf, dict) else submitted_conf
        topo.validate_topology(name, user_topology, merged)  # also refuses a conf that is not an object
        with self._lock:
            if name in self.alive_names() or name in self._submitting:
                raise storm.AlreadyAliveException(msg=f"topology {name!r} is already alive")
            topology_id = topo.topology_id(name, next(self._counter), self.clock.time())
            self._submitting[name] = topology_id
        package = None
        try:
            package = self.inbox.claim(location) if location else None
            normalized, topology_conf = topo.normalize(user_topology, submitted_conf, name=name)
            topology_conf["topology.id"] = topology_id
            system = topo.system_topology(normalized, {**self.conf, **topology_conf})
            tasks = topo.make_tasks(system)
            self.code.put(topology_id, package=package, conf=topology_conf, topology=normalized, system=system)
            self.zk.write(paths.tasks(topology_id), tasks)
            self.zk.write(paths.taskbeats(topology_id), TaskHeartbeats(topo.topology_master_task(tasks) or 0))
            self.zk.create(paths.task_errors_root(topology_id))
            self.zk.create(paths.upgrading_workers(topology_id))
            self.zk.create(paths.upgraded_workers(topology_id))
            self._assign(AssignEvent(topology_id, name))
            self.require_leader()  # demoted while waiting: the new leader will clean up, not us
            now = int(self.clock.time())
            workers = int(self.merged_conf(topology_id)["topology.workers"])
            self.zk.write(paths.topology(topology_id), StormBase(name, initial_status, now, workers))
        except Exception:
            self._remove_state(topology_id)
            raise
        finally:
            if package is not None:
                package.unlink(missing_ok=True)  # the code store has its own copy
            with self._lock:
                self._submitting.pop(name, None)
        log.info("topology submitted", topology_id=topology_id, tasks=len(tasks.tasks))
        return topology_id

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
            if not self.is_leader:
                return
            try:
                self.transition(topology_id, effect.action)
            except lifecycle.StaleTimer:
                log.debug("stale timer dropped", topology_id=topology_id, action=effect.action.verb)
            except storm.NotAliveException:
                pass
            except Exception:
                log.exception("delayed action failed", topology_id=topology_id, action=effect.action.verb)

        # timers run on the clock thread; the action may wait for an assignment, so run it off that thread
        timer = self.clock.call_later(
            max(0.0, effect.due_secs - self.clock.time()),
            lambda: threading.Thread(target=fire, name="nimbus-delayed-action", daemon=True).start())
        now = self.clock.monotonic()  # keep only what can still fire, so the list does not grow forever
        self._leader_timers = [t for t in self._leader_timers if not (isinstance(t, Timer) and t.due < now)]
        self._leader_timers.append(timer)

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
                          system=system)
            old_tasks = self.zk.read(paths.tasks(topology_id), TopologyTasks) or TopologyTasks(tasks={})
            self.zk.write(paths.tasks(topology_id), topo.rescale_tasks(old_tasks, system))
        self._assign(AssignEvent(topology_id, name, AssignType.REBALANCE, reassign=effect.reassign, scale=scale))

    def _remove_state(self, topology_id: str) -> None:
        """Assignment first (supervisors stop the workers), the rest, ``/topology/<id>`` last, then code."""
        self.zk.delete(paths.assignment(topology_id))
        for parent in paths.TOPOLOGY_SUBTREES:
            self.zk.delete(f"{parent}/{topology_id}")
        self.zk.delete(paths.topology(topology_id))
        self.code.remove(topology_id)
        with self._beats_lock:
            self.tracker.forget(topology_id)

    # -- heartbeats and the monitor -------------------------------------------------------------

    def heartbeat(self, topology_id: str, beats: Mapping[int, TaskBeat]) -> None:
        if not self.zk.exists(paths.topology(topology_id)) and topology_id not in self._ids_submitting():
            raise storm.NotAliveException(msg=topology_id)
        with self._beats_lock:
            self.tracker.record(topology_id, beats, int(self.clock.time()))

    def latest_beats(self, topology_id: str) -> dict[int, TaskBeat]:
        """The leader's live view of task beats; a follower reads the leader's last ``/taskbeats`` snapshot."""
        if self.is_leader:
            with self._beats_lock:
                return dict(self.tracker.snapshot(topology_id, 0).beats)
        stored = self.zk.read(paths.taskbeats(topology_id), TaskHeartbeats)
        return dict(stored.beats) if stored else {}

    def _ids_submitting(self) -> set[str]:
        return set(self._submitting.copy().values())  # dict.copy is atomic: no lock, so beats never wait on a change

    def monitor(self) -> None:
        """One monitor cycle: persist beats, reassign dead workers, clean up orphans. Leader only."""
        if not self.is_leader:
            return
        now = int(self.clock.time())
        alive = set(self.zk.children(paths.TOPOLOGIES))
        for topology_id in sorted(alive):
            try:
                self._check_topology(topology_id, now)
            except Exception:
                log.exception("monitor failed for topology", topology_id=topology_id)
        self._cleanup_orphans()

    def _check_topology(self, topology_id: str, now: int) -> None:
        base = self.zk.read(paths.topology(topology_id), StormBase)
        assignment = self.zk.read(paths.assignment(topology_id), Assignment)
        tasks = self.zk.read(paths.tasks(topology_id), TopologyTasks)
        if base is None or assignment is None or tasks is None:
            return
        with self._beats_lock:
            self.zk.write(paths.taskbeats(topology_id),
                          self.tracker.snapshot(topology_id, topo.topology_master_task(tasks) or 0))
            conf = self.merged_conf(topology_id)
            dead = self.tracker.dead_workers(topology_id, assignment, now,
                                             task_timeout_secs=int(conf["nimbus.task.timeout.secs"]),
                                             launch_grace_secs=int(conf["nimbus.task.launch.secs"]))
        if dead and base.status in (TopologyStatus.ACTIVE, TopologyStatus.INACTIVE):
            dead_tasks = frozenset(t for w in dead for t in w.tasks)
            log.warning("reassigning dead workers", topology_id=topology_id,
                        workers=[w.host_port for w in dead], tasks=sorted(dead_tasks))
            self.assigner.push(AssignEvent(topology_id, base.name, AssignType.MONITOR, dead_tasks=dead_tasks,
                                           based_on_ms=assignment.timestamp_ms))

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
