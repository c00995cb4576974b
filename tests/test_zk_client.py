"""The ZooKeeper wrapper against a real server: chroots, watches, ACLs, and recovery from session expiry."""

from __future__ import annotations

import threading
from contextlib import ExitStack
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.security import OPEN_ACL_UNSAFE, READ_ACL_UNSAFE, make_digest_acl, make_digest_acl_credential

from squall.core.clock import SimulatedClock
from squall.core.zk import paths
from squall.core.zk.client import ZkClient, ZkState
from squall.core.zk.errors import (
    MAX_ERROR_CHARS, MAX_ERRORS_PER_TASK, ErrorTimesCache, error_summary, newest_error_times, record_task_error,
)
from squall.core.zk.records import Blacklist, NimbusMaster, SupervisorInfo, TaskError
from squall.dev.zookeeper import free_port
from tcpproxy import TcpProxy
from support import expire_session, open_parent_of_root, readable, remove_as_daemons, wait_until, znodes_under


def test_write_read_children_delete(zk: ZkClient) -> None:
    zk.write("/blacklist", Blacklist(["h1"]))
    zk.write("/blacklist", Blacklist(["h1", "h2"]))
    assert zk.read("/blacklist", Blacklist) == Blacklist(["h1", "h2"])
    assert zk.create("/blacklist", Blacklist([])) is False
    for sid in ("b", "a"):
        zk.write(paths.supervisor(sid), SupervisorInfo(sid, "host", [6700]))
    assert zk.children(paths.SUPERVISORS) == ["a", "b"]
    zk.delete(paths.SUPERVISORS)
    assert zk.children(paths.SUPERVISORS) == []
    zk.delete(paths.SUPERVISORS)  # deleting twice is fine


def test_task_errors_keep_the_newest_few_and_never_overwrite_one_of_the_same_second(zk: ZkClient) -> None:
    record_task_error(zk, "t-1", 3, TaskError("Traceback …\nValueError: in prepare", 1_700_000_000))
    record_task_error(zk, "t-1", 3, TaskError("worker exited", 1_700_000_000))  # same second, other process
    path = paths.task_errors("t-1", 3)
    texts = [zk.read(f"{path}/{name}", TaskError).error for name in zk.children(path)]
    assert texts == ["Traceback …\nValueError: in prepare", "worker exited"]
    for n in range(5):
        record_task_error(zk, "t-1", 3, TaskError(f"later {n}", 1_700_000_010 + n))
    texts = [zk.read(f"{path}/{name}", TaskError).error for name in zk.children(path)]
    assert texts == [f"later {n}" for n in range(5 - MAX_ERRORS_PER_TASK, 5)]


def test_newest_error_times_are_read_from_node_names_per_task(zk: ZkClient) -> None:
    """What nimbus's getClusterInfo reads for the Health column: each task's newest error second."""
    assert newest_error_times(zk, "t-2") == {}
    zk.create(paths.task_errors_root("t-2"))
    record_task_error(zk, "t-2", 3, TaskError("ZeroDivisionError", 1_700_000_000))
    record_task_error(zk, "t-2", 3, TaskError("ZeroDivisionError", 1_700_000_007))
    record_task_error(zk, "t-2", 5, TaskError("worker exited", 1_700_000_004))
    record_task_error(zk, "t-2", 5, TaskError("worker exited", 1_700_000_004))  # same second: named one later
    assert newest_error_times(zk, "t-2") == {3: 1_700_000_007, 5: 1_700_000_005}


def test_error_times_are_read_once_per_period_however_often_asked(zk: ZkClient) -> None:
    clock = SimulatedClock()
    cache = ErrorTimesCache(zk, clock, max_age_secs=10)
    record_task_error(zk, "t-3", 1, TaskError("boom", 1_700_000_000))
    assert cache.of(["t-3", "t-4"]) == {"t-3": {1: 1_700_000_000}, "t-4": {}}
    record_task_error(zk, "t-3", 1, TaskError("boom", 1_700_000_005))
    record_task_error(zk, "t-4", 2, TaskError("boom", 1_700_000_005))
    clock.advance(9.9)
    assert cache.of(["t-3", "t-4"]) == {"t-3": {1: 1_700_000_000}, "t-4": {}}, "within the period: as read"
    clock.advance(0.1)
    assert cache.of(["t-3", "t-4"]) == {"t-3": {1: 1_700_000_005}, "t-4": {2: 1_700_000_005}}
    assert cache.of(["t-4"]) == {"t-4": {2: 1_700_000_005}}, "a topology no longer asked for is forgotten"


