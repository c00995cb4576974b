"""The ZooKeeper wrapper against a real server: chroots, watches, ACLs, and recovery from session expiry."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from squall.zk import paths
from squall.zk.client import ZkClient, ZkState, topology_acl
from squall.zk.errors import MAX_ERRORS_PER_TASK, record_task_error
from squall.zk.records import Blacklist, NimbusMaster, SupervisorInfo, TaskError
from support import expire_session, wait_until


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
    members: list[list[str]] = []
    with ZkClient(zk_conf) as observer, ZkClient(zk_conf) as zk:
        zk.add_state_listener(states.append)
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
        # each state is told on a thread of its own: the reconnection may be told after the re-registration, even
        # just before the loss (the listener came after the first connection: any CONNECTED is a reconnection)
        wait_until(lambda: ZkState.CONNECTED in states, 20, "the reconnection told to the listener")
        owner = zk.kazoo.exists(paths.supervisor("sup-1")).ephemeralOwner
        assert owner == zk.session_id

        # the children watch was re-armed on the new session: it still sees changes
        observer.write(paths.supervisor("sup-2"), SupervisorInfo("sup-2", "host-2", [6700]))
        wait_until(lambda: members[-1] == ["sup-1", "sup-2"], 20, "watch alive after expiry")


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


def test_digest_acl_lets_anyone_read_but_only_the_owner_write(zk_conf: dict[str, Any]) -> None:
    secured = dict(zk_conf, **{"storm.zookeeper.auth.scheme": "digest",
                               "storm.zookeeper.auth.payload": "squall:s3cret"})
    # the stranger connects first so the root and parents stay open and the fixture can clean up
    with ZkClient(zk_conf) as stranger, ZkClient(secured) as owner:
        owner.write(paths.BLACKLIST, Blacklist(["h"]))
        assert stranger.read(paths.BLACKLIST, Blacklist) == Blacklist(["h"])
        with pytest.raises(NoAuthError):
            stranger.write(paths.BLACKLIST, Blacklist([]))


def test_a_topology_s_workers_write_its_errors_with_its_own_credential(zk_conf: dict[str, Any]) -> None:
    """With digest auth, a worker holds only its topology's credential, never the daemons'. It can file and trim
    its task errors under ``/taskerrors/<id>`` (nimbus gave that node the topology's digest too); a session
    without the credential cannot; the daemons can still remove everything the worker wrote."""
    daemons = dict(zk_conf, **{"storm.zookeeper.auth.scheme": "digest", "storm.zookeeper.auth.payload": "squall:s3cret"})
    topology = {"storm.zookeeper.topology.auth.scheme": "digest",
                "storm.zookeeper.topology.auth.payload": "wc-1-1:t0pology"}
    with ZkClient(zk_conf) as stranger, ZkClient(daemons) as nimbus, ZkClient({**zk_conf, **topology}) as worker:
        nimbus.create(paths.task_errors_root("wc-1-1"), acl=topology_acl(daemons, topology))
        for second in range(5):
            record_task_error(worker, "wc-1-1", 3, TaskError(f"boom {second}", 1_700_000_000 + second))
        record_task_error(nimbus, "wc-1-1", 3, TaskError("worker died", 1_700_000_009))
        kept = [stranger.read(paths.task_error("wc-1-1", 3, int(key)), TaskError)
                for key in stranger.children(paths.task_errors("wc-1-1", 3))]
        assert [e.error for e in kept] == ["boom 3", "boom 4", "worker died"]
        with pytest.raises(NoAuthError):
            record_task_error(stranger, "wc-1-1", 3, TaskError("forged", 1_700_000_010))
        with pytest.raises(NoAuthError):
            stranger.delete(paths.task_errors("wc-1-1", 3))
        nimbus.delete(paths.task_errors_root("wc-1-1"))
        assert not stranger.exists(paths.task_errors_root("wc-1-1"))


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
