"""What a nimbus does as its leadership changes: on election it takes over (the code it lacks, ZooKeeper's ACLs,
the tasks' last beats, every topology's delayed action, the leader's periodic work); on demotion it stops all that.

:class:`~nimbus.leader.LeaderElection` calls :meth:`Takeover.lead` and :meth:`Takeover.follow`. A nimbus is ready
to serve writes (:attr:`~nimbus.state.NimbusState.is_leader`) only once the takeover is done.
"""

from __future__ import annotations

import time

import structlog

from nimbus import lifecycle
from nimbus.state import NimbusState
from nimbus.transitions import Transitions
from nimbus.watching import Watching
from squall.core.zk import paths
from squall.core.zk.records import TaskHeartbeats

log = structlog.get_logger(__name__)

#: How long a nimbus waits before taking over again after its takeover failed.
TAKEOVER_RETRY_SECS = 1.0


class Takeover:
    """The leadership changes of one nimbus's :class:`~nimbus.state.NimbusState`."""

    def __init__(self, state: NimbusState, transitions: Transitions, watching: Watching) -> None:
        self.state = state
        self.transitions = transitions
        self.watching = watching

    def lead(self) -> None:
        """Became leader: take over (:meth:`_take_over`), again after a failure (ZooKeeper away half-way, a read
        out of retries) for as long as this nimbus stays elected: a leader that is never ready holds
        ``/nimbus_master`` and serves nothing, and no other nimbus takes over."""
        while True:
            try:
                self._take_over()
                return
            except Exception:
                if not self.state.elected:
                    return  # stopped (its ZooKeeper client closed) or demoted meanwhile: the next takeover starts anew
                log.exception("nimbus takeover failed; trying again", retry_in_secs=TAKEOVER_RETRY_SECS)
            time.sleep(TAKEOVER_RETRY_SECS)  # on the takeover's own thread; ZooKeeper's reconnection is what it waits
            if not self.state.elected:
                return

    def follow(self) -> None:
        """Demoted (or stopping): judge no task on what happens from now, serve no writes, stop the leader's timers."""
        state = self.state
        self.watching.stop_watching()
        state.ready.clear()
        for timer in state.leader_timers:
            timer.cancel()
        state.leader_timers.clear()

    def _take_over(self) -> None:
        """Copy the code it lacks, reload heartbeats, re-arm delayed actions, start the periodic work; done again
        after a failure (re-arming an armed action is harmless: the older timer finds its action stale)."""
        state = self.state
        self.watching.stop_watching()
        self._take_over_code()
        self._enforce_acls()
        now = int(state.clock.time())
        topology_ids = state.zk.children(paths.TOPOLOGIES)
        for topology_id in topology_ids:
            beats = state.zk.read(paths.taskbeats(topology_id), TaskHeartbeats)
            if beats is not None:
                with state.beats_lock:
                    state.tracker.restore(topology_id, beats, now)
            try:
                self.transitions.transition(topology_id, lifecycle.Startup())
            except Exception:
                log.exception("could not re-arm topology on takeover", topology_id=topology_id)
        state.leader_timers += [
            state.clock.call_every(state.conf["nimbus.monitor.freq.secs"], self.watching.monitor),
            state.clock.call_every(state.conf["nimbus.cleanup.inbox.freq.secs"], self._cleanup_files),
        ]
        state.ready.set()
        log.info("nimbus leading", topologies=len(topology_ids))

    def _take_over_code(self) -> None:
        """Copy every published code version this nimbus lacks (the old leader's host may be gone for good), and
        publish alive topologies that no leader published yet (stored before code was replicated)."""
        state = self.state
        try:
            missing = state.replication.sync(leading=True)
            for topology_id in state.zk.children(paths.TOPOLOGIES):
                if state.code.has(topology_id) and not state.zk.exists(paths.code(topology_id)):
                    state.replication.publish(topology_id)
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
            changed = self.state.zk.enforce_acls()
        except Exception:  # leading with some old ACLs beats not leading
            log.exception("could not enforce the ZooKeeper ACLs")
            return
        if changed:
            log.info("zookeeper ACLs enforced", nodes_changed=changed)

    def _cleanup_files(self) -> None:
        self.state.inbox.cleanup()
        self.state.downloads.cleanup()
