"""Nimbus leader election on a real ZooKeeper: one leader, followers registered, takeover on loss."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import pytest
from kazoo.exceptions import ConnectionLoss

from nimbus.leader import LeaderElection, TimerChoice, delayed_action_choice, is_own_stale_master
from squall.core.clock import RealClock
from squall.core.zk import paths
from squall.core.zk.client import ZkClient, ZkState
from squall.core.zk.records import NimbusMaster
from support import expire_session, wait_until
from tcpproxy import TcpProxy


class Nimbus:
    """One contender: its own ZooKeeper session and a record of what it was told."""

    def __init__(self, conf: dict[str, Any], port: int) -> None:
        self.zk = ZkClient(conf).start()
        self.elected = threading.Event()
        self.demoted = threading.Event()
        self.election = LeaderElection(self.zk, "127.0.0.1", port, RealClock(),
                                       on_elected=self.elected.set, on_demoted=self.demoted.set)

    def close(self) -> None:
        self.election.stop()
        self.zk.stop()


@pytest.fixture
def nimbuses(zk_conf: dict[str, Any]) -> Iterator[list[Nimbus]]:
    with ExitStack() as stack:
        started = []
        for port in (6627, 6628):
            n = Nimbus(zk_conf, port)
            stack.callback(n.close)
            started.append(n)
        yield started


def leaders(nimbuses: list[Nimbus]) -> list[Nimbus]:
    return [n for n in nimbuses if n.election.is_leader]


def elect(nimbuses: list[Nimbus]) -> tuple[Nimbus, Nimbus]:
    """Start both elections; (leader, follower) once exactly one leads."""
    for n in nimbuses:
        n.election.start()
    wait_until(lambda: len(leaders(nimbuses)) == 1, what="a leader")
    (leader,) = leaders(nimbuses)
    return leader, next(n for n in nimbuses if n is not leader)


def test_exactly_one_leads_and_the_other_follows(nimbuses: list[Nimbus], zk: ZkClient) -> None:
    leader, follower = elect(nimbuses)
    assert leader.elected.wait(5) and not follower.elected.is_set()
    assert zk.read(paths.NIMBUS_MASTER, NimbusMaster).host_port == leader.election.host_port
    wait_until(lambda: zk.children(paths.NIMBUS_SLAVES) == [follower.election.host_port], what="follower registered")


def test_follower_takes_over_when_the_leader_steps_down(nimbuses: list[Nimbus], zk: ZkClient) -> None:
    leader, follower = elect(nimbuses)
    leader.election.stop()
    assert leader.demoted.is_set()
    wait_until(lambda: follower.election.is_leader, what="takeover")
    assert follower.elected.wait(5)
    wait_until(lambda: zk.children(paths.NIMBUS_SLAVES) == [], what="the new leader to leave /nimbus_slave")


def test_leader_whose_session_expires_is_demoted_and_rejoins_as_follower(
        nimbuses: list[Nimbus], zk: ZkClient, zk_address: str) -> None:
    leader, follower = elect(nimbuses)
    expire_session(leader.zk, zk_address)
    assert leader.demoted.wait(20)
    wait_until(lambda: follower.election.is_leader, 20, "takeover after session expiry")
    wait_until(lambda: zk.children(paths.NIMBUS_SLAVES) == [leader.election.host_port], 20,
               "old leader registered as follower")
    assert leaders(nimbuses) == [follower]


def test_a_lone_leader_told_of_its_lost_session_after_the_new_session_saw_no_leader_leads_again(
        zk_conf: dict[str, Any], zk_address: str) -> None:
    """The loss of the session reaches the election (on the client's delivery thread) after the leader node's watch,
    on the new session, has already reported no leader, and tried to contend while the election still thought it
    led. Nothing else changes the node, so nothing told the demoted nimbus to contend again: no leader at all."""
    zk = ZkClient(zk_conf).start()
    saw_no_leader, demoted, elected = threading.Event(), threading.Event(), []
    lone = LeaderElection(zk, "127.0.0.1", 6627, RealClock(), on_elected=lambda: elected.append(zk.session_id),
                          on_demoted=demoted.set)
    try:
        held = threading.Event()

        def hold_the_loss(state: ZkState) -> None:  # told before the election's listener: registered first
            if state is ZkState.LOST:
                held.set()
                saw_no_leader.wait(20)

        zk.add_state_listener(hold_the_loss)
        on_master, seen = lone._on_master, []

        def watched(master: NimbusMaster | None) -> None:
            on_master(master)
            seen.append(master)
            if master is None and held.is_set():
                saw_no_leader.set()

        lone._on_master = watched  # type: ignore[method-assign]
        lone.start()
        wait_until(lambda: lone.is_leader and seen[-1] is not None, what="the lone nimbus leads, its watch sees it")
        old_session = zk.session_id

        expire_session(zk, zk_address)

        assert saw_no_leader.wait(30), "the new session's watch saw no leader while the loss was held"
        assert demoted.wait(30), "the loss demoted the leader"
        wait_until(lambda: lone.is_leader and len(elected) == 2, 30, "the lone nimbus elected again")
        assert elected[-1] != old_session
        assert zk.kazoo.exists(paths.NIMBUS_MASTER).ephemeralOwner == zk.session_id
    finally:
        saw_no_leader.set()
        lone.stop()
        zk.stop()


def test_a_contention_whose_reply_was_lost_with_the_connection_is_taken_up_when_the_session_resumes(
        zk_conf: dict[str, Any], zk_address: str) -> None:
    """The leader node's create reached ZooKeeper, the connection broke before its reply, and the contention failed
    (on kazoo's watch thread, so nothing tried again): the node was ours and we did not lead. No later change of
    the node would come, so no nimbus led, and every client was told "the leader is <this nimbus>"."""
    host, port = zk_address.rsplit(":", 1)
    with TcpProxy(host, int(port)) as proxy, ZkClient(zk_conf) as other:
        proxy_host, proxy_port = proxy.address.rsplit(":", 1)
        conf = {**zk_conf, "storm.zookeeper.servers": [proxy_host], "storm.zookeeper.port": int(proxy_port),
                "storm.zookeeper.session.timeout": 30_000, "storm.zookeeper.retry.interval": 100}
        other.create_ephemeral(paths.NIMBUS_MASTER, NimbusMaster("127.0.0.1", 6628))  # another nimbus leads
        with ZkClient(conf) as zk:
            session, failed = zk.session_id, threading.Event()
            create = zk.create_ephemeral

            def reply_lost(path: str, record: Any) -> bool:
                created = create(path, record)
                proxy.cut()
                failed.set()
                raise ConnectionLoss(f"the reply to creating {path} (created: {created}) never came")

            zk.create_ephemeral = reply_lost  # type: ignore[method-assign]
            lone = LeaderElection(zk, "127.0.0.1", 6627, RealClock(), on_elected=lambda: None,
                                  on_demoted=lambda: None).start()
            try:
                other.delete(paths.NIMBUS_MASTER, recursive=False)  # the other leader steps down
                assert failed.wait(30), "the contention failed with the connection"
                zk.create_ephemeral = create  # type: ignore[method-assign]
                proxy.heal()
                wait_until(lambda: zk.connected.is_set(), 30, "reconnected")
                assert zk.session_id == session, "the same session resumed"
                wait_until(lambda: lone.is_leader, 30, "leading with the node it made")
                assert zk.kazoo.exists(paths.NIMBUS_MASTER).ephemeralOwner == session
            finally:
                lone.stop()


def test_a_nimbus_restarted_on_its_address_takes_over_its_own_stale_leader_node(zk_conf: dict[str, Any],
                                                                               zk: ZkClient) -> None:
    previous_life = Nimbus(zk_conf, 6627)  # its session stays open, as a SIGKILLed nimbus's does for a while
    try:
        previous_life.election.start()
        wait_until(lambda: previous_life.election.is_leader, what="the first life to lead")
        restarted = Nimbus(zk_conf, 6627)
        try:
            restarted.election.start()
            assert restarted.elected.wait(5), "the restarted nimbus waited out its own previous session"
            master_owner = zk.kazoo.exists(paths.NIMBUS_MASTER).ephemeralOwner
            assert master_owner == restarted.zk.session_id
        finally:
            restarted.close()
    finally:
        previous_life.zk.stop()


def test_another_nimbus_never_takes_a_leader_node_that_is_not_its_own(nimbuses: list[Nimbus]) -> None:
    leader, follower = elect(nimbuses)
    assert not follower.elected.wait(1)
    assert leaders(nimbuses) == [leader]


@pytest.mark.parametrize("master, owner, expected", [
    (NimbusMaster("127.0.0.1", 6627, 0), 7, True),    # our address, another session: our previous life
    (NimbusMaster("127.0.0.1", 6627, 0), 9, False),   # our address, our session: we lead
    (NimbusMaster("127.0.0.1", 6628, 0), 7, False),   # another nimbus leads
    (None, 7, False),
])
def test_is_own_stale_master(master: NimbusMaster | None, owner: int, expected: bool) -> None:
    assert is_own_stale_master(master, owner, "127.0.0.1:6627", session=9) is expected


@pytest.mark.parametrize("elected, ready, choice", [
    (True, True, TimerChoice.RUN),
    (True, False, TimerChoice.WAIT),  # due while taking over: run once the takeover is done, never drop
    (False, True, TimerChoice.DROP),
    (False, False, TimerChoice.DROP),
])
def test_delayed_action_choice(elected: bool, ready: bool, choice: TimerChoice) -> None:
    assert delayed_action_choice(elected, ready) is choice