def test_the_cache_reads_each_tasks_newest_error_once_for_its_line(zk: ZkClient) -> None:
    """``storm list`` shows an error by its line: read with the times, and again only when a newer error came."""
    clock = SimulatedClock()
    cache = ErrorTimesCache(zk, clock, max_age_secs=10)
    record_task_error(zk, "t-5", 1, TaskError(TRACEBACK, 1_700_000_000))
    record_task_error(zk, "t-5", 2, TaskError("worker exited with code 1\nits last output", 1_700_000_000))
    assert cache.lines(["t-5"]) == {"t-5": {1: "ZeroDivisionError: division by zero", 2: "worker exited with code 1"}}
    reads = []
    real_read = zk.read
    zk.read = lambda *args: reads.append(args[0]) or real_read(*args)  # type: ignore[method-assign]
    record_task_error(zk, "t-5", 2, TaskError("KeyError: 'x'", 1_700_000_009))
    clock.advance(10)
    assert cache.lines(["t-5"]) == {"t-5": {1: "ZeroDivisionError: division by zero", 2: "KeyError: 'x'"}}
    assert reads == [paths.task_error("t-5", 2, 1_700_000_009)], "only the task with a newer error is read again"


TRACEBACK = ('Traceback (most recent call last):\n  File "count.py", line 9, in process\n    1 / 0\n'
             'ZeroDivisionError: division by zero')


def test_an_error_is_said_by_its_exception_and_a_huge_one_keeps_it_when_cut(zk: ZkClient) -> None:
    chained = f"{TRACEBACK}\n\nDuring handling of the above exception, another exception occurred:\n\n" \
              'Traceback (most recent call last):\n  File "count.py", line 11, in process\n    raise\n' \
              "RuntimeError: could not count\nthe word 'x'"
    assert error_summary(chained) == "RuntimeError: could not count the word 'x'"
    assert error_summary(f"Shell Process Exception: {TRACEBACK}\n") == "ZeroDivisionError: division by zero"
    assert error_summary("rebalance failed: no free slots\ndetails") == "rebalance failed: no free slots"
    assert error_summary("") == ""
    huge = 'Traceback (most recent call last):\n' + '  File "x.py", line 1, in f\n' * 20_000 + "MemoryError: big"
    record_task_error(zk, "t-6", 1, TaskError(huge, 1_700_000_000))
    (name,) = zk.children(paths.task_errors("t-6", 1))
    stored = zk.read(paths.task_error("t-6", 1, int(name)), TaskError).error
    assert len(stored) <= MAX_ERROR_CHARS and "(cut)" in stored
    assert error_summary(stored) == "MemoryError: big", "the cut is in the middle: the exception stays"


def test_start_creates_root_and_persistent_parents(zk_conf: dict[str, Any], zk_address: str) -> None:
    with ZkClient(zk_conf):
        pass
    bare = KazooClient(hosts=zk_address)
    bare.start(timeout=10)
    try:
        assert set(bare.get_children(zk_conf["storm.zookeeper.root"])) >= {p.lstrip("/") for p in paths.PERSISTENT_ROOTS}
    finally:
        bare.stop()
        bare.close()


def test_roots_isolate_clusters(zk_conf: dict[str, Any]) -> None:
    other_conf = dict(zk_conf, **{"storm.zookeeper.root": zk_conf["storm.zookeeper.root"] + "-other"})
    with ZkClient(zk_conf) as one, ZkClient(other_conf) as other:
        one.write(paths.BLACKLIST, Blacklist(["only-in-one"]))
        assert other.read(paths.BLACKLIST, Blacklist) is None
        other.delete("/")


def test_data_watch_sees_every_change_and_deletion(zk: ZkClient) -> None:
    seen: list[Any] = []
    zk.watch_data(paths.NIMBUS_MASTER, NimbusMaster, seen.append)
    wait_until(lambda: seen == [None], what="initial callback")
    zk.write(paths.NIMBUS_MASTER, NimbusMaster("n1", 6627))
    wait_until(lambda: seen[-1] == NimbusMaster("n1", 6627), what="creation")
    zk.write(paths.NIMBUS_MASTER, NimbusMaster("n2", 6627))
    wait_until(lambda: seen[-1] == NimbusMaster("n2", 6627), what="update (watch re-armed)")
    zk.delete(paths.NIMBUS_MASTER)
    wait_until(lambda: seen[-1] is None and len(seen) == 4, what="deletion")


