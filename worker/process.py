"""``python -m worker TOPOLOGY_ID SUPERVISOR_ID PORT WORKER_ID``: one worker process of a cluster.

Started by a supervisor (or a test) once the topology's code is in :func:`squall.core.local_state.code_dir`.
It reads its tasks from ZooKeeper and runs them on :class:`~worker.runtime.WorkerRuntime`, listening
for other workers on its slot's port; follows the topology's status and assignment from the start
(watches, plus a poll every ``task.refresh.poll.secs`` in case a watch is missed); holds its spouts
until the other workers of the current assignment listen (at most ``supervisor.worker.start.timeout.secs``:
a reassignment during that wait changes whom it waits for); writes a local heartbeat for its
supervisor; stores component errors in ``/taskerrors``; and, where the topology master runs, sends
the task heartbeats to nimbus. It exits 0 when its slot is no longer assigned or on SIGTERM (after
closing its tasks), and 1 when a task cannot start or user code fails under
``topology.worker.exit.on.error`` — the supervisor then restarts it.
"""

from __future__ import annotations

import json
import queue
import signal
import threading
import time
from collections.abc import Mapping
from typing import Any

import structlog

from squall.core.clock import RealClock
from squall.core.config.keys import without_secrets
from squall.core.entry import common_options, load_or_exit
from squall.core.local_state import (
    CODE_FILES,
    code_dir,
    fetched_for,
    heartbeat_file,
    put_code_on_path,
    resources_dir,
    task_beats_file,
    write_heartbeat,
    write_task_beats,
)
from squall.core.loglevels import LogLevelOverrides
from squall.core.logs import configure_logging
from squall.core.nimbus_client import leader_address
from squall.core.stats import to_executor_stats
from squall.core.system_ids import TOPOLOGY_MASTER
from squall.core.thrift import from_bytes, storm, to_bytes
from squall.core.thrift.client import open_client
from squall.core.tls import client_context
from squall.core.topology import system_topology
from squall.core.zk import paths
from squall.core.zk.client import ZkClient
from squall.core.zk.errors import record_task_error
from squall.core.zk.records import (
    Assignment,
    AssignmentType,
    ComponentType,
    LoggerLevels,
    StormBase,
    TaskBeat,
    TaskError,
    TopologyStatus,
    TopologyTasks,
)
from worker.handshake import transfer_secret
from worker.layout import Placement, TopologyLayout, build_layout, place
from worker.runtime import WorkerRuntime

log = structlog.get_logger(__name__)

#: Statuses in which spouts run (JStorm's RefreshActive); every other status pauses them.
ACTIVE_STATUSES = frozenset({TopologyStatus.ACTIVE, TopologyStatus.UPGRADING, TopologyStatus.ROLLBACK})


