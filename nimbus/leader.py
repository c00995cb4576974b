"""Leader election among nimbuses: whoever owns the ephemeral ``/nimbus_master`` leads.

Followers register under ``/nimbus_slave/<host:port>`` and watch ``/nimbus_master``; when it goes
away (the leader stopped, or its session expired) each follower tries to create it and one wins.
A leader whose connection is SUSPENDED stops doing leader work until it knows its session survived;
one whose session is LOST has lost the node and goes back to contending like a follower.

A nimbus restarted on the same address finds ``/nimbus_master`` naming itself, held by the session of its
previous, dead life until that session expires. No other process can hold our address while we are bound
to it, so the node is stale: we delete it and contend at once (:func:`is_own_stale_master`), rather than
answer "not the leader; the leader is <ourselves>" for a whole session timeout.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable

import structlog
from kazoo.exceptions import BadVersionError, NoNodeError

from squall.core.clock import Clock
from squall.core.zk import paths
from squall.core.zk.client import ZkClient, ZkState
from squall.core.zk.records import NimbusMaster, NimbusSlave

log = structlog.get_logger(__name__)


def is_own_stale_master(master: NimbusMaster | None, owner_session: int, host_port: str, session: int) -> bool:
    """True when ``/nimbus_master`` names this nimbus's address but another session owns it: our previous life's.

    >>> is_own_stale_master(NimbusMaster("h", 6627, 0), owner_session=7, host_port="h:6627", session=9)
    True
    """
    return master is not None and master.host_port == host_port and owner_session not in (0, session)


class TimerChoice(enum.Enum):
    RUN = "run"
    WAIT = "wait"  # elected, still taking over: the action runs once the takeover is done
    DROP = "drop"  # not the leader: the leader (this one later, or another) re-arms it from StormBase.pending


def delayed_action_choice(elected: bool, ready: bool) -> TimerChoice:
    """What a delayed action (kill wait, rebalance wait) due now does, given this nimbus's leadership.

    ``elected``: won the election and not lost it (:attr:`LeaderElection.elected`, SUSPENDED included); ``ready``:
    done taking over and connected. A timer comes due while its nimbus is taking over whenever the action was
    overdue at takeover (a leader killed mid-wait), or during a ZooKeeper blip: dropping it then loses the action
    for good, since only a takeover re-arms it.

    >>> delayed_action_choice(elected=True, ready=False)
    <TimerChoice.WAIT: 'wait'>
    """
    if not elected:
        return TimerChoice.DROP
    return TimerChoice.RUN if ready else TimerChoice.WAIT


class LeaderElection:
    """Calls ``on_elected`` (on its own thread) when this nimbus becomes leader, ``on_demoted`` when it stops (under
    the election's lock when the session is lost: it must be quick and not call back into the election).

        election = LeaderElection(zk, "nimbus-1", 6627, RealClock(), on_elected=take_over, on_demoted=follow).start()
        election.is_leader      # owns /nimbus_master and connected; election.elected: SUSPENDED too
    """

    def __init__(
        self,
        zk: ZkClient,
        host: str,
        port: int,
        clock: Clock,
        on_elected: Callable[[], None],
        on_demoted: Callable[[], None],
        *,
        tls_port: int = 0,
    ) -> None:
        self._zk = zk
        self.host, self.port, self.tls_port = host, port, tls_port
        self._clock = clock
        self._started_at = clock.time()
        self._on_elected = on_elected
        self._on_demoted = on_demoted
        self._lock = threading.Lock()
        self._leading = False
        self._stopped = False

    @property
    def host_port(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def is_leader(self) -> bool:
        """True only while we own ``/nimbus_master`` *and* are connected (not SUSPENDED)."""
        return self._leading and self._zk.connected.is_set()

    @property
    def elected(self) -> bool:
        """Won the election and not lost it since: unlike :attr:`is_leader`, True through a SUSPENDED connection,
        whose session (and so our ``/nimbus_master``) may well survive. What must outlast a blip — a delayed kill,
        the beats of running topologies — asks this; what writes ZooKeeper asks :attr:`is_leader`."""
        return self._leading

    def leader(self) -> NimbusMaster | None:
        return self._zk.read(paths.NIMBUS_MASTER, NimbusMaster)

    def start(self) -> LeaderElection:
        self._zk.add_state_listener(self._on_state)
        self._zk.register_ephemeral(paths.nimbus_slave(self.host_port), self._as_follower())
        self._zk.watch_data(paths.NIMBUS_MASTER, NimbusMaster, self._on_master)
        return self

    def _as_follower(self) -> NimbusSlave:
        return NimbusSlave(self.host, self.port, tls_port=self.tls_port)

    def stop(self) -> None:
        """Step down so a follower takes over at once instead of after our session timeout."""
        with self._lock:
            self._stopped = True
            was_leading, self._leading = self._leading, False
        if was_leading:
            self._zk.delete(paths.NIMBUS_MASTER, recursive=False)
            self._on_demoted()
        self._zk.unregister_ephemeral(paths.nimbus_slave(self.host_port))

    def _on_master(self, master: NimbusMaster | None) -> None:
        if master is None:
            self._contend()
        elif master.host_port == self.host_port and not self._leading:
            self._clear_stale_master(master)

    def _clear_stale_master(self, master: NimbusMaster) -> None:
        """Delete a ``/nimbus_master`` left by our previous life; its deletion's watch makes us contend."""
        stat = self._zk.kazoo.exists(paths.NIMBUS_MASTER)
        if stat is None or not is_own_stale_master(master, stat.ephemeralOwner, self.host_port, self._zk.session_id):
            return
        try:
            self._zk.kazoo.delete(paths.NIMBUS_MASTER, version=stat.version)
        except (NoNodeError, BadVersionError):
            return  # gone or replaced meanwhile: the watch sees that
        log.info(
            "removed the leader node of this nimbus's previous life",
            leader=self.host_port,
            stale_session=hex(stat.ephemeralOwner),
        )

    def _contend(self) -> None:
        with self._lock:
            if self._stopped or self._leading:
                return
            record = NimbusMaster(self.host, self.port, int(self._clock.time()), tls_port=self.tls_port)
            if not self._zk.create_ephemeral(paths.NIMBUS_MASTER, record):
                return
            self._leading = True
        self._zk.unregister_ephemeral(paths.nimbus_slave(self.host_port))
        log.info("elected nimbus leader", leader=self.host_port)
        threading.Thread(target=self._on_elected, name="nimbus-leader-start", daemon=True).start()

    def _on_state(self, state: ZkState) -> None:
        """LOST demotes; every CONNECTED contends unless we lead. The leader node's watch tells only of changes,
        and may tell them before this listener hears the states: a new session's watch saw no leader while we still
        thought we led (the LOST told late), or a contention failed with the connection (its create may even have
        made the node, ours, unbeknown). Either way no later change would come, and nobody would lead."""
        if state is ZkState.CONNECTED:
            self._contend()
            return
        if state is not ZkState.LOST:
            return
        with self._lock:  # held through the demotion: a contention on the watch's thread waits for it to be done,
            was_leading, self._leading = self._leading, False  # so a new takeover never runs before an old demotion
            stopped = self._stopped
            if was_leading:
                log.warning("lost nimbus leadership with the ZooKeeper session", leader=self.host_port)
                self._on_demoted()
        if not stopped:
            self._zk.register_ephemeral(paths.nimbus_slave(self.host_port), self._as_follower())