def test_cancelled_watch_stops_calling_back(zk: ZkClient) -> None:
    seen: list[list[str]] = []
    watch = zk.watch_children(paths.SUPERVISORS, seen.append)
    wait_until(lambda: seen == [[]], what="initial children")
    watch.cancel()
    zk.write(paths.supervisor("a"), SupervisorInfo("a", "h", [1]))
    zk.write(paths.supervisor("b"), SupervisorInfo("b", "h", [1]))
    # a second, live watch proves both events were delivered before we look at the cancelled one
    live: list[list[str]] = []
    zk.watch_children(paths.SUPERVISORS, live.append)
    wait_until(lambda: live and live[-1] == ["a", "b"], what="live watch")
    assert seen == [[]]


def test_undecodable_value_is_skipped_by_the_watch(zk: ZkClient) -> None:
    seen: list[Any] = []
    zk.watch_data(paths.BLACKLIST, Blacklist, seen.append)
    zk.kazoo.create(paths.BLACKLIST, b"not json")
    zk.write(paths.BLACKLIST, Blacklist(["h"]))
    wait_until(lambda: seen and seen[-1] == Blacklist(["h"]), what="valid value after a bad one")
    assert seen == [None, Blacklist(["h"])]


def test_ephemeral_registration_and_watches_come_back_after_session_expiry(
        zk_conf: dict[str, Any], zk_address: str) -> None:
    states: list[ZkState] = []
    owned_when_told: list[bool] = []  # whether the registration was this session's when each state was told
    members: list[list[str]] = []
    with ZkClient(zk_conf) as observer, ZkClient(zk_conf) as zk:

        def on_state(state: ZkState) -> None:
            stat = zk.kazoo.exists(paths.supervisor("sup-1")) if state is ZkState.CONNECTED else None
            owned_when_told.append(stat is not None and stat.ephemeralOwner == zk.session_id)
            states.append(state)

        zk.add_state_listener(on_state)
        info = SupervisorInfo("sup-1", "host-1", [6700, 6701])
        zk.register_ephemeral(paths.supervisor("sup-1"), info)
        zk.kazoo.create("/plain-ephemeral", b"", ephemeral=True)
        zk.watch_children(paths.SUPERVISORS, members.append)
        wait_until(lambda: members and members[-1] == ["sup-1"], what="registration seen")
        old_session = zk.session_id

        expire_session(zk, zk_address)

        wait_until(lambda: ZkState.LOST in states, 20, "session loss reported")
        wait_until(lambda: zk.session_id != old_session and zk.connected.is_set(), 20, "new session")
        wait_until(lambda: observer.read(paths.supervisor("sup-1"), SupervisorInfo) == info, 20,
                   "registration re-created")
        assert not observer.exists("/plain-ephemeral"), "the session really expired"
        wait_until(lambda: states[-1] is ZkState.CONNECTED, 20, "the reconnection told to the listener")
        assert states[-2] is ZkState.LOST
        assert owned_when_told[-1], "the registration is back, on the new session, when CONNECTED is told"

        # the children watch was re-armed on the new session: it still sees changes
        observer.write(paths.supervisor("sup-2"), SupervisorInfo("sup-2", "host-2", [6700]))
        wait_until(lambda: members[-1] == ["sup-1", "sup-2"], 20, "watch alive after expiry")


def test_a_registration_made_while_suspended_is_written_when_the_same_session_resumes(
        zk_conf: dict[str, Any], zk_address: str) -> None:
    """A supervisor that registers (or a nimbus that announces its code) during a connection blip: the node was
    written only after a session loss, so a session that survived the blip never got it."""
    host, port = zk_address.rsplit(":", 1)
    with TcpProxy(host, int(port)) as proxy, ZkClient(zk_conf) as observer:
        proxy_host, proxy_port = proxy.address.rsplit(":", 1)
        conf = {**zk_conf, "storm.zookeeper.servers": [proxy_host], "storm.zookeeper.port": int(proxy_port),
                "storm.zookeeper.session.timeout": 30_000, "storm.zookeeper.retry.interval": 100}
        with ZkClient(conf) as zk:
            states: list[ZkState] = []
            zk.add_state_listener(states.append)
            session = zk.session_id
            info = SupervisorInfo("sup-blip", "host-1", [6700])

            proxy.cut()
            wait_until(lambda: ZkState.SUSPENDED in states, 20, "the connection lost")
            zk.register_ephemeral(paths.supervisor("sup-blip"), info)
            proxy.heal()

            wait_until(lambda: states[-1] is ZkState.CONNECTED, 30, "reconnected")
            assert zk.session_id == session and ZkState.LOST not in states, "the same session resumed"
            wait_until(lambda: observer.read(paths.supervisor("sup-blip"), SupervisorInfo) == info, 20,
                       "the registration written on the resumed session")
            assert observer.kazoo.exists(paths.supervisor("sup-blip")).ephemeralOwner == session


