"""The Thrift handler: ``idl/storm.thrift``'s Nimbus calls, translated to the parts of a
:class:`nimbus.daemon.Nimbus`.

Thin on purpose: argument checks and struct building live here, decisions in the daemon's parts and the
pure modules. Anything not declared in the IDL that escapes reaches the client as a
``TApplicationException`` carrying the message (see :func:`squall.core.thrift.server.make_server`).
"""

from __future__ import annotations

import json
import string
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import structlog

from nimbus import lifecycle, upgrade
from nimbus.codestore import DownloadError, MissingTopology, UnknownArtifact, UploadError
from nimbus.queries import HEALTH_WINDOW, Signs, cluster_summary, nimbus_summaries, topology_info
from squall.core import loglevels
from squall.core.auth import Authorizer, TopologyAcl
from squall.core.config.keys import redact
from squall.core.names import quote
from squall.core.stats import from_executor_stats
from squall.core.thrift import storm
from squall.core.thrift.server import client_host, client_principal
from squall.core.topology import validate_name
from squall.core.zk import paths
from squall.core.zk.errors import ErrorTimesCache
from squall.core.zk.records import (
    Assignment,
    LoggerLevel,
    NimbusMaster,
    NimbusSlave,
    StormBase,
    SupervisorInfo,
    TaskBeat,
    TaskError,
    TaskStats,
    TopologyStatus,
    TopologyTasks,
    ValueTooLarge,
)

if TYPE_CHECKING:  # the handler serves a Nimbus it is given: nimbus/__main__.py composes the two
    from nimbus.daemon import Nimbus

log = structlog.get_logger(__name__)


def _initial_status(options: Any) -> TopologyStatus:
    if options is not None and options.initial_status == storm.TopologyInitialStatus.INACTIVE:
        return TopologyStatus.INACTIVE
    return TopologyStatus.ACTIVE


def _invalid_transition(exc: lifecycle.InvalidTransition) -> RuntimeError:
    return RuntimeError(str(exc))  # Storm clients get it as an internal error with this message


def _json_object(json_conf: str) -> dict[str, Any]:
    """The submitted conf when it is a JSON object; anything else is left for submit to refuse."""
    try:
        value = json.loads(json_conf or "{}")
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def _batch_of(conf: dict[str, Any]) -> upgrade.BatchRequest:
    """JStorm's ``topology.upgrade.*`` keys; workers may be a list or a comma-separated string."""
    workers = conf.get("topology.upgrade.workers") or []
    if isinstance(workers, str):
        workers = [w.strip() for w in workers.split(",") if w.strip()]
    return _batch(conf.get("topology.upgrade.worker.num") or 0, conf.get("topology.upgrade.component"), workers)


def _batch(worker_num: Any, component: Any, workers: Any) -> upgrade.BatchRequest:
    if not isinstance(worker_num, int) or isinstance(worker_num, bool) or worker_num < 0:
        raise storm.InvalidTopologyException(msg=f"the upgrade's worker count must be an int >= 0, got {worker_num!r}")
    if component is not None and (not isinstance(component, str) or not component):
        raise storm.InvalidTopologyException(msg=f"the upgrade's component must be a component id, got {component!r}")
    workers = list(workers or [])
    bad = [w for w in workers if not isinstance(w, str) or not w.rpartition(":")[2].isdigit()]
    if bad:
        raise storm.InvalidTopologyException(msg=f"upgrade workers must be 'host:port' strings, got {bad!r}")
    return upgrade.BatchRequest(worker_num, component or None, tuple(workers))


@contextmanager
def _known(topology_id: str) -> Iterator[None]:
    """For Storm calls that declare no NotAliveException: an unknown id says so in an internal error."""
    try:
        yield
    except storm.NotAliveException:
        raise RuntimeError(f"{topology_id} is not a running topology id") from None


_HOST_CHARS = frozenset(string.ascii_letters + string.digits + ".-_:")


def _host(host: str) -> str:
    """A host name or address as supervisors register it; anything else would never match one."""
    if not host or len(host) > 253 or not set(host) <= _HOST_CHARS:
        raise RuntimeError(
            f"not a host name: {quote(host or '')}; give the host name a supervisor registers "
            "(its storm.local.hostname)"
        )
    return host


@contextmanager
def _upload_refusals() -> Iterator[None]:
    """Upload calls declare only AuthorizationException (as Storm's): every refusal reaches the client as one."""
    try:
        yield
    except UploadError as exc:
        raise storm.AuthorizationException(msg=f"upload refused: {exc}") from None