class Worker:
    def __init__(
        self,
        conf: Mapping[str, Any],
        topology_id: str,
        supervisor_id: str,
        port: int,
        worker_id: str,
        host: str | None = None,
        code_version: int = 1,
    ) -> None:
        self.cluster_conf = dict(conf)
        self.topology_id = topology_id
        self.code_version = code_version
        self.supervisor_id = supervisor_id
        self.port = port
        self.worker_id = worker_id
        self.host = host or conf.get("storm.local.hostname") or "localhost"
        self.done = threading.Event()
        self.exit_code = 0
        self.zk: ZkClient
        self.clock = RealClock()
        self.log_levels = LogLevelOverrides(self.clock)  # storm set_log_level
        self.runtime: WorkerRuntime | None = None
        self._errors: queue.Queue[tuple[int, str]] = queue.Queue(maxsize=1000)
        self._beats = _LatestOnly()
        #: The watches, the poll and start-up take turns applying what ZooKeeper says.
        self._follow_lock = threading.Lock()
        self._assignment_ms = -1
        #: Start-up stages: assignments are applied once the tasks have started, the topology's status
        #: reaches the spouts once the peers were waited for (until then they stay paused).
        self._tasks_started = False
        self._peers_waited = False
        self._status_active = False

    # -- start-up ---------------------------------------------------------------------------------

    def run(self) -> int:
        """Run until unassigned, stopped or failed; the exit status for the process."""
        conf = self._load_code()
        self.zk = ZkClient(self._stored_conf())  # with the topology's own ZooKeeper credential, if it has one
        self.zk.start()
        self.zk.watch_data(paths.log_config(self.topology_id), LoggerLevels, self.log_levels.apply)
        try:
            layout, placement, assignment = self._read_layout(conf)
            if not placement.local:
                log.error(
                    "this worker's slot is not in the assignment; exiting",
                    supervisor=self.supervisor_id,
                    port=self.port,
                )
                return 2
            self._assignment_ms = assignment.timestamp_ms
            self.runtime = WorkerRuntime(
                layout,
                placement,
                conf,
                report_error=self._report_error,
                report_beats=self._beats.offer,
                on_fatal=self._fatal,
                listen=(self.cluster_conf["worker.transfer.bind.address"], self.port),
                transfer_secret=transfer_secret(self._stored_conf()),
                resources_dir=resources_dir(self._code),
            )
            # Watch before any wait (tasks preparing, peers not listening yet): a reassignment that moves a
            # dead peer away must reach this worker at once, not at the next poll.
            self.zk.watch_data(paths.topology(self.topology_id), StormBase, self._on_status)
            self.zk.watch_data(paths.assignment(self.topology_id), Assignment, self._on_assignment)
            self.runtime.start()
            if self.runtime.failure is not None:
                return 1
            threading.Thread(target=self._write_errors, name="error-writer", daemon=True).start()
            threading.Thread(target=self._send_beats, args=(conf,), name="beat-reporter", daemon=True).start()
            # The local heartbeat keeps the clock's thread to itself: the poll reads ZooKeeper, which blocks
            # while ZooKeeper is away, and the supervisor must not take that for a hung worker (Storm's workers
            # beat locally through a ZooKeeper outage).
            heartbeat = self.clock.call_every(float(conf["worker.heartbeat.frequency.secs"]), self._local_heartbeat)
            threading.Thread(
                target=self._poll_every, args=(float(conf["task.refresh.poll.secs"]),), name="refresh-poll", daemon=True
            ).start()
            self._local_heartbeat()
            with self._follow_lock:
                self._tasks_started = True
            self._poll()  # an assignment written while the tasks started
            unreachable = self.runtime.wait_for_peers(float(conf["supervisor.worker.start.timeout.secs"]), self.done)
            if not self.done.is_set():
                if unreachable:
                    log.warning(
                        "some workers of the topology are not reachable yet; activating anyway",
                        unreachable=sorted(f"{host}:{port}" for host, port in unreachable),
                    )
                self._release_spouts()
                log.info("worker running", tasks=sorted(self.runtime.placement.local), port=self.port)
            self.done.wait()
            heartbeat.cancel()
            return self.exit_code
        finally:
            if self.runtime is not None:
                self.runtime.stop()
            self._drain_errors()
            self.zk.stop()
            log.info("worker stopped", exit_code=self.exit_code)

    def _load_code(self) -> dict[str, Any]:
        """Put the code package first on ``sys.path``; return the conf its tasks see."""
        self._code = code_dir(self.cluster_conf, self.topology_id, self.code_version)
        self._conf_file = self._code / CODE_FILES["conf"]
        put_code_on_path(self._code)
        return self._conf()

    def _conf(self) -> dict[str, Any]:
        """The conf the tasks see: the topology conf over the cluster conf (after ``update_topology``, the
        updated version's), without secrets (the topology's ZooKeeper credential is for this process's session)."""
        return without_secrets(self._stored_conf())

    def _stored_conf(self) -> dict[str, Any]:
        return {**self.cluster_conf, **json.loads(self._conf_file.read_text())}

    def _read_layout(self, conf: Mapping[str, Any]) -> tuple[TopologyLayout, Placement, Assignment]:
        tasks = self.zk.read(paths.tasks(self.topology_id), TopologyTasks)
        assignment = self.zk.read(paths.assignment(self.topology_id), Assignment)
        if tasks is None or assignment is None:
            raise RuntimeError(f"{self.topology_id} has no tasks or assignment in ZooKeeper")
        normalized = from_bytes(storm.StormTopology, (self._code / CODE_FILES["topology"]).read_bytes())
        layout = build_layout(self.topology_id, system_topology(normalized, conf), tasks, conf)
        return layout, place(assignment, self.supervisor_id, self.port), assignment

    # -- following ZooKeeper ----------------------------------------------------------------------

    def _started(self) -> WorkerRuntime:
        assert self.runtime is not None, "the watches act on the runtime only once its tasks started"
        return self.runtime

    def _on_status(self, base: StormBase | None) -> None:
        if base is None:
            log.info("topology is gone; stopping")
            self.done.set()
            return
        with self._follow_lock:
            self._status_active = base.status in ACTIVE_STATUSES
            if self._peers_waited:
                self._started().set_active(self._status_active)

    def _release_spouts(self) -> None:
        """The peers were waited for: from now on the spouts follow the topology's status."""
        with self._follow_lock:
            self._peers_waited = True
            self._started().set_active(self._status_active)

    def _on_assignment(self, assignment: Assignment | None) -> None:
        if assignment is None:
            log.info("assignment removed; stopping")
            self.done.set()
            return
        with self._follow_lock:
            if assignment.timestamp_ms == self._assignment_ms or not self._tasks_started:
                return  # a change during the tasks' start is applied right after it
            updated = assignment.type is AssignmentType.UPDATE
            if updated:
                version_dir = code_dir(self.cluster_conf, self.topology_id, assignment.code_version)
                if fetched_for(version_dir) < assignment.timestamp_ms:
                    return  # the supervisor is still fetching the new conf: the next poll looks again
                self._conf_file = version_dir / CODE_FILES["conf"]
            try:
                conf = self._conf()
                layout, placement, _ = self._read_layout(conf)
            except Exception:  # not marked as applied: the next watch event or poll reads it again
                log.exception("could not read the new assignment; keeping the old routes until the next look")
                return
            self._assignment_ms = assignment.timestamp_ms
            if not placement.local:
                log.info("this slot is no longer assigned; stopping")
                self.done.set()
                return
            self._started().refresh(layout, placement)
            if updated:
                self._started().update_conf(conf)

    def _poll_every(self, interval: float) -> None:
        while not self.done.wait(interval):
            self._poll()

    def _poll(self) -> None:
        """The safety net for a missed watch."""
        try:
            self._on_status(self.zk.read(paths.topology(self.topology_id), StormBase))
            self._on_assignment(self.zk.read(paths.assignment(self.topology_id), Assignment))
        except Exception:
            log.exception("refresh poll failed")

    # -- reporting --------------------------------------------------------------------------------

    def _local_heartbeat(self) -> None:
        runtime = self.runtime
        tasks = sorted(runtime.placement.local) if runtime else []
        write_heartbeat(
            heartbeat_file(self.cluster_conf, self.worker_id),
            time.time(),
            topology_id=self.topology_id,
            port=self.port,
            tasks=tasks,
        )

    def _report_error(self, task: int, text: str) -> None:
        try:
            self._errors.put_nowait((task, text))
        except queue.Full:
            pass  # already logged; ZooKeeper is behind, the throttle keeps this rare

    def _write_errors(self) -> None:
        while True:
            task, text = self._errors.get()
            self._store_error(task, text)

    def _drain_errors(self) -> None:
        while True:
            try:
                task, text = self._errors.get_nowait()
            except queue.Empty:
                return
            self._store_error(task, text)

    def _store_error(self, task: int, text: str) -> None:
        try:
            record_task_error(
                self.zk, self.topology_id, task, TaskError(text, int(time.time()), host=self.host, port=self.port)
            )
        except Exception:
            log.exception("could not store a task error in ZooKeeper", task=task)

    def _send_beats(self, conf: Mapping[str, Any]) -> None:
        """Ship the topology master's latest beats to the leading nimbus, reconnecting as needed; running as its
        topology's owner (without the daemons' credential), hand them to its supervisor instead."""
        client = None
        while True:
            beats = self._beats.take()
            layout = self.runtime.layout if self.runtime else None
            if conf["supervisor.run.worker.as.user"]:
                write_task_beats(
                    task_beats_file(self.cluster_conf, self.worker_id),
                    [to_bytes(r) for r in beat_requests(self.topology_id, layout, beats)],
                )
                continue
            try:
                if client is None:
                    host, port = leader_address(conf, self.zk)
                    client = open_client(
                        host,
                        port,
                        int(conf["storm.thrift.socket.timeout.ms"]),
                        max_frame_bytes=int(conf["nimbus.thrift.client.max_buffer_size"]),
                        tls=client_context(conf),
                    )
                for request in beat_requests(self.topology_id, layout, beats):
                    client.updateTaskHeartbeat(request)
            except storm.NotAliveException:
                log.info("nimbus does not know this topology (being killed?)")
            except Exception as exc:
                log.warning("could not send task heartbeats to nimbus", error=repr(exc))
                if client is not None:
                    client.close()
                client = None

    def _fatal(self, exc: BaseException) -> None:
        log.error("worker failing", error=repr(exc))
        self.exit_code = 1
        self.done.set()