def test_registration_updates_in_place_and_unregisters(zk: ZkClient) -> None:
    path = paths.supervisor("s")
    zk.register_ephemeral(path, SupervisorInfo("s", "h", [1]))
    zk.register_ephemeral(path, SupervisorInfo("s", "h", [1], used_ports=[1]))
    assert zk.read(path, SupervisorInfo).used_ports == [1]
    zk.unregister_ephemeral(path)
    assert not zk.exists(path)


def test_only_one_client_owns_an_ephemeral(zk_conf: dict[str, Any]) -> None:
    with ZkClient(zk_conf) as a, ZkClient(zk_conf) as b:
        assert a.create_ephemeral(paths.NIMBUS_MASTER, NimbusMaster("a", 1))
        assert a.create_ephemeral(paths.NIMBUS_MASTER, NimbusMaster("a", 1)), "owner may re-claim"
        assert not b.create_ephemeral(paths.NIMBUS_MASTER, NimbusMaster("b", 1))
    with ZkClient(zk_conf) as c:  # a's session closed: the node is free again
        assert c.create_ephemeral(paths.NIMBUS_MASTER, NimbusMaster("c", 1))


def test_without_zookeeper_auth_every_node_is_open(zk: ZkClient) -> None:
    zk.create(paths.assignment("wc-1-1"))
    record_task_error(zk, "wc-1-1", 3, TaskError("boom", 1_700_000_000))
    assert zk.acl(paths.assignment("wc-1-1")) == zk.acl(paths.task_error("wc-1-1", 3, 1_700_000_000)) \
        == list(OPEN_ACL_UNSAFE)


def _topology_credential(topology_id: str) -> dict[str, str]:
    return {"storm.zookeeper.topology.auth.scheme": "digest",
            "storm.zookeeper.topology.auth.payload": f"{topology_id}:pw-of-{topology_id}"}


def test_with_zookeeper_auth_each_session_reads_only_what_it_needs(zk_conf: dict[str, Any]) -> None:
    """The daemons (nimbus naming each topology's stored credential) create a node of every family for two
    topologies. An anonymous session may read only the leader's address; a worker, with its topology's credential,
    reads its topology's nodes and files errors there, but reads nothing of the other topology's, writes none of
    the nodes nimbus writes, and files no error for the other; ``storm.zookeeper.superACL`` reads everything."""
    daemons = {**zk_conf, "storm.zookeeper.auth.scheme": "digest", "storm.zookeeper.auth.payload": "squall:s3cret",
               "storm.zookeeper.superACL": "digest:" + make_digest_acl_credential("ops", "0ps")}
    stored = {topology_id: _topology_credential(topology_id) for topology_id in ("a-1-1", "b-2-2")}
    with ExitStack() as stack:
        open_parent_of_root(zk_conf)
        stack.callback(remove_as_daemons, daemons)
        nimbus = stack.enter_context(ZkClient(daemons, topology_conf=stored.get))
        nimbus.create_ephemeral(paths.NIMBUS_MASTER, NimbusMaster("nimbus-1", 6627))
        nimbus.register_ephemeral(paths.supervisor("s1"), SupervisorInfo("s1", "host", [6700]))
        nimbus.write(paths.BLACKLIST, Blacklist(["h"]))
        for topology_id in stored:
            for path in (paths.topology(topology_id), paths.tasks(topology_id), paths.assignment(topology_id),
                         paths.log_config(topology_id), paths.taskbeats(topology_id), paths.code(topology_id),
                         paths.task_errors_root(topology_id), paths.gray_upgrade_conf(topology_id),
                         paths.assignment_bak(topology_id.split("-")[0])):
                nimbus.create(path)
        worker = stack.enter_context(ZkClient({**zk_conf, **stored["a-1-1"]}))
        other_worker = stack.enter_context(ZkClient({**zk_conf, **stored["b-2-2"]}))
        record_task_error(worker, "a-1-1", 3, TaskError("boom", 1_700_000_000))
        record_task_error(nimbus, "a-1-1", 3, TaskError("worker died", 1_700_000_001))  # its supervisor
        nodes = ["/", *znodes_under(nimbus.kazoo)]
        errors = [paths.task_error("a-1-1", 3, second) for second in (1_700_000_000, 1_700_000_001)]
        assert set(errors) < set(nodes)

        anonymous = stack.enter_context(ZkClient(zk_conf))
        assert readable(anonymous.kazoo, nodes) == [paths.NIMBUS_MASTER]
        assert sorted(readable(worker.kazoo, nodes)) == sorted([
            paths.NIMBUS_MASTER, paths.topology("a-1-1"), paths.tasks("a-1-1"), paths.assignment("a-1-1"),
            paths.log_config("a-1-1"), paths.task_errors_root("a-1-1"), paths.task_errors("a-1-1", 3), *errors])
        with ZkClient({**zk_conf, "storm.zookeeper.auth.scheme": "digest", "storm.zookeeper.auth.payload": "ops:0ps"}) \
                as ops:
            assert readable(ops.kazoo, nodes) == nodes
        for forge in (lambda: worker.write(paths.assignment("a-1-1"), Blacklist([])),
                      lambda: worker.create(f"{paths.topology('a-1-1')}/forged"),
                      lambda: record_task_error(other_worker, "a-1-1", 3, TaskError("forged", 1_700_000_002)),
                      lambda: record_task_error(anonymous, "a-1-1", 3, TaskError("forged", 1_700_000_002)),
                      lambda: anonymous.write(paths.NIMBUS_MASTER, NimbusMaster("evil", 1))):
            with pytest.raises(NoAuthError):
                forge()
        nimbus.delete(paths.task_errors_root("a-1-1"))  # the daemons may remove what a worker wrote
        assert not nimbus.exists(paths.task_errors_root("a-1-1"))