@contextmanager
def _refusals() -> Iterator[None]:
    """Turn the daemon's refusals into the typed errors Storm clients know."""
    try:
        yield
    except UploadError as exc:
        raise storm.InvalidTopologyException(msg=f"uploaded code: {exc}") from None
    except upgrade.UpgradeRefused as exc:
        raise storm.InvalidTopologyException(msg=str(exc)) from None
    except lifecycle.InvalidTransition as exc:
        raise _invalid_transition(exc) from None
    except ValueTooLarge as exc:  # /tasks or /assignments of a topology with very many tasks
        raise storm.InvalidTopologyException(
            msg=f"topology too large for ZooKeeper: {exc.what} encodes to {exc.size} bytes, over the "
            f"{exc.limit}-byte limit of a ZooKeeper value; lower its parallelism (tasks) or split it"
        ) from None


class NimbusService:
    def __init__(self, nimbus: Nimbus) -> None:
        self.nimbus = nimbus  # its parts serve the writes
        self.state = nimbus.state  # what the reads read
        self.error_times = ErrorTimesCache(self.state.zk, self.state.clock, self.state.conf["nimbus.monitor.freq.secs"])
        self.acl = Authorizer(self.state.conf)

    # -- authorization (nimbus.authorizer) -------------------------------------------------------

    def _authorize(self, operation: str, topology_id: str | None = None) -> None:
        """Refuse the caller (AuthorizationException) unless it may do ``operation`` (on ``topology_id``)."""
        if not self.acl.enabled:
            return
        self.acl.check(client_principal(), operation, self._topology_acl(topology_id) if topology_id else None)

    def _authorized_id(self, name: str, operation: str) -> str:
        """The id of the alive topology ``name``, once the caller may do ``operation`` on it."""
        topology_id = self.state.find_id(name)
        self._authorize(operation, topology_id)
        return topology_id

    def _topology_acl(self, topology_id: str) -> TopologyAcl:
        """Its owner (none while a submit is still storing it) and its conf's topology.users and .groups."""
        base = self.state.zk.read(paths.topology(topology_id), StormBase)
        return TopologyAcl(
            topology_id, base.owner if base is not None else "", self.state.topology_conf_or_cluster(topology_id)
        )

    # -- submit and lifecycle --------------------------------------------------------------------

    def submitTopology(self, name: str, uploadedJarLocation: str, jsonConf: str, topology: Any) -> None:
        self.submitTopologyWithOpts(name, uploadedJarLocation, jsonConf, topology, None)

    def submitTopologyWithOpts(
        self, name: str, uploadedJarLocation: str, jsonConf: str, topology: Any, options: Any
    ) -> None:
        """Storm's submit. JStorm's conf flags: ``topology.upgrade`` starts a gray upgrade of the running
        topology of that name, ``topology.hot.deploy.enable`` replaces it."""
        if topology is None:
            raise storm.InvalidTopologyException(msg="no topology given")
        submitted = _json_object(jsonConf)
        upgrade_flag = submitted.get("topology.upgrade") is True
        replace = submitted.get("topology.hot.deploy.enable") is True
        with _refusals():
            try:
                if upgrade_flag:
                    self._authorized_id(name or "", "graySubmit")
                    self.nimbus.upgrading.gray_submit(
                        name or "", uploadedJarLocation, jsonConf, topology, _batch_of(submitted)
                    )
                else:
                    self._authorize("submitTopology")
                    if replace:
                        self._authorized_id(name or "", "hotDeploy")
                    self.nimbus.submission.submit(
                        name or "",
                        uploadedJarLocation,
                        jsonConf,
                        topology,
                        _initial_status(options),
                        replace=replace,
                        owner=client_principal(),
                    )
            except storm.NotAliveException:  # not in this call's Storm signature
                flag = "topology.upgrade" if upgrade_flag else "topology.hot.deploy.enable"
                raise storm.InvalidTopologyException(
                    msg=f"{flag} is set but no topology named {name!r} is running; submit without it"
                ) from None

    def graySubmit(self, name: str, uploadedJarLocation: str, jsonConf: str, topology: Any, options: Any) -> None:
        if topology is None:
            raise storm.InvalidTopologyException(msg="no topology given")
        options = options or storm.GrayUpgradeOptions()
        request = _batch(options.worker_num or 0, options.component, options.workers)
        if options.ttl_ms is not None and options.ttl_ms < 1:
            raise storm.InvalidTopologyException(msg=f"ttl_ms must be >= 1, got {options.ttl_ms}")
        self._authorized_id(name or "", "graySubmit")
        with _refusals():
            self.nimbus.upgrading.gray_submit(
                name or "", uploadedJarLocation, jsonConf, topology, request, options.ttl_ms
            )

    def grayUpgrade(self, topologyName: str, component: str, workers: list[str], workerNum: int) -> None:
        """The next batch of the running gray upgrade (JStorm's ``gray_upgrade -n/-p/-w``)."""
        request = _batch(workerNum or 0, component, workers)
        if request == upgrade.BatchRequest():
            raise storm.InvalidTopologyException(
                msg="say which workers to upgrade next: a worker count, a component, or host:port workers"
            )
        self._authorized_id(topologyName, "grayUpgrade")
        with _refusals():
            self.nimbus.upgrading.gray_continue(topologyName, request)

    def completeUpgrade(self, topologyName: str) -> None:
        """Upgrade every remaining worker in one last batch; the upgrade completes when they all run it."""
        self._authorized_id(topologyName, "completeUpgrade")
        with _refusals():
            self.nimbus.upgrading.gray_continue(topologyName, upgrade.BatchRequest(all_remaining=True))

    def updateTopology(self, name: str, uploadedLocation: str, updateConf: str) -> None:
        self._authorized_id(name, "updateTopology")
        with _refusals():
            self.nimbus.submission.update_topology(name, uploadedLocation, updateConf)

    def restart(self, name: str, jsonConf: str) -> None:
        self._authorized_id(name, "restart")
        with _refusals():
            self.nimbus.submission.restart(name, jsonConf)

    def rollbackTopology(self, topologyName: str) -> None:
        self.state.require_leader()
        topology_id = self._authorized_id(topologyName, "rollbackTopology")
        with _refusals():
            self.nimbus.upgrading.rollback_upgrade(topology_id, "asked by the operator")

    def killTopology(self, name: str) -> None:
        self.killTopologyWithOpts(name, None)

    def killTopologyWithOpts(self, name: str, options: Any) -> None:
        self._act(name, "killTopology", lifecycle.Kill(options.wait_secs if options is not None else None))

    def activate(self, name: str) -> None:
        self._act(name, "activate", lifecycle.Activate())

    def deactivate(self, name: str) -> None:
        self._act(name, "deactivate", lifecycle.Deactivate())

    def rebalance(self, name: str, options: Any) -> None:
        options = options or storm.RebalanceOptions()
        if options.num_workers is not None and options.num_workers < 1:
            raise storm.InvalidTopologyException(msg=f"num_workers must be >= 1, got {options.num_workers}")
        executors = dict(options.num_executors or {})
        bad = {c: n for c, n in executors.items() if n < 1}
        if bad:
            raise storm.InvalidTopologyException(msg=f"num_executors must be >= 1, got {bad}")
        if executors:
            user = self.state.code.topology(self.state.find_id(name))
            unknown = sorted(set(executors) - set(user.spouts) - set(user.bolts))
            if unknown:
                raise storm.InvalidTopologyException(msg=f"num_executors names unknown components {unknown}")
        if options.topology_conf_overrides:
            try:
                overrides = json.loads(options.topology_conf_overrides)
            except json.JSONDecodeError as exc:
                raise storm.InvalidTopologyException(msg=f"topology_conf_overrides is not JSON: {exc}") from None
            if not isinstance(overrides, dict):
                raise storm.InvalidTopologyException(msg="topology_conf_overrides must be a JSON object")
        self._act(
            name,
            "rebalance",
            lifecycle.Rebalance(
                options.wait_secs,
                options.num_workers,
                executors,
                bool(options.reassign),
                options.topology_conf_overrides,
            ),
        )

    def _act(self, name: str, operation: str, action: lifecycle.Action) -> None:
        self.state.require_leader()
        topology_id = self._authorized_id(name, operation)
        with _refusals():
            self.nimbus.transitions.transition(topology_id, action)

    # -- hosts (JStorm's blacklist) --------------------------------------------------------------

    def setHostInBlackList(self, host: str) -> None:
        self._authorize("setHostInBlackList")
        self.nimbus.settings.set_blacklisted(_host(host), True)

    def removeHostOutBlackList(self, host: str) -> None:
        self._authorize("removeHostOutBlackList")
        self.nimbus.settings.set_blacklisted(_host(host), False)

    def getBlacklist(self) -> list[str]:
        return self.nimbus.settings.blacklist()

    # -- dynamic log levels (Storm's set_log_level) ------------------------------------------------

    def setLogConfig(self, name: str, config: Any) -> None:
        """``name`` is a topology id, as Storm's CLI sends it. Storm declares no exceptions here, so refusals
        reach the client as internal errors with the reason."""
        now_ms = int(self.state.clock.time() * 1000)
        changes: dict[str, LoggerLevel | None] = {}
        for logger, level in ((config.named_logger_level if config else None) or {}).items():
            if not logger:
                raise RuntimeError("named loggers need a name; use ROOT for the root logger")
            if level.action == storm.LogLevelAction.REMOVE:
                changes[logger] = None
            elif level.action == storm.LogLevelAction.UPDATE:
                try:
                    loglevels.level_number(level.target_log_level or "")
                except ValueError as exc:
                    raise RuntimeError(f"logger {logger}: {exc}") from None
                secs = max(0, level.reset_log_level_timeout_secs or 0)
                changes[logger] = LoggerLevel(level.target_log_level.upper(), secs, now_ms + secs * 1000 if secs else 0)
        with _known(name):
            self.state.base(name)  # NotAliveException for unknown ids, before the ACL
            self._authorize("setLogConfig", name)
            self.nimbus.settings.set_log_levels(name, changes)

    def getLogConfig(self, name: str) -> Any:
        with _known(name):
            stored = self.nimbus.settings.log_levels(name)
        return storm.LogConfig(
            named_logger_level={
                logger: storm.LogLevel(
                    action=storm.LogLevelAction.UPDATE,
                    target_log_level=s.level,
                    reset_log_level_timeout_secs=s.timeout_secs,
                    reset_log_level_timeout_epoch=s.expires_ms or None,
                )
                for logger, s in stored.loggers.items()
            }
        )

    # -- code transfer ---------------------------------------------------------------------------

    def beginFileUpload(self) -> str:
        self.state.require_leader()
        self._authorize("fileUpload")
        with _upload_refusals():
            return self.state.inbox.begin_upload(client_host())

    def uploadChunk(self, location: str, chunk: bytes) -> None:
        with _upload_refusals():
            self.state.inbox.upload_chunk(location, chunk)

    def finishFileUpload(self, location: str) -> None:
        with _upload_refusals():
            self.state.inbox.finish_upload(location)

    def beginCodeDownload(self, topologyId: str, artifact: str) -> str:
        self._authorize("fileDownload", topologyId)
        try:
            return self.state.downloads.begin(self.state.code.artifact_path(topologyId, artifact))
        except (MissingTopology, UnknownArtifact) as exc:
            raise storm.NotAliveException(msg=str(exc)) from None

    def beginFileDownload(self, file: str) -> str:
        """Storm passes a path; Squall accepts ``<topology-id>/<artifact>`` and nothing else."""
        topology_id, _, artifact = (file or "").partition("/")
        self._authorize("fileDownload", topology_id)
        try:
            return self.state.downloads.begin(self.state.code.artifact_path(topology_id, artifact))
        except (MissingTopology, UnknownArtifact) as exc:
            raise RuntimeError(f"cannot download {file!r}: {exc}; use <topology-id>/<artifact>") from None

    def downloadChunk(self, id: str) -> bytes:
        try:
            return self.state.downloads.chunk(id)
        except DownloadError as exc:
            raise RuntimeError(str(exc)) from None

    # -- heartbeats ------------------------------------------------------------------------------

    def updateTaskHeartbeat(self, taskHbs: Any) -> None:
        self._authorize("updateTaskHeartbeat")
        beats = {
            int(t): TaskBeat(int(b.time_secs), int(b.uptime_secs), _task_stats(taskHbs.topologyId, t, b.stats))
            for t, b in (taskHbs.taskHbs or {}).items()
        }
        self.nimbus.watching.heartbeat(taskHbs.topologyId, beats)

    # -- queries (any nimbus) --------------------------------------------------------------------

    def getNimbusConf(self) -> str:
        return json.dumps(redact(self.state.conf), sort_keys=True, default=str)

    def getClusterInfo(self) -> Any:
        zk = self.state.zk
        supervisors = self._supervisors()
        topologies = {}
        for topology_id in zk.children(paths.TOPOLOGIES):
            base = zk.read(paths.topology(topology_id), StormBase)
            if base is not None:
                topologies[topology_id] = (
                    base,
                    zk.read(paths.tasks(topology_id), TopologyTasks),
                    zk.read(paths.assignment(topology_id), Assignment),
                )
        return cluster_summary(
            supervisors,
            topologies,
            zk.read(paths.NIMBUS_MASTER, NimbusMaster),
            self._slaves(),
            self._now(),
            self.error_times.of(topologies),
            self._signs(topologies),
        )

    def _signs(self, topology_ids: Collection[str]) -> dict[str, Signs]:
        """What this nimbus saw of each topology, for its Health: a follower saw no beats nor restarts."""
        lines = self.error_times.lines(topology_ids)
        watching = self.nimbus.watching
        return {
            tid: Signs(
                window={
                    task: w[HEALTH_WINDOW]
                    for task, w in watching.stats_windows(tid, (HEALTH_WINDOW,)).items()
                    if HEALTH_WINDOW in w
                },
                restarts=watching.restart_times(tid),
                error_lines=lines.get(tid, {}),
            )
            for tid in topology_ids
        }

    def getLeader(self) -> Any:
        master = self.state.zk.read(paths.NIMBUS_MASTER, NimbusMaster)
        if master is None:
            raise RuntimeError("no nimbus leader is elected right now; retry shortly")
        return nimbus_summaries(master, (), self._now())[0]

    def isTopologyNameAllowed(self, name: str) -> bool:
        try:
            validate_name(name)
        except storm.InvalidTopologyException:
            return False
        return name not in self.state.alive_names()

    def getTopologyInfo(self, id: str) -> Any:
        zk, watching = self.state.zk, self.nimbus.watching
        base = self.state.base(id)
        tasks = zk.read(paths.tasks(id), TopologyTasks)
        errors = {
            int(task): [
                e
                for ts in zk.children(paths.task_errors(id, int(task)))
                if (e := zk.read(paths.task_error(id, int(task), int(ts)), TaskError)) is not None
            ]
            for task in zk.children(paths.task_errors_root(id))
            if task.isdigit()
        }
        return topology_info(
            id,
            base,
            tasks,
            zk.read(paths.assignment(id), Assignment),
            errors,
            self._now(),
            beats=watching.latest_beats(id),
            supervisors=self._supervisors(),
            windows=watching.stats_windows(id),
            restarts=watching.restart_times(id),
        )

    def getTopologyInfoByName(self, topologyName: str) -> Any:
        return self.getTopologyInfo(self.state.find_id(topologyName))

    def getTopologyId(self, topologyName: str) -> str:
        return self.state.find_id(topologyName)

    def getTopologyConf(self, id: str) -> str:
        return json.dumps(redact(self._stored(id, self.state.code.conf, "getTopologyConf")), sort_keys=True)

    def getTopology(self, id: str) -> Any:
        return self._stored(id, self.state.code.system_topology, "getTopology")

    def getUserTopology(self, id: str) -> Any:
        return self._stored(id, self.state.code.topology, "getUserTopology")

    def _stored(self, topology_id: str, read: Any, operation: str) -> Any:
        self.state.base(topology_id)  # NotAliveException(id) for unknown ids
        self._authorize(operation, topology_id)
        try:
            return read(topology_id)
        except MissingTopology:
            raise RuntimeError(f"this nimbus has no code for {topology_id}; ask the leader") from None

    def _supervisors(self) -> list[SupervisorInfo]:
        zk = self.state.zk
        return [
            s
            for sid in zk.children(paths.SUPERVISORS)
            if (s := zk.read(paths.supervisor(sid), SupervisorInfo)) is not None
        ]

    def _slaves(self) -> list[NimbusSlave]:
        zk = self.state.zk
        return [
            s
            for hp in zk.children(paths.NIMBUS_SLAVES)
            if (s := zk.read(paths.nimbus_slave(hp), NimbusSlave)) is not None
        ]

    def _now(self) -> int:
        return int(self.state.clock.time())


def _task_stats(topology_id: str, task: Any, stats: Any) -> TaskStats | None:
    """A beat's stats, or None when they are malformed: the beat still counts for liveness."""
    if stats is None:
        return None
    try:
        return from_executor_stats(stats)
    except (ValueError, AttributeError, TypeError) as exc:
        log.warning("ignoring malformed task stats", topology_id=topology_id, task=task, error=str(exc))
        return None