class _LatestOnly:
    """A one-slot mailbox: the reporter sends the newest beats, never a backlog of old ones."""

    def __init__(self) -> None:
        self._value: dict[int, TaskBeat] | None = None
        self._cond = threading.Condition()

    def offer(self, value: dict[int, TaskBeat]) -> None:
        with self._cond:
            self._value = value
            self._cond.notify()

    def take(self) -> dict[int, TaskBeat]:
        with self._cond:
            while self._value is None:
                self._cond.wait()
            value, self._value = self._value, None
            return value


#: Task beats per updateTaskHeartbeat call: a few hundred bytes each with stats, so a call stays far under
#: nimbus.thrift.max_buffer_size (1 MiB) whatever the topology's size (10,000 tasks' beats are ~4 MB).
BEATS_PER_REQUEST = 1000


def beat_requests(topology_id: str, layout: TopologyLayout | None, beats: Mapping[int, TaskBeat]) -> list[Any]:
    """The topology master's latest beats as updateTaskHeartbeat requests of at most :data:`BEATS_PER_REQUEST`
    tasks each (one request for all of a large topology's tasks was over nimbus's request cap, so nimbus
    refused every beat and judged every task dead)."""
    master = layout.component_tasks.get(TOPOLOGY_MASTER, (0,)) if layout else (0,)
    tasks = sorted(beats)
    return [
        storm.TopologyTaskHbInfo(
            topologyId=topology_id,
            topologyMasterId=master[0],
            taskHbs={
                task: _thrift_beat(beats[task], layout, task) for task in tasks[start : start + BEATS_PER_REQUEST]
            },
        )
        for start in range(0, len(tasks), BEATS_PER_REQUEST)
    ]