def test_enforcing_acls_closes_what_an_earlier_squall_left_readable(zk_conf: dict[str, Any]) -> None:
    """A cluster from before: nodes made without ZooKeeper auth, then (the daemons authenticating) by a Squall
    that let everyone read. Enforcing the ACLs (nimbus does on taking the lead) gives each node the ACL a new one
    gets, once; the nodes of a topology whose stored conf has no credential stay readable, as its workers hold
    none."""
    daemons = {**zk_conf, "storm.zookeeper.auth.scheme": "digest", "storm.zookeeper.auth.payload": "squall:s3cret"}
    stored: dict[str, dict[str, str]] = {"a-1-1": _topology_credential("a-1-1"), "old-0-0": {}}
    with ExitStack() as stack:
        open_parent_of_root(zk_conf)
        stack.callback(remove_as_daemons, daemons)
        with ZkClient(zk_conf) as before_auth:
            for path in (paths.topology("old-0-0"), paths.assignment("old-0-0"), paths.BLACKLIST):
                before_auth.create(path)
        nimbus = stack.enter_context(ZkClient(daemons, topology_conf=stored.get))
        everyone_reads = [make_digest_acl("squall", "s3cret", all=True), *READ_ACL_UNSAFE]
        for path in (paths.topology("a-1-1"), paths.assignment("a-1-1"), paths.task_errors("a-1-1", 3),
                     paths.supervisor("s1")):
            nimbus.kazoo.create(path, acl=everyone_reads, makepath=True)
        nodes = ["/", *znodes_under(nimbus.kazoo)]
        anonymous = stack.enter_context(ZkClient(zk_conf))
        assert readable(anonymous.kazoo, nodes) == nodes

        assert nimbus.enforce_acls() == len(nodes) - 2
        assert sorted(readable(anonymous.kazoo, nodes)) == [paths.assignment("old-0-0"), paths.topology("old-0-0")]
        with ZkClient({**zk_conf, **stored["a-1-1"]}) as worker:
            assert sorted(readable(worker.kazoo, nodes)) == sorted([
                paths.topology("a-1-1"), paths.assignment("a-1-1"), paths.task_errors_root("a-1-1"),
                paths.task_errors("a-1-1", 3), paths.assignment("old-0-0"), paths.topology("old-0-0")])
        assert nimbus.enforce_acls() == 0


def test_a_malformed_super_acl_is_refused_naming_the_key(zk_conf: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="storm.zookeeper.superACL must be 'scheme:id'"):
        ZkClient({**zk_conf, "storm.zookeeper.auth.scheme": "digest", "storm.zookeeper.auth.payload": "squall:pw",
                  "storm.zookeeper.superACL": "ops"})


