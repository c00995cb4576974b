"""The adapter of :mod:`nimbus.lifecycle`: applies a topology's actions and carries out their effects (rebalance,
removal of its state) and delayed actions (timers).

Every write to a topology's ``StormBase`` goes through :meth:`Transitions.transition` under the state's lock, so a
timer and an operator can never interleave on the same topology. The decisions are the pure state machine's; this
module reads ``/topology/<id>``, calls it, and does what its outcome says, in its order.
"""

from __future__ import annotations

import json
import threading

import structlog

from nimbus import lifecycle
from nimbus.assign import AssignEvent
from nimbus.codestore import MissingTopology
from nimbus.leader import TimerChoice, delayed_action_choice
from nimbus.scheduler import AssignType
from nimbus.state import NimbusState
from squall.core import topology as topo
from squall.core.clock import Timer
from squall.core.thrift import storm
from squall.core.zk import paths
from squall.core.zk.records import AssignmentType, TopologyTasks

log = structlog.get_logger(__name__)


class Transitions:
    """Applies lifecycle actions to the topologies of one nimbus's :class:`~nimbus.state.NimbusState`."""

    def __init__(self, state: NimbusState) -> None:
        self.state = state

    def transition(self, topology_id: str, action: lifecycle.Action) -> None:
        """Apply one lifecycle action: effects first, then the new base, then timers (see lifecycle)."""
        state = self.state
        with state.lock:
            base = state.base(topology_id)
            outcome = lifecycle.transition(
                base, action, now_secs=int(state.clock.time()), message_timeout_secs=self._message_timeout(topology_id)
            )
            for effect in outcome.effects:
                if isinstance(effect, lifecycle.Reassign):
                    try:
                        self._rebalance(topology_id, base.name, effect)
                    except storm.InvalidTopologyException as exc:  # keep the old placement, say why
                        state.record_error(topology_id, f"rebalance failed: {exc.msg}")
                    except MissingTopology:
                        state.record_error(topology_id, f"rebalance failed: {state.no_code(topology_id)}")
                elif isinstance(effect, lifecycle.RemoveTopology):
                    self.remove_state(topology_id)
            if outcome.base is not None and outcome.base is not base:
                state.zk.write(paths.topology(topology_id), outcome.base)
            for effect in outcome.effects:
                if isinstance(effect, lifecycle.ScheduleAt):
                    self._arm(topology_id, effect)
        log.info(
            "topology transition",
            topology_id=topology_id,
            action=action.verb,
            status=outcome.base.status.value if outcome.base else "removed",
        )

    def _message_timeout(self, topology_id: str) -> int:
        return int(self.state.topology_conf_or_cluster(topology_id)["topology.message.timeout.secs"])

    def _arm(self, topology_id: str, effect: lifecycle.ScheduleAt) -> None:
        state = self.state

        def fire() -> None:
            while (choice := self._delayed_action_choice()) is TimerChoice.WAIT:
                (state.zk.connected if state.ready.is_set() else state.ready).wait(1.0)
            if choice is TimerChoice.DROP:
                return
            try:
                self.transition(topology_id, effect.action)
            except lifecycle.StaleTimer:
                log.debug("stale timer dropped", topology_id=topology_id, action=effect.action.verb)
            except storm.NotAliveException:
                pass
            except Exception:  # e.g. ZooKeeper away: the action is still pending, so try again until it is done
                retry_secs = state.conf["nimbus.monitor.freq.secs"]
                log.exception(
                    "delayed action failed; retrying",
                    topology_id=topology_id,
                    action=effect.action.verb,
                    retry_in_secs=retry_secs,
                )
                self._arm(topology_id, lifecycle.ScheduleAt(int(state.clock.time() + retry_secs), effect.action))

        # timers run on the clock thread; the action may wait for an assignment, so run it off that thread
        timer = state.clock.call_later(
            max(0.0, effect.due_secs - state.clock.time()),
            lambda: threading.Thread(target=fire, name="nimbus-delayed-action", daemon=True).start(),
        )
        now = state.clock.monotonic()  # keep only what can still fire, so the list does not grow forever
        state.leader_timers = [t for t in state.leader_timers if not (isinstance(t, Timer) and t.due < now)]
        state.leader_timers.append(timer)

    def _delayed_action_choice(self) -> TimerChoice:
        """Due during a ZooKeeper blip, an action waits for the connection: dropped, nothing would re-arm it while
        the session survives (only a takeover re-arms from ``StormBase.pending``), and a kill would never end."""
        state = self.state
        return delayed_action_choice(state.elected, state.ready.is_set() and state.zk.connected.is_set())

    def _rebalance(self, topology_id: str, name: str, effect: lifecycle.Reassign) -> None:
        """Apply a new worker count or parallelism to the stored topology, then reschedule."""
        state, code = self.state, self.state.code
        scale = bool(effect.num_executors or effect.num_workers or effect.conf_json)
        if scale:
            conf = code.conf(topology_id)
            if effect.conf_json:
                conf.update(json.loads(effect.conf_json))
            if effect.num_workers:
                conf["topology.workers"] = effect.num_workers
            user = code.topology(topology_id)
            if effect.num_executors:
                spouts = {c: n for c, n in effect.num_executors.items() if c in user.spouts}
                bolts = {c: n for c, n in effect.num_executors.items() if c in user.bolts}
                conf["topology.spout.parallelism"] = {**conf.get("topology.spout.parallelism", {}), **spouts}
                conf["topology.bolt.parallelism"] = {**conf.get("topology.bolt.parallelism", {}), **bolts}
            normalized, conf = topo.normalize(user, conf, name=name)
            system = topo.system_topology(normalized, {**state.conf, **conf})
            code.put(
                topology_id,
                package=code.package(topology_id),
                conf=conf,
                topology=normalized,
                system=system,
                version=code.current_version(topology_id),
                replace=True,
            )
            state.replication.publish(topology_id)
            old_tasks = state.zk.read(paths.tasks(topology_id), TopologyTasks) or TopologyTasks(tasks={})
            state.zk.write(paths.tasks(topology_id), topo.rescale_tasks(old_tasks, system))
        state.assign(
            AssignEvent(
                topology_id,
                name,
                AssignType.REBALANCE,
                reassign=effect.reassign,
                writes=AssignmentType.SCALE if scale else AssignmentType.ASSIGN,
            )
        )

    def remove_state(self, topology_id: str) -> None:
        """Assignment first (supervisors stop the workers), the rest, ``/topology/<id>`` last, then code."""
        state = self.state
        state.zk.delete(paths.assignment(topology_id))
        for parent in paths.TOPOLOGY_SUBTREES:
            state.zk.delete(f"{parent}/{topology_id}")
        state.zk.delete(paths.topology(topology_id))
        state.code.remove(topology_id)
        state.replication.announce()
        with state.beats_lock:
            state.tracker.forget(topology_id)
            state.windows.forget(topology_id)
            state.restarts.forget(topology_id)