def _thrift_beat(beat: TaskBeat, layout: TopologyLayout | None, task: int) -> Any:
    stats = None
    if beat.stats is not None and layout is not None and task in layout.task_component:
        kind = layout.components[layout.task_component[task]].kind
        stats = to_executor_stats(beat.stats, spout=kind is ComponentType.SPOUT)
    return storm.TaskHeartbeat(time_secs=beat.time_secs, uptime_secs=beat.uptime_secs, stats=stats)


def main(argv: list[str] | None = None) -> int:
    parser = common_options("python -m worker", "Run one worker of a topology (normally started by a supervisor).")
    parser.add_argument("topology_id")
    parser.add_argument("supervisor_id")
    parser.add_argument("port", type=int)
    parser.add_argument("worker_id")
    parser.add_argument("--code-version", type=int, default=1, help="the topology code version to run")
    args = parser.parse_args(argv)
    conf = load_or_exit(args, warn=lambda _typo: None)  # the supervisor warned when it loaded this conf
    configure_logging(
        "worker",
        level=conf["squall.log.level"],
        fmt=conf["squall.log.format"],
        topology_id=args.topology_id,
        port=args.port,
        worker_id=args.worker_id,
        code_version=args.code_version,
    )
    worker = Worker(
        conf, args.topology_id, args.supervisor_id, args.port, args.worker_id, code_version=args.code_version
    )
    signal.signal(signal.SIGTERM, lambda *_: worker.done.set())
    signal.signal(signal.SIGINT, lambda *_: worker.done.set())
    try:
        return worker.run()
    except Exception:
        log.exception("worker could not run")
        return 1