def test_state_listener_may_call_zookeeper(zk_conf: dict[str, Any], zk_address: str) -> None:
    """Listeners run off kazoo's event thread, so a listener that reads ZooKeeper does not deadlock."""
    read_back = threading.Event()
    with ZkClient(zk_conf) as zk:
        zk.write(paths.BLACKLIST, Blacklist(["h"]))

        def on_state(state: ZkState) -> None:
            if state is ZkState.CONNECTED and zk.read(paths.BLACKLIST, Blacklist) == Blacklist(["h"]):
                read_back.set()

        zk.add_state_listener(on_state)
        expire_session(zk, zk_address)
        assert read_back.wait(20)


def test_state_listeners_hear_every_state_in_kazoo_s_order_one_call_at_a_time(
        zk_conf: dict[str, Any], zk_address: str) -> None:
    """A listener that blocks on the first state it is told (the suspension of a session that then expires and
    reconnects) delays the later states, never reorders them, and no two listener calls overlap: so a leader
    never hears the LOST that preceded a CONNECTED after that CONNECTED."""
    reported: list[ZkState] = []  # kazoo's own order, recorded on kazoo's thread
    told: dict[str, list[ZkState]] = {"blocking": [], "other": []}
    running, overlapped = [0], threading.Event()
    first_held, release = threading.Event(), threading.Event()
    counting = threading.Lock()

    def listener(name: str, state: ZkState) -> None:
        with counting:
            running[0] += 1
            if running[0] > 1:
                overlapped.set()
        if name == "blocking" and not first_held.is_set():
            first_held.set()
            release.wait(30)
        told[name].append(state)  # after the wait: a later state told meanwhile would come first
        with counting:
            running[0] -= 1

    with ZkClient(zk_conf) as zk:
        zk.kazoo.add_listener(lambda state: reported.append(ZkState(state.lower())))
        zk.add_state_listener(lambda state: listener("blocking", state))
        zk.add_state_listener(lambda state: listener("other", state))
        old_session = zk.session_id

        expire_session(zk, zk_address)

        assert first_held.wait(20), "the first state told"
        wait_until(lambda: zk.session_id not in (0, old_session) and reported[-1] is ZkState.CONNECTED, 20,
                   "kazoo reconnected on a new session while the listener is held")
        assert ZkState.LOST in reported
        release.set()
        wait_until(lambda: told["blocking"] == told["other"] == reported, 20, "every state told in kazoo's order")
        assert not overlapped.is_set(), "two listener calls ran at once"


def test_stop_tells_the_closing_loss_and_ends_the_delivery_thread(zk_conf: dict[str, Any], zk_address: str) -> None:
    told: list[ZkState] = []
    delivery: list[threading.Thread] = []
    zk = ZkClient(zk_conf).start()

    def on_state(state: ZkState) -> None:
        delivery.append(threading.current_thread())
        told.append(state)

    zk.add_state_listener(on_state)
    expire_session(zk, zk_address)  # states to tell, so the listener sees the thread it is told on
    wait_until(lambda: told and told[-1] is ZkState.CONNECTED, 20, "the reconnection told")
    (thread,) = set(delivery)
    assert thread is not threading.main_thread() and thread.is_alive()

    zk.stop()

    assert told[-1] is ZkState.LOST, "the closing loss is told before stop returns"
    assert not thread.is_alive()
    assert thread.ident not in {t.ident for t in threading.enumerate()}
    assert thread.name not in {t.name for t in threading.enumerate()}


def test_a_listener_that_raises_stops_no_other_listener_and_no_later_state(
        zk_conf: dict[str, Any], zk_address: str) -> None:
    told: list[ZkState] = []

    def broken(state: ZkState) -> None:
        raise RuntimeError(f"broken listener told {state.value}")

    with ZkClient(zk_conf) as zk:
        zk.add_state_listener(broken)
        zk.add_state_listener(told.append)
        expire_session(zk, zk_address)
        wait_until(lambda: told[-2:] == [ZkState.LOST, ZkState.CONNECTED], 20, "the loss and reconnection told")


def test_a_start_that_times_out_leaves_no_delivery_thread(zk_conf: dict[str, Any]) -> None:
    before = set(threading.enumerate())
    nobody = {**zk_conf, "storm.zookeeper.port": free_port(), "storm.zookeeper.root": "/"}
    with pytest.raises(KazooTimeoutError):
        ZkClient(nobody).start(timeout=1)
    assert not [t.name for t in set(threading.enumerate()) - before if t.name.startswith("zk-states-")]
